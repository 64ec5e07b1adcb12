from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import naming, output
from ..errors import BadInput
from ..memory import Memory
from ..options import Home, IncludeTools, Json, Name


def command(
    name: Name = None,
    node: Annotated[Optional[str], typer.Argument(help="A node ID+N: N a power of two, ID a multiple of N.", metavar="ID+N", show_default=False)] = None,
    include_tools: IncludeTools = False,
    json: Json = False,
    home: Home = None,
) -> None:
    """Expand a node: ID+1 is the original message whole; ID+N (N>1) is its two halves as lines.

    Any aligned node can be zoomed, not only the view's lines. A half not summarised yet says so. Malformed or
    misaligned ids exit 2 with the reason; ids past the end of the log exit 3. A tool call or result (ID+1)
    needs --include-tools, and without it tool traffic quoted verbatim in a half is shown as a marker.

    Examples:
      pimem zoom 40+8
      pimem zoom main 40+8
      pimem zoom main 42+1
      pimem zoom main 0+1024 --json
    """
    from ..tree import UNBUILT_MERGE, PLACEHOLDER, flat, inert

    name, node = naming.lone(name, node, home)
    if node is None:
        raise BadInput("give a node ID+N to zoom (a label from 'pimem view')")
    mem = Memory.open(name, home)
    mem.patient = output.note  # (a long catch-up of the search index: waited for, said first)
    found = mem.zoom(node, include_tools=include_tools)
    if "message" in found:
        msg = found["message"]
        if json:
            output.json_line({"label": found["label"], **msg})
        else:
            from ..message import leaf_label

            output.line(f"{found['label']}|{leaf_label(msg)}: {inert(msg['text'])}")
        return
    for child in found["children"]:  # (tool traffic taken out unless include_tools)
        if json:
            output.json_line(child)
        else:
            hint = PLACEHOLDER if child["level"] == 0 else UNBUILT_MERGE
            output.line(f"{child['label']}|{hint if child['text'] is None else flat(child['text'])}")


command.needs = ("node",)
