"""pi sessions (``~/.pi/agent/sessions/…/<ts>_<uuid>.jsonl``): the linear v1 and the tree-shaped v2/v3.

Line 1 is the header ``{type:"session", id, cwd, version?}``. v1 entries carry no ids and form one line of
history. v2/v3 entries carry ``id`` and ``parentId``: a tree whose active branch ends at the last entry.
Only some entries become messages (user, assistant, tool results, bash executions, custom messages,
compaction and branch summaries); the rest (model and thinking-level changes, labels, session info,
extension data) are skipped. So that ``recall --scope lineage`` can walk a branch through the log alone,
a message's ``parent`` is its nearest ancestor that became a message (the ids of skipped entries are
looked through). A session that ends on a skipped entry (a model change after the user went back to an
earlier entry) ends its active branch at that entry's nearest ancestor that became a message: the parser's
saved ``state["leaf"]``, which ``lineage.left_out`` reads from the import state.

pi opening a v1 session rewrites its file as v3, each entry given an id and a parent id after its fields: such an
entry is read as the v1 line it was (those two fields cut off: ``_MIGRATED``), so it keeps the key it had, and
what the session says after it is a tree whose root is its last v1 entry.

A session started from another (``/fork``, ``--fork``; its header's ``parentSession`` names the other's file)
is a new file with a new session id that copies the entries it starts from, ids, parents and times kept: a copy
is known by its entry's id and what it says (``state.content_key``) and adds nothing. An entry that gives no time
is ``meta.undated``: the date its message takes from the file is none of its own, and a copy may not share it.
"""

from __future__ import annotations

import re

from .parser import NO_OUTPUT, Malformed, Parser, blocks_text, bounded_put, call_text, ident, line_digest, record, shell_command

_EXITED = re.compile(r"^Command exited with code (-?\d+)\s*\Z", re.M)  # how pi's bash tool ends a failure

SUMMARY_ROLES = ("compactionSummary", "branchSummary")  # (a tuple: a role may be a list or an object)
_MIGRATED = re.compile(rb',"id":"[^"\\]*","parentId":(?:null|"[^"\\]*")\}\s*\Z')  # a v1 entry pi gave ids: they
# come after its fields, where pi writes no entry of its own with them


class PiParser(Parser):
    source = "pi"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ids: dict[str, tuple[int, str]] = {}  # id -> (line, hash) of the entries that gave messages (this read's; the part read before too, once looked at)

    @staticmethod
    def sniff(obj: dict) -> bool:
        kind = obj.get("type")
        if kind == "session":
            return "payload" not in obj
        return kind == "message" and isinstance(obj.get("message"), dict) and "role" in obj["message"]

    @staticmethod
    def describe(obj: dict) -> dict:
        return {"date": obj.get("timestamp"), "cwd": obj.get("cwd") if obj.get("type") == "session" else None}

    def parse(self, line_no: int, raw: bytes, obj) -> list[dict]:
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            raise Malformed("not a pi session entry (no type)")
        kind = obj["type"]
        if kind == "session":
            self.state.update(session=obj.get("id"), cwd=obj.get("cwd"))
            self.date(obj.get("timestamp"))
            return []
        entry = obj.get("id")
        tree = isinstance(entry, str) and bool(entry)
        if tree and (migrated := _MIGRATED.search(raw, max(0, len(raw) - 160))):  # (the v1 line it was: its key)
            tree, raw = False, raw[: migrated.start()] + b"}"
        message = obj.get("message")
        own = self.own_date(obj.get("timestamp"), message.get("timestamp") if isinstance(message, dict) else None)
        date = self.date(own)
        if kind == "message":
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise Malformed("message entry without a message role")
            parts = self._message(message)
        elif kind in ("compaction", "branch_summary"):
            summary = obj.get("summary")
            parts = [("work", summary, {"derived": True})] if isinstance(summary, str) and summary.strip() else []
        elif kind == "custom_message":
            parts = self._custom(obj.get("customType"), obj.get("content"))
        else:
            parts = []
        if not tree:
            base = {"entry": self.line_entry(raw)}
        else:
            base = {"entry": entry, "parent": self._visible(obj.get("parentId")), "undated": own is None}
            if not parts:
                bounded_put(self.state.setdefault("skipped", {}), entry, base["parent"])
        records = [record(k, text, date, self.meta(**base, **extra)) for k, text, extra in parts]
        if tree and records:
            distinct = self._distinct(entry, line_no, raw, records)
            for rec in records:
                rec["meta"]["entry"] = distinct
        if tree:
            self.state["leaf"] = records[0]["meta"]["entry"] if records else base["parent"]  # (the last line is the leaf, in the log or not)
        return records

    def _distinct(self, entry: str, line_no: int, raw: bytes, records: list[dict]) -> str:
        """``entry``, or for a second line of the file with the same id but other content (a damaged
        session) the id with its line's hash after it, so its text is a message of its own and stays one
        when the file is imported again; said, with the line it repeats. The same line written twice is one
        entry. A file read on from an earlier import knows the ids of the part read before only once one of
        its ids is held by the memory: that part is then read again for them, once."""
        if entry not in self.ids and self.before is not None and self.held is not None and any(map(self.held, records)):
            self._read_before()
        digest = line_digest(raw)
        first = self.ids.setdefault(entry, (line_no, digest))
        if first[1] == digest:
            return entry
        self.notes.append(f"entry id {entry!r} is line {first[0]}'s too; logged as entry {entry}.{digest}")
        return f"{entry}.{digest}"

    def _read_before(self) -> None:
        """The ids of the part of the file read before, as a read from its start finds them."""
        from .. import decoder

        scout = PiParser(self.file)
        for n, line in enumerate(self.before(), 1):
            line = line.removeprefix(decoder.BOM) if n == 1 else line
            try:
                scout.parse(n, line, decoder.loads(line))
            except (decoder.JSONDecodeError, Malformed):
                pass
        self.ids = self.ids | scout.ids
        self.before = None

    def _visible(self, parent):
        """The nearest ancestor that became a message (skipped entries are looked through)."""
        skipped = self.state.get("skipped", {})
        seen = 0
        while parent in skipped and seen < len(skipped):
            parent, seen = skipped[parent], seen + 1
        return parent

    def _message(self, message: dict) -> list[tuple]:
        role = message["role"]
        content = message.get("content")
        if role == "user":
            text = blocks_text(content)
            return [("user", text, {})] if text else []  # (whitespace alone is what was typed)
        if role == "assistant":
            parts = []
            text = blocks_text(content)
            model = message.get("model")
            if text:  # (whitespace alone, a text block before a tool call, is kept as the model wrote it)
                parts.append(("pi", text, {"model": model}))
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "toolCall":
                    name, args = block.get("name"), block.get("arguments")
                    parts.append(
                        ("tool", call_text(name, args), {"call_id": ident(block.get("id")), "tool": name, "command": shell_command(args), "model": model})
                    )
            return parts
        if role == "toolResult":
            text = blocks_text(content)
            failed = message.get("isError")
            code = _EXITED.search(text[-200:]) if failed is True else None
            meta = {"call_id": ident(message.get("toolCallId")), "tool": message.get("toolName"),
                    "exit_code": int(code.group(1)) if code else None,
                    "is_error": failed if isinstance(failed, bool) else None}
            return [("echo", text if text.strip() else NO_OUTPUT, meta)]
        if role == "bashExecution":
            command = message.get("command") if isinstance(message.get("command"), str) else ""
            output = message.get("output") if isinstance(message.get("output"), str) else ""
            code = message.get("exitCode")
            meta = {"tool": "bash", "command": command or None, "exit_code": code if isinstance(code, int) else None}
            return [("echo", f"$ {command}\n{output}".rstrip("\n"), meta)]
        if role in ("custom", "hookMessage"):
            return self._custom(message.get("customType"), content)
        if role in SUMMARY_ROLES:
            summary = message.get("summary")
            return [("work", summary, {"derived": True})] if isinstance(summary, str) and summary.strip() else []
        return []  # system prompts and roles we do not know carry no conversation

    @staticmethod
    def _custom(custom_type, content) -> list[tuple]:
        text = blocks_text(content)
        if not text.strip():
            return []
        derived = custom_type in ("compaction", "branch_summary") or str(custom_type or "").startswith("pi-compact")
        return [("work", f"[{custom_type or 'custom'}]\n{text}", {"derived": derived})]
