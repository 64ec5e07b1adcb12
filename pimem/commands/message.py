from __future__ import annotations

from typing import Annotated

import typer

from .. import output
from ..errors import BadInput
from ..memory import Memory
from ..message import is_tool
from ..numbers import index, param
from ..options import Home, IncludeTools, Json, Name


def command(
    name: Name,
    i: Annotated[int, typer.Argument(help="Message number.", metavar="I", click_type=param(index, "I"))],
    include_tools: IncludeTools = False,
    json: Json = False,
    home: Home = None,
) -> None:
    """Print one message whole: its text exactly as logged (--json for the whole record).

    Examples:
      pimem message main 42
      pimem message main 42 --json | jq .date
    """
    msg = Memory.open(name, home).message(i)
    if is_tool(msg) and not include_tools:
        raise BadInput(f"message {i} is a {'tool call' if msg['kind'] == 'tool' else 'tool result'}; add --include-tools to show it")
    if json:
        output.json_line(msg)
    else:
        output.line(msg["text"])
