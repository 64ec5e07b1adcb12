"""Bounded recall for agent tools (pi-compact's recall over pimem's log, DESIGN.md §5).

Each message becomes a record: its number ``i``, its kind under both vocabularies (pimem's ``pi``/``tool``/
``echo``/``work`` and pi-compact's ``assistant``/``tool_call``/``tool_result``/``bash``/``custom``), the files
it names (tool-call arguments, shell commands; the disk is never read), and a source class (``derived`` for
summaries marked ``meta.derived``, else ``primary``: a provenance label, not a trust label).

A request lists (newest first), reads given ids (log order), or searches: the ranker behind every ranked
read (``pimem.ranker``: any of the query's terms, BM25 with neighbour context, through the index), among the
messages holding a term; a message naming a path that holds a term counts double, derived records a fifth.
``--file`` keeps the messages naming a path containing it (found through the index's substring search).
The request's scope narrows what may be found: ``SCOPES`` maps a scope name to a function ``mem -> {i:
message}`` giving the messages it leaves out; ``all`` leaves out none, ``lineage`` the branches each imported
pi session stepped away from (``pimem.lineage``, following ``meta.entry``/``meta.parent``/``meta.session``).

Output never exceeds the budget (characters) and never cuts a JSON document: whole blocks or entries only,
omitted ids listed as far as room allows (and counted beyond), one long entry read through an envelope
``{id, offset, limit, totalChars, truncated, body}`` that pages by character offset.

Privacy: tool calls and results (``tool``, ``echo``) are left out unless ``include_tools`` is set or the
kind filter names them, like every read path; an agent's own recall tool sets ``include_tools`` because it is
reading back its own work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

import orjson

from . import budget, lineage, numbers, terms
from .errors import BadInput
from .message import TOOL_KINDS

NAMES = {
    "user": ["user"], "pi": ["pi", "assistant"], "tool": ["tool", "tool_call"], "echo": ["echo", "tool_result"],
    "work": ["work", "custom"], "note": ["note"],
}
KIND_FILTERS = frozenset(n for names in NAMES.values() for n in names) | {"bash"}
TOOL_FILTERS = frozenset({"tool", "tool_call", "echo", "tool_result", "bash"})
SOURCE_CLASSES = ("primary", "derived", "all")
TEXT_CLIP = 2000
SNIPPET = 700
POOL = 1000  # the ranker's best messages a search looks at (then filtered, re-weighted and paged)
# the argument naming a call's file: pi's, Claude Code's (Read, Edit, Write; NotebookEdit), Cursor's (as
# ``toolwork._PATH_KEYS``, kept apart so that recall need not compile toolwork's patterns)
_FILE_KEYS = frozenset({"path", "file", "filePath", "filename", "file_path", "notebook_path", "target_file"})
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$", re.M)  # Codex's apply_patch
_CALL = re.compile(r"^\s*[\w.-]+\((.*)\)\s*$", re.S)


def _none(mem) -> dict[int, dict]:
    return {}


SCOPES: dict[str, Callable[..., dict[int, dict]]] = {"all": _none, "lineage": lineage.left_out}


# ---- records --------------------------------------------------------------------------------------------


def record(msg: dict) -> dict:
    """The recall record of one message."""
    facets = _facets(msg)
    return {
        "id": msg["i"], "kind": msg["kind"], "kinds": facets["kinds"], "date": msg["date"], "text": msg["text"],
        "files": files_of(msg), "sourceClass": facets["sourceClass"], "message": msg,
    }


def _facets(msg: dict) -> dict:
    """What a listing filters a message's record by: its kind, the names of its kind, its source class."""
    meta = msg.get("meta") if isinstance(msg.get("meta"), dict) else {}
    kinds = list(NAMES.get(msg["kind"], [msg["kind"]]))  # (a kind written by another hand: fsck names it)
    if msg["kind"] == "echo" and isinstance(meta.get("command"), str):
        kinds.append("bash")
    return {"kind": msg["kind"], "kinds": kinds, "sourceClass": "derived" if meta.get("derived") is True else "primary"}


def files_of(msg: dict) -> list[str]:
    """Paths a message names: ``path``/``file_path``/``filePath``/``filename`` … values in a tool call's JSON
    arguments, the files a patch adds, updates, deletes or moves to (``*** Update File: …``), and the words of a
    shell command (``meta.command``) that name files (``toolwork.names_file``: not ``mix phx.server``'s task)."""
    meta = msg.get("meta") if isinstance(msg.get("meta"), dict) else {}
    if msg["kind"] != "tool" and not isinstance(meta.get("command"), str):
        return []  # (most messages: nothing to look at)
    found: list[str] = []
    if msg["kind"] == "tool":
        _walk(_arguments(msg["text"]), found)
        if "*** " in msg["text"]:
            found.extend(a or b for a, b in _PATCH_FILE.findall(msg["text"]))
    command = meta.get("command")
    if isinstance(command, str):
        from . import toolwork  # (here: every command's start-up imports recall, through compaction)

        found.extend(w for w in (w.strip("'\"") for w in command.split()) if toolwork.names_file(w))
    return list(dict.fromkeys(p for p in found if p not in (".", "..") and not p.startswith("http") and 0 < len(p) < 1000))


def _arguments(text: str):
    """A tool call's arguments: the text as JSON, or the JSON inside ``name(...)``."""
    for candidate in (text, (_CALL.match(text) or [None, None])[1]):
        if candidate and candidate.lstrip()[:1] in ("{", "["):
            try:
                return orjson.loads(candidate)
            except orjson.JSONDecodeError:
                pass
    return None


def _walk(value, found: list[str], depth: int = 0) -> None:
    if depth > 32:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if key in _FILE_KEYS and isinstance(item, str):
                found.append(item)
            else:
                _walk(item, found, depth + 1)
    elif isinstance(value, list):
        for item in value:
            if not isinstance(item, str):
                _walk(item, found, depth + 1)


# ---- requests ---------------------------------------------------------------------------------------------


@dataclass
class Request:
    """One recall. ``ids`` are message numbers (``12``) or source entry ids (``meta.entry``; force with
    ``entry:ID``); with ids, query/file/kind/page are ignored. No query and no file lists newest first."""

    query: str = ""
    ids: list[str] = field(default_factory=list)
    file: str | None = None
    kind: str | None = None
    page: int = 1
    limit: int = 8
    raw: bool = False
    offset: int | None = None
    raw_limit: int | None = None
    source_class: str = "all"
    scope: str = "all"
    include_tools: bool = False
    budget: int = budget.DEFAULT
    as_json: bool = False

    def check(self) -> None:
        if self.kind is not None and self.kind not in KIND_FILTERS:
            raise BadInput(f"unknown kind {self.kind!r}: use one of {', '.join(sorted(KIND_FILTERS))}")
        if self.source_class not in SOURCE_CLASSES:
            raise BadInput(f"unknown source class {self.source_class!r}: use primary, derived or all")
        if self.scope not in SCOPES:
            raise BadInput(f"unknown scope {self.scope!r}: use {', '.join(SCOPES)}")
        if not 1 <= self.limit <= 30:
            raise BadInput("--limit is 1-30")
        if self.page < 1:
            raise BadInput("--page starts at 1")
        if (self.offset is not None and self.offset < 0) or (self.raw_limit is not None and self.raw_limit < 1):
            raise BadInput("--offset must be 0 or more and --raw-limit 1 or more")
        if self.budget < 2:
            raise BadInput("--budget must be at least 2")
        if self.query:
            from .search import MAX_TERMS

            if len(words := self.query.split()) > MAX_TERMS:  # (a document pasted as a query, as search refuses it)
                raise BadInput(f"a query of {len(words):,} words: give at most {MAX_TERMS:,}")


@dataclass
class Found:
    """What a request selected before formatting: records of the page, the total matched, ids not found or
    hidden, and whether this is a single-entry raw read."""

    action: str
    records: list[dict]
    total: int
    missing: list = field(default_factory=list)
    hidden: list = field(default_factory=list)
    unlike: list = field(default_factory=list)  # ids naming messages only of the source class not asked for
    beyond: list = field(default_factory=list)  # ids read past the limit: reported as omitted
    next_page: int | None = None
    snippets: dict = field(default_factory=dict)
    capped: bool = False  # a search that looked at the ranker's best POOL messages only: more may match
    tools_matching: int = 0  # nothing selected: how many tool calls and results would be (``_hidden_matches``)
    repeats: list = field(default_factory=list)  # ids matched but not shown: the same kind and text as a result of the page


def recall(mem, request: Request) -> str:
    """The library entry point (commands and the MCP server): the text (or one JSON document) to show,
    never longer than ``request.budget`` characters."""
    request.check()
    return render(mem, request, find(mem, request))


def find(mem, request: Request) -> Found:
    """What a (checked) request selects, never a message its scope leaves out: a search through the index, a
    listing (the log read backwards only as far as its page) or a read by ids (those messages, or the lines
    holding the entry ids). A memory renamed or deleted meanwhile is said so (``NotFound``), as by every reader
    of a Memory: a search, which reads the index and not the log, found nothing in it or the system's error."""
    with mem._failed_where_moved():
        found = _find(mem, request)
    mem._here()
    return found


def _find(mem, request: Request) -> Found:
    out = SCOPES[request.scope](mem)
    if request.ids:
        named = [r for r in _named(mem, request) if r["id"] not in out]
        kept = [r for r in named if request.source_class in ("all", r["sourceClass"])]
        found = _by_ids(request, kept, not _shows_tools(request))
        if len(kept) < len(named):  # an id naming only messages of the other class is said to be so, not "not found"
            unlike = set(_by_ids(request, [r for r in named if r not in kept], False).missing)
            found.unlike = [ident for ident in found.missing if ident not in unlike]
            found.missing = [ident for ident in found.missing if ident in unlike]
        return found
    found = _listing(mem, request, out) if not request.query.strip() and not request.file else _search(mem, request, out)
    found.tools_matching = _hidden_matches(mem, request, found)
    return found


def _hidden_matches(mem, request: Request, found: Found) -> int:
    """How many messages a search or listing that matched nothing would find with tool traffic shown, its
    filters (kind, scope, source class, file) as they are: 0 when it was shown, under a kind filter (a tool's
    shows them, any other leaves them out), or for a read by ids, which says which ids are hidden."""
    if found.total or request.ids or request.kind or _shows_tools(request):
        return 0
    return find(mem, replace(request, include_tools=True, page=1)).total


def _number(raw: str) -> int | None:
    ident = raw.strip().lstrip("#")
    return int(ident) if ident.isascii() and ident.isdigit() else None


def _named(mem, request: Request) -> list[dict]:
    """The records ``request.ids`` can name, of either source class, in log order: the messages
    named by number (those that exist), and for entry ids the messages whose stored line holds one, found
    by a byte search of the log (``Log.holding``) rather than by reading every message. When an entry id
    is not found so (its line written by another hand), every message is read after all."""
    total = mem.count()
    numbers = {n for n in map(_number, request.ids) if n is not None and n < total}
    entries = {_entry(raw) for raw in request.ids if _number(raw) is None}
    messages = {i: mem.message(i) for i in numbers}
    if entries:
        found = [m for m in mem.log.holding([orjson.dumps(e) for e in entries]) if _entry_of(m) in entries]
        if {_entry_of(m) for m in found} != entries:
            found = [m for m in mem.messages() if _entry_of(m) in entries]
        messages.update((m["i"], m) for m in found)
    return [record(messages[i]) for i in sorted(messages)]


def _entry(raw: str) -> str:
    ident = raw.strip()
    return ident[6:] if ident.startswith("entry:") else ident


def _entry_of(msg: dict) -> str | None:
    entry = (msg.get("meta") or {}).get("entry")
    return entry if isinstance(entry, str) else None


LIST_WINDOW = 256  # messages a listing reads back at a time


def _listing(mem, request: Request, out: dict[int, dict]) -> Found:
    """The records a listing shows, newest first, reading little. A filter on a meta field
    (``--kind bash``: a result with ``meta.command``; ``--source-class derived``: ``meta.derived``) reads only
    the lines whose bytes hold that field's key (``Log.holding``), each checked, and makes
    records of the page's alone. Otherwise the log is read backwards a window at a time until the page and
    one more record are found, and the total is counted through the index (less the derived messages, for
    ``primary``, and those the scope leaves ``out``)."""
    hide = not _shows_tools(request)
    start, end = (request.page - 1) * request.limit, request.page * request.limit
    if request.kind == "bash" or request.source_class == "derived":
        needle = _COMMAND_KEY if request.kind == "bash" else _DERIVED
        listed = [m for m in reversed(mem.log.holding([needle], keep=_light)) if m["i"] not in out and _listed(request, m, hide)]
        page, total = [record(mem.message(m["i"])) for m in listed[start:end]], len(listed)
    else:
        found, stop = [], mem.count()
        while stop > 0 and len(found) <= end:
            first = max(0, stop - LIST_WINDOW)
            window = [record(m) for m in mem.messages(first, stop)]
            found += [r for r in reversed(window) if r["id"] not in out and _listed(request, r, hide)]
            stop = first
        if stop == 0:
            total = len(found)
        else:
            total = _total(mem, request, hide) - sum(1 for m in out.values() if _listed(request, _facets(m), hide))
        page = found[start:end]
    return Found("list", page, total, next_page=request.page + 1 if end < total else None)


# the meta fields a listing may filter on, as keys (a line written by another hand may space its values)
_COMMAND_KEY, _DERIVED = b'"command":', b'"derived":'


def _total(mem, request: Request, hide: bool) -> int:
    """How many messages a listing on kinds alone lists, or on ``primary`` ones: the index counts them by
    kind, less the derived ones among them for ``primary``."""
    from .search import asked

    by_kinds = asked(mem, lambda: mem.index().count_kinds(_kinds(request)))
    if request.source_class == "all":
        return by_kinds
    either = replace(request, source_class="all")
    return by_kinds - sum(1 for r in mem.log.holding([_DERIVED], keep=_light) if r["sourceClass"] == "derived" and _listed(either, r, hide))


def _light(msg: dict) -> dict:
    """Of a message a byte search found, what a listing filters it by (many may be found)."""
    return {"i": msg["i"], **_facets(msg)}


def _listed(request: Request, r: dict, hide: bool) -> bool:
    return (not (hide and r["kind"] in TOOL_KINDS) and (not request.kind or request.kind in r["kinds"])
            and request.source_class in ("all", r["sourceClass"]))


def _shows_tools(request: Request) -> bool:
    return request.include_tools or (request.kind in TOOL_FILTERS)


def _by_ids(request: Request, records: list[dict], hide: bool) -> Found:
    by_i = {r["id"]: r for r in records}
    by_entry: dict[str, list[dict]] = {}  # (an entry id names every message logged from that entry: a pi
    for r in records:                     # entry's text and its tool calls are messages of their own)
        entry = _entry_of(r["message"])
        if entry is not None:
            by_entry.setdefault(entry, []).append(r)
    wanted: dict[int, dict] = {}
    missing, hidden = [], []
    for raw_id in request.ids:
        ident = raw_id.strip()
        number = _number(ident)
        found = ([by_i[number]] if number in by_i else []) if number is not None else by_entry.get(_entry(ident), [])
        if not found and ident not in missing:  # (each said once, however often it was asked for)
            missing.append(ident)
        for rec in found:
            if hide and rec["kind"] in TOOL_KINDS:
                hidden.append(rec["id"])
            else:
                wanted[rec["id"]] = rec
    chosen = [wanted[i] for i in sorted(wanted)]
    beyond = [r["id"] for r in chosen[request.limit :]]
    return Found("read", chosen[: request.limit], len(wanted), missing=missing, hidden=list(dict.fromkeys(hidden)), beyond=beyond)


def _search(mem, request: Request, out: dict[int, dict]) -> Found:
    """The ranker's best messages holding a query term (or, with only ``--file``, the messages naming such
    a path, newest first), filtered by the request, re-weighted for path hits and derived records, best first;
    a message of the same kind and the very same text as a better one shown once, the others counted and
    listed as its repeats (never a message whose text differs in any character)."""
    from . import search as searching

    kinds = _kinds(request)
    wanted = terms.query_terms(request.query)
    if wanted:
        pool = [(record(m), score) for m, score in searching.ranked(mem, request.query, kinds, POOL, widen=False)]
        capped = len(pool) >= POOL
    elif request.file and not request.query.strip():
        pool, capped = [(record(m), 0.0) for m in searching.containing(mem, request.file, kinds)], False
    else:
        return Found("search", [], 0)
    pool = [(r, score) for r, score in pool if r["id"] not in out and _admits(request, r)]
    scored = []
    for r, score in pool:
        if request.file or any(t in terms.fold(p) for p in r["files"] for t in wanted):
            score *= 2
        if r["sourceClass"] == "derived":
            score *= 0.2
        scored.append((-score, -r["id"], r))
    scored.sort(key=lambda row: row[:2])
    ranked, same = [], {}
    for _, _, r in scored:
        key = (r["kind"], r["text"])
        if key in same:
            same[key].append(r["id"])
        else:
            same[key] = []
            ranked.append(r)
    start = (request.page - 1) * request.limit
    page = ranked[start : start + request.limit]
    more = start + request.limit < len(ranked)
    repeats = [i for r in page for i in same[(r["kind"], r["text"])]]
    snippets = {r["id"]: snippet(r["text"], wanted) for r in page} if wanted else {}
    return Found("search", page, len(scored), next_page=request.page + 1 if more else None, snippets=snippets,
                 capped=capped, repeats=repeats)


def _kinds(request: Request) -> set[str]:
    """The pimem kinds a search looks at: the kind filter's, else all but tool traffic unless asked for."""
    if request.kind:
        return {kind for kind, names in NAMES.items() if request.kind in names or (request.kind == "bash" and kind == "echo")}
    return {kind for kind in NAMES if _shows_tools(request) or kind not in TOOL_KINDS}


def _admits(request: Request, r: dict) -> bool:
    return ((not request.kind or request.kind in r["kinds"])
            and (request.source_class == "all" or r["sourceClass"] == request.source_class)
            and (not request.file or any(request.file in p for p in r["files"])))


def snippet(text: str, wanted: list[str]) -> str:
    """About 700 characters from the start of the first line holding a term, ending at a line or sentence."""
    folded = terms.fold(text)
    hits = [folded.find(t) for t in wanted if folded.find(t) >= 0] if len(folded) == len(text) else []
    start = text.rfind("\n", 0, min(hits)) + 1 if hits else 0
    piece = text[start : start + SNIPPET]
    if start + SNIPPET < len(text):
        end = max(piece.rfind("\n"), piece.rfind(". "), piece.rfind("。"))
        piece = piece[: end + 1] if end > SNIPPET // 2 else piece
    return piece


# ---- output -----------------------------------------------------------------------------------------------


def _summary(mem, r: dict, found: Found) -> dict:
    meta = r["message"].get("meta") or {}
    # (not the view line itself: it may quote tool traffic verbatim, and the model has the view anyway)
    held = mem.held_each([r["id"]], {r["id"]: r["message"]["size"]}, lines=False)[r["id"]]
    item = {"id": r["id"], "kind": r["kind"], "kinds": r["kinds"], "date": r["date"], "held": held}
    for key in ("tool", "exit_code", "entry"):
        if key in meta and isinstance(meta[key], (str, int)) and not isinstance(meta[key], bool):
            item[key] = budget.clip(meta[key], 200) if isinstance(meta[key], str) else meta[key]
    if r["sourceClass"] == "derived":
        item["sourceClass"] = "derived"
    if r["files"]:
        shown, rest = budget.listed([budget.clip(p, 300) for p in r["files"]], 1200)
        item["files"] = shown
        if rest:
            item["filesOmitted"] = rest
    body = found.snippets.get(r["id"])
    if body is not None:
        item["snippet"] = budget.clip(body, SNIPPET + 60)
    else:
        item["text"] = budget.clip(r["text"], TEXT_CLIP)
    item["chars"] = len(r["text"])
    return item


def _block(item: dict) -> str:
    head = f"[#{item['id']}] {item['kind']} {item['date']}"
    for key in ("tool", "exit_code", "entry", "sourceClass"):
        if item.get(key) is not None:
            head += f" {key}={item[key]}"
    held = item.get("held")
    if held:
        head += f" held={held['held']}" + (f" {held['label']}" if held["n"] > 1 else "")
    if item.get("files"):
        head += " files=" + ", ".join(item["files"]) + (f" (+{item['filesOmitted']})" if item.get("filesOmitted") else "")
    from .tree import flat, inert  # (here, as toolwork above)

    if "snippet" in item:  # (a message's words as the previous exchange shows them: ``tree.inert``)
        return f"{flat(head)}\nsnippet: {inert(item['snippet'])}"
    return f"{flat(head)}\n{inert(item['text'])}"


def _notes_text(notes: dict, request: Request) -> str:
    out = []
    for name, label in (("omitted", "omitted ids"), ("sameText", "same text as a result shown"),
                        ("hidden", "tool traffic hidden, add --include-tools"),
                        ("unlike", f"not {request.source_class}"), ("missing", "not found")):
        if name in notes:
            shown, rest = notes[name]
            out.append(f"({label}: {budget.dumps(shown)}{f' and {rest} more' if rest else ''})")
    return "\n".join(out)


def _notes_json(doc: dict, notes: dict, request: Request) -> dict:
    for name in ("omitted", "sameText", "hidden", "unlike", "missing"):
        if name in notes:
            shown, rest = notes[name]
            key = f"not{request.source_class.title()}" if name == "unlike" else name
            doc[f"{key}Ids"] = shown
            if rest:
                doc[f"{key}IdsNotListed"] = rest
    return doc


def _lists(found: Found, ids: list) -> Callable[[int], dict]:
    def lists(k: int) -> dict:
        out = {}
        if ids[k:] or found.beyond:
            out["omitted"] = ids[k:] + found.beyond
        if found.repeats:
            out["sameText"] = found.repeats
        if found.hidden:
            out["hidden"] = found.hidden
        if found.unlike:
            out["unlike"] = found.unlike
        if found.missing:
            out["missing"] = found.missing
        return out

    return lists


def render(mem, request: Request, found: Found) -> str:
    if request.raw and len(found.records) == 1 and found.action == "read" \
            and not (found.missing or found.hidden or found.unlike or found.beyond):  # (else those are said as a listing says them)
        return _raw_single(found.records[0], request)
    ids = [r["id"] for r in found.records]
    more = f"more: --page {found.next_page}" if found.next_page else None
    if request.raw:
        entries = [orjson.dumps(r["message"], option=orjson.OPT_INDENT_2).decode() for r in found.records]

        def render_raw(k: int, notes: dict) -> str:
            if request.as_json:
                doc = {"source": "pimem-recall", "action": found.action, "count": found.total, "entries": [r["message"] for r in found.records[:k]], "truncated": k < len(ids)}
                if found.tools_matching:
                    doc["toolsMatching"] = found.tools_matching
                return budget.dumps(_notes_json(doc, notes, request))
            head = f"pimem recall ({found.total} result{'s' if found.total != 1 else ''}" + ("" if k == len(ids) else f"; {k} included") + ")"
            parts = [head, *(f"[#{ids[n]}]\n{entries[n]}" for n in range(k))]
            if k < len(ids):
                parts.append("(read a long one alone: --ids ID --raw --offset N --raw-limit N)")
            return "\n\n".join(p for p in [*parts, _notes_text(notes, request), more or ""] if p)

        out = budget.pack(request.budget, len(ids), render_raw, _lists(found, ids))
        return out if out is not None else _nothing_fits(request, found)

    items: list[dict | None] = [None] * len(found.records)

    def item(n: int) -> dict:
        if items[n] is None:
            items[n] = _summary(mem, found.records[n], found)
        return items[n]

    def render_pretty(k: int, notes: dict) -> str:
        if request.as_json:
            doc = {"source": "pimem-recall", "action": found.action, "count": found.total, "page": request.page,
                   "results": [item(n) for n in range(k)], "truncated": k < len(ids)}
            if found.capped:
                doc["capped"] = True
            if found.tools_matching:
                doc["toolsMatching"] = found.tools_matching
            if found.next_page:
                doc["nextPage"] = found.next_page
            elif found.total and not ids and request.page > 1:  # (past the page they end on: which that is)
                doc["lastPage"] = last_page(found, request)
            return budget.dumps(_notes_json(doc, notes, request))
        total = f"{found.total}{'+' if found.capped else ''} result{'s' if found.total != 1 else ''}"
        capped = f": the ranker's best {POOL:,} looked at" if found.capped else ""
        head = f"pimem recall ({total}" + capped + ("" if k == len(ids) else f"; {k} included") + ")"
        return "\n\n".join(p for p in [head, *(_block(item(n)) for n in range(k)), _notes_text(notes, request), more or ""] if p)

    out = budget.pack(request.budget, len(ids), render_pretty, _lists(found, ids))
    return out if out is not None else _nothing_fits(request, found)


def last_page(found: Found, request: Request) -> int:
    return -(-found.total // request.limit)


def _nothing_fits(request: Request, found: Found) -> str:
    """A budget too small for even the bare listing: how many there were (``budget.counted``)."""
    return budget.counted(request.budget, request.as_json, found.total, {"source": "pimem-recall", "action": found.action},
                          "pimem recall", "result" if found.total == 1 else "results")


def _raw_single(r: dict, request: Request) -> str:
    """One entry raw: whole if it fits and no slice was asked for, else an envelope whose body (a slice
    of the entry's indented JSON; with ``--json`` its one-line JSON, as NDJSON is) is as long as fits;
    ``nextOffset`` continues it."""
    whole = orjson.dumps(r["message"], option=0 if request.as_json else orjson.OPT_INDENT_2).decode()
    if request.offset is None and request.raw_limit is None and len(whole) <= request.budget:
        return whole
    offset = min(request.offset or 0, len(whole))
    cap = min(len(whole) - offset, request.raw_limit or request.budget, request.budget)

    def envelope(n: int) -> str:
        doc = {"id": r["id"], "offset": offset, "limit": request.raw_limit, "totalChars": len(whole),
               "truncated": offset + n < len(whole), "body": whole[offset : offset + n]}
        if offset + n < len(whole):
            doc["nextOffset"] = offset + n
        return budget.dumps(doc)

    n = budget.largest(lambda k: len(envelope(k)) <= request.budget, cap)
    if n < 0:
        return budget.fit_text(request.budget, ['{"error":"budget too small for an envelope"}', "{}"])
    return envelope(n)


def parse_ids(values: Iterable[str], what: str = "--ids") -> list[str]:
    """``--ids 3,5 --ids entry:1c9e4b7a`` → ``["3", "5", "entry:1c9e4b7a"]``; ``BadInput`` for an ``--ids``
    that names none (``""``, ``,,``: read nothing, rather than list instead). ``what`` names the option (or
    the API's argument) in the errors."""
    out = []
    for value in values:
        parts = [part for part in value.split(",") if part.strip()]
        if not parts:
            raise BadInput(f"{what} {value!r} names no message: give numbers or entry ids, comma-separated")
        for part in parts:  # a number past any message's (2^63 - 1) is a usage error, as everywhere
            if part.strip().isascii() and part.strip().isdigit():
                numbers.index(part.strip(), f"{what} message number")
        out += parts
    return out
