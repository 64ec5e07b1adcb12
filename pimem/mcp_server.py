"""``pimem mcp``: the API (``pimem.api``: reads, and proposing a provisional memory) as MCP tools over
stdio, on the official SDK.

Imported only by the ``mcp`` command, so nothing else pays for the SDK (or pydantic) at start-up.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Callable

try:  # (arguments as the API takes them: no "0" for 0, no true for 1)
    from pydantic import StrictBool, StrictInt, StrictStr
except ImportError:  # (no SDK: ``_sdk`` says so)
    StrictBool, StrictInt, StrictStr = bool, int, str

from . import api, budget
from .errors import BadInput, PimemError, translate

PROPOSE_TIMEOUT = 10.0  # seconds memory_propose waits for the writer lock at most (a client waits for a call ~60 s)
INSTRUCTIONS = """pimem keeps every message of long-running chats and agent sessions verbatim, by memory name.
Use list_memories to see the memories, search to find where something was said (original messages, newest
first), since and message to read originals, view for the one-line-per-span view the agent reads each turn,
and zoom to open a view line (id+n) into its two halves or, for n=1, the original. recall searches, lists or
reads messages within a character budget; memory_search finds what the user told the agent to remember, and
memory_propose suggests a memory (kept provisional until the user confirms it). Every message and hit says
how the view holds it (held). Tool calls and results are private: ask with include_tools only when needed."""


def _sdk():
    """The SDK's server class, its error for anticipated tool failures, and its result and text types (mcp 2.x,
    as pinned)."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
        from mcp.types import CallToolResult, TextContent
    except ImportError:
        raise BadInput(f"pimem mcp needs the MCP SDK 2.x, pimem's mcp extra: {_install_hint('mcp')}") from None
    return MCPServer, ToolError, CallToolResult, TextContent


def _install_hint(extra: str) -> str:
    """How to add ``extra`` to the Python that runs pimem. pimem is installed from a checkout, not from PyPI
    (where "pimem" is another project): when this source is the checkout (editable, or run from it) the hint
    names it; else it says to run pip in the checkout."""
    import shlex
    import sys
    from pathlib import Path

    pip = f"{shlex.quote(sys.executable)} -m pip install"
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file():
        return f"{pip} -e {shlex.quote(f'{checkout}[{extra}]')}"
    return f"in pimem's checkout, {pip} {shlex.quote(f'.[{extra}]')}"


def _arguments_refused(exc) -> str:
    """A pydantic ``ValidationError`` of a call's arguments as one line: each field and what it must be."""
    return "bad arguments: " + "; ".join(
        f"{'.'.join(str(part) for part in err['loc']) or 'arguments'}: {err['msg']}" for err in exc.errors())


class _Pending:
    """The requests read and not answered yet, by their id as the SDK knows it (a stand-in's too): when stdin
    ends, the SDK stops at once and cuts off the calls still running, so the end of the client's lines is held
    back until each is answered (a client that writes its requests and hangs up, ``printf … | pimem mcp``, gets
    every answer; a ``memory_propose`` stored is said). A cancelled request is answered by no one."""

    DRAIN = 600  # seconds at most: a request the SDK never answers must not keep the server for ever
    # seconds, once a stopping signal came, an answer may wait for the client to take it (then the server ends,
    # saying how many were lost): a process manager stopping the server expects it gone at once, and the SDK's
    # client SIGKILLs it two seconds after SIGTERM; a client that reads takes an answer well within it
    STOPPING = 1.5

    def __init__(self):
        self.ids: set[str] = set()

    @staticmethod
    def _message(text: str) -> dict:
        import json

        try:
            message = json.loads(text)
        except ValueError:
            return {}
        return message if isinstance(message, dict) else {}

    def read(self, line: str) -> None:
        import json

        message = self._message(line)
        if "method" in message and "id" in message:
            self.ids.add(json.dumps(message["id"]))
        elif message.get("method") == "notifications/cancelled" and isinstance(message.get("params"), dict):
            self.ids.discard(json.dumps(message["params"].get("requestId")))

    def answered(self, text: str) -> None:
        import json

        message = self._message(text)
        if "id" in message and ("result" in message or "error" in message):
            self.ids.discard(json.dumps(message["id"]))

    async def drained(self) -> None:
        import anyio

        with anyio.move_on_after(self.DRAIN):
            while self.ids:
                await anyio.sleep(0.02)


class _Lines:
    """The client's lines as the SDK's stdio transport reads them, each one it could not read mended or answered
    here first (it would drop it, leaving the client waiting for an answer, see ``_read``); their end comes once
    the requests read are answered (``_Pending``). Each is read in a daemon thread of its own (``_readline``)."""

    def __init__(self, stdin, ids: dict[str, str], pending: _Pending):
        self.stdin, self.ids, self.write = stdin, ids, None  # (write: set once serving)
        self.pending = pending
        self.reading, self.ended = None, False  # (the read waited for; ``end``)

    def end(self) -> None:
        """No more lines are read, as if stdin had ended (a signal stopping the server): those read are answered
        first."""
        self.ended = True
        if self.reading is not None and not self.reading.done():
            self.reading.set_result("")

    def __aiter__(self):
        return self

    async def __anext__(self):
        from mcp.shared.message import SessionMessage

        while True:
            read = await self._readline()
            if not read:
                await self.pending.drained()
                raise StopAsyncIteration
            line, refusal = _read(read, self.ids)
            if line is not None:
                self.pending.read(line)
                return line
            if refusal is not None:
                await self.write.send(SessionMessage(refusal))

    async def _readline(self) -> str:
        """The client's next line ('' once stdin ends), read in a daemon thread: in one the interpreter waits for
        as it exits (anyio's, ``anyio.wrap_file``), a server a signal stopped said so and then ran on, blocked in
        that read, until the client closed stdin (a second signal ignored). The server reads nothing it was not
        asked for: a thread per line."""
        if self.ended:
            return ""
        self.reading = _in_thread(self.stdin.readline, "pimem-mcp-stdin")
        return await self.reading


class _Answers:
    """The SDK's answers written to the client, each to a request ``_read`` gave a stand-in id with the id the
    request held put back, its escapes as sent. Once the client stops reading, what is left to answer goes
    nowhere and the calls are still served until it hangs up (the SDK's writer would stop the server at the first
    answer lost, with a traceback once stdin closed). What the pipe has no room for is written in a daemon thread
    (``_sent``): a client that keeps its end of stdout open and reads no more blocks that write for ever, and
    the server, stopped by a signal, must still end."""

    def __init__(self, stdout, ids: dict[str, str], pending: _Pending):
        self.fd, self.ids, self.pending, self.unflushed, self.unsent = stdout.fileno(), ids, pending, [], []
        self.blocked: float | None = None  # since when an answer is being written (the client has not taken it)

    async def write(self, text: str) -> None:
        self.unflushed.append(text)  # (answered once flushed: the server may end as soon as the last one is)
        for stand_in in [stand_in for stand_in in self.ids if stand_in in text]:
            text = text.replace(f'"{stand_in}"', self.ids.pop(stand_in), 1)
        self.unsent.append(text.encode("utf-8", "replace"))

    async def flush(self) -> None:
        data = b"".join(self.unsent)
        self.unsent.clear()
        import anyio

        self.blocked = anyio.current_time()
        try:
            await _sent(self.fd, data)
        except BrokenPipeError:
            self._gone()
        self.blocked = None
        for text in self.unflushed:
            self.pending.answered(text)
        self.unflushed.clear()

    def _gone(self) -> None:
        """The client's end of stdout is /dev/null from now on, as a closed stdout is to a command."""
        import os

        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self.fd)
        os.close(null)


def _in_thread(work: Callable[[], Any], name: str):
    """A future of ``work()``, run in a daemon thread: a task waiting on it can be cancelled, and the process can
    end, while the work waits for a client that never comes (a line it never sends, an answer it never reads)."""
    import asyncio
    import threading

    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def settle(result, exc: BaseException | None) -> None:
        if done.done():  # (cancelled meanwhile: the stopping server waits no more)
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(result)

    def run() -> None:
        try:
            result, exc = work(), None
        except Exception as error:  # (handed to the waiting task, as the work's own failure)
            result, exc = None, error
        with contextlib.suppress(RuntimeError):  # (the server's loop closed meanwhile: nobody to tell)
            loop.call_soon_threadsafe(settle, result, exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return done


async def _sent(fd: int, data: bytes) -> None:
    """``data`` written whole to ``fd``: at once while the pipe has room (``PIPE_BUF`` bytes a write, which
    never waits when ``poll`` finds it writable), the rest in a daemon thread (``_in_thread``)."""
    import os
    import select

    view, room = memoryview(data), select.poll()
    room.register(fd, select.POLLOUT)
    while view and room.poll(0):  # (a thread an answer: 15-25% slower over 500 calls)
        view = view[os.write(fd, view[:select.PIPE_BUF]):]

    def rest() -> None:
        left = view
        while left:
            left = left[os.write(fd, left):]

    if view:
        await _in_thread(rest, "pimem-mcp-stdout")


def _read(line: str, ids: dict[str, str]) -> tuple:
    """``(line, None)`` for a line the SDK reads as it should, ``(None, None)`` for a blank line (no request, so
    nothing to answer), else ``(None, the JSON-RPC error that answers it)``, with id null: -32700 for a line that
    is not JSON, -32600 for JSON that is no message or a request whose id is not a string or an integer (the
    SDK reads that one as a notification, and answers nothing).

    A line holding a lone surrogate escape (``"\\ud800"``: valid JSON, as JavaScript writes a string cut inside
    a surrogate pair), which the SDK refuses, is read with U+FFFD in its place, as pimem reads such JSON
    everywhere (``pimem.decoder``); if the request's id holds one, or is an integer beyond 64 bits (which that
    reads as a float), the SDK is given a stand-in id, and ``ids`` keeps the id as sent (``_Answers`` puts it back: the client knows its answer by it).
    A cancellation naming such an id cancels the request of its stand-in; naming none, it is dropped."""
    import json
    import uuid

    import mcp_types as types
    import orjson
    import pydantic_core
    from pydantic import ValidationError

    from . import decoder

    def refused(code: int, message: str):
        return None, types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(code=code, message=message))

    value = None
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as exc:
        error = exc.errors()[0]
        if error["type"] != "json_invalid":  # (JSON, but no message)
            return refused(types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")
        if not line.strip():
            return None, None
        # (RecursionError, or orjson's TypeError: nested too deep; AttributeError: no lone surrogate (kept is None),
        # the line refused as nested too deep for the SDK)
        try:
            value, kept = decoder.loads_keeping(line)

            def as_sent(find: Callable[[dict], Any]) -> str | None:
                """The id ``find`` reads from the message, as the client wrote it, when it is not as read here
                (it holds a lone surrogate, or is an integer beyond 64 bits, which is read as a float)."""
                here = find(value)
                if isinstance(here, str):
                    return decoder.canonical(find(kept)).decode() if find(kept) != here else None
                if isinstance(here, float):
                    written = find(json.loads(line))
                    return str(written) if type(written) is int else None
                return None

            sent = as_sent(lambda message: message.get("id")) if isinstance(value, dict) and "method" in value else None
            if sent is not None:
                value["id"] = stand_in = f"pimem-{uuid.uuid4().hex}"
                ids[stand_in] = sent
            if isinstance(value, dict) and value.get("method") == "notifications/cancelled" and isinstance(value.get("params"), dict):
                # a request of such an id was given a stand-in: cancelled by it; no other request has that id
                # (U+FFFD in place of its lone surrogate would name another one)
                cancelled = as_sent(lambda message: message["params"].get("requestId"))
                if cancelled is not None:
                    stand_ins = [stand_in for stand_in, held in ids.items() if held == cancelled]
                    if not stand_ins:
                        return None, None
                    value["params"]["requestId"] = stand_ins[0]
            line = orjson.dumps(value).decode()
        except (ValueError, TypeError, AttributeError, RecursionError):
            return refused(types.PARSE_ERROR, f"Parse error: {error['msg']}")
        try:
            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValidationError:
            return refused(types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")
    # (read as pydantic read it, NaN, Infinity and 1e400 too, which orjson refuses)
    if isinstance(message, types.JSONRPCNotification) and "id" in (pydantic_core.from_json(line) if value is None else value):
        return refused(types.INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    return line, None


@contextlib.contextmanager
def _wired():
    """The client's end of stdin and stdout, taken from fds 0 and 1, which read ``/dev/null`` and write to stderr
    meanwhile, as the SDK's own stdio transport arranges it: nothing else the process runs reads or writes
    the client's messages. Given back after (a Python user's process may go on once the server ends). Both are
    read and written blocking meanwhile: a client may hand over pipes set non-blocking, of which a read finding
    nothing yet would be taken for the client's hang-up, and a write the pipe cannot take whole would fail."""
    import fcntl
    import io
    import os
    import sys

    ends = [os.fdopen(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3), mode) for fd, mode in ((0, "rb"), (1, "wb"))]
    blocking = [_blocking(end.fileno(), True) for end in ends]
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        yield io.TextIOWrapper(ends[0], encoding="utf-8", errors="replace"), ends[1]
    finally:
        with contextlib.suppress(AttributeError, OSError, ValueError):  # (printed meanwhile: to stderr, as it was)
            sys.stdout.flush()
        for fd, end in enumerate(ends):
            _blocking(end.fileno(), blocking[fd])
            os.dup2(end.fileno(), fd)


def _blocking(fd: int, blocking: bool | None) -> bool | None:
    """Set ``fd`` blocking or not (``None``: as it is); what it was (``None``: unknown, as for a closed one)."""
    import os

    try:
        was = os.get_blocking(fd)
        if blocking is not None and blocking != was:
            os.set_blocking(fd, blocking)
    except OSError:
        return None
    return was


def _unknown(key: str, tool: str, takes: list[str]) -> str:
    """What to say of an argument ``tool`` does not take: the one it likely meant, else those it takes."""
    import difflib

    meant = difflib.get_close_matches(key, takes, n=1, cutoff=0.75)
    return f"{tool} takes no such argument ({f'did you mean {meant[0]}?' if meant else 'it takes ' + (', '.join(takes) or 'none')})"


def build(home: api.Home = None):
    """The server with every tool, reading the memories under ``home``."""
    server_class, tool_error, call_result, text_content = _sdk()
    from pydantic import ValidationError

    takes: dict[str, list[str]] = {}  # each tool's arguments

    class Server(server_class):
        async def list_tools(self):
            """The tools, each schema saying that it takes no other arguments (as a call refuses them)."""
            return [tool.model_copy(update={"input_schema": {**tool.input_schema, "additionalProperties": False}})
                    for tool in await super().list_tools()]

        async def call_tool(self, name, arguments, context=None):
            """Arguments the schema refuses come back in one line, not pydantic's report of many; so does an
            argument the tool does not take (the SDK ignores it: a misspelt ``names`` searched every memory)."""
            if name in takes and (unknown := [key for key in arguments or {} if key not in takes[name]]):
                raise tool_error(f"Error executing tool {name}: bad arguments: " + "; ".join(
                    f"{key}: {_unknown(key, name, takes[name])}" for key in unknown))
            try:
                return await super().call_tool(name, arguments, context)
            except tool_error as exc:
                if isinstance(exc.__cause__, ValidationError):
                    raise tool_error(f"Error executing tool {name}: {_arguments_refused(exc.__cause__)}") from exc.__cause__
                raise

        async def run_stdio_async(self):
            """As the SDK serves stdio, but reading and writing the client's lines here (``_Lines``,
            ``_Answers``): the SDK drops a line it cannot read. (The low-level server is the SDK's private
            attribute, as its own clients reach it: there is no other way in.)"""
            import anyio
            from mcp.server.stdio import stdio_server

            with _wired() as (stdin, stdout), anyio.CancelScope() as scope:
                ids: dict[str, str] = {}  # a stand-in request id: the id as the client wrote it
                pending = _Pending()
                lines = _Lines(stdin, ids, pending)
                answers = _Answers(stdout, ids, pending)
                with _signals_stop(self, lines, answers, scope):
                    async with stdio_server(lines, answers) as (read_stream, write_stream):
                        lines.write = write_stream
                        await self._lowlevel_server.run(read_stream, write_stream,
                                                        self._lowlevel_server.create_initialization_options())
            self.undelivered, self.unread = len(pending.ids), answers.blocked is not None

        stop_on_signals = False  # (``serve``'s ``signals``)
        stopped_by: int | None = None  # the signal that stopped it (``_signals_stop``)
        undelivered = 0  # the requests read and not answered when it ended
        unread = False  # whether it ended writing an answer the client did not take

    from . import __version__, env

    server = Server("pimem", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    root = env.home(home)
    seen = [root.is_dir()]  # whether the home was there, when the server started or since

    def home_there() -> None:
        """A home that was there and is gone (deleted or moved) is said, not read as one nothing was logged in
        (list_memories answered an empty list, search no hits); made again, it is read again."""
        if root.is_dir():
            seen[0] = True
        elif seen[0] and not root.exists():
            raise tool_error(f"the home {root} is gone: it was deleted or moved after the server started")

    def tool(func):
        """Register ``func``; a pimem error reaches the client as a tool error with its message as tools read it
        (its advice names a tool, not a command: ``PimemError.for_tools``), without the name of the library's
        function it may open with: the SDK names the tool, 'Error executing tool NAME: '."""
        named = f"{func.__name__}: "
        takes[func.__name__] = list(inspect.signature(func).parameters)

        @functools.wraps(func)
        def call(*args, **kwargs):
            home_there()
            try:  # (its text the compact JSON budgets are measured on, not the SDK's indented dump of it)
                result = func(*args, **kwargs)
                return call_result(content=[text_content(type="text", text=budget.dumps(result))], structured_content=result)
            except PimemError as exc:
                raise tool_error(exc.for_tools.removeprefix(named)) from None
            except Exception as exc:  # an OS or SQLite failure: the reason the CLI would print, not a bare failure
                error = translate(exc)
                if error is None:
                    raise
                raise tool_error(str(error)) from None

        server.tool(description=inspect.cleandoc(func.__doc__ or ""))(call)
        return call

    @tool
    def list_memories(offset: StrictInt = 0, limit: StrictInt = api.LIST_LIMIT) -> dict[str, Any]:
        """The memories, `limit` of them from `offset`: name, message count, first and last dates, and the
        last thing the user said. `total` counts them all; `next_offset` is the offset for the next page (null
        at the end)."""
        return api.list_memories_page(home, offset, limit)

    @tool
    def search(query: StrictStr, names: list[StrictStr] | None = None, rank: StrictBool = False, any_term: StrictBool = False,
               kinds: list[StrictStr] | None = None, include_tools: StrictBool = False, since: StrictStr | None = None,
               until: StrictStr | None = None, before: StrictInt | None = None, limit: StrictInt = 20,
               offset: StrictInt = 0) -> dict[str, Any]:
        """Where something was said: case-insensitive substring search over the original messages (never the
        summaries) of the memories `names` (default: all), Chinese included. Every word must occur (any_term:
        at least one); "a quoted phrase" exactly; newest first. With rank (not with any_term), ask a question
        instead: the messages holding any of its words (stemmed), best first, each with a score. `since` and
        `until` keep messages from / before a message number #I or a date/time (2026-10-08, 3d, yesterday).
        Each hit has the memory, i, date, kind, a snippet, held and the label of the view line holding it.
        For the next page: pass offset = offset + limit; or, without rank, before = the smallest i seen with
        offset 0 (one memory at a time). `notes`, when there, says a memory's search index is being caught up:
        the messages it lacks were not searched (ask again in a minute)."""
        return api.search(query, names, rank=rank, any_term=any_term, kinds=kinds, include_tools=include_tools, since=since,
                          until=until, before=before, limit=limit, offset=offset, home=home)

    @tool
    def message(name: StrictStr, i: StrictInt, include_tools: StrictBool = False, offset: StrictInt = 0, max_chars: StrictInt = api.MESSAGE_CHARS) -> dict[str, Any]:
        """Message i of memory `name`, exactly as logged, with how the view holds it (held). Long texts come
        in windows of max_chars from offset; next_offset says where the rest starts."""
        return api.message(name, i, include_tools, offset, max_chars, home)

    @tool
    def since(name: StrictStr, start: StrictInt | None = None, when: StrictStr | None = None, limit: StrictInt = api.SINCE_LIMIT,
              include_tools: StrictBool = False) -> dict[str, Any]:
        """Up to `limit` messages from message number `start` (default 0), or from a date/time `when`
        (2026-10-08, 09:30, 3d, yesterday), not both. `next` is the start for the following call (null at the
        end). Each message's held names the view line holding it (label); `lines` gives each such line once, by
        label."""
        return api.since(name, start, when, limit, include_tools, home)

    @tool
    def view(name: StrictStr, lines: StrictInt = api.VIEW_LINES, include_tools: StrictBool = False) -> dict[str, Any]:
        """The view the model of memory `name` reads each turn: one line per span, `id+n|text` (n messages
        from message id; old spans coarse, new ones fine). Only the latest `lines` lines are returned;
        `first` and `total_lines` say where they sit. `notes`, when there, says why some lines are hidden whole
        for now."""
        return api.view(name, lines, include_tools, home)

    @tool
    def zoom(name: StrictStr, node: StrictStr, include_tools: StrictBool = False) -> dict[str, Any]:
        """Open a view line: `node` is its `id+n`. For n=1 the original message (a text past 50,000
        characters is cut: `chars` is its length and `message` reads on from `next_offset`); for n>1 its two
        halves as lines, which can be zoomed in turn."""
        return api.zoom(name, node, include_tools, home)

    @tool
    def recall(name: StrictStr, query: StrictStr = "", ids: list[StrictInt | StrictStr] | None = None, file: StrictStr | None = None, kind: StrictStr | None = None,
               page: StrictInt | None = None, limit: StrictInt = 8, include_tools: StrictBool = False, budget: StrictInt | None = None) -> dict[str, Any]:
        """Bounded recall over the messages of memory `name`: search by `query` words (rare words and paths
        first), list newest first (no query), or read messages by `ids` (numbers or source entry ids; alone,
        without query, file, kind or page). `file` keeps messages naming a path; `kind` one kind. The answer
        never exceeds `budget` characters (default 16,000); `page` (from 1) continues a search. Each result
        carries held."""
        return api.recall(name, query, ids, file, kind, page, limit, include_tools, budget, home)

    @tool
    def memory_search(name: StrictStr, query: StrictStr = "", status: StrictStr | None = None, kind: StrictStr | None = None, offset: StrictInt = 0,
                      limit: StrictInt = 30, session: StrictStr | None = None) -> dict[str, Any]:
        """The user's authoritative memories for `name` (facts, preferences, constraints, decisions): live
        ones (pinned, active, provisional) or those of `status` (all, resolved, superseded, …), ranked by
        `query` words when given. `nextOffset` continues a long list."""
        return api.memory_search(name, query, status, kind, offset, limit, session, home=home)

    @tool
    def memory_propose(name: StrictStr, text: StrictStr | None = None, kind: StrictStr | None = None,
                       priority: StrictStr | None = None, supersede: StrictStr | None = None,
                       session: StrictStr | None = None) -> dict[str, Any]:
        """Propose a memory worth keeping (kind: fact, preference, constraint, decision, working). It is
        stored provisional: only the user makes it active or drops it. `supersede` replaces one of your own
        earlier proposals (without `text`, its text is kept)."""
        # (a client gives up on a call after a while, often 60 s: the writer lock is waited for a few seconds)
        timeout = min(env.current().lock_timeout, PROPOSE_TIMEOUT)
        return api.memory_propose(name, text, kind, priority, supersede, session, timeout, home)

    return server


def serve(home: api.Home = None, signals: bool = False) -> None:
    """Serve over stdio until the client hangs up; a home no command can use (a file) is refused first.
    ``signals`` (``pimem mcp``): SIGINT, SIGTERM and SIGHUP stop it too, and then end the command as the boundary
    ends one (one line, 130, 143 or 129); without, a Python program's own handlers are left as they are."""
    from . import env, stopping, viewfile

    env.home(home)
    with stopping.deferring() if signals else contextlib.nullcontext():  # (the SDK loads: see stopping.deferring)
        server = build(home)
    server.stop_on_signals = signals
    with viewfile.readers_writing_nothing():
        server.run()
    if server.stopped_by is not None:
        from . import boundary

        lost = server.undelivered
        one = lost == 1
        why = f"the client did not read {'it' if one else 'them'}" if server.unread else \
            f"the server stopped before {'it was' if one else 'they were'} ready"
        boundary.stop(server.stopped_by, f"{lost} answer{' was' if one else 's were'} not delivered: {why}" if lost else "")


@contextlib.contextmanager
def _signals_stop(server, lines, answers, scope):
    """While ``server`` serves with ``stop_on_signals``, SIGINT, SIGTERM and SIGHUP (not one its caller ignored)
    stop it: the first, noted in ``server.stopped_by``, ends the client's ``lines`` as stdin's end does (the
    requests read are answered first: a call in flight was cut off, a memory_propose stored never said) and
    cancels ``scope`` once an answer has waited ``_Pending.STOPPING`` seconds for the client (``unread``: answers
    it does not read are lost), a second cancels it at once; ``serve`` then ends the command with the first (the boundary's handler raised it wherever
    the event loop was, in the SDK's code too, which logged it). The handlers as they were after."""
    import asyncio
    import signal
    import threading

    from .boundary import stoppers

    if not server.stop_on_signals or threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    saved = [(sig, signal.getsignal(sig)) for sig in stoppers(signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]

    def stop(signum: int) -> None:
        if server.stopped_by is None:
            server.stopped_by = signum
            lines.end()
            unread(loop.time())
        else:
            scope.cancel()

    def unread(signalled: float) -> None:
        """``scope`` cancelled once an answer has waited ``STOPPING`` seconds since the signal for the client to
        take it: one that no longer reads (its end of stdout open, the pipe full) would keep the server for ever."""
        if answers.blocked is not None and loop.time() - max(answers.blocked, signalled) >= lines.pending.STOPPING:
            scope.cancel()
        else:
            loop.call_later(0.05, unread, signalled)

    for sig, _ in saved:
        loop.add_signal_handler(sig, stop, sig)
    try:
        yield
    finally:
        for sig, handler in saved:
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)
