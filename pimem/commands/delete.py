from __future__ import annotations

from typing import Annotated

import typer

from .. import output
from ..options import Home, Json, Timeout


def command(
    name: Annotated[str, typer.Argument(help="Memory name (always given: delete never takes the default).", metavar="NAME")],
    json: Json = False, timeout: Timeout = None, home: Home = None) -> None:
    """Move a memory to <home>/.trash/NAME-TIMESTAMP and print where it went.

    Nothing is erased: move the directory back to restore it. Refused (exit 4) while a `pimem watch`
    process holds the memory, naming that process.

    Examples:
      pimem delete scratch
      pimem delete scratch --json | jq -r .trash
    """
    from .. import housekeeping  # (here, not at the top: ``pimem --help`` imports every command's module)

    dest = housekeeping.delete(name, home, timeout)
    if json:
        output.json_line({"name": name, "trash": str(dest)})
    else:
        output.line(str(dest))
