"""Options shared by several commands, declared once."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .numbers import count, param, seconds
from .message import ALIASES, KINDS

# what the shell completions offer for a WHEN (every metavar WHEN); each must parse (tests/test_completions.py)
WHEN_WORDS = ("today", "yesterday", "1h", "2h", "1d", "3d", "1w")


def offer(*values: str):
    """``autocompletion=`` for a parameter taking one of ``values``: the generated shell completions list them."""
    return lambda: list(values)


MESSAGE_KINDS = offer(*KINDS, *ALIASES)

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
Session = Annotated[
    Optional[str], typer.Option("--session", help="The caller's session id: session-scoped memories are visible only to it.", metavar="ID")
]
