"""Which format a file is in, when its history starts, and what to call the memory it goes to."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from .. import decoder, ingest, when
from ..hashes import sha256
from ..errors import BadInput, NothingFound, PimemError, escaped
from ..home import NAME_RE, reserved
from ..message import DEFAULT_CAP
from .claude import ClaudeParser
from .codex import CodexParser
from .ndjson import NdjsonParser
from .parser import Parser
from .pi import PiParser

# the order matters only for lines several formats could claim: the more specific first
FORMATS: dict[str, type[Parser]] = {"pi": PiParser, "codex": CodexParser, "claude": ClaudeParser, "ndjson": NdjsonParser}
PEEK_LINES = 64
PEEK_BYTES = 1024 * 1024
_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)
UNFINISHED = "last line still being written; left for the next import"  # (as the import says it: ``job``)


@dataclass
class Source:
    """One file to import: its absolute path, format, size, first date and working directory (if known)."""

    path: str
    format: str
    size: int
    first: datetime | None = None
    cwd: str | None = None

    def sort_key(self):
        return (self.first or _EARLIEST, self.path)

    @property
    def shown(self) -> str:
        """The path as the memory keeps it (``meta.file``, the import state) and reports say it: see
        ``errors.escaped``."""
        return escaped(self.path)


def plan(paths: list[str], fmt: str = "auto", on_note: Callable[[str], None] = lambda text: None) -> list[Source]:
    """The files to import, in the order their histories start. Directories stand for every ``*.jsonl``
    under them. A missing file, a device or pipe, or a file whose format cannot be told, raises ``BadInput``
    before anything is written, and a file or directory that cannot be read its ``OSError`` (exit 7); empty
    files are left out, and so are files whose only line is still being written (``on_note`` says so, as
    the import says it of a last line), and ``NothingFound`` (exit 1) says why when nothing is left."""
    if fmt != "auto" and fmt not in FORMATS:
        raise BadInput(f"unknown format {fmt!r}: use auto, {', '.join(FORMATS)}")
    files: list[Path] = []
    for given in paths:
        path = Path(given).expanduser()
        if path.is_dir():
            found = sessions_under(path)
            if not found:
                raise NothingFound(f"nothing to import: no session files (*.jsonl) under {given}")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif path.exists():
            raise BadInput(f"{given}: not a regular file (a device, pipe or socket); import reads session files")
        else:
            raise BadInput(f"{given}: no such file")
    sources, seen, notes = [], set(), []
    for path in files:
        path = path.resolve()
        if str(path) in seen:
            continue
        seen.add(str(path))
        source = inspect_file(path, fmt, on_unfinished=lambda line: notes.append(f"{escaped(str(path))}:{line}: {UNFINISHED}"))
        if source is not None:
            sources.append(source)
    if not sources:
        if len(files) == 1:
            what = notes[0] if notes else f"{files[0]} is empty"
        else:
            what = f"all {len(files)} session files are empty" + (" or still writing their first line" if notes else "")
        raise NothingFound(f"nothing to import: {what}")
    for note in notes:
        on_note(note)
    return sorted(sources, key=Source.sort_key)


def sessions_under(directory: Path) -> list[Path]:
    """Every ``*.jsonl`` file under ``directory``, sorted (links to directories are not followed). A
    directory that cannot be listed raises its ``OSError``, as a file that cannot be read does: an import
    that would leave its sessions out says so instead of leaving them out unsaid."""

    def fail(exc: OSError) -> None:
        if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):  # (gone meanwhile: nothing to read)
            raise exc

    found = []
    for folder, _, names in os.walk(directory, onerror=fail):
        found += [path for name in names if name.endswith(".jsonl") and (path := Path(folder, name)).is_file()]
    return sorted(found)


def inspect_file(path: Path, fmt: str, remedy: str | None = None,
                 on_unfinished: Callable[[int], None] = lambda line: None) -> Source | None:
    """``path`` as a ``Source`` (its format detected unless ``fmt`` forces one), None when it holds no line
    yet or only one still being written (no newline, the start of a JSON object not whole yet:
    ``on_unfinished`` is given its number);
    ``BadInput`` when its format cannot be told or it has no line of the format forced (``remedy`` instead of
    import's advice to give another ``--format``, for a caller that has none)."""
    lines, passed, unfinished = _head_lines(path)
    objects = list(_objects(lines))
    size = path.stat().st_size
    if not objects:
        if len(lines) == 1 and unfinished and _may_open_object(lines[0]):  # (being written: the next import reads it)
            on_unfinished(unfinished)
            return None
        if lines:
            raise BadInput(f"{path}: not JSON lines; pimem imports pi, claude, codex and ndjson files")
        if passed:
            raise BadInput(f"{path}: its only line is over the {ingest.line_cap(DEFAULT_CAP):,}-byte line cap")
        return None
    looks = next((name for obj in objects for name, parser in FORMATS.items() if parser.sniff(obj)), None)
    if fmt == "auto":
        if looks is None:
            raise BadInput(f"{path}: cannot tell its format (pi, claude, codex or ndjson); give --format")
        fmt = looks
    elif objects and not any(FORMATS[fmt].sniff(obj) for obj in objects):
        found = f"it looks like {looks}" if looks else "its lines are of no format pimem knows"
        advice = remedy or (f"give --format {looks}, or leave --format out" if looks else "")
        raise BadInput(f"{path}: not a {fmt} file: {found}" + (f" ({advice})" if advice else ""))
    first = cwd = None
    for obj in objects:
        found = FORMATS[fmt].describe(obj)
        first = first or _moment(found.get("date"))
        cwd = cwd or (found.get("cwd") if isinstance(found.get("cwd"), str) else None)
    return Source(str(path), fmt, size, first, cwd)


def _head_lines(path: Path) -> tuple[list[bytes], bool, int]:
    """The file's first ``PEEK_LINES`` lines that are not blank, read ``PEEK_BYTES`` at a time, whether a
    line was passed over, and the number of the last line kept when it has no newline (else 0): a line
    longer than that (a long first message) is read whole up to the importers' line cap; one longer still
    is passed over, as the import passes over it. A last line without its newline is kept (it may be
    whole); a BOM opening the file is left out, as the import leaves it out."""
    lines: list[bytes] = []
    cap = ingest.line_cap(DEFAULT_CAP)
    pending, skipping, passed, budget, ended, open_end = b"", False, False, PEEK_BYTES + cap, 0, 0
    with open(path, "rb") as f:
        while len(lines) < PEEK_LINES and budget > 0:
            chunk = f.read(PEEK_BYTES)
            if f.tell() == len(chunk):  # the first chunk: a BOM opening the file is no part of its first line
                chunk = chunk.removeprefix(decoder.BOM)
            if not chunk:
                if not skipping and pending.strip():
                    lines.append(pending)
                    open_end = ended + 1
                break
            if skipping:  # (the rest of a line over the cap)
                cut = chunk.find(b"\n")
                if cut < 0:
                    continue
                chunk, skipping, ended = chunk[cut + 1:], False, ended + 1
            budget -= len(chunk)
            *whole, pending = (pending + chunk).split(b"\n")
            lines += whole
            ended += len(whole)
            if len(pending) > cap:
                pending, skipping, passed = b"", True, True
    kept = [line for line in lines if line.strip()]
    return kept[:PEEK_LINES], passed, open_end if len(kept) <= PEEK_LINES else 0


def _objects(lines: list[bytes]):
    for line in lines:
        try:
            obj = decoder.loads(line)
        except decoder.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            yield obj


def _may_open_object(line: bytes) -> bool:
    """Whether ``line``, not yet parsed whole, could be the start of a JSON object (``hello`` cannot)."""
    return line.lstrip().removeprefix(decoder.BOM).lstrip().startswith(b"{")


def _moment(value) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return when.parse_stored(value).astimezone(timezone.utc)
    except BadInput:
        return None


def default_name(sources: list[Source], home=None) -> str:
    """A memory name for an import without ``--name``, as a reader looks for it (nothing is written): the
    memory the first session's working directory goes to (``projects.memory_for`` over its ``choices``), else
    the first file's name, made into a valid memory name. A writer takes the name with ``claim_name``."""
    from .. import projects

    cwd = _first_cwd(sources)
    return projects.memory_for(cwd, choices(cwd), home)[0] if cwd else _file_name(sources)


def claim_name(sources: list[Source], home=None, timeout: float | None = None) -> str:
    """``default_name`` for a writer: the project's memory claimed for it (``projects.claim``), so that two
    projects of one directory name never both take it."""
    from .. import projects

    cwd = _first_cwd(sources)
    return projects.claim(cwd, choices(cwd), home, timeout) if cwd else _file_name(sources)


def _first_cwd(sources: list[Source]) -> str | None:
    """The project of an import of ``sources``: the first session's working directory that is known."""
    return next((s.cwd for s in sources if s.cwd), None)


def choices(cwd: str) -> list[tuple[str, str]]:
    """The memories project ``cwd``'s sessions may go to, in order, each with when it is taken
    (``projects.HELD``, ``FREE``, ``OWN``): the basename of the directory, made into a valid memory name, while
    it holds this project or none (``FREE``), else the same name with ``-`` and 8 hex digits of the hash of the
    path (cut to 55 characters first, so it fits in 64). A directory whose name keeps nothing (``项目``, ``/``)
    or only a name the home keeps for its own files is named ``dir-`` and that hash; a name over 64 characters
    its first 55, ``-`` and the hash, so two long names that start alike are two memories; a memory an earlier
    pimem named by the first 64 alone is used still while it holds this directory's sessions (``HELD``). The
    names are the directory's with links resolved (``projects.resolved``); those of the path as given, when it
    differs, come first while they hold the project (an earlier pimem's memory of the project by its link)."""
    from ..projects import HELD, resolved

    real = resolved(cwd)
    found = _choices(real)
    if real != cwd:
        taken = {name for name, _ in found}
        found[:0] = [(name, HELD) for name, _ in _choices(cwd) if name not in taken]
    return found


def _choices(cwd: str) -> list[tuple[str, str]]:
    """``choices`` of directory ``cwd`` as it is given."""
    from ..projects import FREE, HELD, OWN

    path = cwd.encode("utf-8", "surrogateescape")
    plain = _plain(Path(cwd).name)
    if len(plain) > 64:
        old = plain[:64].rstrip("._-")
        return [(old, HELD)] * (_valid(old) == old) + [(_valid(plain, path), OWN)]
    name = _valid(plain)
    if not name:
        return [("dir-" + _hash(path), OWN)]
    return [(name, FREE), (name[:55].rstrip("._-") + "-" + _hash(path), OWN)]


def apart(sources: list[Source], name: str, home=None) -> str:
    """Why a project's sessions go to memory ``name`` and not to the one of its directory's name, as a clause
    for the import to say ("'api' holds another project's sessions; "), or ""."""
    from .. import projects
    from ..memory import Memory

    cwd = _first_cwd(sources)
    first, when = next((c for c in choices(cwd) if c[1] != projects.HELD), (name, None)) if cwd else (name, None)
    if when != projects.FREE or first == name:
        return ""
    try:
        others = projects.held(Memory.at(first, home).path)
    except PimemError:
        return ""
    return f"'{first}' holds another project's sessions; " if others != [] else ""


def release(groups: dict[str, list[Source]], home=None) -> None:
    """The claims ``by_project`` made for ``groups`` undone where nothing was logged (``projects.release``)."""
    from .. import projects
    from ..memory import Memory

    for name, group in groups.items():
        projects.release(Memory.at(name, home), [s.cwd for s in group if s.cwd])


def _file_name(sources: list[Source]) -> str:
    for s in sources:
        if name := _valid(Path(s.path).stem, s.path.encode("utf-8", "surrogateescape")):
            return name
    return "imported"


def _valid(candidate: str, whole: bytes = b"") -> str:
    """``candidate`` as a memory name (what ``NAME_RE`` allows of it), or "" when nothing of it is left; one
    over 64 characters is cut to 55 and given ``-`` and 8 hex digits of the hash of ``whole``."""
    name = _plain(candidate)
    if len(name) > 64:
        name = name[:55].rstrip("._-") + "-" + _hash(whole)
    return name if name and NAME_RE.fullmatch(name) and not reserved(name) else ""


def _plain(candidate: str) -> str:
    """``candidate`` with each run of what a memory name cannot hold made ``-``, and none at either end."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", candidate).strip("._-")


def _hash(whole: bytes) -> str:
    return sha256(whole).hexdigest()[:8]


def by_project(sources: list[Source], home=None, timeout: float | None = None) -> dict[str, list[Source]]:
    """The sources grouped by the memory each goes to without ``--name``: one memory per project (the
    session's working directory), in the order the groups' histories start, each claimed for its project
    (``claim_name``) in that order: of two projects of one directory name, the one whose sessions start
    first takes the name (unless the memory of that name holds the other already)."""
    groups: dict[str, list[Source]] = {}
    for source in sources:
        groups.setdefault(source.cwd or _file_name([source]), []).append(source)
    named: dict[str, list[Source]] = {}
    try:
        for group in groups.values():
            named.setdefault(claim_name(group, home, timeout), []).extend(group)
    except BaseException:  # (one refused, a busy lock or a broken list: the claims made before it undone)
        release(named, home)
        raise
    return {name: sorted(group, key=Source.sort_key) for name, group in named.items()}  # (two projects one memory holds)
