from __future__ import annotations

import shutil

from .. import env, output, when
from ..errors import NothingFound
from ..memory import Memory
from ..options import Home, Json


def command(json: Json = False, home: Home = None) -> None:
    """List memories with their message counts, dates and the last thing the user said.

    Dates are in the local time zone (the JSON's as recorded, with their offsets). Exit 1 when there are none. A memory that cannot be read (its log damaged) is one line on stderr, the
    others listed (with --json it is listed too, as {"name", "error"}), and the exit its error's (5).

    Examples:
      pimem list
      pimem list --json | jq -r .name
    """
    unread = output.Unread()
    mems = Memory.all(home, refused=unread, claims=True)
    if not mems and not unread.said:
        raise NothingFound("no memories yet; start one with 'pimem append NAME TEXT'")
    width = shutil.get_terminal_size((100, 24)).columns
    now = env.now()
    rows = []
    for mem in mems:
        row = unread.run(mem, mem.summary)
        if row is None:
            continue
        if json:
            rows.append(row)
            continue
        last = when.in_zone(row["last"], now)[:16].replace("T", " ") if row["last"] else ""  # (the reader's zone)
        noun = "message " if row["messages"] == 1 else "messages"
        head = f"{row['name']:<16} {row['messages']:>8,} {noun}  {last:<16}  "
        said = output.cut(output.flatten(row["last_user"] or ""), max(10, width - len(head)))
        output.line(output.style(head, "bold") + said)
    if json:  # a memory it could not read is listed too, in its place, as {name, error} (as api.list_memories)
        rows += [{"name": mem.name, "error": str(exc)} for mem, exc in unread.said]
        for row in sorted(rows, key=lambda row: row["name"]):
            output.json_line(row)
    unread.check()
