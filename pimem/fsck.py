"""Checking a memory on disk, and repairing what can be repaired, deleting nothing but a killed write's temporary copy.

Each check reads one part of the memory and returns findings. A finding is a problem (``pimem fsck`` exits 5
while one remains) or a note (something the readers already tolerate, reported so a person knows). Repair
only ever adds (a newline sealing a torn line; asked by name, a note in place of each message lost from the
log's end) or rebuilds derived state from the sources of truth; a damaged line, a gap, a duplicate or a broken
hash chain is explained, never rewritten.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import orjson

from . import config, decoder, message as msgs, when
from .errors import BadInput, IntegrityError, PimemError
from .home import append_durably
from .memory import Memory
from .nofollow import check_dir, kind, read_bytes
from .output import count

# how a line torn by a crash starts, per file: the first key a writer puts down
_TORN_MESSAGE = re.compile(rb'\{"i":(\d+)[,}]')
_TORN_NODE = re.compile(rb'\{"l":\d+')


@dataclass
class Finding:
    memory: str
    area: str  # log, tree, view, memory, windows, index, settings, files, pointer
    where: str  # file:line, or the file
    problem: str
    fatal: bool = True  # False for a note: readers tolerate it and nothing needs doing
    repair: str | None = None  # what --repair does about it, when it can
    repaired: bool = False
    action: Callable[[Memory], None] | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("memory", "area", "where", "problem", "fatal", "repair", "repaired")}

    def __str__(self) -> str:
        tag = "repaired" if self.repaired else ("problem" if self.fatal else "note")
        fix = f" (--repair: {self.repair})" if self.repair and self.fatal and not self.repaired else ""
        return f"{self.memory}: {self.area}: {self.where}: {tag}: {self.problem}{fix}"


def check(mem: Memory, repair: bool = False, timeout: float | None = None, accept_lost: bool = False) -> list[Finding]:
    """Every finding for one memory; with ``repair``, the repairable ones are fixed under the writer lock
    and marked ``repaired``. ``accept_lost``: messages lost from the log's end are gone for good, and a note
    is logged in place of each."""
    mem.log.explaining = True
    findings = _run_checks(mem, accept_lost)
    actions = list(dict.fromkeys(f.action for f in problems(findings) + _leftovers(findings) if f.action))
    if not repair or not actions:
        return findings
    with mem.lock(timeout):
        for action in actions:
            action(mem)
    after = _run_checks(mem, accept_lost)
    remaining = {_key(f) for f in problems(after) + _leftovers(after)}
    for f in problems(findings) + _leftovers(findings):
        f.repaired = _key(f) not in remaining
    before = {_key(f) for f in findings}
    return findings + [f for f in after if _key(f) not in before and f.fatal]


def _key(f: Finding) -> tuple:
    return f.area, f.where, f.problem


def _run_checks(mem: Memory, accept_lost: bool = False) -> list[Finding]:
    kept = check_kept(mem)
    if any(f.area in _READ_BY_CHECKS for f in kept):  # (the checks below would stop at it, as every reader does)
        return kept
    known: dict[str, int] = {}  # what the other parts of the memory know the log held, as the T each implies
    log = check_log(mem, known)
    rest = check_tree(mem) + check_view(mem, known) + check_chains(mem, known) + check_index(mem, known)
    lost = check_end(mem, known, accept_lost, any(f.fatal and f.action is None for f in log))
    if lost and lost[0].action is None:  # (a refolded view or a rebuilt index would forget how far the log went)
        _left(rest, lambda f: getattr(f.action, "func", None) is not _seal,
              "--repair leaves it until the lost messages are put back or accepted")
    log += lost
    broken = any(f.fatal and f.action is None for f in log)  # (a message numbered twice, a gap: put right by hand)
    if broken:  # (rebuilt from such a log, the index or the view would stop at it half way, as readers do)
        _left(rest, lambda f: f.area in ("index", "view"), "--repair builds it again once the log's problems above are put right")
    return (kept + log + check_ranges(mem, broken) + rest + check_projects(mem) + check_imports(mem)
            + check_temporaries(mem))


def _left(findings: list[Finding], which: Callable[[Finding], bool], why: str) -> None:
    """The repairs of ``which`` findings left undone while the log cannot be trusted, each saying ``why``."""
    for f in findings:
        if f.action is not None and which(f):
            f.action, f.repair = None, None
            f.problem += f"; {why}"


# the files a memory keeps that its commands open, by where (a day file and a tree file stand for every one):
# the area fsck says it in, who stops at something else there (exit 7, one line naming it), and what to do
_KEPT = {
    "main/": ("log", "every command reading the log stops at it", "move it out of main/, and put the day file back if you have it"),
    "tree/": ("tree", "every reader of the view stops at it", "remove it: its summaries are built again"),
    "config.json": ("settings", "the commands reading its settings (view, context, search, append …) stop at it",
                    "move it away: the memory then has the default settings"),
    "memory.jsonl": ("memory", "remember, memories, context and compact stop at it", "move it away, and put the file back if you have it"),
    "windows.jsonl": ("windows", "compact stops at it", "move it away, and put the file back if you have it"),
    "lock.json": ("files", "status, context and the builders stop at it", "remove it: a builder writes its lease again"),
    "compactor.json": ("files", "status and the builders stop at it", "remove it: the builders note the compactor's failures again"),
    "cursors.json": ("files", "since --cursor stops at it", "move it away: each consumer's cursor then starts afresh"),
    "cursors.lock": ("files", "since --cursor stops at it", "remove it"),
    "write.lock": ("files", "every write stops at it", "remove it"),
    "index.lock": ("index", "search and recall stop at it", "remove it"),
}
_READ_BY_CHECKS = {"log", "tree", "settings", "memory", "windows"}  # (by the areas said: the checks read those files)


def check_kept(mem: Memory) -> list[Finding]:
    """A directory, a named pipe, a socket or a device where the memory keeps a file its commands open (a day
    file, a tree file, ``config.json``, ``memory.jsonl`` … and the home's ``config.json``, which every memory's
    settings read): each command stops at it in one line naming it (exit 7); fsck names it as a problem, with
    what to do, and leaves it (a directory there holds what is someone's). So are settings every command refuses
    (exit 2: ``_unsettled``). The checks that would read one of those files are not run until it is mended."""
    found = check_home(mem.path.parent, mem.name)
    if what := _not_a_dir(mem.path / "main"):
        found.append(Finding(mem.name, "log", "main", f"{what}, not a directory: every command reading the log stops at "
                             "it (exit 7); pimem leaves it (move it away, and put the log's directory back if you have it)"))
    if what := _not_a_dir(mem.path / "tree"):
        found.append(Finding(mem.name, "tree", "tree", f"{what}, not a directory: every reader of the view stops at it "
                             "(exit 7); pimem leaves it (remove it: the summaries are built again)"))
    for where, (area, stops, remedy) in _KEPT.items():
        if where.endswith("/"):
            folder = mem.path / where
            try:
                with os.scandir(folder) as entries:
                    odd = sorted(e.name for e in entries if e.name.endswith(".jsonl") and not e.name.startswith(".")
                                 and not e.is_file(follow_symlinks=False) and not e.is_symlink())
            except (FileNotFoundError, NotADirectoryError):
                continue
            paths = [folder / name for name in odd]
        else:
            paths = [mem.path / where]
        for path in paths:
            if what := _not_a_file(path):
                found.append(Finding(mem.name, area, str(path.relative_to(mem.path)),
                                     f"{what}, not a file: {stops} (exit 7); pimem leaves it ({remedy})"))
    if not any(f.area == "settings" for f in found) and (said := _unsettled(lambda: config.of_memory(mem.path, mem.path.parent))):
        found.append(Finding(mem.name, "settings", "config.json", said))
    return found


def check_home(root: Path, name: str | None = None) -> list[Finding]:
    """The home's ``config.json`` (the settings every memory starts from), when it is no file: said for memory
    ``name``, else for the home (its path in place of a memory's name)."""
    path = root / "config.json"
    who, where = (str(root), "config.json") if name is None else (name, str(path))
    if what := _not_a_file(path):
        return [Finding(who, "settings", where,
                        f"{what}, not a file: the commands reading settings (view, context, search, append …) stop "
                        "at it (exit 7); pimem leaves it (move it away: every memory then has the default settings and its own)")]
    if said := _unsettled(lambda: config.of_home(root)):
        return [Finding(who, "settings", where, said)]
    return []


def _unsettled(read: Callable[[], dict]) -> str | None:
    """What is wrong with the settings ``read()`` reads (a ``config.json`` that is not JSON, a setting of the
    wrong shape, settings that do not agree), as every command reading them says it (exit 2) but for the
    file's path, which the finding names; None when they are fine."""
    try:
        read()
    except BadInput as exc:
        text = str(exc).partition(": ")[2] or str(exc)  # (PATH: what; fix it or remove it)
        said, _, remedy = text.rpartition("; ") if "; " in text else (text, "", "fix it or remove it")
        return f"{said}: the commands reading its settings (view, context, search, append …) stop at it (exit 2); pimem leaves it ({remedy})"
    return None


def check_projects(mem: Memory) -> list[Finding]:
    """The list of the projects whose sessions the memory holds (``projects.json``): one that cannot be read
    stops ``import`` and the hook of every project of the memory's name (exit 5); ``--repair`` makes it again
    from the memory's imports (a link there is named and left alone)."""
    from . import projects

    path = mem.path / projects.FILE
    if os.path.islink(path):
        return [Finding(mem.name, "files", path.name, "a symbolic link: pimem never follows links inside its home")]
    try:
        if os.path.lexists(path):
            projects.held(mem.path)
    except IntegrityError:
        return [Finding(mem.name, "files", path.name, "not a list of the project directories whose sessions the memory "
                        "holds; import and the hook stop at it (exit 5)", repair="make it again from the memory's imports",
                        action=_remake_projects)]
    except OSError as exc:
        return [Finding(mem.name, "files", path.name, f"cannot be read ({exc.strerror}); import and the hook stop at it")]
    return []


def _remake_projects(mem: Memory) -> None:
    from . import projects

    projects.remake(mem.path)


def check_imports(mem: Memory) -> list[Finding]:
    """The journal of the import state (``imports.journal``, the changes since ``imports.json``): one that names
    another ``imports.json`` (a fold killed between its two writes, an older pimem's write of it), or ends in a
    line a killed write tore, is a note: readers leave it out, or stop before that line, and read the files
    again from the positions they have, finding what they logged held. ``--repair`` folds it into
    ``imports.json``. A link there, or at ``imports.json``, is named and left alone, as is a file that cannot be
    read (named: ``imports.json`` or the journal)."""
    from .importers import state

    path = mem.path / state.JOURNAL
    for name in (state.STATE, state.JOURNAL):
        if os.path.islink(mem.path / name):
            return [Finding(mem.name, "files", name, "a symbolic link: pimem never follows links inside its home")]
    try:
        left = state.journal_left(mem.path)
    except (OSError, PimemError) as exc:
        name = os.path.basename(getattr(exc, "filename", None) or path)
        return [Finding(mem.name, "files", name if name in (state.STATE, state.JOURNAL) else path.name,
                        f"cannot be read ({getattr(exc, 'strerror', None) or exc}); import and the hook stop at it")]
    if left is None:
        return []
    problem = ("names another imports.json than the one there (a write of it was killed, or an older pimem wrote it): "
               "readers leave it out" if left == "another" else "ends in a line a killed write tore: readers stop before it")
    return [Finding(mem.name, "files", path.name, f"{problem}; the lines of the files it left out are read again and "
                    "found logged", fatal=False, repair="fold it into imports.json", action=_refold_imports)]


def _refold_imports(mem: Memory) -> None:
    from .importers import state

    state.refold(mem)


# a write's temporary twin (``home.write_atomic``): .NAME.PID.tmp
_TEMPORARY = re.compile(r"\.(.+)\.(\d+)\.tmp")
STALE_AFTER = 3600  # seconds: a twin this old whose process is gone was left by a write that was killed


def check_temporaries(mem: Memory, now: float | None = None) -> list[Finding]:
    """Temporary twins left in the memory's directory (or one below it) by a write killed before its rename: a
    note each, which ``--repair`` removes. One whose process still runs, or younger than an hour (a process on
    another machine sharing the home may be writing it), is left alone, and so is one beside which no file of
    its name is kept (a file of the user's named so: pimem's twins are of files it keeps, once one write of
    them is done)."""
    now = time.time() if now is None else now
    found = []
    with os.scandir(mem.path) as top:
        folders = [mem.path] + sorted(Path(e.path) for e in top if e.is_dir(follow_symlinks=False))
    for folder in folders:
        with os.scandir(folder) as entries:
            stale = [(e, m) for e in entries if (m := _TEMPORARY.fullmatch(e.name)) and e.is_file(follow_symlinks=False)
                     and (folder / m[1]).is_file()]
        for entry, match in sorted(stale, key=lambda em: em[0].name):
            path = Path(entry.path)
            if not _dead_write(path, int(match[2]), now):
                continue
            found.append(Finding(mem.name, "files", str(path.relative_to(mem.path)),
                                 f"a temporary copy of {match[1]} left by a write that was killed (process {match[2]} "
                                 f"is gone); readers never read it", fatal=False, repair="remove it",
                                 action=functools.partial(_remove, path, int(match[2]))))
    return found


def _dead_write(path: Path, pid: int, now: float) -> bool:
    """Whether temporary copy ``path`` of process ``pid`` is a killed write's: an hour old, its process gone."""
    from .lease import pid_alive

    try:
        return now - path.lstat().st_mtime >= STALE_AFTER and not pid_alive(pid)
    except FileNotFoundError:  # (its write ended after all)
        return False


def _remove(path: Path, pid: int, mem: Memory) -> None:
    """Remove a killed write's temporary copy, looked at again: it was found without the writer lock, and a
    process given its PID since may be writing it now."""
    if _dead_write(path, pid, time.time()):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _leftovers(findings: list[Finding]) -> list[Finding]:
    """The notes ``--repair`` acts on all the same: temporary twins to remove."""
    return [f for f in findings if not f.fatal and f.action is not None and not f.repaired]


def check_end(mem: Memory, known: dict[str, int], accept_lost: bool = False, log_broken: bool = False) -> list[Finding]:
    """Messages lost from the log's end (a day file deleted or cut short, an older copy put back): ranges.json,
    or the view, the compaction windows or the index, knows the log went further than it does (a tree node
    past the end is the tree's problem: its lines are no record of the log's end). A
    writer would give their numbers to other messages, so writes are refused until the file is put back, or
    until the loss is accepted (``accept_lost``): a note is then logged in place of each lost message, and
    every number keeps its one message. Not while the log has another problem (``log_broken``: a gap, a
    duplicate, lines out of order): the notes' write would record ranges.json for the broken log, and the
    commands that now stop at the gap would go on past it."""
    from .store import lost_words

    end = mem.log.past_unsealed(known.pop("main/"), [p.name for p in mem.log.files()])  # (not lost: sealed by --repair)
    recorded = mem.log.lost_end(end)
    if recorded is not None:
        known["ranges.json"] = recorded[1] + 1
    past = {what: n for what, n in known.items() if n > end}
    if not past or _logged_since(mem, max(past.values())):
        return []
    last = max(past.values()) - 1
    names = recorded[2] if recorded is not None else []
    one = len(names) <= 1
    problem = (f"{lost_words(end, last, names)} ({', '.join(sorted(past))} "
               f"{'knows' if len(past) == 1 else 'know'} the log went to #{last}), so nothing is logged: put "
               f"{'the file' if one else 'the files'} back and everything is as it was, or, if they are gone for good, "
               f"'pimem fsck --repair --accept-lost {mem.name}' logs a note in place of each")
    where = f"main/{names[0]}" if len(names) == 1 else "main/"
    if not accept_lost:
        return [Finding(mem.name, "log", where, problem)]
    if log_broken:
        return [Finding(mem.name, "log", where, problem + "; --accept-lost logs them only once the log's problems "
                        "above are put right")]
    return [Finding(mem.name, "log", where, problem, repair=f"log a note in place of each lost message (#{end}…#{last})",
                    action=functools.partial(_log_lost, end, last, names))]


def _logged_since(mem: Memory, end: int) -> bool:
    """Whether the log now holds the messages before ``end``: the others were asked how far it went after it
    was read, without the writer lock, and a writer may have logged those messages meanwhile (an agent
    appending every turn). Read only when it looks short."""
    again: dict[str, int] = {}
    check_log(mem, again)
    return mem.log.past_unsealed(again["main/"], [p.name for p in mem.log.files()]) >= end


def _log_lost(first: int, last: int, names: list[str], mem: Memory) -> None:
    """Log a note in place of each message lost from the log's end, so that their numbers stay theirs."""
    from . import env

    where = f" from {', '.join(names)}" if names else ""
    today = when.rfc3339(env.now())[:10]
    batch = mem.prepare([{"kind": "note", "text": f"message #{i} was lost{where}; this note takes its place "
                          f"(pimem fsck --repair --accept-lost, {today})"} for i in range(first, last + 1)])
    start = mem.log.seal()
    if start != first:  # (the log changed since it was checked: checked again by the next fsck)
        return
    notes = list(batch)
    mem.log.write(notes, start)
    mem.views.noted(first, notes)


def check_ranges(mem: Memory, log_broken: bool = False) -> list[Finding]:
    """ranges.json (derived): readers take the day files' sizes from it when no write can have happened since
    it was written, so what it records must be what the files are (a file changed other than by pimem). It
    is written again only once the log itself is sound: until then every command checks the whole log and
    stops at its gap or duplicate."""
    wrong, gone = mem.log.stale_ranges()
    if not wrong and not gone:
        return []
    one = len(wrong) + len(gone) == 1
    said = []
    if wrong:
        said.append(f"{count(len(wrong), 'day file')} otherwise than "
                    f"{f'it is ({wrong[0]})' if len(wrong) == 1 else f'they are ({wrong[0]} first)'}")
    if gone:  # (a row for a file not there: every command takes it for a change and checks the whole log)
        said.append(f"{count(len(gone), 'day file')} that {'is' if len(gone) == 1 else 'are'} gone "
                    f"({gone[0]}{'' if len(gone) == 1 else ' first'})")
    did = "changed or deleted" if wrong and gone else "changed" if wrong else "deleted"
    return [Finding(mem.name, "log", "ranges.json", f"records {' and '.join(said)}: something else {did} "
                    f"{'it' if one else 'them'}, so every command checks the whole log"
                    + ("; --repair writes it again only once the log's problems above are put right (recorded now, "
                       "it would vouch for a broken log and commands would stop checking it)" if log_broken else ""),
                    repair=None if log_broken else "write it again from the day files",
                    action=None if log_broken else (lambda m: m.log.rewrite_ranges()))]


def _lines(mem: Memory, area: str, path: Path, found: list[Finding], torn_write: Callable[[bytes], object],
           loads: Callable = orjson.loads, whole_tail: bool = False) -> Iterator[tuple[str, bytes, object]]:
    """``(where, raw, parsed)`` for each complete line of a JSONL file, each parsed as its readers parse it
    (``loads``; ``decoder.loads``: a byte order mark first is read past, as the chains' reader does). Adds a
    repairable finding for a torn last line, a note for a torn write sealed earlier (it starts like a record of
    the file: ``torn_write`` says so) and a problem for any other line that is not JSON. ``whole_tail``: the file's
    readers read a last line that is whole JSON without its newline (the chains' do; the log's and the tree's
    skip it as torn until it is sealed), so it is yielded too."""
    rel = str(path.relative_to(mem.path))
    data = read_bytes(path)  # (a link: refused, as every reader refuses it)
    if loads is decoder.loads and data.startswith(decoder.BOM):
        data = data[len(decoder.BOM):]
    lines = data.split(b"\n")
    tail = lines.pop()  # bytes after the last newline: empty unless the last line is torn
    for n, raw in enumerate(lines, 1):
        where = f"{rel}:{n}"
        if not raw.strip():
            continue
        try:
            obj = loads(raw)
        except orjson.JSONDecodeError:
            if torn_write(raw):
                found.append(Finding(mem.name, area, where, f"a write torn by a crash and later sealed ({count(len(raw), 'byte')}); skipped on read", fatal=False))
            else:
                found.append(Finding(mem.name, area, where, f"damaged line ({count(len(raw), 'byte')}) is not JSON; readers skip it, so anything it held is missing"))
            continue
        yield where, raw, obj
    if tail:
        try:
            obj, whole = loads(tail), True
        except orjson.JSONDecodeError:
            obj, whole = None, False
        what = (f"last line has no newline ({count(len(tail), 'byte')}), which readers read as it is" if whole and whole_tail
                else f"last line has no newline ({count(len(tail), 'byte')}): whole, but readers skip it as a torn write until "
                     "it is sealed (the next write seals it)" if whole
                else f"torn last line ({count(len(tail), 'byte')}, no newline): a write cut by a crash, which readers skip")
        found.append(Finding(mem.name, area, f"{rel}:{len(lines) + 1}", what,
                             repair="seal it with a newline", action=functools.partial(_seal, path)))
        if whole and whole_tail:
            yield f"{rel}:{len(lines) + 1}", tail, obj


def _seal(path: Path, mem: Memory) -> None:
    """End a torn last line with a newline (the only byte repair ever adds)."""
    append_durably(path, b"")


def check_log(mem: Memory, known: dict[str, int] | None = None) -> list[Finding]:
    """The message log: torn and damaged lines, contiguity of ``i``, and each message's schema. ``known``
    gets the T it holds (``main/``: one more than its highest ``i``)."""
    found: list[Finding] = []
    where_is: dict[int, str] = {}
    duplicates: dict[int, list[str]] = {}

    def add(where: str, problem: str, **kw) -> None:
        found.append(Finding(mem.name, "log", where, problem, **kw))

    torn: dict[int, tuple[int, int]] = {}  # a sealed torn write's finding: the i it starts as, and its bytes

    def torn_write(raw: bytes):
        start = _TORN_MESSAGE.match(raw)
        if start:
            torn[len(found)] = int(start.group(1)), len(raw)  # (the note _lines appends next)
        return start

    for path in mem.log.files():
        before: tuple[int, str] | None = None  # the last message of the file so far, and where
        for where, raw, obj in _lines(mem, "log", path, found, torn_write):
            if type(obj) is not dict or type(obj.get("i")) is not int:
                add(where, f"damaged line ({count(len(raw), 'byte')}) is not a message; readers skip it, so anything it held is missing")
                continue
            i = obj["i"]
            if i in where_is:
                duplicates.setdefault(i, [where_is[i]]).append(where)
            else:
                where_is[i] = where
            if before is not None and i < before[0]:
                add(where, f"out of order: message {i} comes after message {before[0]} ({before[1]}), so readers, "
                    f"who read a day file in its order, miss i={i} where they expect it and stop with exit 5; put the "
                    "file's lines back in i order by hand (--repair never rewrites the log)")
            before = max(before or (i, where), (i, where))
            for problem in _message_problems(obj, path.name[:10]):
                add(where, f"message {i}: {problem}")
    for i, places in sorted(duplicates.items()):
        add(places[1], f"duplicate i={i}: also at {', '.join(p for p in places if p != places[1])}")
    for at, (i, size) in torn.items():
        # a torn write is sealed, and its i written again after it; one the log lacks, with later messages
        # logged, is that message's line damaged: its bytes are the gap's
        if i not in where_is and i < max(where_is, default=-1):
            found[at] = Finding(mem.name, "log", found[at].where, f"damaged line ({count(size, 'byte')}) is not JSON: "
                                f"it starts as message {i}, which the log lacks (the gap below): put its bytes right by hand")
    if known is not None:
        known["main/"] = max(where_is, default=-1) + 1
    expected = 0
    for i in sorted(where_is):
        if i > expected:
            missing = f"i={expected}" if i == expected + 1 else f"i={expected}…{i - 1}"
            after = f" after {where_is[expected - 1]}" if expected else ""
            add(where_is[i], f"gap: no message {missing}{after}; readers stop here with exit 5")
        expected = i + 1
    return found


def check_tree(mem: Memory) -> list[Finding]:
    """The summary tree's files: each line a node of the log, within a line's bytes, built once."""
    from .tree import byte_size, label, unrecorded

    found: list[Finding] = []
    total = mem.count()
    line_bytes = int(mem.config["line_bytes"])
    seen: dict[tuple[int, int], str] = {}
    sizes: dict[tuple[int, int], int] = {}  # the bytes of the line readers use, by node
    tree_dir = mem.path / "tree"
    paths = sorted(tree_dir.glob("*.jsonl")) if check_dir(tree_dir) else []  # (a link: refused, never read through)
    for path in paths:
        for where, raw, node in _lines(mem, "tree", path, found, _TORN_NODE.match):
            l, i = (node.get("l"), node.get("i")) if type(node) is dict else (None, None)
            if type(l) is not int or type(i) is not int or l < 0 or i < 0 or type(node.get("text")) is not str:
                found.append(Finding(mem.name, "tree", where, f"damaged line ({count(len(raw), 'byte')}) is not a node; readers skip it"))
                continue
            name, text = label(l, i), node["text"]
            if byte_size(text) > line_bytes:  # (built before line_bytes was lowered: no damage, and not read)
                found.append(Finding(mem.name, "tree", where, f"node {name} is {byte_size(text)} bytes, over the "
                                     f"{line_bytes}-byte line: readers pass over it, and it is built again", fatal=False))
            elif (l, i) in seen:
                first = f"first at {seen[l, i]}, which readers use"
                # (built again under a lowered line_bytes, since raised: no damage. A first line no longer than the
                # least line_bytes there is was never passed over, so its second is a node built twice)
                if sizes[l, i] > max(byte_size(text), config.LEAST_LINE_BYTES):
                    found.append(Finding(mem.name, "tree", where, f"node {name} built again shorter, as a lowered line_bytes "
                                         f"has it built ({first})", fatal=False))
                else:
                    found.append(Finding(mem.name, "tree", where, f"node {name} built twice ({first})"))
            else:
                seen[l, i], sizes[l, i] = where, byte_size(text)
            if (i + 1) << l > total:
                found.append(Finding(mem.name, "tree", where, f"node {name} covers messages past the end of the log ({total})"))
            if node.get("size") != byte_size(text):
                found.append(Finding(mem.name, "tree", where, f"node {name}: size is {node.get('size')!r}, the text makes it {byte_size(text)}"))
            wrong = unrecorded(node)
            if wrong:
                found.append(Finding(mem.name, "tree", where, f"node {name}: its {'; '.join(wrong)} (counted as none)",
                                     fatal=False))
            if node.get("suspect") and isinstance(node["suspect"], list) and seen.get((l, i)) == where:  # (readers' line)
                found.append(Finding(mem.name, "tree", where, f"node {name} is suspect: its summary names "
                                     f"{', '.join(map(str, node['suspect']))}, which its messages do not hold", fatal=False))
    return found


def check_view(mem: Memory, known: dict[str, int] | None = None) -> list[Finding]:
    """view.json: it must restore as is (a refold would change the bytes the model has cached). ``known``
    gets the T it covers."""
    path = mem.path / "view.json"
    if what := _not_a_file(path):
        return [_leave(mem, "view", path, what, "the view is folded afresh from the log")]
    if not path.exists():
        return [Finding(mem.name, "view", "view.json", "missing: the next reader folds the view afresh from the log and the tree", fatal=False)] if mem.count() else []
    if known is not None:
        from .viewfile import checksum

        try:
            saved = orjson.loads(read_bytes(path))
            body = {k: saved.get(k) for k in ("T", "view", "cview", "tree")}
        except (OSError, orjson.JSONDecodeError, AttributeError):
            body = None
        if body is not None and type(body["T"]) is int and saved.get("check") == checksum(body):  # (as pimem saved it)
            known["view.json"] = body["T"]
    from .viewfile import Overreaching

    try:
        mem.views.check()
        views = mem.views.make()  # (as a reader restores it: the tree nodes it saw built must still be there)
        views.load(read_bytes(path), mem.count())
        views.check_tree(mem.tree.file_sizes())
    except Overreaching as exc:  # (messages lost from the log's end: once notes take their numbers, it restores)
        return [Finding(mem.name, "view", "view.json", f"unusable: {exc}", repair="keep it as saved once the log "
                        "holds what it covers again (folded afresh only if it does not restore then)",
                        action=_restore)]
    except (ValueError, OSError) as exc:
        return [Finding(mem.name, "view", "view.json", f"unusable: {exc}", repair="fold the view afresh from the log and the tree", action=_refold)]
    return []


def _refold(mem: Memory) -> None:
    mem.views.current(save=True)


def _restore(mem: Memory) -> None:
    """The view once lost messages were accepted (``_log_lost`` has put the notes' lines in their place): kept
    as saved if it restores now, else folded afresh; left as it is while the log is still short of it (the
    notes not logged: the log changed since it was checked)."""
    from .viewfile import Overreaching

    try:
        mem.views.check()
    except Overreaching:
        return
    except (ValueError, OSError):
        pass
    _refold(mem)


def check_chains(mem: Memory, known: dict[str, int] | None = None) -> list[Finding]:
    """memory.jsonl and windows.jsonl: seq, prevHash and hash of every event (the trusted prefix ends at the
    first bad one, and appends are refused after it until a person repairs the file). ``known`` gets the T
    the compaction windows imply (each keeps the log from a message there was)."""
    from .chain import cut_short, memory_chain, window_chain

    found: list[Finding] = []
    for chain in (memory_chain(mem.path), window_chain(mem.path)):
        if kind(chain.path) is None:  # (a link, even one to nothing, is refused as its readers refuse it)
            continue
        for _ in _lines(mem, chain.path.name.removesuffix(".jsonl"), chain.path, found, cut_short, decoder.loads, True):
            pass
        reading = chain.read()
        if known is not None and chain.path.name == "windows.jsonl" and reading.events:
            known["windows.jsonl"] = max(ev["keptStart"] for ev in reading.events)
        if reading.problem:
            where = f"{chain.path.name}:{reading.line}"  # (the line the chain stops at: said once, as what it is,
            found[:] = [f for f in found if not (f.where == where and f.fatal)]  # not as a line torn or unsealed)
            found.append(Finding(mem.name, chain.path.name.removesuffix(".jsonl"), where,
                                 f"{reading.what}; later events are not trusted and appends are refused"))
    return found


def check_index(mem: Memory, known: dict[str, int] | None = None) -> list[Finding]:
    """index.sqlite (derived): SQLite's own check, and every message row pointing at the line holding that
    message. Only read, never created; opened as a search opens it, so that the last connection to close
    takes its WAL files away (a read-only connection would leave them behind), or read-only where nothing
    may be written. Repair deletes it and builds it again."""
    import sqlite3

    from . import index

    path, second = mem.path / index.FILENAME, mem.path / index.SHARD_FILENAME
    for file in (path, second):
        for suffix in ("", "-wal", "-shm"):  # (SQLite's own files beside each: search stops at one that is no file)
            if what := _not_a_file(file.with_name(file.name + suffix)):
                return [_leave(mem, "index", file.with_name(file.name + suffix), what, "the index is built again from the log")]
    if not path.exists() and not path.is_symlink():
        return []

    def problem(text: str, where: str = index.FILENAME) -> list[Finding]:
        return [Finding(mem.name, "index", where, text, repair="delete it and build it again from the log", action=_reindex)]

    for file in (path, second):
        for suffix in ("", "-wal", "-shm", "-journal"):
            if os.path.islink(f"{file}{suffix}"):  # SQLite would follow it
                return problem(f"{file.name}{suffix} is a symbolic link: pimem never follows links inside its home")
    writable = os.access(mem.path, os.W_OK)
    uri = (lambda file: f"{file.as_uri()}?mode=rw") if writable else index.read_only_uri
    reading = path  # (the file an error is about: the one the user has, never the URI SQLite was given)
    try:
        db = sqlite3.connect(uri(path), uri=True)
        try:
            schemas = ["main"]
            db.execute("SELECT count(*) FROM main.sqlite_master").fetchone()  # (main read first: an error is its own)
            if second.exists():
                reading = second
                db.execute("ATTACH DATABASE ? AS shard", (uri(second),))
                schemas.append("shard")
            for schema in schemas:
                reading = path if schema == "main" else second
                verdict = db.execute(f"PRAGMA {schema}.quick_check").fetchone()[0]
                if verdict != "ok":  # (SQLite's report runs over lines: one line here)
                    verdict = "; ".join(part for part in verdict.replace("*** in database main ***", "").splitlines() if part.strip())
                    return problem(f"damaged: {verdict}", reading.name)
            reading = path
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"files", "msgs"} <= tables:
                return []  # only the tree's tables so far: the search index has not been built
            names = dict(db.execute("SELECT id, name FROM files"))
            rows = db.execute("SELECT i, file, offset, length FROM msgs").fetchall()
            read = {}  # (an index of an older pimem has no mtimes: rebuilt by the next reader)
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version == index.SCHEMA_VERSION or version in index.UPGRADES:  # (upgraded by the next reader: no CRC-32 yet)
                crc = "crc" if version == index.SCHEMA_VERSION else "NULL"
                read = {name: (done, stamp) for name, done, *stamp
                        in db.execute(f"SELECT name, done, mtime, inode, edits, {crc} FROM files")}
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", "").startswith(("SQLITE_IOERR", "SQLITE_FULL")):
            raise  # the disk, not the file (full, or failing): said as such, exit 7, and nothing to rebuild
        said = re.sub(r"file:\S*", reading.name, str(exc)).replace(f"{reading.name}: {reading.name}", reading.name)
        return problem(f"unreadable: {said}", reading.name)
    if known is not None and rows:
        known["index.sqlite"] = max(row[0] for row in rows) + 1
    lines = {}
    for path_ in mem.log.files():
        for offset, length, msg in mem.log.read_offsets(path_):
            lines[path_.name, offset] = msg["i"], length
    # a row points at the line holding its message (its length counted with or without the newline)
    wrong = [(i, names.get(fid), offset) for i, fid, offset, length in rows
             if lines.get((names.get(fid), offset)) not in ((i, length), (i, length + 1))]
    if wrong:
        i, name, offset = wrong[0]
        return problem(f"{len(wrong)} of {len(rows)} message rows point at the wrong line (message {i} at {name}:{offset})")
    stats = mem.log.stats()  # (a file found changed counts as the index counted it)
    edits = mem.log.edit_counts()
    for name, st in stats.items():
        done, read_then = read.get(name, (0, None))
        if index.changed_since(done, read_then, st.st_size, [st.st_mtime_ns, st.st_ino, edits.get(name, 0)],
                               lambda: mem.log.content_crc(name, st)):  # (a file touched or copied back is as read)
            return problem(f"read main/{name} before it was changed: searches miss the change")
    return []


def _not_a_file(path: Path) -> str | None:
    """What stands where pimem keeps a derived file, when it is no file (a link is said elsewhere)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return None
    return {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a named pipe", stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(mode), "a device")


def _not_a_dir(path: Path) -> str | None:
    """What stands where pimem keeps a directory, when it is none (a link is said elsewhere)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
        return None
    return "a file" if stat.S_ISREG(mode) else _not_a_file(path)


def _leave(mem: Memory, area: str, path: Path, what: str, rebuilt: str) -> Finding:
    """A directory (or a pipe, a socket) where a derived file goes: not the file --repair would delete and build
    again (what it holds is someone's; a pipe would hang whoever reads it), so named and left; once it is
    removed, readers make the file."""
    return Finding(mem.name, area, path.name, f"{what}, not a file: pimem leaves it (remove it: {rebuilt})")


def check_pointers(root: Path) -> list[Finding]:
    """The rename pointers of the home (a file ``<home>/<old>`` holding ``{"renamedTo": "<new>"}``): one that
    cannot be read stops every command given its name (exit 5), so it is named; only read, and left for a
    person (what it should point at is theirs to say)."""
    from .home import NAME_RE, reserved, validate_name

    found = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    for entry in entries:
        if not NAME_RE.fullmatch(entry.name) or reserved(entry.name) or entry.is_dir(follow_symlinks=False) \
                or entry.is_symlink():  # (a pipe there is a pointer to every command given its name)
            continue
        try:
            validate_name(orjson.loads(read_bytes(Path(entry.path)))["renamedTo"])
            continue
        except (orjson.JSONDecodeError, KeyError, TypeError, PimemError, OSError) as exc:
            why = "no renamedTo in it" if isinstance(exc, (KeyError, TypeError)) else str(exc)
            if isinstance(exc, OSError) and not isinstance(exc, PimemError):
                why = exc.strerror or why
            code = 7 if isinstance(exc, OSError) else 5  # (what the system refuses, a pipe there say: as commands say it)
        found.append(Finding(entry.name, "pointer", entry.name, f"a rename pointer that cannot be read ({why}): commands "
                             f"given the name '{entry.name}' stop at it (exit {code}); pimem leaves it: remove it, or write "
                             '{"renamedTo": "NAME"} in it'))
    return found


def _reindex(mem: Memory) -> None:
    from . import index

    mem.close()
    index.rebuild(mem.path, mem.log)


def _message_problems(msg: dict, day: str) -> list[str]:
    out = []
    kind, text = msg.get("kind"), msg.get("text")
    if kind not in msgs.KINDS:
        out.append(f"unknown kind {kind!r}")
    if not isinstance(text, str):
        out.append("text is not a string")
    elif kind in msgs.KINDS and msg.get("size") != msgs.size_of(kind, text):
        out.append(f"size is {msg.get('size')!r}, the text makes it {msgs.size_of(kind, text)}")
    date = msg.get("date")
    try:
        when.parse_stored(date)
    except PimemError:
        out.append(f"bad date {date!r}")
    else:
        if not re.search(r"(Z|z|[+-]\d\d:\d\d)$", date):
            out.append(f"date {date!r} has no UTC offset")
        if msgs.day_of(date) != day:
            out.append(f"dated {date} but stored in {day}.jsonl")
    meta = msg.get("meta")
    if meta is not None and not isinstance(meta, dict):
        out.append("meta is not an object")
    return out


def problems(findings: list[Finding]) -> list[Finding]:
    """The findings that still need a person (or ``--repair``)."""
    return [f for f in findings if f.fatal and not f.repaired]
