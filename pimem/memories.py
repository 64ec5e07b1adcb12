"""Authoritative memories: the pure projector over ``memory.jsonl``, the author rules, the writers behind
``remember``/``forget``, ranking, and budgeted output (DESIGN.md §5).

Events are pi-compact's (``create``, ``supersede``, ``pin``, ``unpin``, ``resolve``; authors ``user``,
``model``, ``rule``). The projector replays them into records whose status is provisional, active, pinned,
resolved or superseded. Only the user makes a record active or pinned, and only the user touches what the user
wrote; the model and the compaction rules write provisional records and may only edit or withdraw their own
provisional ones. Events breaking these rules are ignored, so a hand-edited log cannot promote a proposal.
A ``session``-scoped record is visible only to the same session.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Iterable

from . import budget, env, home as homes, terms, when
from .errors import BadInput, IntegrityError, NotFound, library, shown

# (memory.jsonl's hash chain, ``pimem.chain``, is imported where the log is read or written: ``pimem --help``
# imports this module for the commands' choices, KINDS and the like)

KINDS = ("fact", "preference", "constraint", "decision", "working", "derived")
SCOPES = ("project", "user", "session")
READ_SCOPES = (*SCOPES, "workspace")  # pi-compact's later name for project
PRIORITIES = ("low", "normal", "high")
STATUSES = ("pinned", "active", "provisional", "resolved", "superseded")
LIVE = frozenset({"pinned", "active", "provisional"})
TERMINAL = frozenset({"resolved", "superseded"})
SNIPPET = 600  # characters of content a listing shows per record
READ_LIMIT = 4000  # characters of content a read returns by default
META_CLIP = 512
MAX_SOURCE_IDS = 64


def says_nothing(text: str) -> bool:
    """Whether a memory's ``text`` says nothing: white space, invisible characters (a zero-width space, a BOM)
    or escape sequences alone, all a context leaves out (``tree.plain``). Such a text is refused as a blank one."""
    if text.isascii() and "\x1b" not in text:
        return not text.strip()
    from .tree import plain  # (only for a text that may hold them)

    return not plain(text).strip()


# ---- the projector (pure) ---------------------------------------------------------------------------------


def project(events: Iterable[dict]) -> dict[str, dict]:
    """Replay events into records, by id, in creation order. Deterministic; never raises on bad events."""
    seen: set[int] = set()
    ordered = []
    for event in events:
        seq = event.get("seq") if isinstance(event, dict) else None
        if type(seq) is int and seq not in seen and isinstance(event.get("payload"), dict):
            seen.add(seq)
            ordered.append(event)
    ordered.sort(key=lambda e: (e["seq"], str(e.get("ts", ""))))
    records: dict[str, dict] = {}
    for event in ordered:
        _apply(records, event)
    return records


def _choice(payload: dict, key: str, allowed, default):
    value = payload.get(key)
    return value if value in allowed else default


def _apply(records: dict[str, dict], event: dict) -> None:
    kind, rid, author, payload, ts = event.get("type"), event.get("recordId"), event.get("author"), event["payload"], event.get("ts")
    if not isinstance(rid, str) or author not in ("user", "model", "rule") or not isinstance(ts, str):
        return
    if kind == "create":
        if rid in records or not _valid_create(payload):
            return
        if author != "user" and payload["status"] != "provisional":
            return  # only the user makes a record active
        record = {
            "id": rid, "kind": payload["kind"], "content": payload["content"], "scope": payload["scope"],
            "status": payload["status"], "priority": payload["priority"], "author": author,
            "sourceEntryIds": list(payload.get("sourceEntryIds") or []), "sourceHash": payload.get("sourceHash", ""),
            "createdAt": ts, "updatedAt": ts, "version": 1, "pinned": False,
        }
        _optional(record, "sessionId", event.get("sessionId"))
        _optional(record, "provenance", payload.get("provenance"))
        records[rid] = record
        return
    old = records.get(rid)
    if old is None or old["status"] in TERMINAL:
        return
    if author != "user" and (old["author"] != author or old["status"] != "provisional" or kind not in ("supersede", "resolve")):
        return  # the model and the rules may only edit or withdraw their own provisional records
    if kind == "pin":
        old.update(status="pinned", pinned=True, updatedAt=ts)
    elif kind == "unpin":
        old.update(status="active" if old["status"] == "pinned" else old["status"], pinned=False, updatedAt=ts)
    elif kind == "resolve":
        old.update(status="resolved", pinned=False, updatedAt=ts)
    elif kind == "supersede":
        _supersede(records, old, event, author, payload, ts)


def _supersede(records: dict, old: dict, event: dict, author: str, payload: dict, ts: str) -> None:
    new_id, content = payload.get("newRecordId"), payload.get("content")
    if not (isinstance(new_id, str) and new_id and new_id not in records and isinstance(content, str) and content):
        return
    status = payload.get("status")
    if status not in ("provisional", "active"):
        status = "provisional" if old["status"] == "provisional" else "active"
    if author != "user" and status != "provisional":
        return
    ids = payload.get("sourceEntryIds")
    record = {
        "id": new_id, "kind": _choice(payload, "kind", KINDS, old["kind"]), "content": content,
        "scope": _choice(payload, "scope", READ_SCOPES, old["scope"]), "status": status,
        "priority": _choice(payload, "priority", PRIORITIES, old["priority"]), "author": author,
        "sourceEntryIds": list(ids) if isinstance(ids, list) else old["sourceEntryIds"],
        "sourceHash": payload["sourceHash"] if isinstance(payload.get("sourceHash"), str) else old["sourceHash"],
        "createdAt": ts, "updatedAt": ts, "version": old["version"] + 1, "pinned": False,
    }
    _optional(record, "sessionId", event.get("sessionId") or old.get("sessionId"))
    _optional(record, "provenance", payload.get("provenance") if isinstance(payload.get("provenance"), str) else old.get("provenance"))
    record["supersedes"] = old["id"]
    old.update(status="superseded", pinned=False, supersededBy=new_id, updatedAt=ts)
    records[new_id] = record


def _valid_create(p: dict) -> bool:
    return (
        p.get("kind") in KINDS and isinstance(p.get("content"), str) and bool(p["content"])
        and p.get("scope") in READ_SCOPES and p.get("status") in ("provisional", "active")
        and p.get("priority") in PRIORITIES and isinstance(p.get("sourceEntryIds", []), list)
        and isinstance(p.get("sourceHash", ""), str)
    )


def _optional(record: dict, key: str, value) -> None:
    if isinstance(value, str) and value:
        record[key] = value


def visible(record: dict, session: str | None) -> bool:
    """Session-scoped records belong to their session; everything else is shared."""
    return record["scope"] != "session" or (bool(session) and record.get("sessionId") == session)


# ---- reading ----------------------------------------------------------------------------------------------


def records(mem, session: str | None = None, include_tools: bool = False, on_damage=None) -> list[dict]:
    """The records ``session`` can see (the trusted prefix of the log), in creation order. Rule-derived
    records quote tool calls and results (paths, commands), so like tool traffic they need ``include_tools``.
    A damaged log is read up to the damage, and ``on_damage(text)`` says what is left out (default: a warning)."""
    from .chain import memory_chain

    reading = memory_chain(mem.path).read()
    if reading.problem:
        text = f"{mem.name}: {reading.problem}; it and the memories after it are left out until a person repairs it ('pimem fsck')"
        (on_damage or (lambda said: env.stderr().write(f"pimem: warning: {said}\n")))(text)
    return [
        r for r in project(reading.events).values()
        if visible(r, session) and (include_tools or r["author"] != "rule")
    ]


def find(items: list[dict], query: str | None = None, status: str | None = None, kind: str | None = None) -> list[dict]:
    """Filter by status (default: live; ``all`` for every status) and kind, then rank by ``query``.

    Without a query: pinned, then active, then provisional (then resolved, superseded), newest first."""
    if status is not None and status not in ("live", "all", *STATUSES):
        raise BadInput(f"unknown status {status!r}: use live, all, {', '.join(STATUSES)}")
    _check_choice(kind, KINDS, "kind")
    if status in (None, "live"):
        items = [r for r in items if r["status"] in LIVE]
    elif status != "all":
        items = [r for r in items if r["status"] == status]
    if kind:
        items = [r for r in items if r["kind"] == kind]
    if query and query.strip():
        return rank(items, query)
    items = sorted(items, key=lambda r: _moment(r["updatedAt"]), reverse=True)
    return sorted(items, key=lambda r: STATUSES.index(r["status"]))


TEXT_CAP = 256 * 1024  # bytes of one memory's text (long ones are paged by budget; a document belongs in the log)
_STATUS_BONUS = {"pinned": 0.8, "active": 0.55, "provisional": 0.0, "superseded": -0.8, "resolved": -1.2}
_AUTHOR_BONUS = {"user": 0.4, "model": 0.0, "rule": -0.2}
_PRIORITY_BONUS = {"high": 0.2, "normal": 0.08, "low": 0.0}


def rank(items: list[dict], query: str) -> list[dict]:
    """The ranker's BM25 (``pimem.ranker``, the same terms and scores as ``search --rank``; records are not
    a conversation, so no neighbour context) plus bonuses for all terms, the exact phrase, status, author,
    priority; provisional machine records fade over a month. Records matching no term are dropped; a query
    of stop words only finds nothing."""
    from . import ranker

    wanted = terms.query_terms(query)
    if not wanted or not items:
        return []
    phrase = " ".join(terms.fold(query).split())
    texts = [f"{r['content']}\n{r['id']}\n{r['kind']}\n{r.get('provenance', '')}" for r in items]
    documents = [terms.bag(text) for text in texts]
    scores = ranker.bm25(ranker.Corpus(documents), wanted)
    now = env.now()
    scored = []
    for n, score in scores.items():
        record, found = items[n], documents[n][0]
        matched = sum(1 for t in wanted if t in found)
        score += 1.6 if matched == len(wanted) else 0.0
        score += 1.2 if len(wanted) > 1 and phrase in " ".join(terms.fold(texts[n]).split()) else 0.0
        score += _STATUS_BONUS[record["status"]] + _AUTHOR_BONUS[record["author"]] + _PRIORITY_BONUS[record["priority"]]
        if record["author"] != "user" and record["status"] not in ("active", "pinned"):
            days = max(0.0, (now - _moment(record["updatedAt"])).total_seconds() / 86400)
            score += 0.3 / (1 + days / 30)
        scored.append((-score, -matched, -_moment(record["updatedAt"]).timestamp(), record["id"], record))
    scored.sort(key=lambda row: row[:4])
    return [row[-1] for row in scored]


def _moment(stamp: str) -> datetime:
    try:
        return when.parse_stored(stamp)
    except BadInput:  # a hand-written event with a bad date sorts as oldest
        return datetime.fromtimestamp(0).astimezone()


# ---- writing ----------------------------------------------------------------------------------------------


def new_id() -> str:
    return "mem_" + uuid.uuid4().hex[:16]


def _check_choice(value, allowed, what: str) -> None:
    if value is not None and value not in allowed:
        raise BadInput(f"unknown {what} {shown(value)}: use one of {', '.join(allowed)}")


def _strings(*given: tuple[str, object]) -> None:
    """``BadInput`` naming the argument given that is neither None nor a string (the library's callers: the
    log keeps strings)."""
    from .naming import is_utf8

    for name, value in given:
        if value is not None and not isinstance(value, str):
            raise BadInput(f"{name} must be a string, not {type(value).__name__}")
        if value is not None and not is_utf8(value):  # (memory.jsonl holds UTF-8: a write would fail midway)
            raise BadInput(f"{name} is not valid UTF-8 (it holds a lone surrogate)")


def _flags(*given: tuple[str, object]) -> None:
    """``BadInput`` naming the argument given that is not True or False (a "yes" would pin)."""
    for name, value in given:
        if type(value) is not bool:
            raise BadInput(f"{name} is True or False, not {shown(value):.40}")


@library  # (what the system refuses: a PimemError, as every failure of the library)
def remember(
    mem, text: str | None, *, pin: bool = False, kind: str | None = None, priority: str | None = None,
    scope: str | None = None, supersede: str | None = None, session: str | None = None, propose: bool = False,
    timeout: float | None = None,
) -> dict:
    """Write a memory and return its record as the projector now sees it.

    The user's memories are active (``pin`` makes them pinned); ``propose`` writes a provisional one as the
    model would. ``supersede`` replaces a visible, live record (the new text, or the old one when ``text`` is
    None: a blank text given is refused); a proposal may only replace the model's own provisional proposals."""
    from .chain import sha256

    _check_choice(kind, KINDS, "kind")
    _check_choice(priority, PRIORITIES, "priority")
    _check_choice(scope, SCOPES, "scope")
    _strings(("text", text), ("session", session), ("supersede", supersede))
    _flags(("pin", pin), ("propose", propose))
    if supersede is not None and text is not None and says_nothing(text):
        raise BadInput("the new text is blank: give the memory's new text, or none to keep its text")
    text = None if text is None or says_nothing(text) else text
    if text is not None and "\x00" in text:
        raise BadInput("text contains a NUL byte")
    if text is not None and len(text.encode("utf-8", "surrogatepass")) > TEXT_CAP:
        raise BadInput(f"a memory's text is at most {TEXT_CAP:,} bytes; log long texts with 'pimem append' and "
                       "remember what matters about them")
    if propose and pin:
        raise BadInput("--pin and --propose do not go together: only the user pins a memory")
    if scope == "session" and not session:
        raise BadInput("--scope session needs --session ID: a session memory is visible only to its session")
    if supersede is None and text is None:
        raise BadInput("no text: give the memory as arguments or on stdin")
    author = "model" if propose else "user"
    provenance = "model:propose" if propose else "user:remember"
    status = "provisional" if propose else "active"
    stamp = when.rfc3339(env.now())
    new = new_id()

    def build(events: list[dict]) -> list[dict]:
        base = {"ts": stamp, "author": author}
        if session:
            base["sessionId"] = session
        if supersede is None:
            content = text or ""
            payload = {
                "kind": kind or "fact", "content": content, "scope": scope or "project", "status": status,
                "priority": priority or "normal", "sourceEntryIds": [], "sourceHash": sha256(content),
                "provenance": provenance,
            }
            out = [{**base, "type": "create", "recordId": new, "payload": payload}]
            target_pinned = False
        else:
            target = _live_target(project(events), supersede, session, mem.name)
            if propose and (target["author"] != "model" or target["status"] != "provisional"):
                raise BadInput(f"a proposal may only replace the model's own provisional proposals; {supersede} is {target['author']}'s and {target['status']}")
            content = text or target["content"]
            payload = {"newRecordId": new, "content": content, "status": status, "sourceHash": sha256(content), "provenance": provenance}
            for key, value in (("kind", kind), ("scope", scope), ("priority", priority)):
                if value is not None:
                    payload[key] = value
            out = [{**base, "type": "supersede", "recordId": supersede, "payload": payload}]
            target_pinned = target["pinned"]
        if not propose and (pin or target_pinned):
            out.append({**base, "type": "pin", "recordId": new, "payload": {}})
        return out

    record = _write(mem, build, new, session, timeout)
    expected = ("provisional",) if propose else ("pinned",) if pin else ("active", "pinned")
    if record["status"] not in expected:
        raise IntegrityError(f"memory {new} was written but reads back as {record['status']}")
    return record


@library
def forget(mem, record_id: str, *, session: str | None = None, timeout: float | None = None) -> dict:
    """Resolve a visible, live record (the user's word); it leaves the default listing."""
    if not isinstance(record_id, str):
        raise BadInput(f"record_id must be a string, not {type(record_id).__name__}")
    _strings(("session", session))
    stamp = when.rfc3339(env.now())

    def build(events: list[dict]) -> list[dict]:
        _live_target(project(events), record_id, session, mem.name)
        event = {"ts": stamp, "type": "resolve", "recordId": record_id, "author": "user", "payload": {"reason": "user:forget"}}
        if session:
            event["sessionId"] = session
        return [event]

    record = _write(mem, build, record_id, session, timeout)
    if record["status"] != "resolved":
        raise IntegrityError(f"memory {record_id} was resolved but reads back as {record['status']}")
    return record


def _live_target(projected: dict[str, dict], record_id: str, session: str | None, name: str) -> dict:
    target = projected.get(record_id)
    if target is None or not visible(target, session):
        missing = f"no memory {budget.clip(record_id, 80)!r} in '{name}'"
        raise NotFound(f"{missing} (see 'pimem memories {name}')", tools=f"{missing} (see memory_search)")
    if target["status"] in TERMINAL:
        by = f" by {target['supersededBy']}" if target.get("supersededBy") else ""
        raise BadInput(f"memory {record_id} is already {target['status']}{by}")
    return target


def _write(mem, build, record_id: str, session: str | None, timeout: float | None) -> dict:
    from .chain import memory_chain
    from .memory import check_timeout

    check_timeout(timeout)  # (checked before the memory is created, as the lock checks it)
    homes.ensure_dir(mem.path)

    def made(events: list[dict]) -> list[dict]:
        new = build(events)
        if new:  # remember is a writer: it may create the memory (not one refused: a claim stays a claim)
            homes.ensure_dir(mem.path / "main")
        return new

    with mem.lock(timeout):
        memory_chain(mem.path).append(made)
    record = next((r for r in records(mem, session, include_tools=True) if r["id"] == record_id), None)
    if record is None:
        raise IntegrityError(f"memory {record_id} was written but does not read back; run 'pimem fsck'")
    return record


def unwritten(events: list[dict], proposals: list[dict]) -> list[dict]:
    """The rule-derived ``proposals`` that the memory log ``events`` does not hold yet (by id or content),
    each content once."""
    projected = project(events)
    contents = {r["content"] for r in projected.values() if r["author"] == "rule"}
    out = []
    for p in proposals:
        if p["id"] not in projected and p["content"] not in contents:
            contents.add(p["content"])
            out.append(p)
    return out


def derive(mem, proposals: list[dict], source_hash: str, stamp: str) -> list[str]:
    """Write rule-derived provisional records (compaction), skipping ids and contents already present.
    ``proposals``: ``{"id", "content", "provenance", "sourceEntryIds"}``. Caller holds the writer lock."""
    from .chain import memory_chain

    written: list[str] = []

    def build(events: list[dict]) -> list[dict]:
        out = []
        for p in unwritten(events, proposals):
            payload = {
                "kind": "derived", "content": p["content"], "scope": "project", "status": "provisional", "priority": "low",
                "sourceEntryIds": p["sourceEntryIds"], "sourceHash": source_hash, "provenance": p["provenance"],
            }
            out.append({"ts": stamp, "type": "create", "recordId": p["id"], "author": "rule", "payload": payload})
            written.append(p["id"])
        return out

    memory_chain(mem.path).append(build)
    return written


# ---- output within a budget ---------------------------------------------------------------------------------


def bounded(record: dict, content: str | None = None) -> dict:
    """A record with its metadata bounded (long strings clipped, at most 64 source ids) and ``content``
    replaced when given; ``metadataTruncated`` says when anything was clipped."""
    out = dict(record)
    clipped = False
    for key in ("id", "sessionId", "provenance", "supersedes", "supersededBy", "sourceHash"):
        value = out.get(key)
        if isinstance(value, str) and len(value) > META_CLIP:
            out[key] = budget.clip(value, META_CLIP)
            clipped = True
    ids = out.get("sourceEntryIds") or []
    if len(ids) > MAX_SOURCE_IDS or len(budget.dumps(ids)) > 4096:
        shown, _ = budget.listed([budget.clip(str(i), 128) if not isinstance(i, int) else i for i in ids[:MAX_SOURCE_IDS]], 4096)
        out["sourceEntryIds"] = shown
        out["sourceEntryIdsOmitted"] = len(ids) - len(shown)
        clipped = True
    if content is not None:
        out["content"] = content
    if clipped:
        out["metadataTruncated"] = True
    return out


def listing(found: list[dict], offset: int, limit: int, max_chars: int, as_json: bool, tools_matching: int = 0) -> str:
    """A page of records as text (or one JSON object) of at most ``max_chars`` characters: whole records
    only, the rest counted and pointed to with ``nextOffset``; ``tools_matching``: how many records derived
    from tool traffic, left out, would match (said as ``toolsMatching`` in JSON)."""
    page = found[offset : offset + limit]
    shortened = []
    for r in page:
        clip = budget.clip(r["content"], SNIPPET)
        item = bounded(r, clip)
        if clip != r["content"]:
            item.update(contentChars=len(r["content"]), contentTruncated=True)
        shortened.append(item)
    blocks = [_block(item) for item in shortened]

    def render(k: int, _notes: dict) -> str:
        next_offset = offset + k if offset + k < len(found) else None
        if as_json:
            doc = {"source": "memory-log", "count": len(found), "offset": offset, "records": shortened[:k], "truncated": next_offset is not None}
            if next_offset is not None:
                doc["nextOffset"] = next_offset
            if tools_matching:
                doc["toolsMatching"] = tools_matching
            return budget.dumps(doc)
        head = f"pimem memories ({len(found)})" if k == len(page) else f"pimem memories ({len(found)}; {k} included)"
        text = "\n\n".join([head, *blocks[:k]])
        if next_offset is not None:
            text += f"\n\n({len(found) - offset - k} more: --offset {next_offset}; read one whole with --id ID)"
        return text

    text = budget.pack(max_chars, len(page), render)
    if text is not None:
        return text
    return budget.counted(max_chars, as_json, len(found), {"source": "memory-log", "offset": offset}, "pimem memories")


def _block(r: dict) -> str:
    head = f"- [{r['id']}] {r['status']} {r['kind']} prio={r['priority']} author={r['author']} v{r['version']}"
    if r.get("supersedes"):
        head += f" supersedes={r['supersedes']}"
    content = r["content"]
    if r.get("contentTruncated"):
        content += f" (read it whole: pimem memories NAME --id {r['id']})"
    from .output import flatten  # (each line shown, not obeyed: an ESC in a memory must not drive the terminal)

    return head + "\n  " + "\n  ".join(flatten(part) for part in content.split("\n"))


def read(record: dict, offset: int = 0, limit: int | None = None, max_chars: int = budget.DEFAULT) -> str:
    """One record as a JSON object with a slice of its content starting at ``offset`` (character
    positions), as long as fits ``max_chars``; ``nextOffset`` continues it, so pages reassemble exactly."""
    total = len(record["content"])
    if offset < 0:
        raise BadInput("--offset must be 0 or more")
    offset = min(offset, total)
    want = min(total - offset, READ_LIMIT if limit is None else limit)
    meta = bounded(record)

    def render(n: int, base: dict = meta) -> str:
        doc = {**base, "content": record["content"][offset : offset + n], "offset": offset, "totalChars": total,
               "truncated": offset + n < total}
        if offset + n < total:
            doc["nextOffset"] = offset + n
        return budget.dumps(doc)

    n = budget.largest(lambda k: len(render(k)) <= max_chars, want)
    if n < 0:  # metadata too big even with no content: keep only what identifies the record
        minimal = {"id": budget.clip(record["id"], 128), "status": record["status"], "metadataTruncated": True}
        n = budget.largest(lambda k: len(render(k, minimal)) <= max_chars, want)
        if n < 0:
            return budget.fit_text(max_chars, ["{}"])
        return render(n, minimal)
    return render(n)
