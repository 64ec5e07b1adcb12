from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import env, output, stopping
from ..errors import BadInput, NothingFound, PimemError, as_error
from ..memory import Memory
from ..options import Home, Json, Timeout, offer

PROGRESS_MIN_BYTES = 8 * 1024 * 1024
LABELS = {"import": "importing", "index": "indexing"}


def command(
    files: Annotated[list[str], typer.Argument(help="Session files (or directories of *.jsonl) to import.", metavar="FILE…")],
    name: Annotated[Optional[str], typer.Option("-n", "--name", help="Memory to import into (default: one per project, named after its working directory).")] = None,
    format: Annotated[str, typer.Option("-f", "--format", help="auto, pi, claude, codex or ndjson.", autocompletion=offer("auto", "pi", "claude", "codex", "ndjson"))] = "auto",
    follow: Annotated[bool, typer.Option("--follow", help="Keep going: import what the files (and new files in the directories) get, until stopped.")] = False,
    json: Json = False,
    timeout: Timeout = None,
    home: Home = None,
) -> None:
    """Import pi sessions, Claude Code transcripts, Codex rollouts or NDJSON into memories.

    The format is detected per file (a file with no line of the --format given is refused, naming the format
    it looks like). Without --name each project (a session's working directory) gets its own memory, named
    after the directory (and its path's hash when a memory of that name holds another project's sessions). A
    memory's files go in in the order their histories start, each message with its original date and source
    ids in meta. Thinking is never imported, images become [image]. Re-importing the same or a grown file
    adds only what is new. A line that cannot be read is reported on stderr with its file and line number and
    skipped; the rest is imported.

    With --follow it keeps reading the files as they grow (a file rotated away is read to its end, a
    truncated one again from the start), and new session files in the directories, printing a line per
    file read, until SIGINT, SIGTERM or SIGHUP (exit 130, 143 or 129); a restart reads on where the last run stopped. A
    reader of those lines that goes away (| head -1) ends the lines, not the import: it goes on capturing the
    sessions until stopped.

    Examples:
      pimem import ~/.pi/agent/sessions/--home-dev-shop--/*.jsonl
      pimem import ~/.claude/projects/-home-dev-shop/ --name shop
      pimem import rollout-2026-05-11T11-26-55-*.jsonl --format codex --json
      pimem since main '#0' --include-tools > main.ndjson && pimem import main.ndjson -n copy
      pimem import --follow ~/.codex/sessions ~/.pi/agent/sessions
    """
    from ..importers import by_project, plan
    from ..importers.detect import apart, release
    from ..importers.state import Unsaved

    if "" in files:  # (a path the system reads as the current directory)
        raise BadInput("an empty FILE names no file: give a session file or a directory")
    if follow:
        _follow(files, name, format, json, timeout, home)
        return
    sources = plan(files, format, on_note=output.info)  # (a file whose only line is still being written)
    groups = {name: sources} if name is not None else by_project(sources, home, timeout)
    mems = {memory: Memory.at(memory, home) for memory in groups}
    for mem in mems.values():  # (renamed or deleted from here on: said as such, as a write finds it)
        mem.pin()
    logged = [0]  # messages logged so far, counted as each batch is durable (not read back from the log: a
    # memory renamed or deleted meanwhile is no longer there to count)
    read = malformed = 0
    fresh = []  # the files read from their start
    held: list | None = []  # what the groups print, held back until a message is read: nothing to import says only why
    try:
        with stopping.armed():
            for memory, group in groups.items():
                if name is None:
                    output.info(f"importing into memory '{memory}' ({apart(group, memory, home)}choose another with --name)")
                reports = _import(mems[memory], group, json, timeout, held.append if held is not None else _say, logged)
                read += sum(r.imported + r.present for r in reports)
                malformed += sum(r.malformed for r in reports)
                fresh += [r.file for r in reports if r.from_line == 1 and not r.unchanged]
                if read and held is not None:  # (from here on, said as it comes)
                    for said in held:
                        _say(said)
                    held = None
    except stopping.Interrupted as exc:
        output.info(f"pimem: interrupted: {_logged(logged[0])}")
        raise typer.Exit(exc.code) from None
    except Exception as exc:  # a full disk, a lock held too long: say what went in before it stopped
        error = as_error(exc)
        if error is None:
            raise
        raise PimemError(f"{error.message}; {_logged(logged[0], saved=not isinstance(exc, Unsaved))}", error.code) from None
    finally:
        if name is None:  # (a memory claimed for nothing: unclaimed)
            release(groups, home)
    if malformed and not read:
        raise NothingFound(f"nothing to import: {output.count(malformed, 'malformed line')} skipped and no message read")
    if not read and len(fresh) == len(sources):  # (a file read before, unchanged or grown by such lines, is no news)
        what = f"{fresh[0]} holds no message" if len(fresh) == 1 else f"none of the {len(fresh)} files holds a message"
        raise NothingFound(f"nothing to import: {what} (only lines that carry none, such as progress or snapshots)")
    for said in held or ():
        _say(said)


def _say(said: tuple) -> None:
    show, value = said
    show(value)


def _logged(count: int, saved: bool = True) -> str:
    """What an import stopped part way logged; ``saved``: whether its import state says so (else the messages of
    the batch it could not record are found held again, from the log)."""
    if not saved and count:
        return (f"{output.count(count, 'message')} imported, kept in the log: the same import again finds "
                f"{'it' if count == 1 else 'them'} held and adds only the rest")
    return f"{output.count(count, 'message')} imported; the same import again reads on from where this one stopped"


def _import(mem: Memory, sources: list, json: bool, timeout: float | None, say, logged: list[int]) -> list:
    """Import ``sources`` into ``mem``, adding what it logs to ``logged[0]`` as it goes; what it prints goes
    through ``say((output.line or output.json_line, value))``."""
    from ..importers import run

    def count(n: int) -> None:
        logged[0] += n

    with _progress(sum(s.size for s in sources)) as on_progress:
        reports = run(mem, sources, on_warning=output.warn, on_progress=on_progress, timeout=timeout, on_logged=count)
    for report in reports:
        if report.unfinished:
            output.info(f"{report.file}:{report.unfinished}: last line still being written; left for the next import")
    total = {key: sum(getattr(r, key) for r in reports) for key in ("imported", "present", "malformed")}
    messages = mem.count() if mem.exists() else 0
    if json:
        for report in reports:
            say((output.json_line, {"name": mem.name, **report.as_dict()}))
        say((output.json_line, {"name": mem.name, "files": len(reports), **total, "messages": messages}))
        return reports
    if len(reports) > 1:
        for report in reports:
            how = ", ".join([report.format] + _whence(report))
            say((output.line, f"{Path(report.file).name}: {_counts(report.imported, report.present, report.malformed)} ({how})"))
    note = "".join(f" ({text})" for text in _whence(reports[0])) if len(reports) == 1 else ""
    say((output.line, f"{mem.name}: {_counts(**total)}; {output.count(messages, 'message')} in all{note}"))
    return reports


def _follow(paths: list[str], name: str | None, fmt: str, json: bool, timeout: float | None, home) -> None:
    """``--follow``: import what arrives until SIGINT, SIGTERM or SIGHUP (a closed terminal), then exit 130, 143
    or 129 (as shells expect)."""
    import signal

    from ..importers.follow import Follower

    imported = 0

    def show(memory: str, report) -> None:
        nonlocal imported
        imported += report.imported
        if json:
            output.json_line({"name": memory, **report.as_dict()})
        else:
            output.line(f"{memory}: {report.imported:,} imported from {Path(report.file).name}")
        output.flush()

    follower = Follower(paths, home, name, fmt, on_report=show, on_warning=output.warn, timeout=timeout)
    stop = _Signalled()
    from ..boundary import stoppers

    for sig in stoppers(signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # (not one the caller ignored: nohup)
        signal.signal(sig, stop.handler)
    follower.run(stop)
    output.info(f"pimem: interrupted: {output.count(imported, 'message')} imported while following; "
                "the next run reads on from where this one stopped")
    raise typer.Exit(128 + stop.signum)


class _Signalled:
    """Set by a signal handler, which must take no lock: an ``Event.set`` there deadlocks when the signal
    lands while the main thread is inside ``Event.wait``."""

    signum = 0

    def handler(self, signum: int, _frame) -> None:
        self.signum = signum

    def is_set(self) -> bool:
        return self.signum != 0

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)  # (a signal ends the wait at the next poll, a quarter of a second at most)


def _counts(imported: int, present: int, malformed: int) -> str:
    return f"{imported:,} imported, {present:,} already present, {malformed:,} malformed skipped"


def _whence(report) -> list[str]:
    if report.unchanged:
        return ["file unchanged since the last import"]
    return [f"read on from line {report.from_line}"] if report.from_line > 1 else []


@contextlib.contextmanager
def _progress(total: int):
    """A progress bar on stderr for large imports on a terminal (one line per task: import, index);
    nothing on a pipe."""
    if total < PROGRESS_MIN_BYTES or not env.stderr_is_tty():
        yield lambda task, done, size: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    columns = (TextColumn("{task.description:<9}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        tasks: dict[str, int] = {}

        def report(task: str, done: int, size: int) -> None:
            if task not in tasks:
                tasks[task] = bar.add_task(LABELS.get(task, task), total=size)
            bar.update(tasks[task], completed=done, total=size)

        yield report
