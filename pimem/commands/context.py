from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import context as contexts, naming, output
from ..memory import Memory
from ..errors import BadInput
from ..numbers import param, seconds
from ..options import Home, IncludeTools, Json, Name, Session


def _cwd(text: str, _name=None) -> str:
    if not text.strip():  # (`--cwd "$DIR"` with DIR unset: not the process's directory, as if none were given)
        raise BadInput(f"{text!r}: give the working directory to report, not an empty one")
    return text


def command(
    name: Name = None,
    system: Annotated[bool, typer.Option("--system", help="Print the system prompt and the tool schemas as one JSON object; the same bytes every time.")] = False,
    cwd: Annotated[Optional[str], typer.Option("--cwd", help="Working directory to report (default: the current one).", metavar="DIR", click_type=param(_cwd, "DIR"))] = None,
    wait: Annotated[Optional[float], typer.Option("--wait", help="While a watcher is running, wait up to S seconds for the summaries of the newest messages (default: context_wait in config.json, 8; 0: never).", metavar="S", click_type=param(seconds, "S"))] = None,
    session: Session = None,
    include_tools: IncludeTools = False,
    json: Json = False,
    home: Home = None,
) -> None:
    """Print what an agent wrapper sends the model this turn.

    The view (<chat>), the user's pinned and active memories, the previous exchange (last user message and
    last reply, if together at most 16,000 bytes) and now · cwd. Run it before logging the user's new
    message. While a watcher is building the memory, it first waits up to 8 seconds (--wait) for the
    summaries of long messages the view still shows as placeholders. Tool calls and results in the view show
    as markers unless --include-tools (a wrapper whose model reads back its own tool work passes it).
    --system prints {"system": …, "tools": […]}: no date, no state, byte-stable across turns, the same for
    every memory (a NAME given with it is ignored).

    Examples:
      pimem context --system | jq -r .system > system.txt
      pimem context main --cwd "$PWD"
      pimem context main --json | jq -r .view
    """
    if system:  # the same for every memory: a wrapper may pass its NAME anyway
        output.line(contexts.system())
        return
    mem = Memory.open(naming.given(name), home)
    if json:
        output.json_line(contexts.parts(mem, session, cwd, wait, include_tools))
    else:
        output.raw_line(contexts.context(mem, session, cwd, wait, include_tools).encode())
