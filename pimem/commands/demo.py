from __future__ import annotations

from importlib import resources
from typing import Annotated

import orjson
import typer

from .. import output
from ..memory import Memory
from ..options import Home


def command(
    name: Annotated[str, typer.Option("--name", help="Memory to log the sample into.")] = "demo",
    home: Home = None,
) -> None:
    """Log a bundled sample conversation into a memory and show it (run it twice: nothing is logged twice).

    Examples:
      pimem demo
      pimem demo --home /tmp/pimem-demo
    """
    sample = [orjson.loads(line) for line in resources.files("pimem.data").joinpath("sample.ndjson").read_bytes().splitlines() if line.strip()]
    mem = Memory.at(name, home)
    have = mem.count() if mem.exists() else 0
    if have < len(sample):
        mem.append(sample[have:])
        output.info(f"logged {len(sample) - have} sample messages into '{mem.name}' ({mem.path})")
    else:
        output.info(f"'{mem.name}' already holds the sample ({have} messages)")
    for msg in mem.messages():
        output.line(output.message_line(msg, width=160))
