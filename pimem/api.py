"""The API for consumers outside the agent: other agents, scripts and MCP clients.

Every function takes plain arguments and returns JSON-ready data. The readers never take the writer lock and
never write to a memory; the writers are ``memory_propose`` (a provisional memory, as the model would write
it), ``remember``, ``forget`` and ``compact`` (as their commands), and ``search`` brings ``index.sqlite``
(derived) up to date when it lags the log, as every reader does. Every message or hit carries ``held``: how
the view holds it today. Tool calls and tool results appear only with ``include_tools``. Outputs are bounded
so an MCP client's output limit is never hit by surprise.
"""

from __future__ import annotations

import os

from . import budget
from .errors import BadInput, as_error, library, shown
from .memory import Memory
from .message import TOOL_KINDS
from .numbers import MAX_COUNT, MAX_I

Home = str | os.PathLike | None

SINCE_LIMIT = 100  # messages per since call by default
MAX_LIMIT = 1000
MESSAGE_CHARS = 50_000  # characters of one message per call by default
SINCE_CHARS = 200_000  # characters of a since reply's JSON at most (then ``next`` goes on)
LAST_USER_CHARS = 500  # characters of the last thing the user said, in a listing
VIEW_LINES = 200  # the latest view lines by default
LIST_LIMIT = 100  # memories per MCP list_memories call by default


def _checked(func):
    """``func`` refusing an argument of the wrong type with ``BadInput`` naming it (``message: i must be int,
    not str``) before anything is read, as it refuses one out of bounds: a caller's mistake is a
    ``PimemError`` like any other, never a ``TypeError`` from deep inside. Text must be UTF-8. What the system
    refuses (a file where a directory should be) is a ``PimemError`` too (``errors.library``)."""
    import functools
    import inspect
    import typing

    from . import naming

    signature, hints = inspect.signature(func), typing.get_type_hints(func)

    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            given = signature.bind(*args, **kwargs).arguments
        except TypeError as exc:
            raise BadInput(f"{func.__name__}: {exc}") from None
        for name, value in given.items():
            if not _fits(value, hints[name]):
                raise BadInput(f"{func.__name__}: {name} must be {_named(hints[name])}, not {type(value).__name__}")
            for text in value if isinstance(value, list) else [value]:
                if isinstance(text, str) and not naming.is_utf8(text):
                    raise BadInput(f"{func.__name__}: {name} is not valid UTF-8 (it holds a lone surrogate)")
        return run(*args, **kwargs)

    run = library(func)  # (what the system refused: a PimemError too)
    return call


def _fits(value, hint) -> bool:
    import types
    import typing

    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_fits(value, option) for option in typing.get_args(hint))
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    if hint is type(None):
        return value is None
    if hint in (int, float):
        return isinstance(value, hint) and not isinstance(value, bool)
    return isinstance(value, hint)


def _named(hint) -> str:
    import typing

    if typing.get_origin(hint) is list:
        return f"a list of {_named(typing.get_args(hint)[0])}"
    args = typing.get_args(hint)
    if args:
        return " or ".join(_named(a) for a in args)
    return {type(None): "None", os.PathLike: "a path"}.get(hint, getattr(hint, "__name__", str(hint)))


def _budget(budget: int | None) -> int:
    """A reply's budget in characters: at least 2 (room for ``{}``, the reply when nothing fits)."""
    from .budget import DEFAULT

    return DEFAULT if budget is None else _bounded(budget, "budget", MAX_COUNT, 2)


def _session(session: str | None) -> None:
    """An empty session is refused, as the CLI's ``--session ''``: it is no caller's session, nor none given."""
    if session is not None and not session.strip():
        raise BadInput(f"session {session!r}: give the caller's session id, not an empty one")


def _bounded(value: int, name: str, top: int = MAX_LIMIT, bottom: int = 1) -> int:
    if type(value) is not int or not bottom <= value <= top:
        raise BadInput(f"{name} must be a whole number from {bottom} to {top}")
    return value


def _hurried(name: str, home: Home, notes: list[str]) -> Memory:
    """Memory ``name`` for a call a client times out: its tool-text mask does not wait for a long catch-up of
    the search index (``Memory.hurried``); ``notes`` takes why lines are hidden meanwhile."""
    mem = Memory.open(name, home)
    mem.hurried = lambda note: note in notes or notes.append(note)
    return mem


def _noted(out: dict, notes: list[str]) -> dict:
    return {**out, "notes": notes} if notes else out


class _Held:
    """``held`` for messages of one memory, its view line (tool traffic taken out unless asked for) worked out
    once per call and kept in ``lines`` by label."""

    def __init__(self, mem: Memory, include_tools: bool):
        self.mem, self.include_tools = mem, include_tools
        self.lines: dict[str, str] = {}

    def __call__(self, msg: dict, inline: bool = True) -> dict:
        """``msg`` with its ``held``; ``inline``: with the line in it (else the caller gives ``lines`` once)."""
        i, sizes = msg["i"], {msg["i"]: msg["size"]}
        held = self.mem.held_each([i], sizes, lines=False)[i]
        if held is not None:
            if held["label"] not in self.lines:
                self.lines[held["label"]] = self.mem.held_each([i], sizes, include_tools=self.include_tools)[i]["line"]
            if inline:
                held["line"] = self.lines[held["label"]]
        return {**msg, "held": held}


@_checked
def list_memories(home: Home = None, offset: int = 0, limit: int | None = None) -> list[dict]:
    """Every memory (from ``offset``, at most ``limit`` of them: default all): name, message count, first and
    last dates, the last thing the user said; for one that cannot be read (its log damaged), its name and the
    ``error``."""
    return list_memories_page(home, offset, limit)["memories"]


@_checked
def list_memories_page(home: Home = None, offset: int = 0, limit: int | None = None) -> dict:
    """``list_memories`` as a page: ``memories``, the ``total`` count and ``next_offset`` (None at the end).
    Only the memories of the page are read."""
    _bounded(offset, "offset", MAX_COUNT, 0)
    if limit is not None:
        _bounded(limit, "limit", 200)
    found: list = []  # each memory, or the row of one refused, in the order they are listed
    mems = Memory.all(home, refused=lambda mem, exc: found.append({"name": mem.name, "error": str(exc)}), claims=True)
    found += mems
    page = found[offset:] if limit is None else found[offset : offset + limit]
    out = []
    for mem in page:
        if isinstance(mem, dict):
            out.append(mem)
            continue
        with mem:
            try:
                row = mem.summary()
                if row["last_user"] is not None:
                    row["last_user"] = budget.clip(row["last_user"], LAST_USER_CHARS)
                out.append(row)
            except Exception as exc:
                if (error := as_error(exc)) is None:
                    raise
                out.append({"name": mem.name, "error": str(error)})
    end = offset + len(page)
    return {"memories": out, "total": len(found), "next_offset": end if end < len(found) else None}


@_checked
def message(name: str, i: int, include_tools: bool = False, offset: int = 0, max_chars: int = MESSAGE_CHARS, home: Home = None) -> dict:
    """Message ``i`` whole, or a window of its text (``offset``, ``max_chars``) with ``next_offset`` when more
    remains."""
    _bounded(i, "i", MAX_I, 0)
    _bounded(max_chars, "max_chars", 1_000_000)
    notes: list[str] = []
    with _hurried(name, home, notes) as mem:
        msg = mem.message(i)
        if msg["kind"] in TOOL_KINDS and not include_tools:
            raise BadInput(f"message {i} is a {'tool call' if msg['kind'] == 'tool' else 'tool result'}; "
                           "ask again with include_tools to show it")
        text = msg["text"]
        if type(offset) is not int or not 0 <= offset <= len(text):
            raise BadInput(f"offset must be a whole number from 0 to {len(text)}")
        out = _Held(mem, include_tools)({**msg, "text": text[offset : offset + max_chars]})
    if offset or offset + max_chars < len(text):
        out.update(offset=offset, chars=len(text), next_offset=offset + max_chars if offset + max_chars < len(text) else None)
    return _noted(out, notes)


@_checked
def since(name: str, start: int | None = None, when: str | None = None, limit: int = SINCE_LIMIT, include_tools: bool = False,
          home: Home = None) -> dict:
    """Up to ``limit`` messages from message ``start`` (default 0) or from the date/time ``when`` (one or the
    other, as ``pimem since`` takes ``#I`` or a date), and ``next``: the ``start`` to ask for next (None at the end).
    Each message's ``held`` names the view line holding it by ``label``, and ``lines`` gives each of those lines
    once (a line covers many messages). The reply's compact JSON is at most ``SINCE_CHARS`` characters: a
    message's text past ``MESSAGE_CHARS`` is cut, with ``chars`` and ``next_offset`` for ``message`` to read on
    (cut shorter when one message alone would pass the bound), and the call ends early, before the message that
    would pass the bound (``next`` names it)."""
    from . import when as whens
    from .options import apart  # (the CLI's own check, so that a pair refused there is refused here: one rule)

    _bounded(limit, "limit")
    # (one was dropped: a caller paging on with both got one page again; 0 is a start given too)
    apart(("start", start), ("when", when), why="next is a start, to page on with alone")
    if start is not None:
        _bounded(start, "start", MAX_I, 0)
    if isinstance(when, str) and when.strip().startswith("#"):  # (pimem since's WHEN and search's since take #I)
        raise BadInput(f"when is a date or time; a message number ({when.strip()}) goes in start")
    notes: list[str] = []
    with _hurried(name, home, notes) as mem:
        if when is not None:
            first = mem.first_at(whens.parse_when(when))
            start = mem.count() if first is None else first
        elif start is None:
            start = 0
        out, lines, position, held = [], {}, start, _Held(mem, include_tools)
        chars = len(budget.dumps({"messages": [], "lines": {}, "next": MAX_I}))  # (the reply around the messages)
        for msg in mem.messages(start):
            if len(out) == limit:
                break
            if msg["kind"] in TOOL_KINDS and not include_tools:
                position = msg["i"] + 1
                continue
            if len(msg["text"]) > MESSAGE_CHARS:
                msg = _cut(msg, MESSAGE_CHARS)
            msg = held(msg, inline=False)
            label = (msg["held"] or {}).get("label")
            line = {label: held.lines[label]} if label is not None and label not in lines else {}
            cost = len(budget.dumps(msg)) + 1 + (len(budget.dumps(line)) if line else 0)
            if chars + cost > SINCE_CHARS:
                if out:
                    break
                msg, cost = _fitted(msg, SINCE_CHARS - chars - (len(budget.dumps(line)) if line else 0))
            position, chars = msg["i"] + 1, chars + cost
            out.append(msg)
            lines.update(line)
        return _noted({"messages": out, "lines": lines, "next": position if position < mem.count() else None}, notes)


def _cut(msg: dict, n: int) -> dict:
    """``msg`` with the first ``n`` characters of its text, ``chars`` and ``next_offset`` saying the rest."""
    return {**msg, "text": msg["text"][:n], "chars": msg.get("chars", len(msg["text"])), "next_offset": n}


def _fitted(msg: dict, room: int) -> tuple[dict, int]:
    """One message whose JSON alone passes ``room``: its text cut to what fits (its JSON costs more than its
    characters where it is escaped), and its cost."""
    cost = lambda n: len(budget.dumps(_cut(msg, n))) + 1  # noqa: E731
    n = max(0, budget.largest(lambda n: cost(n) <= room, len(msg["text"])))
    return _cut(msg, n), cost(n)


@_checked
def search(query: str, names: list[str] | None = None, rank: bool = False, any_term: bool = False,
           kinds: list[str] | None = None, include_tools: bool = False, since: str | None = None,
           until: str | None = None, before: int | None = None, limit: int = 20, offset: int = 0,
           home: Home = None) -> dict:
    """Where something was said: hits in the original messages of ``names`` (default: every memory), newest
    first (``rank``: best first), each with ``held`` and the ``label`` of the view line holding it, as ``pimem
    search``: ``since`` and ``until`` bound the messages (``#I`` or a date/time), ``before`` pages (only
    messages numbered below it), ``offset`` skips the first hits (the next page of ranked hits); ``unread``
    names the memories that could not be read (a damaged log), the others searched. Searching may catch up
    ``index.sqlite``, the derived index, when it lags the log, as every reader does; nothing else is written.
    A long catch-up is not waited for (a client times a call out): an index that lacks over ``index.LAG_BYTES``
    of the log, or that another process is catching up, is searched as it is, and ``notes`` says so."""
    from . import search as searching
    from .message import kind_of
    from .options import apart

    apart(("rank", rank), ("any_term", any_term), why="rank finds messages holding any of the words already")
    _bounded(limit, "limit", 200)
    _bounded(offset, "offset", MAX_COUNT, 0)
    if before is not None:
        _bounded(before, "before", MAX_I, 0)
    bounds = searching.bounds(since, until, before, ("since", "until"))  # ("" is a bad date, as --since '')
    unread: list[dict] = []

    def note(mem, exc) -> None:
        unread.append({"memory": mem.name, "error": str(exc)})

    notes: list[str] = []
    mems = Memory.named(names, home) if names else Memory.all(home, refused=note)
    for mem in mems:
        mem.hurried = lambda text: text in notes or notes.append(text)
    try:
        hits = searching.search(mems, query, any_term=any_term, rank=rank,
                                kinds={kind_of(k) for k in kinds} if kinds else None, include_tools=include_tools,
                                **bounds, limit=limit, offset=offset, unread=note)
    finally:  # (the index keeps the log files it read open: a long-lived server must not collect them)
        for mem in mems:
            mem.close()
    if rank and not hits:
        from .ranker import query_words

        if not query_words(query):
            notes.append("the query holds no word rank ranks (stop words and symbols are not): search for it without rank")
    for hit in hits:  # held in the shape since and message give it
        label = hit.pop("label", None)
        hit["held"] = {"held": hit["held"], "label": label, "n": int(label.split("+")[1])} if label else None
    return {"hits": hits, **({"unread": unread} if unread else {}), **({"notes": notes} if notes else {})}


@_checked
def view(name: str, lines: int = VIEW_LINES, include_tools: bool = False, home: Home = None) -> dict:
    """The latest ``lines`` lines of the view the model reads each turn (``id+n|text``), with the view's
    totals; ``first`` is the position of the first line returned. Tool calls and results in the lines are
    replaced by a marker unless ``include_tools``. ``message``, ``since``, ``view`` and ``zoom`` do not wait for
    a long catch-up of the search index, which the tool-text mask asks about lines over long spans: such a line
    is hidden whole meanwhile, and ``notes`` says why (``Memory.hurried``; not with ``include_tools``, which
    shows no line hidden)."""
    from .view import render_line

    _bounded(lines, "lines", 10_000)
    notes: list[str] = []
    with _hurried(name, home, [] if include_tools else notes) as mem:
        v = mem.views.current()
        rows = mem.views.shown(v, include_tools, save=False)  # (the MCP server writes nothing)
    first = max(0, len(rows) - lines)
    return _noted({
        "lines": [render_line(l, i, text) for l, i, text, _ in rows[first:]],
        "first": first,
        "total_lines": len(rows),
        "bytes": sum(cost for *_, cost in rows),
        "messages": v.T,
    }, notes)


@_checked
def zoom(name: str, node: str, include_tools: bool = False, home: Home = None) -> dict:
    """Expand a node ``id+n``: for n=1 the original message (with ``held``; a text past ``MESSAGE_CHARS`` cut
    as ``since`` cuts it, with ``chars`` and ``next_offset`` for ``message`` to read on), else its two halves
    as lines (``text`` null while a half is not summarised yet)."""
    notes: list[str] = []
    with _hurried(name, home, notes) as mem:
        found = mem.zoom(node, include_tools=include_tools)
        if "message" in found:
            msg = found["message"]
            if len(msg["text"]) > MESSAGE_CHARS:
                msg = _cut(msg, MESSAGE_CHARS)
            found["message"] = _Held(mem, include_tools)(msg)
    return _noted(found, notes)


@_checked
def recall(name: str, query: str = "", ids: list[int | str] | None = None, file: str | None = None, kind: str | None = None,
           page: int | None = None, limit: int = 8, include_tools: bool = False, budget: int | None = None, home: Home = None) -> dict:
    """pimem's bounded recall (``pimem recall --json``): search, list or read messages, as one JSON document
    never longer than ``budget`` characters, each result with ``held``. ``ids`` goes with none of ``query``,
    ``file``, ``kind`` and ``page`` (default 1), as ``--ids`` with none of theirs."""
    import orjson

    from . import naming, recall as recalls
    from .options import apart

    apart(("ids", ids), ("file", file), ("kind", kind), ("page", page),
          why="ids names the messages to read; file, kind and page narrow a search or a listing")
    apart(("ids", ids), ("query", query), why="ids names the messages to read; query searches")
    _bounded(limit, "limit", 30)  # (checked here to name the arguments, where the request names the options)
    if file == "":  # (every path contains it: not the search file asks for, as the CLI's --file '')
        raise BadInput("empty file: give a path or part of one")
    if page is not None:
        _bounded(page, "page", MAX_COUNT)
    for i in ids or []:  # (each names one message or more: "" is no message, not a listing)
        if type(i) is int and not 0 <= i <= MAX_I or isinstance(i, str) and not any(p.strip() for p in i.split(",")):
            raise BadInput(f"ids {shown(i)} names no message: give message numbers (0 to {MAX_I}) or entry ids")
    query = naming.joined([query] if query else None, "empty query: give words to search for, or none to list the newest")
    request = recalls.Request(query=query, ids=recalls.parse_ids([str(i) for i in ids or []], "ids"), file=file, kind=kind,
                              page=page if page is not None else 1, limit=limit, include_tools=include_tools, budget=_budget(budget), as_json=True)
    from dataclasses import replace

    from .budget import dumps

    notes: list[str] = []
    with _hurried(name, home, notes) as mem:
        found = orjson.loads(recalls.recall(mem, request))
        if not notes:
            return found
        more = len(dumps(_noted(found, notes))) - len(dumps(found))  # (within the budget with them, if it holds them)
        if request.budget - more < len(dumps(found)):
            found = orjson.loads(recalls.recall(mem, replace(request, budget=max(2, request.budget - more))))
        return _noted(found, notes) if len(dumps(_noted(found, notes))) <= request.budget else found


@_checked
def memory_search(name: str, query: str = "", status: str | None = None, kind: str | None = None, offset: int = 0,
                  limit: int = 30, session: str | None = None, budget: int | None = None, home: Home = None) -> dict:
    """The authoritative memories (``pimem memories --json``): live ones (pinned, active, provisional) or
    those of ``status``, ranked by ``query`` when given, within ``budget`` characters."""
    return memories(name, query, status, kind, offset, limit, session, False, budget, home)


@_checked
def memories(name: str, query: str = "", status: str | None = None, kind: str | None = None, offset: int = 0,
             limit: int = 30, session: str | None = None, include_tools: bool = False, budget: int | None = None,
             home: Home = None) -> dict:
    """``memory_search`` as ``pimem memories --json`` lists them: with ``include_tools``, the memories the
    compaction rules derived from tool traffic too."""
    import orjson

    from . import memories as records, naming

    _bounded(limit, "limit", 100)
    _bounded(offset, "offset", MAX_I, 0)
    _session(session)
    query = naming.joined([query] if query else None, "empty query: give words to rank by, or none to list every memory")
    damaged: list[str] = []
    with Memory.open(name, home) as mem:
        found = records.find(records.records(mem, session, include_tools, on_damage=damaged.append), query, status, kind)
    listing = orjson.loads(records.listing(found, offset, limit, _budget(budget), True))
    return {**listing, "damaged": damaged[0]} if damaged else listing


@_checked
def remember(name: str, text: str | None = None, pin: bool = False, kind: str | None = None, priority: str | None = None,
             scope: str | None = None, supersede: str | None = None, session: str | None = None,
             timeout: int | float | None = None, home: Home = None) -> dict:
    """Remember ``text`` as the user's word (``pimem remember``): an active memory, pinned with ``pin``;
    ``supersede`` replaces a live one (with ``text``, or its own text when ``text`` is None). Creates the memory
    ``name`` if need be (not to supersede), and waits at most ``timeout`` seconds for the writer lock. Returns the
    record."""
    from . import memories as records, naming

    naming.memory_id(supersede, "supersede")  # ("" names no memory: refused, not one not found)
    _session(session)
    if supersede is None and (text is None or records.says_nothing(text)):  # (what remember says names the CLI's arguments)
        raise BadInput("remember: text is blank: give the memory's text")
    if scope == "session" and session is None:
        raise BadInput("remember: scope session needs session: a session memory is visible only to its session")
    with Memory.open(name, home) if supersede is not None else Memory.at(name, home) as mem:
        return records.remember(mem, text, pin=pin, kind=kind, priority=priority, scope=scope, supersede=supersede,
                                session=session, timeout=timeout)


@_checked
def forget(name: str, record_id: str, session: str | None = None, timeout: int | float | None = None, home: Home = None) -> dict:
    """Forget the memory ``record_id`` (``pimem forget``): it is resolved, and leaves the default listing.
    Returns the record."""
    from . import memories as records, naming

    naming.memory_id(record_id, "record_id")
    _session(session)
    with Memory.open(name, home) as mem:
        return records.forget(mem, record_id, session=session, timeout=timeout)


@_checked
def compact(name: str, keep: int, dry_run: bool = False, timeout: int | float | None = None, home: Home = None) -> dict:
    """Compact memory ``name`` keeping at least ``keep`` bytes of recent messages (``pimem compact --json``):
    the checkpoint and its details; ``dry_run`` writes nothing."""
    from . import compaction

    _bounded(keep, "keep", MAX_I, 0)
    with Memory.open(name, home) as mem:
        return compaction.compact(mem, keep, dry_run, timeout, option="keep")


@_checked
def memory_propose(name: str, text: str | None = None, kind: str | None = None, priority: str | None = None,
                   supersede: str | None = None, session: str | None = None, timeout: int | float | None = None,
                   home: Home = None) -> dict:
    """Propose a memory as the model would: it is written provisional, and only the user makes it active
    (``pimem remember --supersede``) or drops it (``pimem forget``). ``supersede`` replaces one of the model's
    own proposals (with ``text``, or its own text when ``text`` is None; a blank text is refused, as
    ``remember``'s). Waits at most ``timeout`` seconds for the writer lock."""
    from . import memories, naming

    naming.memory_id(supersede, "supersede")  # ("" names no memory: refused, not one not found)
    _session(session)
    if supersede is None and (text is None or memories.says_nothing(text)):  # (what remember says names the CLI's arguments)
        raise BadInput("memory_propose: text is blank: give the memory's text")
    with Memory.open(name, home) as mem:
        return memories.remember(mem, text, kind=kind, priority=priority, supersede=supersede, session=session,
                                 propose=True, timeout=timeout)
