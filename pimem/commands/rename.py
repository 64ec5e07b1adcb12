from __future__ import annotations

from typing import Annotated

import typer

from .. import output
from ..memory import Memory
from ..options import Home, Timeout


def command(
    old: Annotated[str, typer.Argument(help="The memory's current name.", metavar="NAME")],
    new: Annotated[str, typer.Argument(help="Its new name (must be free).", metavar="NEW")],
    timeout: Timeout = None,
    home: Home = None,
) -> None:
    """Rename a memory; the old name keeps a pointer, so scripts using it still work.

    The directory moves to NEW and a small file <home>/OLD holding {"renamedTo": "NEW"} is left behind,
    which every command follows. Refused (exit 2) when NEW exists, and (exit 4) while a `pimem watch`
    process holds the memory.

    Examples:
      pimem rename scratch project-x
      pimem since scratch '#0'        # still works: follows the pointer to project-x
    """
    from .. import housekeeping  # (here, not at the top: ``pimem --help`` imports every command's module)

    was = Memory.open(old, home).name  # (an old name leads to the memory it was renamed to)
    mem = housekeeping.rename(old, new, home, timeout)
    named = f"'{old}'" if was == old else f"'{was}' (the memory '{old}' leads to)"
    output.info(f"renamed {named} to '{mem.name}' ({mem.path})")
