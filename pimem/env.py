"""The injected environment: home directory, clock and terminal flags come from here and nowhere else.

Tests point ``PIMEM_HOME`` at a temporary directory and may freeze the clock with ``PIMEM_NOW``
(an RFC 3339 date-time).
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path


def home(explicit: str | os.PathLike | None = None) -> Path:
    """Resolve the store home: ``--home``, then ``$PIMEM_HOME``, ``$PI_MEM_HOME``, ``~/.pi/memory``."""
    for candidate in (explicit, os.environ.get("PIMEM_HOME"), os.environ.get("PI_MEM_HOME")):
        if candidate:
            return Path(candidate).expanduser()
    return Path.home() / ".pi" / "memory"


def now() -> datetime:
    """The current local time with its UTC offset (``$PIMEM_NOW`` overrides it, for tests)."""
    frozen = os.environ.get("PIMEM_NOW")
    if frozen:
        moment = datetime.fromisoformat(frozen)
        return moment if moment.tzinfo else moment.astimezone()
    return datetime.now().astimezone()


def stdout_is_tty() -> bool:
    return sys.stdout.isatty()


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
