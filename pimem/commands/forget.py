from __future__ import annotations

from typing import Annotated

import typer

from .. import memories, output
from ..memory import Memory
from ..options import Home, Json, Name, Session, Timeout


def command(
    name: Name,
    record_id: Annotated[str, typer.Argument(help="The memory's id (see 'pimem memories').", metavar="ID")],
    session: Session = None,
    json: Json = False,
    timeout: Timeout = None,
    home: Home = None,
) -> None:
    """Resolve a memory: it stays in the log but leaves listings and the context.

    Examples:
      pimem forget main mem_3f9a0c1d2e4b5a6c
      pimem memories main --status resolved
    """
    record = memories.forget(Memory.open(name, home), record_id, session=session, timeout=timeout)
    if json:
        output.line(memories.read(record, limit=memories.SNIPPET))
    else:
        output.line(record["id"])
