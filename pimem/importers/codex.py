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

from .. import hashes, toolwork
from .parser import NO_OUTPUT, Malformed, Parser, blocks_text, bounded_put, call_text, record, shell_command

LINE_TYPES = {"session_meta", "turn_context", "response_item", "event_msg", "compacted"}
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
CALLS = {"function_call", "custom_tool_call", "local_shell_call"}
OUTPUTS = {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
_EXITED = re.compile(r"^Process exited with code (-?\d+)$", re.M)
_RUNNING = re.compile(r"^Process running with session ID (\d+)$", re.M)
SAID_CAP = 10_000  # texts a turn's repeat counter keeps (in memory and in the saved state)
CROWDED = -1  # a turn's new text once it keeps SAID_CAP
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # a turn's id as Codex mints it now


class CodexParser(Parser):
    source = "codex"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.parents: set[str] = set()  # the sessions whose session_meta a fork's copy holds (``state.key_turns``)

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
        date = self.date(obj.get("timestamp"))
        if kind == "session_meta":  # (the first is the rollout's own; a fork's copy of its parent's names the parent)
            session = self.state.setdefault("session", payload.get("id"))
            if isinstance(payload.get("id"), str) and payload["id"] != session:
                self.parents.add(payload["id"])
            self.state["cwd"] = payload.get("cwd") or self.state.get("cwd")
            return []
        if kind == "turn_context":
            self._turn(payload.get("turn_id"))
            self.state.update(cwd=payload.get("cwd") or self.state.get("cwd"), model=payload.get("model") or self.state.get("model"))
            return []
        if kind == "compacted":
            text = payload.get("message")
            parts = [("work", text, {"derived": True})] if isinstance(text, str) and text.strip() else []
        elif kind == "response_item":
            parts = self._item(payload)
        else:
            if kind == "event_msg" and payload.get("type") == "task_started":
                self._turn(payload.get("turn_id"))
            return []
        entry, out = self.line_entry(raw), []
        for k, text, extra in parts:
            repeat = self._repeat(k, text, extra)
            turn = None if repeat is CROWDED else self.state.get("turn")
            out.append(record(k, text, date, self.meta(entry=entry, turn=turn, **extra, repeat=None if turn is None else repeat)))
        return out

    def _turn(self, turn_id) -> None:
        """A turn starts (its task_started or turn_context line): its id, where it is a UUID (Codex's own
        since early 2026; an older one's may recur), and what it said so far, nothing yet."""
        turn = turn_id if isinstance(turn_id, str) and _UUID.fullmatch(turn_id) else None
        if turn != self.state.get("turn"):
            self.state["turn"] = turn
            self.state.pop("said", None)

    def _repeat(self, kind: str, text: str, extra: dict) -> int | None:
        """How often the turn said the same before (its kind and text; None the first time, and for a call
        or an output, which its call's id tells apart), so that a fork's copy of a turn is known message for
        message while the same words said twice in a turn stay two messages (``state.content_key``). The
        turn keeps ``SAID_CAP`` texts and counts on: a text new after them is ``CROWDED``, known by its line
        alone (forgetting one would count it as said the first time, and drop it as a copy of itself)."""
        if self.state.get("turn") is None or extra.get("call_id"):
            return None
        said = self.state.setdefault("said", {})
        digest = hashes.blake2b(orjson.dumps([kind, text]), digest_size=6).hexdigest()
        n = said.get(digest)
        if n is None and len(said) >= SAID_CAP:
            return CROWDED
        said[digest] = (n or 0) + 1
        return n

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
            call_id = item.get("call_id") or item.get("id")
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
                bounded_put(self.state.setdefault("programs", {}), call_id, toolwork.program(meta["command"]) or None)
            return [("tool", call_text(name, args), meta)]
        if kind in OUTPUTS:
            call_id = item.get("call_id")
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
