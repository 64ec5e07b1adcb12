"""Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl``).

Lines are ``{timestamp, type, payload}`` and linear. ``session_meta`` and ``turn_context`` give the
session id, cwd and model; ``response_item`` lines are the conversation: messages, function calls and
their outputs (paired by ``call_id``), custom tool calls, shell calls, web searches. Reasoning is never
imported; ``event_msg`` lines only mirror the conversation for the UI and are skipped, as are developer
messages and the instruction and environment blocks Codex puts in front of the user's words. A command still
running when its call returned (``Process running with session ID N``) is polled by ``write_stdin`` calls on
its session: each poll and its result carry ``meta.polls``, the call id of the command, whose outcome they hold, and
``meta.polls_program``, the program it runs (``npm``: a line without the command's call says it). Lines carry
no ids, so each message's ``entry`` is its line's hash (``Parser.line_entry``).

``codex fork`` (and going back to an earlier message) writes a new rollout, a new session id: its own
``session_meta``, then the parent's lines again, its ``session_meta`` among them, each stamped with the time of
the fork (``codex resume`` appends to the same file). The first ``session_meta`` names the rollout's session, as
Codex reads it: the fork's own messages are the fork's, and so is a copy imported before its parent. The parent
a copy names (``parents``) has the turns of what an earlier pimem logged of it, without them, read again from
its rollout (``state.key_turns``). So that such a copy adds nothing, a message carries the turn it was said in (``meta.turn``, the
UUID the turn's ``task_started`` or ``turn_context`` line names; older rollouts name none) and, for the second and
later time its turn says the same, ``meta.repeat`` (a call and its output are told apart by their call id): these
make its content key (``state.content_key``).

Older rollouts (before the ``payload`` envelope) open with ``{id, timestamp, instructions}``, then hold
bare response items and ``{"record_type": "state"}`` lines; they are read the same way, every item dated
by the header.
"""

from __future__ import annotations

import re

import orjson

from .. import decoder, hashes
from .parser import NO_OUTPUT, Malformed, Parser, blocks_text, bounded_put, call_text, ident, record, shell_command

LINE_TYPES = ("session_meta", "turn_context", "response_item", "event_msg", "compacted")  # (tuples: a line's "type"
# may be a list or an object, which a set cannot be asked about)
BOILERPLATE = (
    "<environment_context>",
    "<user_instructions>",
    "<permissions instructions>",
    "<collaboration_mode>",
    "<skills_instructions>",
    "<plugins_instructions>",
    "<INSTRUCTIONS>",
    "# AGENTS.md instructions",
)
TEXT_TYPES = ("input_text", "output_text", "text")
CALLS = ("function_call", "custom_tool_call", "local_shell_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
_EXITED = re.compile(r"^Process exited with code (-?\d+)$", re.M)
_RUNNING = re.compile(r"^Process running with session ID (\d+)$", re.M)
SAID_CAP = 10_000  # texts a turn's repeat counter keeps (in memory; the saved state keeps a digest of them)
CROWDED = -1  # a turn's new text once it keeps SAID_CAP (or once its counts could not be read again)
SAID_KEPT = 8  # files whose turn's counter a process keeps for its next read of them (``import --follow``)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # a turn's id as Codex mints it now


class CodexParser(Parser):
    source = "codex"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.parents: set[str] = set()  # the sessions whose session_meta a fork's copy holds (``state.key_turns``)
        self._said: _Said | None = None  # the turn's repeat counter (``_counter``), once asked for
        self._counting = False  # parse only counts the turn's repeats, making no record (``_recount``)

    @staticmethod
    def sniff(obj: dict) -> bool:
        if obj.get("type") in LINE_TYPES and isinstance(obj.get("payload"), dict):
            return True
        return _legacy_header(obj) or obj.get("record_type") == "state"

    @staticmethod
    def describe(obj: dict) -> dict:
        payload = obj.get("payload") if isinstance(obj.get("payload"), dict) else {}
        return {"date": payload.get("timestamp") or obj.get("timestamp"), "cwd": payload.get("cwd")}

    def parse(self, line_no: int, raw: bytes, obj) -> list[dict]:
        if not isinstance(obj, dict):
            raise Malformed("not a Codex rollout line (not an object)")
        if "payload" not in obj:
            obj = self._legacy(obj)
        if not isinstance(obj.get("payload"), dict):
            raise Malformed("not a Codex rollout line (no payload)")
        kind, payload = obj.get("type"), obj["payload"]
        date = None if self._counting else self.date(obj.get("timestamp"))
        if kind == "session_meta":  # (the first is the rollout's own; a fork's copy of its parent's names the parent)
            session = self.state.setdefault("session", payload.get("id"))
            if isinstance(payload.get("id"), str) and payload["id"] != session:
                self.parents.add(payload["id"])
            self.state["cwd"] = payload.get("cwd") or self.state.get("cwd")
            return []
        if kind == "turn_context":
            self._turn(payload.get("turn_id"), line_no)
            self.state.update(cwd=payload.get("cwd") or self.state.get("cwd"), model=payload.get("model") or self.state.get("model"))
            return []
        if kind == "compacted":
            text = payload.get("message")
            parts = [("work", text, {"derived": True})] if isinstance(text, str) and text.strip() else []
        elif kind == "response_item":
            if self._counting and _told_apart(payload):  # (its repeats are not counted: nothing of it is needed)
                return []
            parts = self._item(payload)
        else:
            if kind == "event_msg" and payload.get("type") == "task_started":
                self._turn(payload.get("turn_id"), line_no)
            return []
        if self._counting:
            for k, text, extra in parts:
                self._repeat(k, text, extra)
            return []
        entry, out = self.line_entry(raw), []
        for k, text, extra in parts:
            repeat = self._repeat(k, text, extra)
            turn = None if repeat is CROWDED else self.state.get("turn")
            out.append(record(k, text, date, self.meta(entry=entry, turn=turn, **extra, repeat=None if turn is None else repeat)))
        return out

    def _turn(self, turn_id, line_no: int) -> None:
        """A turn starts (its task_started or turn_context line ``line_no``): its id, where it is a UUID (Codex's
        own since early 2026; an older one's may recur), and what it said so far, nothing yet."""
        turn = turn_id if isinstance(turn_id, str) and _UUID.fullmatch(turn_id) else None
        if turn != self.state.get("turn"):
            self.state["turn"] = turn
            for key in ("said", "said_at", "said_sum"):
                self.state.pop(key, None)
            self._said = None
            if turn is not None:
                self._said = _keep(self.file, _Said(turn, line_no))
                self.state.update(said_at=line_no, said_sum=self._said.digest())

    def _repeat(self, kind: str, text: str, extra: dict) -> int | None:
        """How often the turn said the same before (its kind and text; None the first time, and for a call
        or an output, which its call's id tells apart), so that a fork's copy of a turn is known message for
        message while the same words said twice in a turn stay two messages (``state.content_key``). The
        turn keeps ``SAID_CAP`` texts and counts on: a text new after them is ``CROWDED``, known by its line
        alone (forgetting one would count it as said the first time, and drop it as a copy of itself)."""
        if self.state.get("turn") is None or extra.get("call_id"):
            return None
        said = self._counter()
        if said is None:
            return CROWDED
        digest = hashes.blake2b(orjson.dumps([kind, text]), digest_size=6).hexdigest()
        n = said.table.get(digest)
        if n is None and len(said.table) >= SAID_CAP:
            return CROWDED
        said.add(digest, (n or 0) + 1)
        self.state["said_sum"] = said.digest()
        return n

    def _counter(self) -> "_Said | None":
        """The turn's repeat counter. The saved state keeps where the turn started (``said_at``, its line) and a
        digest of its counts (``said_sum``), not the counts (up to 10,000 of them, written again at each flush
        of ``import --follow``): a read on from an earlier one takes them from the process's last read of this
        file, else reads the turn's lines again (``before``). None when they do not give the digest saved (the
        file read otherwise then, a line over the cap skipped, say): the turn's later texts are ``CROWDED``."""
        if self._said is not None:
            return self._said if self._said.turn is not None else None
        turn, at, saved = self.state.get("turn"), self.state.get("said_at"), self.state.get("said_sum")
        old = self.state.pop("said", None)
        if isinstance(old, dict):  # the counts whole, as the pimem before saved them
            said = _Said(turn, at)
            for digest, n in old.items():
                if type(n) is int and 0 < n and isinstance(digest, str):
                    said.add(digest, n)
        elif at is None and saved is None:  # (the pimem before: a turn that had counted nothing yet)
            said = _Said(turn, at)
        elif (kept := _KEPT.get(self.file)) is not None and (kept.turn, kept.at, kept.digest()) == (turn, at, saved):
            said = kept
        else:
            said = self._recount(turn, at)
            if said is None or said.digest() != saved:
                self._said = _Said(None, None)  # (counts that cannot be had again)
                return None
        self._said = _keep(self.file, said)
        self.state.update(said_at=said.at, said_sum=said.digest())
        return said

    def _recount(self, turn: str, at) -> "_Said | None":
        """The counter of ``turn``, which started on line ``at``, read again from the lines read before (as
        ``state._turns_of`` reads them); where the state does not say that line (the pimem before saved the
        counts whole, and this one read on from them), from the file's start to the turn's last start."""
        if self.before is None or at is not None and type(at) is not int:
            return None
        again = CodexParser(self.file)
        again._counting = True  # (its records are not wanted: no line's entry, date or meta worked out)
        for n, line in enumerate(self.before(), 1):
            if at is not None and n < at:
                continue
            line = line.removeprefix(decoder.BOM) if n == 1 else line
            if not line.strip():
                continue
            try:
                again.parse(n, line, decoder.loads(line))
            except (decoder.JSONDecodeError, Malformed):
                continue
        said = again._said
        return said if said is not None and said.turn == turn and at in (None, said.at) else None

    def _legacy(self, obj: dict) -> dict:
        """An older rollout's line in the current envelope (or unchanged when it is neither)."""
        if _legacy_header(obj):
            return {"type": "session_meta", "timestamp": obj.get("timestamp"), "payload": obj}
        if obj.get("record_type") == "state":
            return {"type": "event_msg", "payload": {}}
        if isinstance(obj.get("type"), str):
            return {"type": "response_item", "payload": obj}
        return obj

    def _item(self, item: dict) -> list[tuple]:
        kind = item.get("type")
        model = self.state.get("model")
        if kind == "message":
            role = item.get("role")
            if role == "user":
                said = [blocks_text([b], TEXT_TYPES) for b in _content(item) if not _boilerplate(b)]
                return [("user", "\n".join(said), {})] if any(said) else []  # (whitespace alone is what was typed)
            if role == "assistant":
                text = blocks_text(_content(item), TEXT_TYPES)
                return [("pi", text, {"model": model})] if text else []  # (whitespace alone too, as written)
            return []  # developer and system messages are instructions
        if kind in CALLS:
            call_id = ident(item.get("call_id")) or ident(item.get("id"))
            if kind == "local_shell_call":
                name, args = "shell", (item.get("action") or {})
            else:
                name, args = item.get("name"), item.get("arguments", item.get("input"))
            self.remember_call(call_id, name)
            meta = {"call_id": call_id, "tool": name, "command": shell_command(args), "model": model}
            polled = self.state.get("sessions", {}).get(_session(args)) if name == "write_stdin" else None
            if polled and call_id:  # a poll of a command still running: the call that started it, and its program
                meta.update(polls=polled, polls_program=self.state.get("programs", {}).get(polled))
                bounded_put(self.state.setdefault("polls", {}), call_id, polled)
            elif meta["command"] and call_id:  # (kept till its output says whether it still runs)
                from .. import toolwork  # (not at import: it costs ~8 ms, and every hook event imports this module)

                bounded_put(self.state.setdefault("programs", {}), call_id, toolwork.program(meta["command"]) or None)
            return [("tool", call_text(name, args), meta)]
        if kind in OUTPUTS:
            call_id = ident(item.get("call_id"))
            text, code = _output(item.get("output"))
            polled = self.state.get("polls", {}).pop(call_id, None) if call_id else None
            programs = self.state.get("programs", {})
            running = _RUNNING.search(text[:4096])
            if running and call_id:  # still running: later polls of its session are this command's
                bounded_put(self.state.setdefault("sessions", {}), running.group(1), polled or call_id)
            if not polled and not running:  # (a command's program is kept while its session may be polled)
                programs.pop(call_id, None)
            meta = {"call_id": call_id, "tool": self.called(call_id), "exit_code": code}
            if polled:
                meta.update(polls=polled, polls_program=programs.get(polled))
            return [("echo", text if text.strip() else NO_OUTPUT, meta)]
        if kind == "web_search_call":
            action = item.get("action") if isinstance(item.get("action"), dict) else {}
            return [("tool", call_text("web_search", action.get("query") or action), {"tool": "web_search"})]
        return []  # reasoning and items we do not know


class _Said:
    """A turn's repeat counter: each text's digest -> how often the turn said it; and ``digest()``, how many
    times it counted and a sum over what it counted, which a copy counting the same texts has too."""

    __slots__ = ("turn", "at", "table", "n", "h")

    def __init__(self, turn: str | None, at):
        self.turn, self.at = turn, at  # the turn, and the line it started on
        self.table: dict[str, int] = {}
        self.n = self.h = 0

    def add(self, digest: str, n: int) -> None:
        """``digest``'s text said an ``n``-th time (or, from a saved table, ``n`` times)."""
        for k in range(self.table.get(digest, 0) + 1, n + 1):
            mixed = hashes.blake2b(f"{digest}.{k}".encode(), digest_size=8).digest()
            self.h = (self.h + int.from_bytes(mixed, "big")) & 0xFFFF_FFFF_FFFF_FFFF
            self.n += 1
        self.table[digest] = n

    def digest(self) -> list[int]:
        return [self.n, self.h]


_KEPT: dict[str, _Said] = {}  # file -> the counter of its turn as its last read in this process left it


def _keep(file: str, said: _Said) -> _Said:
    """Keep ``said`` for the next read of ``file`` in this process (the last ``SAID_KEPT`` files)."""
    _KEPT.pop(file, None)
    _KEPT[file] = said
    while len(_KEPT) > SAID_KEPT:
        del _KEPT[next(iter(_KEPT))]
    return said


def _told_apart(item: dict) -> bool:
    """Whether ``item`` is a call or an output its call's id tells apart (as ``_item`` names it), whose
    repeats ``_repeat`` does not count: a recount (``_recount``) need not make its text."""
    kind = item.get("type")
    return kind in CALLS and bool(ident(item.get("call_id")) or ident(item.get("id"))) or kind in OUTPUTS and bool(ident(item.get("call_id")))


def _session(arguments) -> str | None:
    """The session a ``write_stdin`` call writes to (``{"session_id": 48230, …}``), as a string."""
    try:
        found = orjson.loads(arguments).get("session_id") if isinstance(arguments, str) else None
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return str(found) if isinstance(found, (int, str)) and not isinstance(found, bool) else None


def _legacy_header(obj: dict) -> bool:
    return "type" not in obj and isinstance(obj.get("id"), str) and "instructions" in obj and "timestamp" in obj


def _content(item: dict) -> list:
    content = item.get("content")
    return content if isinstance(content, list) else [content] if isinstance(content, str) else []


def _boilerplate(block) -> bool:
    text = block.get("text") if isinstance(block, dict) else block
    return isinstance(text, str) and text.lstrip().startswith(BOILERPLATE)


def _output(output) -> tuple[str, int | None]:
    """Text and exit code of a call's output: plain text (exit code in a ``Process exited with code N``
    line), or the older JSON envelope ``{"output": …, "metadata": {"exit_code": …}}``."""
    if isinstance(output, str) and output.startswith("{"):
        try:
            decoded = orjson.loads(output)
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("output"), str):
            code = (decoded.get("metadata") or {}).get("exit_code") if isinstance(decoded.get("metadata"), dict) else None
            return decoded["output"], code if isinstance(code, int) else None
    if isinstance(output, dict):
        output = output.get("content", output.get("output", orjson.dumps(output).decode()))
    if isinstance(output, list):
        output = blocks_text(output, TEXT_TYPES)
    if not isinstance(output, str):
        return "", None
    found = _EXITED.search(output[:4096])
    return output, int(found.group(1)) if found else None
