"""Options shared by several commands, declared once."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .errors import BadInput
from .numbers import count, param, seconds
from .message import ALIASES, KINDS

# what the shell completions offer for a WHEN (every metavar WHEN); each must parse (tests/test_completions.py)
WHEN_WORDS = ("today", "yesterday", "1h", "2h", "1d", "3d", "1w")


def offer(*values: str):
    """``autocompletion=`` for a parameter taking one of ``values``: the generated shell completions list them."""
    return lambda: list(values)


MESSAGE_KINDS = offer(*KINDS, *ALIASES)


def apart(first: tuple[str, object], *others: tuple[str, object], why: str = "") -> None:
    """Refuse ``first`` given with any of ``others`` (each an option as typed and its value: None, False or
    empty is not given; 0 is, so a numeric option defaults to None), one of which would be ignored: exit 2,
    before any memory is read."""
    for option, value in others:
        if _given(first[1]) and _given(value):
            raise BadInput(f"{first[0]} and {option} do not go together" + (f": {why}" if why else ""))


def needs(option: tuple[str, object], wanted: str, present: bool) -> None:
    """Refuse ``option`` given without ``wanted``, the only case it means something in (``present``)."""
    if _given(option[1]) and not present:
        raise BadInput(f"{option[0]} goes only with {wanted}")


def _given(value: object) -> bool:
    return value is not None and value is not False and value != "" and value != [] and value != ()

Home = Annotated[
    Optional[str],
    typer.Option("--home", help="Store directory (default: $PIMEM_HOME, $PI_MEM_HOME, ~/.pi/memory).", metavar="DIR"),
]
Json = Annotated[bool, typer.Option("--json", help="One JSON object per line (NDJSON).")]
IncludeTools = Annotated[
    bool, typer.Option("--include-tools", help="Also show tool calls and tool results (hidden by default: they hold file contents and command output).")
]
Timeout = Annotated[
    Optional[float], typer.Option("--timeout", help="Seconds to wait for the writer lock before exit 4 (default 60).", metavar="S",
                                   click_type=param(seconds, "S"))
]
Log = Annotated[
    Optional[str], typer.Option("--log", help="Append what would go to stderr to FILE, creating its directory (for cron).", metavar="FILE")
]
Name = Annotated[
    Optional[str], typer.Argument(help="Memory name (default: $PIMEM_MEMORY, else main).", metavar="NAME", show_default=False)
]
Budget = Annotated[
    int, typer.Option("--budget", help="Most characters to print (the output is never longer and never cuts JSON).", metavar="CHARS",
                         click_type=param(count, "CHARS", lo=2))
]
def _session(text: str, _name=None) -> str:
    if not text.strip():  # (as if no session were given, or a session no caller has)
        raise BadInput(f"{text!r}: give the caller's session id, not an empty one")
    return text


Session = Annotated[
    Optional[str], typer.Option("--session", help="The caller's session id: session-scoped memories are visible only to it.", metavar="ID",
                                click_type=param(_session, "ID"))
]
