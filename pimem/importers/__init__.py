"""Importers: pi sessions, Claude Code transcripts, Codex rollouts and NDJSON, into one memory.

    >>> from pimem import Memory
    >>> from pimem.importers import plan, run
    >>> sources = plan(["session.jsonl"])            # formats detected, files in date order
    >>> reports = run(Memory.at("shop"), sources)   # streamed in batches through Memory.append

``plan`` reads the head of each file (format, first date, cwd) and refuses bad input before anything is
written; ``run`` streams each file through its format's parser, drops what the memory already holds and
logs the rest in validated batches (one fsync each). See ``job`` for the details.
"""

from .detect import FORMATS, Source, by_project, default_name, plan
from .job import FileReport, run

__all__ = ["FORMATS", "FileReport", "Source", "by_project", "default_name", "plan", "run"]
