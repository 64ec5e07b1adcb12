from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import env, naming, output
from ..errors import IntegrityError
from ..memory import Memory
from ..options import Home, Json, Timeout, needs


def command(
    names: Annotated[Optional[list[str]], typer.Argument(help="Memories to check (default: all).", metavar="NAME…", show_default=False)] = None,
    repair: Annotated[bool, typer.Option("--repair", help="Seal torn lines and rebuild derived state; deletes nothing but a killed write's temporary copy.")] = False,
    accept_lost: Annotated[bool, typer.Option("--accept-lost", help="With --repair and a NAME: messages lost from the log's end are gone for good; log a note in place of each.")] = False,
    json: Json = False,
    timeout: Timeout = None,
    home: Home = None,
) -> None:
    """Check memories on disk: the log, the tree, the view, the hash chains and the index.

    The log: torn or damaged lines, gaps and duplicates in i, messages lost from its end (ranges.json, the
    view, the index or the compaction windows knew it went further), sizes, kinds and dates. The tree: nodes past
    the log, over a line's bytes, or built twice. view.json: it must restore as saved. memory.jsonl and
    windows.jsonl: seq, prevHash and hash of every event. index.sqlite: SQLite's check, and every row
    pointing at its message's line. config.json (the memory's and the home's): settings every command accepts. Prints one line per finding (a memory with none: NAME: ok, or with --json
    {"memory", "ok": true, "messages"}) and exits 5 while a problem remains, 0 when clean; notes (things readers tolerate, like a sealed torn write) do not count. --repair only adds a
    newline to seal a torn line, or rebuilds derived state (view.json, index.sqlite) from the logs; a
    damaged line, a gap, a duplicate or a broken chain is explained for a person to decide. Messages lost from
    the log's end: put the day file back, or, if they are gone for good, --repair --accept-lost NAME logs a
    note in place of each, so their numbers are never given to other messages.

    Examples:
      pimem fsck main
      pimem fsck --repair main
      pimem fsck --repair --accept-lost main
      pimem fsck --json | jq -r 'select(.fatal) | .where'
    """
    from .. import fsck  # (here, not at the top: ``pimem --help`` imports every command's module)

    if not repair:
        output.read_only()
    needs(("--timeout", timeout), "--repair (only a repair takes the writer lock)", repair)
    needs(("--accept-lost", accept_lost), "--repair", repair)
    needs(("--accept-lost", accept_lost), "a NAME (the memory whose loss is accepted)", bool(names))
    unread = output.Unread(_unread_json if json else None)
    settings = fsck.check_home(env.home(home))
    if settings:  # (every memory's settings start from it: each would stop at it, and say it again)
        for finding in settings:
            output.json_line(finding.to_json()) if json else output.line(str(finding))
        raise IntegrityError("1 problem found")
    mems = _given(names, home) if names else Memory.all(home, refused=unread, claims=True)
    if not mems and not unread.said:
        naming.say_none(home, "check")
    remaining = repairable = 0
    for mem in mems:
        findings = unread.run(mem, lambda: fsck.check(mem, repair=repair, timeout=timeout, accept_lost=accept_lost))
        if findings is None:  # (a memory it may not read: named, the others checked)
            continue
        for finding in findings:
            if json:
                output.json_line(finding.to_json())
            else:
                output.line(str(finding))
        left = fsck.problems(findings)
        remaining += len(left)
        repairable += sum(1 for f in left if f.repair)
        if not findings:
            count = mem.count()
            if json:
                output.json_line({"memory": mem.name, "ok": True, "messages": count})
            else:
                output.line(f"{mem.name}: ok ({count} message{'' if count == 1 else 's'})")
    if not names:  # (a name given that is a broken pointer stops at it: exit 5, said)
        for finding in fsck.check_pointers(env.home(home)):
            output.json_line(finding.to_json()) if json else output.line(str(finding))
            remaining += 1
    if remaining:
        hint = f"; {repairable} can be fixed with 'pimem fsck --repair'" if repairable and not repair else ""
        raise IntegrityError(f"{remaining} problem{'s' if remaining != 1 else ''} found{hint}")
    unread.check()


def _given(names: list[str], home) -> list[Memory]:
    """The memories ``names``, each once, as ``Memory.named`` opens them; but one whose log's directory is a pipe
    or a file, which every other command stops at (exit 7), is checked: fsck names it."""
    found: dict = {}
    for name in names:
        try:
            mem = Memory.open(name, home)
        except NotADirectoryError:
            mem = Memory.at(name, home)
        found.setdefault(mem.path, mem)
    return list(found.values())


def _unread_json(mem, exc) -> None:
    """A memory fsck could not read at all, as a record of --json (a problem: the line on stderr says it too)."""
    said = str(exc)
    output.json_line({"memory": mem.name, "area": "files", "where": None, "problem": said.removeprefix(f"{mem.name}: "),
                      "fatal": True, "repair": None, "repaired": False, "exit": int(exc.code)})
