from __future__ import annotations

from .. import output
from ..memory import Memory
from ..options import Home, Json, Name


def command(name: Name, json: Json = False, home: Home = None) -> None:
    """Show one memory's state: messages, dates, files and bytes on disk.

    Examples:
      pimem status main
      pimem status main --json
    """
    mem = Memory.open(name, home)
    row = mem.summary()
    files = mem.log.files()
    row.update(path=str(mem.path), log_files=len(files), log_bytes=sum(p.stat().st_size for p in files))
    if json:
        output.json_line(row)
        return
    output.line(f"memory    {row['name']}  ({row['path']})")
    output.line(f"messages  {row['messages']}  in {row['log_files']} daily files, {row['log_bytes']:,} bytes")
    if row["messages"]:
        output.line(f"from      {row['first']}")
        output.line(f"to        {row['last']}")
