from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import naming, output
from ..errors import BadInput
from ..memory import Memory
from ..message import is_tool
from ..numbers import index, param
from ..options import Home, IncludeTools, Json, Name


def command(
    name: Name = None,
    i: Annotated[Optional[int], typer.Argument(help="Message number.", metavar="I", show_default=False, click_type=param(index, "I"))] = None,
    include_tools: IncludeTools = False,
    json: Json = False,
    home: Home = None,
) -> None:
    """Print one message whole: its text exactly as logged, then a newline (--json for the whole record).

    Examples:
      pimem message 42
      pimem message main 42
      pimem message main 42 --json | jq .date
    """
    if i is None:  # one positional: the number, unless a memory has that name
        name, number = naming.lone(name, None, home, reads_as=str.isdigit)
        if number is None:
            raise BadInput("give a message number I")
        i = index(number)
    msg = Memory.open(naming.given(name), home).message(i)
    if is_tool(msg) and not include_tools:
        raise BadInput(f"message {i} is a {'tool call' if msg['kind'] == 'tool' else 'tool result'}; add --include-tools to show it")
    if json:
        output.json_line(msg)
    else:
        output.line(msg["text"])


command.needs = ("i",)
