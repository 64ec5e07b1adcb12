from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import naming, output, panorama
from ..errors import BadInput
from ..memory import Memory
from ..numbers import count, param
from ..options import Home, IncludeTools, Name


def command(
    name: Name = None,
    width: Annotated[Optional[int], typer.Option("--width", help="Columns to fit (default: the terminal's).", metavar="N", click_type=param(count, "N", lo=panorama.MIN_WIDTH, hi=panorama.MAX_WIDTH))] = None,
    svg: Annotated[Optional[str], typer.Option("--svg", help="Also write the picture as an SVG image.", metavar="FILE")] = None,
    include_tools: IncludeTools = False,
    home: Home = None,
) -> None:
    """Draw a memory's panorama: how long it is, how much each turn reads, how fine the view is.

    From the top: the title (messages, since when, day N); two bars at one scale, everything said against
    what each turn reads (lines summarising several messages in grey ▒, one-message lines in green █); a
    two-row timeline across the whole history, taller where the view is finer; then the view's lines
    grouped by day, newest at the bottom (days in date order even when an older session was logged later;
    a day's lines in log order). No line is wider than the terminal (or --width). Colour only on
    a terminal.

    Examples:
      pimem map main
      pimem map main --width 100 --svg main.svg
    """
    if svg is not None and not svg:  # (typer would make '' the working directory, '.')
        raise BadInput("--svg wants a file to write, not an empty name")
    if svg is not None and Path(svg).is_dir():
        raise BadInput(f"--svg wants a file to write, and {svg!r} is a directory")
    mem = Memory.open(naming.given(name), home)
    cols = width or min(shutil.get_terminal_size((80, 24)).columns, panorama.MAX_WIDTH)  # ($COLUMNS is not checked)
    picture = panorama.rows(panorama.facts_of(mem, include_tools), cols, include_tools)
    if svg is not None:  # (first: a file that cannot be written ends the command before it prints)
        try:
            Path(svg).write_text(panorama.to_svg(picture, cols, f"pimem map {mem.name}"), encoding="utf-8")
        except OSError as exc:  # (a write's own error, a full disk, names no file: the line names it)
            exc.filename = exc.filename or svg
            raise
    output.line(panorama.to_text(picture).rstrip("\n"))
    if svg is not None:
        output.info(f"wrote {svg}")
