from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import memories, naming, output
from ..errors import BadInput
from ..memory import Memory
from ..options import Home, Json, Name, Session, Timeout


def command(
    name: Name = None,
    record_id: Annotated[Optional[str], typer.Argument(help="The memory's id (see 'pimem memories').", metavar="ID", show_default=False)] = None,
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
    name, record_id = naming.lone(name, record_id, home)
    naming.memory_id(record_id, "ID"), naming.text_argument(session)
    if record_id is None:
        raise BadInput("give the ID of the memory to forget (see 'pimem memories')")
    record = memories.forget(Memory.open(name, home), record_id, session=session, timeout=timeout)
    if json:
        output.line(memories.read(record, limit=memories.SNIPPET))
    else:
        output.line(record["id"])


command.needs = ("record_id",)
