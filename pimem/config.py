"""``config.json``: the one place pimem's defaults are written, and how a memory's settings are layered.

A memory's settings are ``DEFAULTS``, overlaid by ``<home>/config.json`` (the defaults for memories without
settings of their own), overlaid by ``<memory>/config.json``; objects merge key by key. The compactor's
optional knobs (``timeout``, ``retry_seconds``, ``max_tokens``) are not written into ``DEFAULTS["compactor"]``
(``pimem model`` shows a compactor as configured) but read through ``compactor_knob``, whose defaults are here.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import orjson

from . import env, home as homes
from .message import DEFAULT_CAP

LINE_BYTES = 512  # a tree node's line, in UTF-8 bytes

DEFAULTS = {
    "view": {"hi": 128_000, "lo": 64_000},
    "cview": {"hi": 32_000, "lo": 16_000},
    "line_bytes": LINE_BYTES,
    "max_text_bytes": DEFAULT_CAP,
    "compactor": {"provider": "extractive"},
    "max_cost_per_day": None,  # dollars a local day a watcher may spend on this memory's compactor
    "context_wait": 8.0,  # seconds `context` waits for a running watcher's summaries of the newest messages
}

COMPACTOR_KNOBS = {
    "timeout": 60.0,  # seconds per call
    "retry_seconds": 10.0,  # before a failed node is tried again (longer if the server says Retry-After)
    "max_tokens": 170,  # ≈512 bytes of English; the harness cuts whatever comes back
}


def compactor_knob(cfg: dict, key: str):
    """A compactor setting from its config object, else its default."""
    return cfg.get(key) or COMPACTOR_KNOBS[key]


def merged(base: dict, over: dict) -> dict:
    """``base`` overlaid by ``over``, objects merged key by key (neither is changed)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def read_json(path: Path, default=None):
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return default


def of_home(home: str | os.PathLike | None = None) -> dict:
    """The defaults for memories without settings of their own: ``DEFAULTS``, overlaid by the home's."""
    return merged(DEFAULTS, read_json(env.home(home) / "config.json", {}) or {})


def save_home(home: str | os.PathLike | None, changes: dict) -> None:
    """Merge ``changes`` into ``<home>/config.json`` (creating the home if needed)."""
    save(homes.ensure_dir(env.home(home)), changes)


def of_memory(path: Path, home: Path) -> dict:
    """A memory's settings: the home's defaults, overlaid by its own ``config.json``."""
    return merged(of_home(home), read_json(path / "config.json", {}) or {})


def save(directory: Path, changes: dict) -> None:
    """Merge ``changes`` into ``directory/config.json`` (a home's or a memory's directory, which exists)."""
    own = merged(read_json(directory / "config.json", {}) or {}, changes)
    homes.write_atomic(directory / "config.json", orjson.dumps(own, option=orjson.OPT_INDENT_2) + b"\n")
