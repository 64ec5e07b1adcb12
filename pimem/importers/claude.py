"""Claude Code transcripts (``~/.claude/projects/<cwd>/<session>.jsonl``, sub-agents in
``subagents/agent-<id>.jsonl``).

Each line carries ``type, uuid, parentUuid, sessionId, timestamp, cwd, isSidechain``. ``assistant`` lines
hold text, thinking (dropped) and ``tool_use`` blocks, often one block per line; tool results come back as
``user`` lines with ``tool_result`` blocks, paired by ``tool_use_id``. Lines the harness injected
(``isMeta``) and bookkeeping lines (progress, file-history snapshots, queue operations, system notices,
titles) are skipped; the summary that opens a compacted conversation (``isCompactSummary``) is kept as
derived ``work``; sub-agent traffic (``isSidechain``, or a file in ``subagents/``) is marked ``sidechain``: its
prompt is kept as ``user`` (the kind is part of what makes a message's import key) and passed over where the
user's last words are shown (``Memory.last_of_kind``); so is the marker Claude Code writes as a user line when
the user stops a turn (``[Request interrupted by user]``), kept as ``user`` and marked ``marker``. A command the
user ran in bash mode (``!cmd``: ``<bash-input>``) and what it printed (``<bash-stdout>``, ``<bash-stderr>``),
and a slash command's output (``<local-command-stdout>``), come as ``user`` lines but are tool traffic
(``tool``, ``echo``), kept as written: private like pi's bash executions.

The parent chain is kept as written but not used for lineage: Claude Code hangs parallel tool calls off
each other, so its "branch" is not a conversation branch.

An entry is keyed by its uuid alone (``claude --resume`` writes the earlier entries again in the new
session's file); one whose uuid the memory holds with other content is logged under the entry
``UUID.HASH`` by the import (``state.content_key``), as a pi session's repeated id is.
"""

from __future__ import annotations

import functools
import os
import re

from ..memory import CLAUDE_MARKERS
from .parser import NO_OUTPUT, Malformed, Parser, blocks_text, call_text, ident, record, shell_command

LINE_TYPES = ("user", "assistant", "summary", "system", "progress", "file-history-snapshot", "queue-operation")  # (a tuple: a
# line's "type" may be a list or an object, which a set cannot be asked about)
_SUBAGENT = re.compile(r"(\A|/)subagents/agent-[^/]*\.jsonl\Z")
_EXIT = re.compile(r"\AExit code (\d+)")
_SHELL_INPUT = re.compile(r"\A\s*<bash-input>(.*?)</bash-input>\s*\Z", re.S)
_SHELL_OUTPUT = re.compile(r"\A\s*(?:<bash-stdout>.*?</bash-stdout>\s*|<bash-stderr>.*?</bash-stderr>\s*|"
                           r"<local-command-stdout>.*?</local-command-stdout>\s*)+\Z", re.S)


class ClaudeParser(Parser):
    source = "claude"

    @functools.cached_property
    def subagent(self) -> bool:
        """A sub-agent's transcript (``subagents/agent-<id>.jsonl``), whatever its lines' ``isSidechain`` say."""
        return _SUBAGENT.search(self.file.replace(os.sep, "/")) is not None

    @staticmethod
    def sniff(obj: dict) -> bool:
        return obj.get("type") in LINE_TYPES and ("sessionId" in obj or "uuid" in obj or "leafUuid" in obj or "messageId" in obj)

    @staticmethod
    def describe(obj: dict) -> dict:
        return {"date": obj.get("timestamp"), "cwd": obj.get("cwd")}

    def parse(self, line_no: int, raw: bytes, obj) -> list[dict]:
        if not isinstance(obj, dict):
            raise Malformed("not a Claude Code transcript line (not an object)")
        kind = obj.get("type")
        if kind not in ("user", "assistant"):
            return []
        message = obj.get("message")
        if not isinstance(message, dict):
            raise Malformed(f"{kind} line without a message")
        if obj.get("isMeta"):
            return []
        for key, field in (("session", "sessionId"), ("cwd", "cwd")):
            if isinstance(obj.get(field), str) and obj[field]:
                self.state[key] = obj[field]
        date = self.date(obj.get("timestamp"))
        base = {"entry": obj.get("uuid") or self.line_entry(raw), "parent": obj.get("parentUuid"),
                "sidechain": obj.get("isSidechain") is True or self.subagent}
        parts = self._user(obj, message) if kind == "user" else self._assistant(message)
        return [record(k, text, date, self.meta(**base, **extra)) for k, text, extra in parts]

    def _user(self, obj: dict, message: dict) -> list[tuple]:
        content = message.get("content")
        if obj.get("isCompactSummary"):
            text = blocks_text(content)
            return [("work", text, {"derived": True})] if text.strip() else []
        parts = []
        text = blocks_text(content)
        if (shell := _SHELL_INPUT.match(text)) is not None:
            parts.append(("tool", text, {"tool": "Bash", "command": shell.group(1)}))
        elif _SHELL_OUTPUT.match(text):
            parts.append(("echo", text, {"tool": "Bash"} if "<bash-" in text else {}))
        elif text:  # (whitespace alone is what was typed)
            parts.append(("user", text, {"marker": text.strip() in CLAUDE_MARKERS}))
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                call_id = ident(block.get("tool_use_id"))
                output = blocks_text(block.get("content"))
                code = _EXIT.match(output) if block.get("is_error") else None
                failed = block.get("is_error")
                meta = {"call_id": call_id, "tool": self.called(call_id), "exit_code": int(code.group(1)) if code else None,
                        "is_error": failed if isinstance(failed, bool) else None}
                parts.append(("echo", output if output.strip() else NO_OUTPUT, meta))
        return parts

    def _assistant(self, message: dict) -> list[tuple]:
        content = message.get("content")
        model = message.get("model")
        parts = []
        text = blocks_text(content)
        if text:  # (whitespace alone, a text block before a tool call, is kept as the model wrote it)
            parts.append(("pi", text, {"model": model}))
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") in ("tool_use", "server_tool_use"):
                call_id, name, args = ident(block.get("id")), block.get("name"), block.get("input")
                self.remember_call(call_id, name)
                parts.append(("tool", call_text(name, args), {"call_id": call_id, "tool": name, "command": shell_command(args), "model": model}))
        return parts
