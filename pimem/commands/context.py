from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import context as contexts, naming, output
from ..memory import Memory
from ..options import Home, Json, Name, Session


def command(
    name: Name = None,
    system: Annotated[bool, typer.Option("--system", help="Print the system prompt and the tool schemas as one JSON object; the same bytes every time.")] = False,
    cwd: Annotated[Optional[str], typer.Option("--cwd", help="Working directory to report (default: the current one).", metavar="DIR")] = None,
    session: Session = None,
    json: Json = False,
    home: Home = None,
) -> None:
    """Print what an agent wrapper sends the model this turn.

    The view (<chat>), the user's pinned and active memories, the previous exchange (last user message and
    last reply, if together at most 16,000 bytes) and now · cwd. Run it before logging the user's new
    message. --system prints {"system": …, "tools": […]}: no date, no state, byte-stable across turns, the
    same for every memory (a NAME given with it is ignored).

    Examples:
      pimem context --system | jq -r .system > system.txt
      pimem context main --cwd "$PWD"
      pimem context main --json | jq -r .view
    """
    if system:  # the same for every memory: a wrapper may pass its NAME anyway
        output.line(contexts.system())
        return
    mem = Memory.open(name or naming.default(), home)
    if json:
        output.json_line(contexts.parts(mem, session, cwd))
    else:
        output.raw_line(contexts.context(mem, session, cwd).encode())
