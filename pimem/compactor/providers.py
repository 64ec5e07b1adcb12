"""The ways to reach a model: an OpenAI-compatible chat-completions endpoint, Anthropic's Messages API, or
any shell command that reads a prompt on stdin and prints the line.

Every failure (HTTP status, timeout, malformed JSON, a command's non-zero exit) becomes ``CallFailed``; the
scheduler retries it later, but for ``Unusable`` (no retry can succeed until a person mends the setup: a refused
API key, ``KeyRefused``, among them). httpx is
imported only when a remote provider is first used.
"""

from __future__ import annotations

import atexit
import datetime
import email.utils
import json
import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass

import orjson

from ..errors import ProviderError

_DELAY = re.compile(r"-?[0-9]+(\.[0-9]+)?")  # seconds (or ms) in a Retry-After header
DEFAULT_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
KEY_LEAST = 8  # characters of an API key worth hiding in an error (``_hidden``)


REFUSED = (400, 413, 422)  # HTTP statuses of a request refused for what it holds (too long, say): its own fault
# the words of an HTTP 403 that refuses the key or its account, not the request: Anthropic's permission_error
# ("does not have permission", its region's "Request not allowed"), OpenAI's unsupported_country_region_territory
# and "not allowed to sample from this model", "does not have access to model", a gateway's {"message": "Forbidden"}
_ACCESS = re.compile(r"api[ _-]?key|permission|authori[sz]|authenticat|credential|access|not allowed|forbidden|"
                     r"country|region|territor", re.I)
# the words of an HTTP 403 that refuses what the request holds: OpenRouter's moderation ("Your input was flagged")
_FLAGGED = re.compile(r"flagged|moderation", re.I)
_BLOCKED = re.compile(r"blocked", re.I)  # a firewall's page (Cloudflare's "you have been blocked"): for a word of the
# request, or for this machine's address, no telling which: retried as any failure is


class CallFailed(ProviderError):
    """One model call failed; ``retry_after`` is the delay the server asked for, if any; ``spent`` what the
    requests that were answered cost all the same (an empty reply is billed): tokens and ``cost``; ``refused``:
    the server answered that it refuses this request (``REFUSED``), so it works, and the fault is the request's
    (a command's non-zero exit is no such answer)."""

    def __init__(self, message: str, retry_after: float | None = None, spent: dict | None = None,
                 refused: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.spent = spent or {}
        self.refused = refused


class Unusable(CallFailed):
    """No call of this compactor can go out from here until a person changes the environment (a socks proxy
    without the package that speaks socks, a proxy of a scheme httpx does not know): retried, every call failed
    the same way, for ever under ``watch``, as if the server were down. The scheduler stops building that memory
    instead, saying this one line (``Scheduler._collect``)."""


class KeyRefused(Unusable):
    """The server refused the API key (HTTP 401; Google's HTTP 400 ``API_KEY_INVALID``), or what it may do (an
    HTTP 403 saying so: its permissions, the model, the region): every call of this compactor is refused alike
    until a person mends the key or its access, or chooses another compactor. ``status``: the HTTP status. Such a
    call is not billed. The scheduler stops building
    that memory, as for ``Unusable``, saying which variable holds the key (``Scheduler._key_refused``)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def refuses_key(status: int, text: str) -> bool:
    """Whether an HTTP ``status`` with body ``text`` refuses the key or its account rather than this request: a 401
    always; a 400 giving Google's reason ``API_KEY_INVALID`` (its OpenAI-compatible endpoint says a wrong key so,
    not with a 401); a 403 when its words name the key or its access and not the request's content (``_ACCESS``,
    ``_FLAGGED``, ``_BLOCKED``). Another 403 is no proof: a firewall refuses a word of the request so."""
    if status == 401 or status == 400 and "API_KEY_INVALID" in text:
        return True
    return status == 403 and bool(_ACCESS.search(text)) and not _FLAGGED.search(text) and not _BLOCKED.search(text)


NO_CHOICE = "no choice"  # a chat-completions reply's finish when its choices list is empty


@dataclass
class Reply:
    text: str
    finish: str  # "stop", or "length" when the token limit cut the reply (NO_CHOICE: the reply held none)
    tokens_in: int  # every input token, cached or not
    tokens_out: int
    tokens_cached: int = 0  # of tokens_in, those read from the provider's prompt cache
    tokens_written: int = 0  # of tokens_in, those written to it (Anthropic bills them at 1.25× the input price)

    def __post_init__(self):  # (parts of tokens_in: a reply claiming more is held to it)
        self.tokens_cached = min(self.tokens_cached, self.tokens_in)
        self.tokens_written = min(self.tokens_written, self.tokens_in - self.tokens_cached)


def _unreadable(hidden, what: str, data, tokens_in, tokens_out, tokens_cached=0, tokens_written=0) -> CallFailed:
    """A reply in a shape we cannot read: the call failed, but its usage (when it says one) was billed. The
    reply is quoted through ``hidden`` (``HttpProvider._hidden``), before it is cut: a gateway's ``{"error":
    "bad key K"}`` echoes the key."""
    spent = {"tokens_in": _count(tokens_in), "tokens_out": _count(tokens_out), "tokens_cached": _count(tokens_cached),
             "tokens_written": _count(tokens_written)}
    return CallFailed(f"unexpected {what} reply: {hidden(str(data))[:200]}", spent=spent)


def _usage(data) -> dict:
    usage = data.get("usage") if isinstance(data, dict) else None
    return usage if isinstance(usage, dict) else {}


def _estimate_tokens(text: str) -> int:
    return max(1, len(text.encode("utf-8")) // 4)


def _retry_after(headers) -> float | None:
    """Seconds the server asked to wait: ``retry-after-ms`` (OpenAI's), else ``Retry-After`` (seconds or an HTTP
    date). A number is ASCII digits (a negative one asks for no wait); ``nan``, ``inf`` and other words are no
    number, so nothing was asked for (``nan`` read as a number was 0, a retry at once). An HTTP date is GMT: one
    written with ``-0000`` (Python's ``email.utils.formatdate``) or with no zone is too, where it was read as
    this machine's local time (in Tokyo 20 s became none, in New York 5 hours)."""
    ms = (headers.get("retry-after-ms") or "").strip()
    if _DELAY.fullmatch(ms):
        return max(0.0, float(ms) / 1000)
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    if _DELAY.fullmatch(value):
        return max(0.0, float(value))
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, moment.timestamp() - time.time())


def _proxy_for(url: str) -> str | None:
    """The proxy a request to ``url`` goes through, from the environment as curl and requests read it
    (``HTTPS_PROXY`` or ``HTTP_PROXY`` by the URL's scheme, else ``ALL_PROXY``; none for a host ``NO_PROXY``
    names). None for a server on this machine (localhost, 127.0.0.0/8, ::1) whatever the environment says: a
    local Ollama, vLLM or llama.cpp is never reached through a proxy."""
    import ipaddress
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass
    if urllib.request.proxy_bypass(parts.netloc.rpartition("@")[2]):
        return None
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy:
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://|//)?[^/?#]*@")  # a URL's user and password, up to its host
HIDDEN = "[hidden]"  # a query value of a URL as pimem shows it


def strip_userinfo(url: str) -> str:
    """``url`` without the user and password it may carry (all before the last ``@`` of the part that names the
    host, as a URL parser reads it; one written without its ``http://`` too)."""
    return _USERINFO.sub(r"\1", url)


def _query_values(url: str) -> list[str]:
    """The values of ``url``'s query (``?key=K&code=C``: K and C), as written."""
    query = url.partition("?")[2].partition("#")[0]
    return [part.partition("=")[2] for part in query.split("&") if part.partition("=")[2]]


def without_password(url: str) -> str:
    """``url`` as pimem shows or records it: without the user and password a proxy URL or ``--base-url`` may
    carry (``strip_userinfo``), and each value of its query shown as ``[hidden]`` (a key may be passed there:
    ``?key=…``). Read as text: a URL no parser takes (``http://[::1/v1``) is shown so too."""
    url = strip_userinfo(url)
    head, mark, query = url.partition("?")
    if not mark:
        return url
    query, hash_, fragment = query.partition("#")
    parts = [name + (f"={HIDDEN}" if value else eq) for name, eq, value in (p.partition("=") for p in query.split("&"))]
    return f"{head}?{'&'.join(parts)}{hash_}{fragment}"


def joined(base_url: str, path: str) -> str:
    """``path`` (``/chat/completions``) added to the path of ``base_url``, before its query: Azure's
    ``…/deployments/NAME?api-version=…`` becomes ``…/deployments/NAME/chat/completions?api-version=…``."""
    head, rest = re.match(r"([^?#]*)(.*)", base_url, re.S).groups()
    return head.rstrip("/") + path + rest


def url_path(url: str) -> str:
    """The part of ``url`` before its query."""
    return re.match(r"[^?#]*", url).group()


def _hide_password(text: str, url: str) -> str:
    """``text`` without the password ``url`` carries (``http://user:password@host/v1``) nor the values of its
    query: as written, as sent (percent-decoded, and in the ``Basic`` header httpx makes of it, which a server
    may echo), ``[password]`` and ``[hidden]`` in their places, and ``url`` itself as ``without_password``
    shows it."""
    import base64
    import urllib.parse

    text = text.replace(url, without_password(url))
    found = _USERINFO.match(url)
    if found:
        userinfo = found.group()[len(found.group(1) or ""):-1]
        user, _, password = userinfo.partition(":")
        plain = [urllib.parse.unquote(user), urllib.parse.unquote(password)]
        basic = base64.b64encode(":".join(plain).encode()).decode()
        text = text.replace(basic, "[password]")
        for secret in sorted({password, plain[1]}, key=len, reverse=True):
            if len(secret) >= KEY_LEAST:  # (as for a key: a shorter one would be every such letter of the error)
                text = text.replace(secret, "[password]")
    values = _query_values(url)
    for secret in sorted({*values, *map(urllib.parse.unquote_plus, values)}, key=len, reverse=True):
        if len(secret) >= KEY_LEAST:
            text = text.replace(secret, HIDDEN)
    return text


# a proxy answering 407 refuses every call alike until its URL in the environment (which a running process never
# sees change) gives the user and password it takes: no retry can succeed (``Unusable``)
PROXY_CREDENTIALS = ("the proxy asks for a user and password it was not given, or refused them: give them in its URL "
                     "(http://user:password@host:port)")


HTTP_REPLY = 4 << 20  # bytes of an HTTP reply read, at most (a completion is a few KB): a longer one fails the call


def _body(response) -> tuple[bytes, bool]:
    """The body of ``response`` as it comes, up to ``HTTP_REPLY`` bytes, and whether that is all of it (no more
    is read: a flood is never held whole). ``TimeoutError`` once the call's deadline passes (the check an httpx
    whose pool ``_Bounded`` cannot wrap still has: a reply trickled byte by byte)."""
    content = bytearray()
    for chunk in response.iter_bytes():
        if time.monotonic() > _CALL.deadline:
            raise TimeoutError
        content += chunk
        if len(content) > HTTP_REPLY:
            return bytes(content[:HTTP_REPLY]), False
    return bytes(content), True


_CALL = threading.local()  # ``deadline``: when the HTTP call this thread is making must end (``time.monotonic``)


def _left(timeout: float | None, late: Exception) -> float | None:
    """``timeout``, the seconds one socket operation may wait, cut to what this thread's call has left; ``late``
    (an httpcore timeout) once nothing is."""
    deadline = getattr(_CALL, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise late
    return left if timeout is None else min(timeout, left)


class _Bounded:
    """httpcore's network backend, each connect, TLS handshake, write and read of a call waiting only for what
    the call has left (``_left``). httpcore gives every read the whole read timeout, so a reply that stopped
    halfway held a call up to twice its timeout, and headers sent a byte at a time held it for ever. A pooled
    connection's stream serves one call at a time, the deadline of the thread making it."""

    def __init__(self, backend):
        self._backend = backend

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        import httpcore

        return _BoundedStream(self._backend.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout()),
                                                        local_address, socket_options))

    def __getattr__(self, name):  # (``sleep``; ``connect_unix_socket``, never asked for)
        return getattr(self._backend, name)


class _BoundedStream:
    """A connection of ``_Bounded``: each of its operations given no more than its call has left."""

    def __init__(self, stream):
        self._stream = stream

    def read(self, max_bytes, timeout=None):
        import httpcore

        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout()))

    def write(self, buffer, timeout=None):
        import httpcore

        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout()))

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        import httpcore

        return _BoundedStream(self._stream.start_tls(ssl_context, server_hostname,
                                                     _left(timeout, httpcore.ConnectTimeout())))

    def close(self):
        self._stream.close()

    def get_extra_info(self, info):
        return self._stream.get_extra_info(info)


class HttpProvider:
    """Shared HTTP plumbing: one pooled client, key from the environment, errors as ``CallFailed``."""

    kind = ""

    def __init__(self, model: str, base_url: str | None = None, key_env: str | None = None, timeout: float = 60.0):
        self.model = model
        self.base_url = (base_url or DEFAULT_URLS[self.kind]).rstrip("/")
        self.key_env = key_env
        self.timeout = timeout
        self._client = None
        self._via = ""  # " via proxy URL" when requests go through a proxy, for the errors to say so

    def key(self) -> str | None:
        """The API key, without the spaces or line end a ``.env`` file may leave around it; never shown."""
        if not self.key_env:
            return None
        value = (os.environ.get(self.key_env) or "").strip()
        if not value:
            raise CallFailed(f"environment variable {self.key_env} (the API key for {self.kind}) is not set")
        if not (value.isascii() and value.isprintable()):
            raise CallFailed(f"environment variable {self.key_env} (the API key for {self.kind}) holds characters "
                             "no HTTP header can carry (a line break, a non-ASCII letter); it is not shown here")
        return value

    def _hidden(self, text: str) -> str:
        """``text`` with the API key (as the environment holds it) replaced, for errors that quote a request. A
        key under ``KEY_LEAST`` characters (``x``, ``1``: a local server's stand-in) is no secret, and hidden it
        would be every such letter of the error (``http://api.e[API key]ample.invalid``)."""
        raw = os.environ.get(self.key_env or "") or ""
        for secret in {raw, raw.strip()} - {""}:
            if len(secret.strip()) >= KEY_LEAST:
                text = text.replace(secret, "[API key]").replace(repr(secret.encode())[2:-1], "[API key]")
        return _hide_password(text, self.base_url)

    def post(self, path: str, body: dict, headers: dict) -> dict:
        import httpx

        url = joined(self.base_url, path)
        shown = without_password(url)
        if any(name.lower() == "authorization" for name in headers):
            # (httpx sends a URL's user and password as an Authorization: Basic header, in place of the API key's
            # Bearer one: the key wins, as curl's -H does over a URL's user and password)
            url = strip_userinfo(url)
        if self._client is None:
            proxy = _proxy_for(self.base_url)
            self._via = f" via proxy {without_password(proxy)}" if proxy else ""
            try:  # (a transport of our own: httpx then reads no proxy from the environment itself)
                transport = httpx.HTTPTransport(proxy=proxy)
                # (httpx takes no network backend: its pool's, bounded; a proxy's pool holds one too)
                pool = getattr(transport, "_pool", None)  # (private: an httpx without it keeps ``_body``'s check)
                if hasattr(pool, "_network_backend"):
                    pool._network_backend = _Bounded(pool._network_backend)
            except ImportError:  # a socks proxy without the socksio package
                raise Unusable(f"{shown}{self._via}: a socks proxy needs the socksio package: pip install "
                               "'httpx[socks]'") from None
            except ValueError as exc:  # (a scheme httpx does not know: socks4://, ftp://)
                raise Unusable(f"{shown}{self._via}: {exc}; use an http://, https:// or socks5:// proxy") from None
            self._client = httpx.Client(timeout=httpx.Timeout(self.timeout, connect=min(10.0, self.timeout)),
                                        transport=transport)
        where = shown + self._via
        outer = getattr(_CALL, "deadline", None)  # (a call made during another in this thread gives it back)
        _CALL.deadline = time.monotonic() + self.timeout  # (the whole call, whatever the server does: ``_Bounded``)
        try:
            with self._client.stream("POST", url, content=orjson.dumps(body),
                                     headers={**headers, "content-type": "application/json"}) as response:
                content, whole = _body(response)
        except (httpx.TimeoutException, TimeoutError):
            raise CallFailed(f"{where}: no answer within {self.timeout:g} s") from None
        except httpx.ProxyError as exc:  # (an https:// URL's tunnel the proxy would not open: "407 Proxy …")
            if str(exc).startswith("407"):
                raise Unusable(self._hidden(f"{where}: {exc}: {PROXY_CREDENTIALS}")) from None
            raise CallFailed(self._hidden(f"{where}: {type(exc).__name__}: {exc}")) from None
        except httpx.HTTPError as exc:
            raise CallFailed(self._hidden(f"{where}: {type(exc).__name__}: {exc}")) from None
        finally:
            _CALL.deadline = outer
        if 300 <= response.status_code < 400:  # (not followed: the request, key and all, goes where it was set to)
            location = response.headers.get("location")
            target = str(response.url.join(location)) if location else "nowhere (no Location header)"
            raise CallFailed(self._hidden(f"{where}: HTTP {response.status_code} redirect to "
                                          f"{without_password(target)} (not followed: set --base-url to where it points)"))
        text = content.decode(response.encoding or "utf-8", "replace")
        if response.status_code == 407 and self._via:  # (an http:// URL's request, refused by the proxy)
            raise Unusable(f"{where}: HTTP 407: {PROXY_CREDENTIALS}")
        if response.status_code >= 400:
            detail = self._hidden(" ".join(text.split()))[:300]  # (a server may echo the request; hidden, then cut)
            if refuses_key(response.status_code, text):
                raise KeyRefused(f"{where}: HTTP {response.status_code}: {detail}", response.status_code)
            flagged = response.status_code == 403 and bool(_FLAGGED.search(text))
            raise CallFailed(f"{where}: HTTP {response.status_code}: {detail}", _retry_after(response.headers),
                             refused=response.status_code in REFUSED or flagged)
        if not whole:
            raise CallFailed(f"{where}: the reply is over {HTTP_REPLY >> 20} MiB (a summary's is a few KB); "
                             "the rest was not read")
        try:
            data = json.loads(content)
        except (ValueError, RecursionError):  # (RecursionError: nested deeper than Python reads)
            raise CallFailed(f"{where}: the reply is not JSON: {self._hidden(text)[:120]!r}") from None
        if not isinstance(data, dict):
            raise CallFailed(f"{where}: the reply is not a JSON object")
        return data

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class OpenAI(HttpProvider):
    """Any OpenAI-compatible ``/chat/completions`` endpoint (OpenAI, DeepSeek, OpenRouter, vLLM, Ollama, …)."""

    kind = "openai"

    def complete(self, system: str, chat: str, task: str, max_tokens: int) -> Reply:
        """One call; ``chat`` (the compactor's view) then ``task`` make the user turn. The provider caches
        the longest prefix it saw before by itself; the reply's ``cached_tokens`` say how much was reused."""
        headers = {}
        key = self.key()
        if key:
            headers["authorization"] = f"Bearer {key}"
        user = chat + task
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": max_tokens,
            "temperature": 0.2,
        }
        data = self.post("/chat/completions", body, headers)
        usage = _usage(data)
        details = usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
        try:
            choices = data["choices"]
            choice = choices[0] if choices != [] else {"message": {}}  # (no choice: an empty answer, billed as one)
            text = choice["message"].get("content") or ""
            if isinstance(text, list):  # content parts (some servers answer so): their text, in order
                text = "".join(part["text"] for part in text if part.get("type") == "text")
            if not isinstance(text, str):
                raise TypeError(text)
            finish = choice.get("finish_reason") or ("stop" if choices != [] else NO_CHOICE)
        except (KeyError, IndexError, TypeError, AttributeError):
            raise _unreadable(self._hidden, "chat-completions", data, usage.get("prompt_tokens"), usage.get("completion_tokens"),
                              details.get("cached_tokens")) from None
        return Reply(
            text,
            "length" if finish == "length" else str(finish),
            _count(usage.get("prompt_tokens")) or _estimate_tokens(system + user),
            _count(usage.get("completion_tokens")) or _estimate_tokens(text),
            _count(details.get("cached_tokens")),
        )


class Anthropic(HttpProvider):
    """Anthropic's Messages API."""

    kind = "anthropic"

    def complete(self, system: str, chat: str, task: str, max_tokens: int) -> Reply:
        """One call; the stable prefix (the system prompt, then ``chat``, the compactor's view) is marked with
        ``cache_control`` so the next call that shares it reads it from the cache; ``task`` follows."""
        headers = {"anthropic-version": "2023-06-01"}
        key = self.key()
        if key:
            headers["x-api-key"] = key
        cached = {"type": "ephemeral"}
        body = {
            "model": self.model,
            "system": [{"type": "text", "text": system, "cache_control": cached}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": chat, "cache_control": cached},
                                                      {"type": "text", "text": task}]}],
            "max_tokens": max_tokens,
            "temperature": 0.2,
        }
        # (an OpenAI URL ends in /v1, Anthropic's does not: one written so either way reaches /v1/messages)
        data = self.post("/messages" if url_path(self.base_url).rstrip("/").endswith("/v1") else "/v1/messages", body,
                         headers)
        usage = _usage(data)
        read = _count(usage.get("cache_read_input_tokens"))  # input_tokens counts only the uncached rest
        written = _count(usage.get("cache_creation_input_tokens"))
        fresh = usage.get("input_tokens")
        try:
            text = "".join(block.get("text", "") for block in data["content"] if block.get("type") == "text")
        except (KeyError, TypeError, AttributeError):
            raise _unreadable(self._hidden, "messages", data, _count(fresh) + read + written, usage.get("output_tokens"), read, written) from None
        stop = data.get("stop_reason") or "end_turn"
        return Reply(
            text,
            "length" if stop == "max_tokens" else str(stop),
            # (no readable count of the uncached rest: the input estimated from the bytes sent, never below the
            # cache's part of it)
            _count(fresh) + read + written if _counted(fresh) else max(read + written, _estimate_tokens(system + chat + task)),
            _count(usage.get("output_tokens")) or _estimate_tokens(text),
            read,
            written,
        )


MAX_TOKENS_A_CALL = 10**12  # a count held to this keeps a cost finite (and far past any call's worst case)


def _counted(value) -> bool:
    """Whether ``value`` is a token count ``_count`` reads as given (a whole number from 0)."""
    return (type(value) is int or type(value) is float and value.is_integer()) and value >= 0


def _count(value) -> int:
    """A token count from a reply's usage: a whole number from 0, held to ``MAX_TOKENS_A_CALL`` (a bill past a
    call's worst case is kept as billed, and stops a capped run: ``Scheduler._check_bill``); anything else is
    no count, 0 (and the caller's estimate where it has one)."""
    return min(int(value), MAX_TOKENS_A_CALL) if _counted(value) else 0


class Command:
    """A shell command that reads the prompt on stdin and prints the line (``llm -n -m MODEL -s {system}``).

    The system prompt reaches it apart from the task: ``{system}`` in the command stands for it, as the shell
    reads ``$PIMEM_SYSTEM`` where it stands (quoted or not, alone or inside a longer word); ``$PIMEM_SYSTEM_FILE``
    names a file holding it; stdin then carries only the task (the compactor's view and the task). A command
    without ``{system}`` gets the system prompt at the head of stdin too, as one input. The command runs in a
    session of its own, killed whole on timeout (and whatever it left running once it has answered), so no
    child outlives a call, nor pimem however it ends (``_watched``). Its output is read from pipes as it
    comes: the answer's first ``COMMAND_OUTPUT`` bytes and the last ``COMMAND_STDERR`` of its stderr are kept,
    the rest dropped, so no flood fills the memory or a disk."""

    kind = "command"

    def __init__(self, command: str, model: str | None = None, timeout: float = 60.0):
        self.command = command
        self.model = model or command.split()[0]
        self.timeout = timeout
        self._system_files: dict[str, str] = {}  # system prompt -> the file holding it
        self._lock = threading.Lock()  # (calls run at once, each in a thread of the pool: one file a prompt)

    def _shown(self) -> str:
        """The command as an error says it: redacted, as ``pimem model`` shows it (``OPENAI_API_KEY=sk-… llm``)."""
        from .redact import redact_shown

        return redact_shown(self.command)

    def _hidden(self, text: str) -> str:
        """``text`` (the command's stderr, quoted in an error) without the secrets its command line carries: each
        word of it (between spaces, quotes and ``=:@,;``) of ``KEY_LEAST`` characters or more that ``_shown``
        hides, replaced by ``[hidden]`` (a tool that echoes its key: ``invalid key K``)."""
        shown = self._shown()
        words = {word for word in re.split(r"[\s'\"=:@,;]+", self.command) if len(word) >= KEY_LEAST and word not in shown}
        for word in sorted(words, key=len, reverse=True):
            text = text.replace(word, HIDDEN)
        return text

    def _system_path(self, system: str) -> str:
        with self._lock:
            if system not in self._system_files:
                import tempfile

                fd, path = tempfile.mkstemp(prefix="pimem-system-", suffix=".txt")  # mode 0600
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(system)
                self._system_files[system] = path
                _SYSTEM_FILES.add(path)
            return self._system_files[system]

    def complete(self, system: str, chat: str, task: str, max_tokens: int) -> Reply:
        import tempfile

        apart = "{system}" in self.command
        command = _placed(self.command) if apart else self.command
        prompt = f"{chat}{task}\n" if apart else f"{system}\n\n{chat}{task}\n"
        env = {**os.environ, "PIMEM_SYSTEM": system, "PIMEM_SYSTEM_FILE": self._system_path(system)}
        # stdin from a file: a command that never reads it cannot block the write; stdout and stderr are pipes
        # read as they come, so what is kept of them is bounded however much the command prints
        with tempfile.TemporaryFile() as stdin:
            stdin.write(prompt.encode("utf-8"))
            stdin.seek(0)
            lifeline = _lifeline()
            proc = subprocess.Popen(["/bin/sh", "-c", _watched(lifeline), "sh", command], stdin=stdin,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
                                    pass_fds=() if lifeline is None else (lifeline,))
        _RUNNING.add(proc.pid)
        try:
            answered, head, size, tail = _read_until_exit(proc, self.timeout)
        finally:
            _kill_call(proc.pid)  # anything it started and left behind
            _RUNNING.discard(proc.pid)
            proc.stdout.close()
            proc.stderr.close()
            proc.wait()
        if not answered:
            raise CallFailed(f"command {self._shown()!r} gave no answer within {self.timeout:g} s")
        # (bytes that are not UTF-8 are shown as U+FFFD, as imports show them, not dropped unseen)
        text = bytes(head).decode("utf-8", "replace")
        detail = self._hidden(" ".join(bytes(tail).decode("utf-8", "replace").split()))[-300:]
        if proc.returncode != 0:
            raise CallFailed(f"command {self._shown()!r} {_ended(proc.returncode)}" + (f": {detail}" if detail else ""))
        if not text.strip():  # (its stderr says why, as a failure's does: a pipeline's end, `| head -1`, exits 0)
            raise CallFailed(f"command {self._shown()!r} exited 0 with no answer" + (f": {detail}" if detail else ""),
                             spent={"tokens_in": _estimate_tokens(system + chat + task)})
        # its tokens out, as estimated, count up to the ``max_tokens`` asked for (a model stops there): so a call
        # costs no more than the worst case ``--max-cost`` counted for it, whatever the command printed
        return Reply(text, "length" if size > COMMAND_OUTPUT else "stop", _estimate_tokens(system + chat + task),
                     min(_estimate_tokens(text), max_tokens))

    def close(self) -> None:
        with self._lock:
            paths, self._system_files = list(self._system_files.values()), {}
        _unlink(paths)


COMMAND_OUTPUT = 1 << 20  # bytes of a command's answer read, at most
COMMAND_STDERR = 4096  # bytes of a command's stderr kept (its last), for the error a failure shows
_RUNNING: set[int] = set()  # the sessions of calls in flight, killed when pimem exits with them running
_SYSTEM_FILES: set[str] = set()  # the system prompt files of commands not closed yet, removed at exit


_LIFELINE: list[int] = []  # a pipe's ends: the write end is this process's alone, so it closes when it ends
_LIFELINE_LOCK = threading.Lock()


def _lifeline() -> int | None:
    """The read end of this process's lifeline, which a command's watchdog reads to its end (None where
    ``/dev/fd`` cannot reopen it)."""
    with _LIFELINE_LOCK:
        if not _LIFELINE:
            _LIFELINE.extend(os.pipe())  # (not inherited: each command is passed the read end alone)
        return _LIFELINE[0] if os.path.exists(f"/dev/fd/{_LIFELINE[0]}") else None


def _watched(lifeline: int | None) -> str:
    """The script that runs a command (``$1``) in its session beside a watchdog: when this process ends in any
    way, even by a signal that runs no exit handler (SIGKILL, a SIGHUP nothing catches: a terminal closed),
    the watchdog reads the lifeline's end, removes the system prompt file and kills the session, so no command
    runs on, past every timeout, after pimem. Killed with the session when the command has answered."""
    run = 'exec /bin/sh -c "$1"'  # (exec: the group's leader is the command, whose exit ends the call)
    if lifeline is None:
        return run
    return (f'( exec < /dev/fd/{lifeline} || exit; read -r _; rm -f "$PIMEM_SYSTEM_FILE"; pkill -KILL -s 0; '
            f'kill -KILL 0 ) < /dev/null > /dev/null 2>&1 &\n{run}')  # (pkill -s 0: its session's other groups)


def _placed(command: str) -> str:
    """``command`` with each ``{system}`` made an expansion of ``$PIMEM_SYSTEM`` fit for the quotes it stands
    in: ``"${PIMEM_SYSTEM}"`` outside quotes, ``${PIMEM_SYSTEM}`` inside double quotes, and inside single
    quotes those closed around it. The shell expands a variable once and never reads its value as code, so
    the system prompt's quotes and backticks arrive as written wherever the placeholder is (pasting the text
    itself in, quoted, broke inside a quoted word: ``"Rules: {system}"``). A backslash-escaped one stays."""
    placed, quote, k = [], "", 0
    while k < len(command):
        if command.startswith("{system}", k):
            placed.append({"": '"${PIMEM_SYSTEM}"', '"': "${PIMEM_SYSTEM}", "'": "'\"${PIMEM_SYSTEM}\"'"}[quote])
            k += len("{system}")
            continue
        char = command[k]
        if char == "\\" and quote != "'":  # (escapes the next character, placeholder or quote)
            placed.append(command[k:k + 2])
            k += 2
            continue
        if char in "'\"" and quote in ("", char):
            quote = "" if quote else char
        placed.append(char)
        k += 1
    return "".join(placed)


def _read_until_exit(proc: subprocess.Popen, timeout: float) -> tuple[bool, bytearray, int, bytearray]:
    """Read ``proc``'s stdout and stderr until it exits or ``timeout`` passes: whether it exited, the first
    ``COMMAND_OUTPUT`` bytes of its stdout, how many bytes it printed there, and the last ``COMMAND_STDERR``
    of its stderr. The answer counts when the command exits: its group is killed then (before it is reaped,
    so under its own id), what it wrote is read from the pipes, and a child that left the group and still
    holds them is not waited for."""
    import selectors
    import signal

    deadline = time.monotonic() + timeout
    head, tail, size = bytearray(), bytearray(), 0
    streams = {proc.stdout.fileno(): "out", proc.stderr.fileno(): "err"}
    try:  # (readable when the command exits: Linux 5.3; elsewhere its exit is looked at every 10 ms)
        exit_fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        exit_fd = None
    with selectors.DefaultSelector() as selector:
        for fd in streams:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        if exit_fd is not None:
            selector.register(exit_fd, selectors.EVENT_READ)

        def read(fd: int) -> None:  # (one read a turn: a flood never keeps the loop from the clock)
            nonlocal size
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                selector.unregister(fd)
            elif streams[fd] == "out":
                head.extend(chunk[:max(0, COMMAND_OUTPUT - len(head))])
                size += len(chunk)
            else:
                tail.extend(chunk)
                del tail[:-COMMAND_STDERR]

        try:
            while not _exited(proc):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False, head, size, tail
                for key, _ in selector.select(left if exit_fd is not None else min(left, 0.01)):
                    if key.fd in streams:
                        read(key.fd)
            _kill_group(proc.pid, signal.SIGKILL)  # (nothing of its group writes more)
            while any(fd in streams for fd in selector.get_map()) and time.monotonic() < deadline:
                ready = [key.fd for key, _ in selector.select(0) if key.fd in streams]
                if not ready:
                    break
                for fd in ready:
                    read(fd)
        finally:
            if exit_fd is not None:
                os.close(exit_fd)
    return True, head, size, tail


def _ended(returncode: int) -> str:
    """How a command that failed ended: ``exited 3``, or ``was killed by SIGTERM``."""
    import signal

    if returncode >= 0:
        return f"exited {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"was killed by signal {-returncode}"


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the command has exited, without reaping it where the system can say so (``waitid``)."""
    if not hasattr(os, "waitid"):  # (macOS before Python 3.13)
        return proc.poll() is not None
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


@atexit.register
def _kill_running() -> None:
    """At exit (a build stopped by a signal leaves the calls it gave up on running): no command outlives pimem,
    and no system prompt file it was given stays behind."""
    for sid in list(_RUNNING):
        _kill_call(sid)
    _unlink(list(_SYSTEM_FILES))


def _unlink(paths: list[str]) -> None:
    for path in paths:
        _SYSTEM_FILES.discard(path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _kill_call(sid: int) -> None:
    """Kill a call's command and all it started: its process group, then every other group of its session
    (a child that moved to a group of its own: coreutils' ``timeout`` does, as does a shell with job control).
    Only a child that left the session (``setsid``, a daemon) escapes."""
    import signal

    _kill_group(sid, signal.SIGKILL)
    for _ in range(3):  # (a child forked while the session was looked at is in a group found the next time)
        groups = _session_groups(sid)
        if not groups:
            return
        for pgid in groups:
            _kill_group(pgid, signal.SIGKILL)


def _session_groups(sid: int) -> set[int]:
    """The process groups of session ``sid`` that hold a live process, from ``/proc`` (none without it)."""
    groups = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return groups
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:  # (gone meanwhile)
                continue
            state, _, pgid, session = stat[stat.rindex(b")") + 2:].split(b" ", 4)[:4]
            if int(session) == sid and state != b"Z":
                groups.add(int(pgid))
    return groups


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
