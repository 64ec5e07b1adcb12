"""Claude Code's hooks: capture every session into the project's memory and answer with context.

Claude Code runs a hook command on each event with a JSON object on stdin (``session_id``,
``transcript_path``, ``cwd``, ``hook_event_name``, and per event ``source``, ``prompt``, ``trigger``,
``stop_hook_active`` …). For every event ``handle`` imports the transcript's new lines (and its
sub-agents', in ``<session>/subagents/``) into the project's memory, named and claimed as ``pimem import`` names
it (the session's working directory: ``pimem.projects``), nothing twice. On
``SessionStart`` and ``UserPromptSubmit`` it answers with the context Claude Code adds for the model::

    {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "…"}}

within a character budget: the user's pinned and active memories and, for a prompt, the best ranked
messages that pass ``relevant`` and are not in the agent's context already: not those its transcript holds
after its last compaction boundary (``in_context``; a resumed session's copies of an earlier one's lines
included), so after a compaction the session's own earlier turns are offered too.

The exit codes are Claude Code's: 2 blocks (a prompt is erased, a stopping agent told to go on), so no event
makes the hook exit 2. A payload that cannot be read exits 1, Claude Code's non-blocking error (its one line
shown to the user); once it is read, every failure is a warning (stderr, and ``systemMessage``, which Claude Code
shows the user) and the hook exits 0. Time is bounded: an import reads for a part of the time left and logs
what it read (the next event reads on), and a watchdog ends the process a second after the deadline.

``install`` merges the hooks block into a Claude Code settings file, keeping everything already there;
``uninstall`` takes pimem's hooks out of it again.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from pathlib import Path

from .errors import BadInput, Busy, ExitStatus, NotFound, PimemError, as_error, escaped

EVENTS = ("SessionStart", "UserPromptSubmit", "PreCompact", "Stop", "SessionEnd")  # the ones install registers
ANSWERS = ("SessionStart", "UserPromptSubmit")  # the events whose output Claude Code adds to the context
BUDGET = 4_000  # characters of context, at most
TIMEOUT = 10.0  # seconds the hook may take (then one more for the watchdog)
PAYLOAD_BYTES = 16 * 1024 * 1024
OPTIONAL = ("transcript_path", "cwd", "prompt")  # the payload's fields read besides the event and session
HITS = 6  # earlier messages shown at most
QUERY_TERMS = 12  # the prompt's first terms searched for
WARNINGS = 3  # warnings an event's message says at most (500 sub-agent files that are no transcripts: 58 KB)
QUERY_CHARS = 16_384  # the head of a prompt its terms are taken from (its first QUERY_TERMS lie well within)
POOL = 200  # postings the ranked search reads per term (search --rank: 2,000): the hook runs every turn
HOOK_TIMEOUT = 30  # seconds Claude Code gives the hook (its "timeout" in the settings), above ours
NOT_CLAUDE = "the hook reads Claude Code transcripts; import other sessions with pimem import"  # (it has no --format)
PAYLOAD_WAIT = 1.0  # seconds the payload is waited for at least, even past the hook's own --timeout
SETTLE = 0.05  # seconds of quiet after a whole JSON object that end the payload (a stdin left open)
ANSWER_CAPTURE = 1.0  # seconds capture may take, lock wait included, on the events the user waits for
CAPTURE_SHARE = 3 / 4  # of the time left, the part a transcript's reading may take on the events no one waits for (the
# importers' 1/5 leaves the rest for indexing what was read, which a capture leaves to a process of its own) ...
CAPTURE_SPAN = 2 / 3  # ... within this part of the time left for reading at all: however many transcripts are read
# one after the other, the last third is left for logging the last batch read, saving the position and starting
# the index's catch-up, on a loaded machine too (a SessionEnd of 10 s reads its first transcript for about 5 s, its
# transcript and three sub-agents' with a backlog each end at 7.3 s, 8.3 with the span at 3/4, 10.4 with none)
TAIL_BYTES = 16 * 1024 * 1024  # of a transcript's end, the most read for what the agent has in context (no context
# window holds more)


# ---- the payload -------------------------------------------------------------------------------------------


class TooLarge(PimemError):
    """A payload past ``PAYLOAD_BYTES``: an event like any other (a pasted log as the prompt), not one to block."""


def read_payload(stream, deadline: float) -> dict:
    """The hook's JSON object from ``stream`` (a binary file), read until EOF or ``deadline``, or until a whole
    JSON value has come and nothing more follows for ``SETTLE`` seconds (a stdin left open); ``BadInput`` for
    anything that is not a hook payload (``handle`` exits 1 on it). Wrong-typed optional fields are left to
    ``Hook`` (a warning)."""
    import select

    from .decoder import BOM, JSONDecodeError, loads

    data = bytearray()
    fd = stream.fileno()
    tried = 0  # the length a parse was last tried at
    while True:
        left = max(deadline - time.monotonic(), PAYLOAD_WAIT)  # (a payload there is read, whatever --timeout)
        whole = len(data) != tried and bool(data.strip())  # (maybe the whole event, or a value that is none, its stdin left open)
        if not select.select([fd], [], [], min(left, SETTLE) if whole else left)[0]:
            if whole:
                tried = len(data)
                try:
                    loads(data.removeprefix(BOM))
                    break
                except JSONDecodeError:
                    continue  # (a part of it: read on)
            if data:
                raise BadInput(f"hook payload: cut off ({len(data):,} bytes came, then nothing until the timeout; "
                               "Claude Code sends the whole event as JSON and closes stdin)")
            raise BadInput("hook payload: nothing on stdin (Claude Code sends the event as JSON)")
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        data += chunk
        if len(data) > PAYLOAD_BYTES:
            raise TooLarge(f"the event was over {PAYLOAD_BYTES // (1 << 20)} MiB and was not read; "
                           "the next event imports the session's transcript")
    if not data.strip():
        raise BadInput("hook payload: empty (Claude Code sends the event as JSON on stdin)")
    try:
        payload = loads(data.removeprefix(BOM))  # (a prompt cut inside a surrogate pair is valid JSON as Claude Code writes it)
    except JSONDecodeError as exc:
        raise BadInput(f"hook payload: not JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise BadInput("hook payload: not a JSON object")
    for field in ("hook_event_name", "session_id"):
        if payload.get(field) is not None and not isinstance(payload[field], str):
            raise BadInput(f"hook payload: {field} is not a string")
        if not payload.get(field):
            raise BadInput(f"hook payload: no {field}")
    return payload


# ---- one event ---------------------------------------------------------------------------------------------


class Hook:
    """One event: ``run`` returns the JSON object to print (None: print nothing) and records warnings."""

    def __init__(self, payload: dict, home=None, name: str | None = None, budget: int = BUDGET, deadline: float | None = None):
        self.payload, self.home, self.budget = payload, home, budget
        self.deadline = deadline if deadline is not None else time.monotonic() + TIMEOUT
        self.event = payload["hook_event_name"]
        self.session = payload["session_id"]
        self.warnings: list[str] = []
        for field in OPTIONAL:  # (one of another type is left out: the rest of the event is done)
            if payload.get(field) is not None and not isinstance(payload[field], str):
                self.warnings.append(f"the event's {field} is not a string; left out")
                self.payload = payload = {k: v for k, v in payload.items() if k != field}
        self.context = ""
        self.answering = False  # (while the context is made: what the watchdog says when it cuts the event)
        self.transcript: Path | None = None  # (the session's own, as ``_transcripts`` finds it)
        # (a relative --home, refused as a relative $PIMEM_HOME is: Claude Code runs the hook in the session's
        # directory, where it would make a home of its own; the event then reads and writes nothing)
        from . import env

        homed = home is None or self._guard(lambda: env.absolute(os.fspath(home), "--home") or True)
        self.sources = (self._guard(self._transcripts) or []) if homed else []
        self.cwd: str | None = None  # the project's directory, when the memory is the project's (no --name)
        self.settled = bool(name)  # (False: the memory of the directory's name, to be claimed: ``projects.memory_for``)
        self.name = (name or self._guard(self._name)) if homed else None  # (None: the working directory is gone, say)

    def run(self) -> dict | None:
        from .memory import Memory

        if self.name and not self.settled and self.sources:  # (the project's first capture: the memory is claimed
            self.name = self._guard(self._claim)  # for it before anything is read from it)
            self.settled = self.name is not None
        # (a bad --name or --home: a warning)
        mem = self._guard(lambda: Memory.at(self.name, self.home)) if self.name else None
        if mem is None:
            return self.result()
        if self.event in ANSWERS and mem.exists():
            prompt = self.payload.get("prompt") if self.event == "UserPromptSubmit" else None
            try:
                held = in_context(self.transcript) if prompt and self.transcript else None
            except OSError:  # (gone or unreadable: the next event says so if it matters)
                held = None
            self.answering = True
            self.context = self._guard(lambda: answer(mem, self.session, prompt, self.budget, self.warnings.append, held)) or ""
            if self.context and not self.settled and not self._guard(self._still_free):
                self.context = ""  # (a memory of no project, claimed by another project while this read it)
            self.answering = False
        if self.sources:
            self._guard(lambda: self._capture(mem))
        mem.close()
        return self.result()

    def result(self) -> dict | None:
        """What to print: the context (if any) and the warnings (if any)."""
        out: dict = {}
        if self.context:
            out["hookSpecificOutput"] = {"hookEventName": self.event, "additionalContext": self.context}
        if self.warnings:  # (the answer and the capture may meet one failure: said once; many, the first few)
            said = list(dict.fromkeys(self.warnings))
            more = f"; and {len(said) - WARNINGS:,} more" if len(said) > WARNINGS else ""
            out["systemMessage"] = "pimem: " + "; ".join(said[:WARNINGS]) + more
        return out or None

    def _transcripts(self) -> list:
        """The session's transcript and its sub-agents' (``<session>/subagents/*.jsonl`` beside it), as
        import ``Source``s; none while the session has written nothing. A relative path is the event's
        ``cwd``'s."""
        from .importers.detect import inspect_file

        path = self.payload.get("transcript_path")
        if not path:
            return []
        path, cwd = os.path.expanduser(path), self.payload.get("cwd")
        if not os.path.isabs(path) and cwd:  # (relative to the session's directory, not the hook's)
            path = os.path.join(os.path.expanduser(cwd), path)
        if not os.path.isfile(path):
            return []
        main = self.transcript = Path(path).resolve()
        found = []
        for file in [main] + sorted((main.with_suffix("") / "subagents").glob("*.jsonl")):
            source = self._guard(lambda: inspect_file(file, "claude", NOT_CLAUDE) if file.is_file() else None)
            if source is not None:
                found.append(source)
        return found

    def _name(self) -> str:
        """The project's memory, as ``pimem import`` names it, looked for (``projects.memory_for``: one small file
        read while the project is where it was); ``run`` claims it, unless settled, on the project's first capture."""
        from .importers.detect import choices
        from .projects import memory_for

        self.cwd = next((s.cwd for s in self.sources if s.cwd), None) or self.payload.get("cwd") or _own_cwd()
        name, self.settled = memory_for(self.cwd, choices(self.cwd), self.home)
        return name

    def _claim(self) -> str | None:
        """The project's memory claimed for it (``projects.claim``), the lock waited for as a capture waits."""
        from .importers.detect import choices
        from .projects import claim

        deadline = min(self.deadline, time.monotonic() + ANSWER_CAPTURE) if self.event in ANSWERS else self.deadline
        try:
            return claim(self.cwd, choices(self.cwd), self.home, max(0.0, deadline - time.monotonic()))
        except Busy:
            self.warnings.append(f"memory '{self.name}' is locked by another writer; the next event imports the transcript's new lines")
            return None

    def _still_free(self) -> bool:
        from .projects import still_free

        return still_free(self.name, self.cwd, self.home)

    def _capture(self, mem) -> None:
        """Import the transcripts' new lines until the deadline; on ``ANSWERS`` events, which the user waits
        for (the answer is ready by now), for ``ANSWER_CAPTURE`` at most: the next event reads on from where
        this one stopped, so a busy memory or a long transcript delays the capture, not the prompt."""
        from .importers import run
        from .importers.job import INDEX_MIN, READ_SHARE
        from .importers.state import ImportState, deleted_positions

        warnings: list[str] = []
        now = time.monotonic()
        deadline = min(self.deadline, now + ANSWER_CAPTURE) if self.event in ANSWERS else self.deadline
        left = max(0.1, deadline - now)
        share, reading = (READ_SHARE, deadline) if self.event in ANSWERS else (CAPTURE_SHARE, now + max(0.0, deadline - now) * CAPTURE_SPAN)
        state = ImportState(mem)  # (a transcript a deleted memory held: read on from where it stood, so what the
        unheld = [s.shown for s in self.sources if state.peek_file(s.shown) is None]  # user deleted stays deleted)
        since = deleted_positions(mem.home, unheld) if unheld else None
        try:  # (the index left to a process of its own: indexing a backlog here would take the event's time)
            reports = run(mem, self.sources, on_warning=warnings.append, timeout=left, deadline=reading, index=False,
                          read_share=share, state=state, since=since)
        except Busy:
            self.warnings.append(f"memory '{mem.name}' is locked by another writer; the next event imports the transcript's new lines")
            return
        if sum(r.imported for r in reports) >= INDEX_MIN:  # (a backlog: indexed now, not at the next prompt)
            from .index import Look

            look = Look(mem.index(), mem.name)
            if look.far:
                look.hand_over("")  # (nothing said: a capture answers nothing)
        skipped = [text for text in warnings if text.endswith("; skipped")]  # (not an entry logged under ID.HASH, or
        # NULs logged as ␀: what they say is in the log)
        if skipped:  # the importer's own (a malformed line): counted, not repeated to the user
            self.warnings.append(f"{len(skipped)} transcript {'line' if len(skipped) == 1 else 'lines'} skipped: {skipped[0]}")
        if any(r.cut_short for r in reports):
            self.warnings.append("out of time; the next event imports the rest of the transcript")

    def _guard(self, work):
        try:
            return work()
        except Exception as exc:  # (an OS or SQLite failure as the CLI names it, a full disk under index.sqlite say)
            error = as_error(exc)
            if error is None:  # (a bug)
                raise
            self.warnings.append(str(error))
        return None


def handle(stream, home=None, name: str | None = None, budget: int = BUDGET, timeout: float = TIMEOUT) -> int:
    """Read one event from ``stream``, act on it, print the answer on the environment's stdout (``pimem.env``);
    the exit code. A second past ``timeout``, a watchdog prints what is ready (the context comes before the
    import) and ends the process."""
    deadline = time.monotonic() + timeout
    try:
        payload = read_payload(stream, deadline)
    except TooLarge as exc:
        _print({"systemMessage": f"pimem: {exc}"})
        return 0
    except BadInput as exc:  # (not 2, bad input's exit elsewhere: Claude Code takes 2 as blocking)
        raise PimemError(str(exc), ExitStatus.NOTHING_FOUND) from None
    hook = Hook(payload, home, name, budget, deadline)
    printed = threading.Lock()

    def give_up() -> None:
        if printed.acquire(blocking=False):
            hook.warnings.append(f"out of time after {timeout:g} s making the context, so none was given; the next event imports the "
                                 "transcript's new lines" if hook.answering else f"out of time after {timeout:g} s; the next event imports the rest")
            _print(hook.result())
            os._exit(0)

    watchdog = threading.Timer(max(0.0, deadline - time.monotonic()) + 1.0, give_up)
    watchdog.daemon = True
    watchdog.start()
    result = hook.run()
    watchdog.cancel()
    if printed.acquire(blocking=False):
        _print(result)
    return 0


def _print(result: dict | None) -> None:
    """The answer on stdout, its warning (if any) on stderr as well (flushed: the watchdog ends the process
    right after)."""
    from . import env, output

    if result is None:
        return
    if result.get("systemMessage"):
        output.info(result["systemMessage"])
        env.stderr().flush()
    output.json_line(result)
    output.flush()


# ---- the context -------------------------------------------------------------------------------------------


def answer(mem, session: str, prompt: str | None, budget: int, on_damage=None, held: set[str] | None = None) -> str:
    """The context for the model: the user's memories and, for a prompt, relevant messages it does not have in
    its context (``earlier``; ``held``: the entries it has, ``in_context``), in at most ``budget`` characters
    (whole lines only); empty when there is nothing to say. A damaged memory log is said through ``on_damage``
    (the hook's warnings, which the user sees)."""
    from . import budget as budgets, context

    head = f"pimem memory '{mem.name}' (this project's messages not in your context: earlier sessions, and this one's before its compaction; `pimem message {mem.name} I` shows message I whole):"
    hits = earlier(mem, session, prompt, held, on_damage) if prompt else []
    lines = [f"- #{h['i']} {h['date'][:16]} {h['kind']}: {h['snippet']}" for h in hits]
    room = budget - len(head) - 1
    share = room // 2 if lines else room  # the memories leave at least half to relevant hits
    mine = context.memory_block(mem, session, max(0, share - len("<memories>\n\n</memories>\n")), on_damage,
                                more=f"`pimem memories {mem.name}` lists them")  # (Claude Code's model has a shell, not pimem's MCP tools)
    parts = [f"<memories>\n{mine}\n</memories>"] if mine else []
    room -= sum(len(p) + 1 for p in parts)

    def render(k: int, _notes: dict) -> str:
        return "<earlier_sessions>\n" + "\n".join(lines[:k]) + "\n</earlier_sessions>" if k else ""

    found = budgets.pack(max(0, room), len(lines), render)
    return "\n".join([head] + parts + ([found] if found else [])) if parts or found else ""


def _own_cwd() -> str:
    """The hook's working directory, the project when the event and its transcript name none; one removed is
    said as such (the system's line, `No such file or directory`, named nothing)."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise NotFound("the event names no working directory and the hook's own was removed: nothing to capture "
                       "it into") from None


def earlier(mem, session: str, prompt: str, held: set[str] | None = None, on_note=None) -> list[dict]:
    """The best ranked messages for ``prompt`` that the agent does not have in its context, relevant ones only,
    as ``{i, date, kind, snippet, score}``: not those of the entries ``held`` (the lines its transcript holds
    since its last compaction, whichever session logged them; with its transcript unread, ``None``: those of
    ``session``), nor the messages of ``session``'s sub-agents.
    The ranker gets the prompt as typed (it finds and stems its terms) and reads its first ``QUERY_TERMS``
    terms, ``POOL`` postings each, lexically: the hook runs every turn, so it loads no sentence vectors (the
    semantic extra) and reads no view. An index that lacks over ``index.LAG_BYTES`` of the log is caught up by a
    process of its own (``index.Look``), unless one does it already: none found then, and ``on_note`` says why;
    one that lacks less is caught up here, unless another process does it (then read as it is)."""
    from . import search, terms
    from .index import Look
    from .message import KINDS, TOOL_KINDS

    prompt = prompt[:QUERY_CHARS]  # (its first terms are all the ranker reads: a pasted 13 MB log is not stemmed whole)
    words = terms.query_terms(prompt)[:QUERY_TERMS]  # what the ranker reads, for the threshold
    if not words:
        return []
    look = Look(mem.index(), mem.name)
    talk = [k for k in KINDS if k not in TOOL_KINDS]
    found = [] if look.far else search.ranked(mem, prompt, talk, HITS * 4, widen=False, pool=POOL, max_terms=QUERY_TERMS,
                                              semantic=False, catch_up=not look.busy, rebuild=False)
    if look.left():  # (far behind, or found damaged and deleted: built anew)
        note = look.hand_over("this prompt gets no earlier messages (the next prompts do once it is done)")
        if on_note is not None:
            on_note(note)
        return []
    others = [(msg, score) for msg, score in found if not _held(msg.get("meta") or {}, session, held)]
    return [{"i": msg["i"], "date": msg["date"], "kind": msg["kind"], "score": score,
             "snippet": search.snippet(msg["text"], msg["text"].lower(), words)} for msg, score in relevant(others, words)[:HITS]]


def _held(meta: dict, session: str, held: set[str] | None) -> bool:
    """Whether a logged message is in the agent's context: its entry's uuid (a changed entry's ``UUID.HASH``
    too) is one of ``held``, or it is a sub-agent's of this session (whose lines the agent has not read, but
    whose prompt and answer it has); with no ``held`` known (the transcript unread), any of this session's."""
    if held is None:
        return meta.get("session") == session
    entry = meta.get("entry")
    return isinstance(entry, str) and entry.partition(".")[0] in held or bool(meta.get("sidechain")) and meta.get("session") == session


def in_context(path: Path) -> set[str]:
    """The uuids of the transcript's lines after its last compaction boundary (a ``compact_boundary`` line):
    what the agent has in its context, an earlier session's lines that a resumed session's transcript holds
    again included; what came before the boundary it has only as the summary. Only the file's last
    ``TAIL_BYTES`` are read."""
    import re

    from .decoder import JSONDecodeError, loads

    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - TAIL_BYTES))
        data = f.read(TAIL_BYTES)
    start = data.find(b"\n") + 1 if size > TAIL_BYTES else 0  # (from its first whole line)
    end = len(data)
    while (at := data.rfind(b'"compact_boundary"', start, end)) >= 0:
        first, last = data.rfind(b"\n", 0, at) + 1, data.find(b"\n", at)
        last = len(data) if last < 0 else last
        try:
            line = loads(data[first:last])
        except JSONDecodeError:
            line = None
        if isinstance(line, dict) and line.get("type") == "system" and line.get("subtype") == "compact_boundary":
            start = last
            break
        end = first  # (the words in a line of another kind: look further back)
    return {uuid.decode("ascii", "replace") for uuid in re.compile(rb'"uuid" *: *"([^"\\]*)"').findall(data, start)}


def relevant(hits: list[tuple[dict, float]], words: list[str]) -> list[tuple[dict, float]]:
    """The relevance threshold, in one place: of ranked ``(message, score)`` pairs, those whose text holds at
    least a third of the query's terms ``words`` (1 to 3 of them; terms as ``pimem.terms`` makes them, so
    compared with the text's terms) and whose score is at least half the best one's."""
    from .terms import bag

    need = min(3, max(1, math.ceil(len(words) / 3)))
    kept = [(msg, score) for msg, score in hits if len(bag(msg["text"])[0].intersection(words)) >= need]
    if not kept:
        return []
    best = max(score for _, score in kept)
    return [(msg, score) for msg, score in kept if score >= best / 2]


# ---- install -----------------------------------------------------------------------------------------------


def settings_path(project: bool) -> Path:
    from .env import user_home

    return (Path.cwd() if project else Path(user_home())) / ".claude" / "settings.json"


def hook_command(home: str | None = None, name: str | None = None, budget: int | None = None,
                 timeout: float | None = None) -> str:
    """The command Claude Code runs: this pimem by its absolute path (Claude Code's PATH may not find it),
    with the options given to ``install`` (those left out keep their defaults). A pimem started as ``python -m
    pimem`` is written as ``python -P -m pimem``: Claude Code runs hooks in the project's directory, and ``-m``
    alone would look there first, running a project's own ``pimem.py`` or ``pimem/`` instead."""
    import shlex

    argv0 = Path(sys.argv[0])
    exe = shlex.quote(str(argv0.absolute())) if argv0.name == "pimem" and argv0.is_file() else f"{shlex.quote(sys.executable)} -P -m pimem"
    options = [("--home", home and str(Path(home).expanduser().absolute())), ("--name", name),
               ("--budget", budget), ("--timeout", None if timeout is None else repr(float(timeout)).removesuffix(".0"))]
    command = f"{exe} hook claude-code" + "".join(f" {flag} {shlex.quote(str(value))}" for flag, value in options
                                                  if value not in (None, ""))
    try:
        command.encode("utf-8")
    except UnicodeEncodeError:  # (settings.json holds text: the shell would be given another path)
        raise BadInput(f"{escaped(command)}: a path in it is not UTF-8, which Claude Code's settings.json cannot "
                       "hold; give a --home (and a pimem) whose path is UTF-8") from None
    return command


HOOK_OPTIONS = ("--home", "--name", "--budget", "--timeout")  # as ``hook_command`` writes them, in this order


def is_ours(hook) -> bool:
    """Whether ``hook`` is a command hook as ``hook_command`` writes it or wrote it before ``-P`` (this or another
    pimem, any options), and so one ``install`` may change and ``uninstall`` remove. A user's own command
    naming pimem (``my-wrapper pimem hook claude-code``, ``audit --tag pimem -- hook claude-code``) is not."""
    import shlex

    command = hook.get("command") if isinstance(hook, dict) else None
    try:
        words = shlex.split(command) if isinstance(command, str) else []
    except ValueError:
        return False
    if " ".join(shlex.quote(word) for word in words) != command:  # (as written: each word quoted only if it must be)
        return False
    if words[:1] and os.path.isabs(words[0]) and Path(words[0]).name == "pimem":
        words = words[1:]
    elif len(words) > 4 and os.path.isabs(words[0]) and words[1:4] == ["-P", "-m", "pimem"]:
        words = words[4:]
    elif len(words) > 3 and os.path.isabs(words[0]) and words[1:3] == ["-m", "pimem"]:  # (as versions before -P wrote it)
        words = words[3:]
    else:
        return False
    if words[:2] != ["hook", "claude-code"] or len(words) % 2:
        return False
    flags = words[2::2]
    return all(flag in HOOK_OPTIONS for flag in flags) and flags == sorted(flags, key=HOOK_OPTIONS.index) \
        and len(set(flags)) == len(flags) and all(words[3::2])


def installed_in(path: Path) -> bool:
    """Whether the settings file ``path`` holds a pimem hook (``is_ours``) for one of ``EVENTS``; a file that
    is not there or cannot be read holds none."""
    try:
        _, _, settings = load(path) if path.exists() else (path, None, {})
    except (PimemError, OSError):
        return False
    hooks = settings.get("hooks")
    groups = [g for e in EVENTS for g in (hooks.get(e) if isinstance(hooks, dict) and isinstance(hooks.get(e), list) else [])]
    return any(is_ours(h) for g in groups if isinstance(g, dict) and isinstance(g.get("hooks"), list) for h in g["hooks"])


def merge(settings: dict, command: str, timeout: int = HOOK_TIMEOUT) -> tuple[list[str], dict[str, list[str]]]:
    """Add a pimem hook for each of ``EVENTS`` that has none to ``settings`` (in place), Claude Code giving it
    ``timeout`` seconds, and make a pimem hook of another command (installed with other options) this one:
    ``(events added, {old command: events updated})``. Nothing else there is changed or removed."""
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise BadInput("its \"hooks\" is not a JSON object; fix it by hand first")
    added: list[str] = []
    updated: dict[str, list[str]] = {}
    for event in EVENTS:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise BadInput(f"its hooks.{event} is not a list; fix it by hand first")
        if any(isinstance(g, dict) and "hooks" in g and not isinstance(g["hooks"], list) for g in groups):
            raise BadInput(f"its hooks.{event} holds a group whose \"hooks\" is not a list; fix it by hand first")
        ours = [h for g in groups if isinstance(g, dict) for h in (g.get("hooks") or []) if is_ours(h)]
        if not ours:
            groups.append({"hooks": [{"type": "command", "command": command, "timeout": timeout}]})
            added.append(event)
        elif all(h.get("command") != command for h in ours):
            for hook in ours:
                updated.setdefault(str(hook.get("command")), []).append(event)
                hook["command"], hook["timeout"] = command, timeout
    return added, updated


def install(path: Path, command: str, dry_run: bool = False, timeout: int = HOOK_TIMEOUT) -> tuple[dict, list[str], dict[str, list[str]], Path | None]:
    """Merge the hooks into the settings file ``path``: ``(settings, events added, {old command: events
    updated}, backup)`` (``merge``). The file is copied to a new ``<name>.<time>.bak`` first (``_backup``)
    and replaced atomically (its mode kept; a link is written through to the file it names); a file that is
    not a JSON object is refused (exit 2) and left alone; ``dry_run`` writes nothing. Every number stays as
    written (``1.50``, ``1E2``, ``-0``: see ``Number``)."""
    path, original, settings = load(path)
    try:
        added, updated = merge(settings, command, timeout)
    except BadInput as exc:
        raise BadInput(f"{path}: {exc}") from None
    backup = save(path, original, settings) if (added or updated) and not dry_run else None
    return settings, added, updated, backup


def uninstall(path: Path, dry_run: bool = False) -> tuple[dict, list[str], Path | None]:
    """Take pimem's hooks out of the settings file ``path`` (``unmerge``), written as ``install`` writes it:
    ``(settings, events removed, backup)``; a file that is not there has none."""
    if not path.exists() and not path.is_symlink():
        return {}, [], None
    path, original, settings = load(path)
    try:
        removed = unmerge(settings)
    except BadInput as exc:
        raise BadInput(f"{path}: {exc}") from None
    backup = save(path, original, settings) if removed and not dry_run else None
    return settings, removed, backup


def unmerge(settings: dict) -> list[str]:
    """Remove from ``settings`` (in place) each hook of ``EVENTS`` that ``merge`` recognises as pimem's, and the
    group, the event's list and ``hooks`` itself when that leaves them empty: the events it was removed from.
    Everything else stays as it is."""
    hooks = settings.get("hooks")
    if hooks is None:
        return []
    if not isinstance(hooks, dict):
        raise BadInput("its \"hooks\" is not a JSON object; fix it by hand first")
    removed = []
    for event in EVENTS:
        groups = hooks.get(event)
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list) and any(is_ours(h) for h in group["hooks"]):
                group["hooks"] = [h for h in group["hooks"] if not is_ours(h)]
                if event not in removed:
                    removed.append(event)
                if not group["hooks"]:
                    continue  # (the group install made, or one that held nothing else)
            kept.append(group)
        if event in removed:
            hooks[event] = kept
            if not kept:
                del hooks[event]
    if removed and not hooks:
        del settings["hooks"]
    return removed


def load(path: Path) -> tuple[Path, bytes | None, dict]:
    """A settings file as ``(path, its bytes, settings)``: a link is followed to the file it names, a file that
    is not there or is blank is ``{}``; one that is not a JSON object is refused (exit 2)."""
    import json

    folder = path.parent  # (.claude: a file there, or a link to nothing, was said as `File exists`, exit 7)
    if folder.is_symlink() and not folder.exists():
        raise BadInput(f"{folder}: a link to {os.readlink(folder)}, which is not there; fix the link first")
    if folder.exists() and not folder.is_dir():
        raise BadInput(f"{folder} is not a directory, where {path.name} goes; fix it by hand first")
    if path.is_symlink():  # (a dotfiles checkout, say: the link stays, its file gets the hooks)
        try:
            resolved = path.resolve()
        except RuntimeError:  # (a loop of links, before Python 3.13)
            resolved = path
        if resolved.is_symlink():  # (a loop of links: Python 3.13 resolves one to a link of it)
            raise BadInput(f"{path}: a loop of symbolic links; fix it by hand first")
        if not resolved.parent.is_dir():  # (a dotfiles checkout moved away: its directory is not made anew)
            raise BadInput(f"{path}: a link to {resolved}, whose directory is not there; fix the link first")
        path = resolved
    if path.exists() and not path.is_file():  # (a pipe would be waited on for ever)
        raise BadInput(f"{path}: not a regular file; fix it by hand first")
    original = path.read_bytes() if path.exists() else None
    try:
        settings = json.loads(original, parse_float=Number, parse_int=Number, parse_constant=Number) if original and original.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"{path}: not JSON ({exc}); fix it by hand first") from None
    if not isinstance(settings, dict):
        raise BadInput(f"{path}: not a JSON object; fix it by hand first")
    return path, original, Settings.read(settings, original)


def save(path: Path, original: bytes | None, settings: dict) -> Path | None:
    """Write ``settings`` to ``path`` after a backup of its ``original`` bytes (none for a new file): the
    backup."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if original is not None else None
    if mode is not None and not mode & 0o200:  # (the rename needs only the directory's permission, root's none)
        raise PimemError(f"{path} is read-only (mode {mode:o}): pimem leaves it as it is; make it writable (chmod u+w) "
                         "and run this again", ExitStatus.SYSTEM)
    backup = _backup(path, original, mode) if original is not None else None
    try:
        _write(path, render(settings), mode)
    except BaseException:
        if backup is not None:  # (the file is as it was: no backup of it is left either)
            backup.unlink(missing_ok=True)
        raise
    return backup


class Number:
    """A number of a settings file, kept as its text: the standard library's json would write ``1.50`` back as
    ``1.5``, ``1E2`` as ``100.0`` and ``1e400`` as ``Infinity``, which JavaScript's JSON.parse refuses."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


class Settings(dict):
    """A settings file's object that knows the text it was read from, so ``render`` writes that text again
    wherever nothing was changed (a user's indent, one-line groups, escapes, a missing last newline)."""

    text: str = ""
    spans: "_Span | None" = None

    @classmethod
    def read(cls, settings: dict, original: bytes | None) -> "Settings":
        import json

        made = cls(settings)
        try:
            encoding = json.detect_encoding(original) if original else None
            if encoding in ("utf-8", "utf-8-sig"):
                made.text = original.decode("utf-8")  # (a BOM kept, as the character it is; bytes that are no UTF-8: afresh)
                start = len(made.text) - len(made.text.lstrip("\ufeff \t\n\r"))
                made.spans = _Span.parse(made.text, start)
                made.spans.bind(settings)
        except (ValueError, IndexError, RecursionError):  # (whatever it cannot follow is written afresh)
            made.spans = None
        return made


class _Span:
    """Where a value of a settings file's text is (``start``, ``end``), the value ``json`` read there (``value``)
    and, for an object, its members ``(key, key's start, key's end, value's span)``, for an array its values'."""

    __slots__ = ("start", "end", "items", "value")

    def __init__(self, start: int, end: int = 0, items: list | None = None):
        self.start, self.end, self.items, self.value = start, end, items, None

    @classmethod
    def parse(cls, text: str, i: int) -> "_Span":
        import re
        from json.decoder import scanstring

        space = re.compile(r"[ \t\n\r]*")
        scalar = re.compile(r'"|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|NaN|-?Infinity')

        def value(i: int) -> "_Span":
            if text[i] in "{[":
                close, items = "}" if text[i] == "{" else "]", []
                j = space.match(text, i + 1).end()
                while text[j] != close:
                    if close == "}":
                        key, end = scanstring(text, j + 1)
                        member = value(space.match(text, space.match(text, end).end() + 1).end())
                        items.append((key, j, end, member))
                    else:
                        member = value(j)
                        items.append(member)
                    j = space.match(text, member.end).end()
                    if text[j] == ",":
                        j = space.match(text, j + 1).end()
                return cls(i, j + 1, items)
            match = scalar.match(text, i)
            if not match:
                raise ValueError(f"no JSON value at {i}")
            return cls(i, scanstring(text, i + 1)[1] if match[0] == '"' else match.end())

        return value(i)

    def bind(self, value) -> None:
        """Note the value json read at each span (a repeated key's last, as json takes it)."""
        self.value = value
        if isinstance(value, dict):
            for key, member in {key: member for key, _, _, member in self.items}.items():
                member.bind(value[key])
        elif isinstance(value, list):
            for member, item in zip(self.items, value, strict=True):
                member.bind(item)


def _edited(settings: Settings) -> str:
    """``settings`` written into the text it was read from: every value unchanged as it was written there; a
    member or item added after the container's last, in its indent and layout (one line when it was on one
    line); one taken out with the separator before it (after it for the first)."""
    text, unit = settings.text, "  "
    newline = "\r\n" if "\r\n" in text else "\n"  # (a file of Windows line ends gets its new lines so ended)
    import re

    found = re.search(r"\n([ \t]+)\S", text)
    if found:
        unit = found[1]

    def indent(at: int) -> str:
        line = text[text.rfind("\n", 0, at) + 1 :]
        return line[: len(line) - len(line.lstrip(" \t"))]

    def same(old, new) -> bool:
        if isinstance(old, Number) or isinstance(new, Number):
            return isinstance(old, Number) and isinstance(new, Number) and old.text == new.text
        return type(old) is type(new) and old == new

    def fresh(value, base: str, flat: bool) -> str:
        return _dumps(value, None if flat else unit).replace("\n", newline + base)

    def edit(span: _Span, new) -> str:
        old = span.value
        if span.items is None or not (isinstance(new, dict) and isinstance(old, dict) or isinstance(new, list) and isinstance(old, list)):
            return text[span.start : span.end] if span.items is None and same(old, new) else fresh(new, indent(span.start), False)
        bounds = [(item[1], item[3].end) if isinstance(old, dict) else (item.start, item.end) for item in span.items]
        if isinstance(old, dict):
            last = {key: n for n, (key, *_) in enumerate(span.items)}
            kept = [(n, text[start : member.start] + edit(member, new[key])) if last[key] == n else (n, text[start : member.end])
                    for n, (key, start, _, member) in enumerate(span.items) if key in new or last[key] != n]
            colon = text[span.items[0][2] : span.items[0][3].start] if span.items else ": "
            added = [key for key in new if key not in last]
        else:
            kept, added, n = [], [], 0
            for item in new:  # (an item is the one it was read as, or equal to one read as a number, a string …)
                match = next((m for m in range(n, len(span.items)) if span.items[m].value is item
                              or span.items[m].items is None and same(span.items[m].value, item)), None)
                if match is None or added:  # (one after an added one is written after it, afresh)
                    added.append(item)
                else:
                    kept.append((match, edit(span.items[match], item)))
                    n = match + 1
        if bounds:
            lead, trail = text[span.start + 1 : bounds[0][0]], text[bounds[-1][1] : span.end - 1]
            between = text[bounds[0][1] : bounds[1][0]] if len(bounds) > 1 else ("," + lead if "\n" in lead else ", ")
        else:
            flat = "\n" not in text.strip() and span is not settings.spans  # (a file of "{}" alone: indented, as ever)
            lead = trail = "" if flat else newline + indent(span.start)
            lead = lead if flat else lead + unit
            between = ", " if flat else "," + lead
        base, flat = between[between.rfind("\n") + 1 :] if "\n" in between else indent(span.start), "\n" not in between
        pieces = [(n, piece) for n, piece in kept]
        for item in added:
            value = new[item] if isinstance(old, dict) else item
            pieces.append((None, (_dumps(item, None) + colon if isinstance(old, dict) else "") + fresh(value, base, flat)))
        if not pieces:  # (one that was empty as it was, or is emptied)
            return text[span.start : span.end] if not bounds else text[span.start] + text[span.end - 1]
        out = [text[span.start], lead, pieces[0][1]]
        for (before, _), (n, piece) in zip(pieces, pieces[1:]):
            out += [text[bounds[before][1] : bounds[n][0]] if before is not None and n == before + 1 else between, piece]
        return "".join(out + [trail, text[span.end - 1]])

    spans = settings.spans
    return text[: spans.start] + edit(spans, settings) + text[spans.end :]


def render(settings: dict) -> bytes:
    """``settings`` as JSON: as the text it was read from where nothing changed (``Settings``, ``_edited``),
    else indented afresh, each ``Number`` written as it was read."""
    import json

    if isinstance(settings, Settings) and settings.spans is not None:
        try:
            data = _edited(settings).encode("utf-8")
            fresh = _dumps(settings, "  ")
            if json.loads(data) == json.loads(fresh):  # (what it says is what the object holds)
                return data
        except (ValueError, IndexError, RecursionError, UnicodeError):
            pass
    return _dumps(settings, "  ").encode("utf-8") + b"\n"


def _dumps(settings, indent: str | None) -> str:
    """``settings`` as JSON (``indent``; None: on one line), each ``Number`` written as it was read: json gives
    it a placeholder string (one a settings file cannot hold: a fresh random tag), replaced by the number's text
    after."""
    import json
    import re
    import secrets

    tag, numbers = secrets.token_hex(8), []

    def placeholder(value):
        if not isinstance(value, Number):
            raise TypeError(f"{type(value).__name__} is not JSON")
        numbers.append(value.text)
        return f"{tag}{len(numbers) - 1}{tag}"

    text = json.dumps(settings, indent=indent, ensure_ascii=False, default=placeholder,
                      separators=None if indent else (", ", ": "))
    text = re.sub(f'"{tag}(\\d+){tag}"', lambda m: numbers[int(m[1])], text)
    # a lone surrogate ("\ud800" in the file: no character of its own) stays the escape it was read from
    return re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m[0]):04x}", text)


def _backup(path: Path, data: bytes, mode: int) -> Path:
    """A new file ``<name>.<time>.bak`` holding ``data`` (``.<time>.1.bak``, ``.2`` … when that name is
    taken: a second install within the same second keeps the first one's backup)."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    n = 0
    while True:
        backup = path.with_name(f"{path.name}.{stamp}{f'.{n}' if n else ''}.bak")
        try:
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            n += 1
            continue
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(backup)) from None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            os.fsync(fd)
        except BaseException as exc:
            os.close(fd)
            backup.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise OSError(exc.errno, exc.strerror, str(backup)) from None
            raise
        os.close(fd)
        return backup


def _write(path: Path, data: bytes, mode: int | None) -> None:
    """Replace ``path`` with ``data`` atomically; a failed write leaves no temporary file and names ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            if mode is not None:
                os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
