"""Providers as good citizens: prompt caching fields against real fake servers on 127.0.0.1, and the command
provider's own process group (killed whole: no process left) and its system prompt apart from the task."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import socket
import time
import uuid
from pathlib import Path

import pytest

from bench.llm_server import FakeLLM
from pimem.compactor import REASONING_EXTRA, CallFailed, Compactor, Task
from pimem.compactor.prompt import SYSTEM
from pimem.compactor.state import BuildState

CONTEXT = "\n".join(f"{k}+1|user: line {k} of the compactor's view " + "x" * 200 for k in range(40))


def _compactor(server, api, tmp_path, **extra) -> Compactor:
    return Compactor({"provider": api, "model": "m", "base_url": server.url, "key_env": "TEST_LLM_KEY",
                      "price_in": 1.0, "price_out": 5.0, **extra}, BuildState(tmp_path))


def test_anthropic_marks_the_system_prompt_and_the_view_as_a_cached_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("anthropic", usage="bytes") as server:
        comp = _compactor(server, "anthropic", tmp_path, price_cached_in=0.1)
        comp.build(Task(0, 40, kind="user", text="x" * 900), CONTEXT)
        text, meta = comp.build(Task(0, 41, kind="user", text="y" * 900), CONTEXT)
    body = server.requests[-1]
    assert body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    chat, task = body["messages"][0]["content"]
    assert chat["cache_control"] == {"type": "ephemeral"} and chat["text"].startswith("<chat>\n0+1|user: line 0")
    assert chat["text"].endswith("</chat>\n\n") and "cache_control" not in task
    assert task["text"].startswith("Compaction: compress message 41")
    # input_tokens counts only the uncached part: pimem adds the cache reads back and prices them apart
    assert 0 < meta["tokens_cached"] < meta["tokens_in"]
    fresh = meta["tokens_in"] - meta["tokens_cached"]
    assert meta["cost"] == pytest.approx((fresh * 1.0 + meta["tokens_cached"] * 0.1 + meta["tokens_out"] * 5.0) / 1e6)


def test_openai_cached_tokens_are_read_and_priced_when_a_cached_price_is_set(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", usage="bytes") as server:
        for price in (None, 0.25):
            comp = _compactor(server, "openai", tmp_path, price_cached_in=price)
            comp.build(Task(0, 40, kind="user", text="x" * 900), CONTEXT)
            _, meta = comp.build(Task(0, 41, kind="user", text="y" * 900), CONTEXT)
            cached = meta["tokens_cached"]
            assert 0 < cached < meta["tokens_in"]
            cached_price = 1.0 if price is None else price
            assert meta["cost"] == pytest.approx(((meta["tokens_in"] - cached) * 1.0 + cached * cached_price
                                                  + meta["tokens_out"] * 5.0) / 1e6)
    user = server.requests[-1]["messages"][1]["content"]
    assert isinstance(user, str) and user.startswith("<chat>\n0+1|")  # one string: the provider caches prefixes itself


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_billed_reply_that_cannot_be_read_still_counts(tmp_path, monkeypatch, api):
    """A 200 whose body is in no shape we read (content a number, or null) fails the call, and its usage is
    what the call spent: ``--max-cost`` and the daily cap count it."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM(api, faults=["number"]) as server:
        with pytest.raises(CallFailed, match="unexpected") as failed:
            _compactor(server, api, tmp_path).build(Task(0, 3, kind="user", text="x" * 900))
    assert failed.value.spent["tokens_in"] == 1000 and failed.value.spent["cost"] == pytest.approx((1000 + 100 * 5.0) / 1e6)


def test_a_reasoning_models_first_request_counts_when_the_second_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=["length", "500"]) as server:
        with pytest.raises(CallFailed) as failed:
            _compactor(server, "openai", tmp_path).build(Task(0, 3, kind="user", text="x" * 900))
    assert len(server.requests) == 2 and server.requests[1]["max_tokens"] > server.requests[0]["max_tokens"]
    assert failed.value.spent["cost"] == pytest.approx((1000 + 100 * 5.0) / 1e6)  # the first one, billed


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_request_the_server_refuses_for_what_it_holds_is_told_from_a_server_that_fails(tmp_path, monkeypatch, api):
    """A 400, 413 or 422 (too long, say) is the request's own fault, the server works; a 500 or a command's
    non-zero exit tells nothing of the request (``CallFailed.refused``: probes, ``Builder._fresh``)."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    task = Task(0, 3, kind="user", text="x" * 900)
    for fault, refused in (("400", True), ("413", True), ("422", True), ("500", False), ("429", False)):
        with FakeLLM(api, faults=[fault]) as server, pytest.raises(CallFailed) as failed:
            _compactor(server, api, tmp_path).build(task)
        assert failed.value.refused is refused, (fault, str(failed.value))
    with pytest.raises(CallFailed) as failed:
        Compactor({"provider": "command", "command": "cat > /dev/null; echo too long >&2; exit 1"},
                  BuildState(tmp_path)).build(task)
    assert failed.value.refused is False and "too long" in str(failed.value)


@pytest.mark.parametrize("fault", ["negative", "text", "fraction"])
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_an_input_count_that_is_no_count_is_taken_from_the_bytes_sent(tmp_path, monkeypatch, api, fault):
    """A usage of -5, "1000" or 999.5 input tokens: the call is billed for the input it sent (a token per 4
    bytes), never for none of it."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM(api, faults=[fault]) as server:
        _, meta = _compactor(server, api, tmp_path).build(Task(0, 3, kind="user", text="x" * 9000), CONTEXT)
    sent = len(SYSTEM) + len(CONTEXT) + 9000
    assert sent // 4 <= meta["tokens_in"] < sent // 3 and meta["cost"] >= (sent // 4 + 100 * 5.0) / 1e6


def test_anthropic_cache_writes_cost_a_quarter_more_and_the_cap_reserves_for_them(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("anthropic", faults=["written"]) as server:
        comp = _compactor(server, "anthropic", tmp_path)
        task = Task(0, 3, kind="user", text="x" * 900)
        _, meta = comp.build(task)
    assert meta["tokens_in"] == 3000  # 1000 fresh and 2000 written to the cache
    assert meta["cost"] == pytest.approx((1000 + 2000 * 1.25 + 100 * 5.0) / 1e6)
    openai = _compactor(server, "openai", tmp_path)
    worst_in = openai.worst_cost(task) - 2 * (2 * comp.max_tokens + REASONING_EXTRA) * 5.0 / 1e6  # (what it sends)
    assert comp.worst_cost(task) - openai.worst_cost(task) == pytest.approx(0.25 * worst_in)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_redirect_is_one_line_naming_where_it_points_and_is_not_followed(tmp_path, monkeypatch, api):
    """A POST with the API key is not resent elsewhere (another host may be anyone's): the error says where
    the provider points, absolute, for --base-url."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    path = "/chat/completions" if api == "openai" else "/v1/messages"
    with FakeLLM(api) as elsewhere, FakeLLM(api, faults=["redirect", "redirect"]) as server:
        server.location = elsewhere.url + path
        with pytest.raises(CallFailed) as failed:
            _compactor(server, api, tmp_path).build(Task(0, 3, kind="user", text="x" * 900))
        assert str(failed.value) == (f"{server.url}{path}: HTTP 307 redirect to {elsewhere.url}{path} "
                                     "(not followed: set --base-url to where it points)")
        server.location = "/moved" + path  # (relative: shown as the URL it names)
        with pytest.raises(CallFailed, match=f"redirect to http://127.0.0.1:[0-9]+/moved{path} "):
            _compactor(server, api, tmp_path).build(Task(0, 3, kind="user", text="x" * 900))
    assert len(server.requests) == 2 and elsewhere.requests == []


@pytest.mark.parametrize("api,base,path", [
    ("openai", "/v1?api-version=2024-02-01&key=QkEyAbCdEfGh12", "/v1/chat/completions?api-version=2024-02-01&key=QkEyAbCdEfGh12"),
    ("openai", "/v1/?key=QkEyAbCdEfGh12", "/v1/chat/completions?key=QkEyAbCdEfGh12"),
    ("anthropic", "?key=QkEyAbCdEfGh12", "/v1/messages?key=QkEyAbCdEfGh12"),
    ("anthropic", "/v1?key=QkEyAbCdEfGh12", "/v1/messages?key=QkEyAbCdEfGh12")])
def test_a_base_urls_query_follows_the_path_and_its_values_are_never_said(tmp_path, monkeypatch, api, base, path):
    """A base URL with a query (Azure's ``?api-version=``, a key passed as ``?key=``) was sent as
    ``/v1?key=…/chat/completions``: the path goes before the query. An error shows the query's values hidden."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM(api, faults=["500", "redirect"]) as server:
        url = f"http://127.0.0.1:{server.httpd.server_address[1]}{base}"
        server.location = path  # (the redirect points where the request went, query and all)
        compactor = Compactor({"provider": api, "model": "m", "base_url": url, "key_env": "TEST_LLM_KEY"}, BuildState(tmp_path))
        for _ in range(2):
            with pytest.raises(CallFailed) as failed:
                compactor.build(Task(0, 3, kind="user", text="x" * 900))
            assert "QkEyAbCdEfGh12" not in str(failed.value) and "key=[hidden]" in str(failed.value)
        assert path.partition("?")[0] + "?" in str(failed.value)
        text, _ = compactor.build(Task(0, 3, kind="user", text="x" * 900))
    assert text and server.paths == [path] * 3


PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture
def proxy_env(monkeypatch):
    """No proxy variable from the machine running the tests; ``set(NAME=value)`` sets one (the upper-case
    spelling)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    return lambda **names: [monkeypatch.setenv(name, value) for name, value in names.items()]


@contextlib.contextmanager
def _refusing_port():
    """A port on 127.0.0.1 that refuses every connection (bound, never listening) while the block runs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_server_on_this_machine_is_never_reached_through_a_proxy(tmp_path, proxy_env, host):
    """A proxy elsewhere cannot reach this machine's Ollama or vLLM: HTTP_PROXY and ALL_PROXY (a socks one,
    whose package is not even needed) are passed by for loopback, as curl passes them by with NO_PROXY."""
    from pimem.compactor import providers

    with _refusing_port() as port, FakeLLM("openai") as server:
        proxy_env(HTTP_PROXY=f"http://127.0.0.1:{port}", HTTPS_PROXY=f"http://127.0.0.1:{port}",
                  ALL_PROXY=f"socks5://127.0.0.1:{port}")
        server.url = server.url.replace("127.0.0.1", host)
        text, _ = _compactor(server, "openai", tmp_path).build(Task(0, 3, kind="user", text="x" * 900))
    assert text.startswith("user: summary of 3") and len(server.requests) == 1
    assert providers._proxy_for("http://[::1]:8000/v1") is None and providers._proxy_for("http://localhost:11434/v1") is None


def test_a_remote_server_is_reached_through_the_proxy_and_its_failure_names_the_proxy(tmp_path, proxy_env):
    from pimem.compactor import providers

    remote = "http://llm.example.invalid/v1"  # (no such host: only the proxy can answer for it)
    with FakeLLM("openai") as proxy:  # (it answers whatever is asked of it, an absolute URL as well)
        proxy_env(HTTP_PROXY=proxy.url.removesuffix("/v1"))
        proxy.url = remote
        text, _ = _compactor(proxy, "openai", tmp_path).build(Task(0, 3, kind="user", text="x" * 900))
    assert text.startswith("user: summary of 3") and len(proxy.requests) == 1
    with _refusing_port() as port:
        proxy_env(HTTP_PROXY=f"http://someone:s3cret@127.0.0.1:{port}")
        with pytest.raises(CallFailed) as failed:
            _compactor(proxy, "openai", tmp_path).build(Task(0, 3, kind="user", text="x" * 900))
    assert str(failed.value).startswith(f"{remote}/chat/completions via proxy http://127.0.0.1:{port}: ConnectError")
    assert "s3cret" not in str(failed.value)
    proxy_env(NO_PROXY="example.invalid")
    assert providers._proxy_for(remote) is None


@pytest.mark.skipif(importlib.util.find_spec("socksio") is not None, reason="socksio is installed here")
def test_a_socks_proxy_without_its_package_is_one_line_saying_so(tmp_path, proxy_env):
    proxy_env(ALL_PROXY="socks5://127.0.0.1:1080")
    comp = Compactor({"provider": "openai", "model": "m", "base_url": "http://llm.example.invalid/v1"}, BuildState(tmp_path))
    with pytest.raises(CallFailed) as failed:
        comp.build(Task(0, 3, kind="user", text="x" * 900))
    message = str(failed.value)
    assert message.startswith("http://llm.example.invalid/v1/chat/completions via proxy socks5://127.0.0.1:1080: ")
    assert "socksio" in message and "\n" not in message


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_cached_price_above_the_input_price_is_within_the_worst_case(tmp_path, api):
    """A cache priced above fresh input (a cache-write price entered as --price-cached-in, say): the worst case
    takes every token sent from the cache, so an honest bill is never taken for an overbilled one."""
    task = Task(0, 3, kind="user", text="x" * 900)
    cheap, dear = (Compactor({"provider": api, "model": "m", "price_in": 1.0, "price_out": 5.0, "price_cached_in": price},
                             BuildState(tmp_path)) for price in (0.1, 20.0))
    from pimem.compactor.prompt import chat

    sent = 2 * (len(SYSTEM.encode()) + len(chat("").encode()) + len(task.prompt().encode()) + 16)  # (a reasoning model's two)
    out = 2 * cheap.max_tokens + REASONING_EXTRA
    written = 1.25 if api == "anthropic" else 1.0
    assert cheap.worst_cost(task) == pytest.approx(2 * (sent * written + out * 5.0) / 1e6)
    assert dear.worst_cost(task) == pytest.approx(2 * (sent * 20.0 + out * 5.0) / 1e6)


@contextlib.contextmanager
def _replying(status: int, head: bytes, body, pause: float = 0.0):
    """A server on 127.0.0.1 whose every reply is ``status`` with ``head`` then each chunk of ``body`` (an
    iterable of bytes), ``pause`` seconds apart; yields its base URL."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length") or 0))
            chunks = list(body)
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(head) + sum(map(len, chunks))))
            self.end_headers()
            try:
                self.wfile.write(head)
                for chunk in chunks:
                    self.wfile.flush()
                    time.sleep(pause)
                    self.wfile.write(chunk)
            except OSError:  # (the client gave up)
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _completion(content: bytes) -> bytes:
    return (b'{"choices":[{"index":0,"message":{"role":"assistant","content":"' + content
            + b'"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":100}}')


def _failing_in_2_s(url: str, tmp_path) -> tuple[CallFailed, float]:
    """The error of an OpenAI-compatible call to ``url`` with a 2 s timeout, and the seconds it took."""
    comp = Compactor({"provider": "openai", "model": "m", "base_url": url, "key_env": "TEST_LLM_KEY",
                      "timeout": 2}, BuildState(tmp_path))
    start = time.monotonic()
    with pytest.raises(CallFailed) as failed:
        comp.build(Task(0, 3, kind="user", text="x" * 900))
    took = time.monotonic() - start
    comp.close()
    return failed.value, took


def test_a_reply_trickled_byte_by_byte_fails_the_call_at_its_timeout(tmp_path, monkeypatch):
    """``timeout`` bounds the whole call, not each read: a server sending its headers, then a byte every 0.2 s
    (80 s in all), fails the call as a silent one does, long before it would have finished."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    reply = _completion(b"user: trickled summary.")
    with _replying(200, b"", [reply[k:k + 1] for k in range(len(reply))], pause=0.2) as url:
        failed, took = _failing_in_2_s(url, tmp_path)
    assert str(failed) == f"{url}/chat/completions: no answer within 2 s"
    assert took < 0.2 * len(reply) / 2  # (generous: the trickle alone takes 0.2 s a byte)


@contextlib.contextmanager
def _stalling(parts: list[tuple[float, bytes]]):
    """A server on 127.0.0.1 that answers one request with each ``(pause, bytes)`` of ``parts`` in turn, then
    says nothing more for 60 s; yields its base URL and a list that gets ``True`` once the client hangs up
    (waited for, up to 10 s, on the way out)."""
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    hung_up: list[bool] = []

    def serve():
        conn, _ = listener.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(60)
            conn.recv(1 << 16)  # (the request: headers and a small body come in one go on 127.0.0.1)
            try:
                for pause, data in parts:
                    time.sleep(pause)
                    conn.sendall(data)
                while conn.recv(1 << 16):
                    pass
                hung_up.append(True)
            except ConnectionError:  # (a reset: the client hung up on bytes it had not read)
                hung_up.append(True)
            except TimeoutError:  # (60 s passed)
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1", hung_up
    finally:
        listener.close()
        thread.join(10)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_server_falling_silent_mid_reply_fails_the_call_at_its_timeout(tmp_path, monkeypatch, api):
    """Every read waits only for what is left of the call's ``timeout``: half a reply at 1.9 s, then silence,
    fails a 2 s call at 2 s (each read given the whole timeout, it failed at 3.9 s), and its connection is
    closed."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    reply = _completion(b"user: half a summary.")
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(reply)
    with _stalling([(0, head), (1.9, reply[:len(reply) // 2])]) as (url, hung_up):
        comp = Compactor({"provider": api, "model": "m", "base_url": url, "key_env": "TEST_LLM_KEY", "timeout": 2},
                         BuildState(tmp_path))
        start = time.monotonic()
        with pytest.raises(CallFailed) as failed:
            comp.build(Task(0, 3, kind="user", text="x" * 900))
        took = time.monotonic() - start
        comp.close()
    path = "/chat/completions" if api == "openai" else "/messages"
    assert str(failed.value) == f"{url}{path}: no answer within 2 s"
    assert took < 3.5  # (a bound, not a speed: the reads alone, each given 2 s, take 3.9 s)
    assert hung_up == [True]


def test_a_status_line_trickled_byte_by_byte_fails_the_call_at_its_timeout(tmp_path, monkeypatch):
    """The timeout bounds the wait for the headers too: a status line sent a byte every 0.5 s (each read
    answered in time, 60 s in all) fails a 2 s call at 2 s, and its connection is closed."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    line = b"HTTP/1.1 200 OK " + b"x" * 104
    with _stalling([(0.5, line[k:k + 1]) for k in range(len(line))]) as (url, hung_up):
        failed, took = _failing_in_2_s(url, tmp_path)
    assert str(failed) == f"{url}/chat/completions: no answer within 2 s"
    assert took < 10  # (a bound, not a speed: the line takes 60 s)
    assert hung_up == [True]


def test_a_call_made_during_another_in_the_same_thread_leaves_the_other_its_deadline(monkeypatch):
    """A call made while another is under way in the same thread (here a Python user's httpx event hook; a
    provider wrapping another could) gives the outer call its own deadline back when it ends: it cleared it,
    and the outer call failed reading its reply (a TypeError, no deadline to compare the clock with)."""
    from pimem.compactor import providers

    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai") as server:
        outer, inner = (providers.OpenAI("m", server.url, "TEST_LLM_KEY", timeout=30) for _ in range(2))
        assert outer.complete("system", "chat ", "task one", 100).text  # (its client made)
        inner_texts = []
        outer._client.event_hooks["response"] = [lambda _: inner_texts.append(inner.complete("system", "chat ", "task two", 100).text)]
        try:
            assert outer.complete("system", "chat ", "task three", 100).text and len(inner_texts) == 1
        finally:
            outer.close()
            inner.close()
    assert len(server.requests) == 3


def test_a_reply_past_its_bound_fails_the_call_unread(tmp_path, monkeypatch):
    """A completion of 8 MiB (a valid one: 200 MiB took 3.9 GB) is not held whole: the call fails past
    ``HTTP_REPLY`` bytes, saying so; an error page that long still shows its head."""
    from pimem.compactor import providers

    monkeypatch.setenv("TEST_LLM_KEY", "k")
    words = [b"word " * 65536] * 25
    assert providers.HTTP_REPLY < sum(map(len, words)) < 2 * providers.HTTP_REPLY
    task = Task(0, 3, kind="user", text="x" * 900)
    with _replying(200, _completion(b"")[:-66], words) as url:
        comp = Compactor({"provider": "openai", "model": "m", "base_url": url}, BuildState(tmp_path))
        with pytest.raises(CallFailed) as failed:
            comp.build(task)
        comp.close()
    assert str(failed.value) == (f"{url}/chat/completions: the reply is over 4 MiB (a summary's is a few KB); "
                                 "the rest was not read")
    with _replying(502, b"<html>bad gateway ", words) as url:
        comp = Compactor({"provider": "openai", "model": "m", "base_url": url}, BuildState(tmp_path))
        with pytest.raises(CallFailed) as failed:
            comp.build(task)
        comp.close()
    assert str(failed.value).startswith(f"{url}/chat/completions: HTTP 502: <html>bad gateway word word")


def test_a_reply_nested_too_deep_to_read_is_no_json_and_says_where_it_came_from(tmp_path):
    """A reply of JSON nested deeper than Python reads (a broken proxy, a hostile server) failed the call with
    ``RecursionError: maximum recursion depth exceeded …``, naming neither the server nor the reply; it fails as
    any reply that is not JSON does."""
    task = Task(0, 3, kind="user", text="x" * 900)
    with _replying(200, b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", []) as url:
        comp = Compactor({"provider": "openai", "model": "m", "base_url": url}, BuildState(tmp_path))
        with pytest.raises(CallFailed) as failed:
            comp.build(task)
        comp.close()
    assert str(failed.value).startswith(f"{url}/chat/completions: the reply is not JSON: '{{\"choices\": [[[["), failed.value


def test_a_password_in_the_base_url_is_never_shown_nor_recorded(run, sh, home, tmp_path, monkeypatch):
    """``http://user:password@host/v1``: the build's error, ``status``, ``compactor.json`` and the log show
    the URL without it; a server echoing the ``Basic`` header it became is hidden too."""
    import orjson

    from pimem import Memory
    from pimem.compactor import providers

    monkeypatch.setenv("TEST_LLM_KEY", "sk-testkey-abcdefghijklmnop")
    Memory.at("m").append([{"kind": "user", "text": f"message {k}: " + "words " * 150} for k in range(4)])
    with FakeLLM("openai", faults=["500"] * 20) as server:
        url = server.url.replace("http://", "http://bob:UrlPw0rdSecret@")
        assert run("model", "m", "openai/x", "--base-url", url, "--key-env", "TEST_LLM_KEY").exit_code == 0
        config = orjson.loads((home / "m" / "config.json").read_bytes())
        config["compactor"]["retry_seconds"] = 0  # (the second build retries at once)
        (home / "m" / "config.json").write_bytes(orjson.dumps(config))
        built = sh("build-tree", "m", "--retries", "0")
        logged = sh("build-tree", "m", "--retries", "0", "--log", tmp_path / "build.log")
    stderr, log = built.stderr.decode(), (tmp_path / "build.log").read_text()
    assert built.returncode == 6 and f"{server.url}/chat/completions: HTTP 500" in stderr
    assert logged.returncode == 6 and f"{server.url}/chat/completions: HTTP 500" in log
    status = run("status", "m").stdout
    assert f"failing   0+1: {server.url}/chat/completions: HTTP 500" in status
    for shown in (stderr, status, (home / "m" / "compactor.json").read_text(), log):
        assert "UrlPw0rdSecret" not in shown
    provider = providers.OpenAI("m", url, key_env="TEST_LLM_KEY")
    echo = "bad key Basic Ym9iOlVybFB3MHJkU2VjcmV0 for bob:UrlPw0rdSecret at " + url
    assert provider._hidden(echo) == f"bad key Basic [password] for bob:[password] at {server.url}"


def test_the_api_key_reaches_the_server_past_a_user_and_password_in_the_base_url(tmp_path, monkeypatch):
    """httpx sends a URL's user and password as ``Authorization: Basic``, which took the place of the OpenAI
    key's ``Bearer`` one: the key goes, and the user and password only without a key. Anthropic's key has a
    header of its own: both go."""
    monkeypatch.setenv("TEST_LLM_KEY", "sk-testkey-abcdefghijklmnop")
    basic = "Basic Ym9iOlVybFB3MHJkU2VjcmV0"  # bob:UrlPw0rdSecret
    sent = []
    for api, key_env in (("openai", "TEST_LLM_KEY"), ("openai", None), ("anthropic", "TEST_LLM_KEY")):
        with FakeLLM(api) as server:
            server.url = server.url.replace("http://", "http://bob:UrlPw0rdSecret@")
            comp = _compactor(server, api, tmp_path, key_env=key_env)
            assert comp.build(Task(0, 3, kind="user", text="x" * 900))[0].startswith("user: summary of 3")
            comp.close()
        headers = {k.lower(): v for k, v in server.headers[-1].items()}
        sent.append((headers.get("authorization"), headers.get("x-api-key")))
    assert sent == [("Bearer sk-testkey-abcdefghijklmnop", None), (basic, None), (basic, "sk-testkey-abcdefghijklmnop")]


def test_an_anthropic_base_url_ending_in_v1_reaches_the_messages_api(tmp_path, monkeypatch):
    """An OpenAI URL holds /v1 and Anthropic's does not; written either way, an Anthropic one reaches
    /v1/messages (with it, calls went to /v1/v1/messages)."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("anthropic") as server:
        for url in (server.url, server.url + "/v1", server.url + "/v1/"):
            server.url = url
            text, _ = _compactor(server, "anthropic", tmp_path).build(Task(0, 3, kind="user", text="x" * 900))
            assert text.startswith("user: summary of 3")
    assert server.paths == ["/v1/messages"] * 3


def _alive(marker: str) -> list[int]:
    """Processes whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline:
                found.append(int(entry))
    return found


def _marker(seconds: int) -> str:
    """A ``sleep`` duration no other process on the machine runs (another copy of this suite among them)."""
    return f"{seconds}.{uuid.uuid4().int % 10**12:012d}"


def _sleeping(marker: str) -> list[int]:
    """The ``sleep MARKER`` processes."""
    found = []
    for pid in _alive(marker):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                found.append(pid)
    return found


def _gone(marker: str) -> bool:
    deadline = time.monotonic() + 20  # (generous: a loaded machine starts the watchdog's pkill late)
    while _alive(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(marker)


def test_the_api_key_never_appears_in_an_error_and_a_stray_line_end_is_dropped(tmp_path, monkeypatch):
    from pimem.compactor import providers

    monkeypatch.setenv("TEST_LLM_KEY", "sk-SECRET123456789\r\n")  # (as a .env file written on Windows leaves it)
    with FakeLLM("openai") as server:
        _compactor(server, "openai", tmp_path).build(Task(0, 0, kind="user", text="x" * 900))
    assert {k.lower(): v for k, v in server.headers[-1].items()}["authorization"] == "Bearer sk-SECRET123456789"
    monkeypatch.setenv("TEST_LLM_KEY", "sk-SECRET\n123456789")
    with FakeLLM("openai") as server, pytest.raises(CallFailed) as failed:
        _compactor(server, "openai", tmp_path).build(Task(0, 0, kind="user", text="x" * 900))
    assert "SECRET" not in str(failed.value) and "TEST_LLM_KEY" in str(failed.value) and not server.requests
    provider = providers.OpenAI("m", key_env="TEST_LLM_KEY")  # a server's error that quotes the request back
    assert "SECRET" not in provider._hidden("Illegal header value b'Bearer sk-SECRET\\n123456789' from sk-SECRET\n123456789")
    monkeypatch.setenv("TEST_LLM_KEY", "x")  # a local server's stand-in: no secret, and each x of the error stays
    assert provider._hidden("http://api.example.invalid: no key x") == "http://api.example.invalid: no key x"


def test_a_command_past_its_timeout_is_killed_with_every_child_it_started(tmp_path):
    marker = _marker(31)
    command = f"sleep {marker} & sleep {marker} & (sleep {marker}; echo late) & cat > /dev/null; sleep {marker}"
    comp = Compactor({"provider": "command", "command": command, "timeout": 1}, BuildState(tmp_path))
    started = time.monotonic()
    with pytest.raises(CallFailed, match="no answer within 1 s"):
        comp.build(Task(0, 0, kind="user", text="a long message"))
    comp.close()
    assert time.monotonic() - started < 10
    assert _gone(marker), "children of the command were left running"


@pytest.mark.parametrize("answers", [False, True])
def test_a_child_in_a_process_group_of_its_own_goes_with_the_command(tmp_path, answers):
    """coreutils' ``timeout`` (and a shell with job control, ``set -m``) moves itself into a process group of
    its own, still in the command's session: it is killed with the command, whether the command answers or
    passes its timeout."""
    marker = _marker(25)
    then = "sleep 0.5; echo 'user: answered'" if answers else "wait"
    command = f"cat > /dev/null; timeout 100 sleep {marker} | cat & {then}"
    comp = Compactor({"provider": "command", "command": command, "timeout": 2}, BuildState(tmp_path))
    try:
        if answers:
            assert comp.build(Task(0, 0, kind="user", text="a long message"))[0] == "user: answered"
        else:
            with pytest.raises(CallFailed, match="no answer within 2 s"):
                comp.build(Task(0, 0, kind="user", text="a long message"))
        comp.close()
        assert _gone(marker), "a child in a group of its own outlived the call"
    finally:
        for pid in _alive(marker):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)


def test_a_command_that_answers_leaves_nothing_running_behind_it(tmp_path):
    marker = _marker(27)
    command = f"(sleep {marker} &); cat > /dev/null; echo 'user: answered'"
    comp = Compactor({"provider": "command", "command": command}, BuildState(tmp_path))
    started = time.monotonic()
    text, _ = comp.build(Task(0, 0, kind="user", text="a long message"))
    comp.close()
    assert text == "user: answered"
    assert time.monotonic() - started < 10  # the answer counts once the command exits (its child holds stdout)
    assert _gone(marker)


def test_calls_still_running_when_pimem_exits_are_killed_with_their_children(tmp_path):
    """A build stopped by a signal gives up on calls still running after its grace (daemon threads); the
    process's exit kills their commands whole. A real process that exits with a call in flight."""
    import subprocess
    import sys

    from conftest import ROOT

    marker = _marker(29)
    script = (
        "import threading, time\n"
        "from pimem.compactor.providers import Command\n"
        f"call = Command('cat > /dev/null; sleep {marker} & sleep {marker}')\n"
        "threading.Thread(target=lambda: call.complete('s', '', 'task', 10), daemon=True).start()\n"
        "time.sleep(1.0)\n"
    )
    temp = tmp_path / "temp"
    temp.mkdir()
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)})
    assert done.returncode == 0
    assert _gone(marker), "a command outlived the process that started it"
    assert list(temp.iterdir()) == []  # nor its system prompt file


@pytest.mark.parametrize("signum", [9, 1])  # SIGKILL, and SIGHUP (a terminal closed, an ssh link dropped)
def test_calls_in_flight_die_with_a_pimem_killed_by_a_signal_it_cannot_handle(tmp_path, signum):
    """A signal that ends pimem without its exit handlers (SIGKILL, a SIGHUP nothing catches) still takes its
    commands along: they are in sessions of their own, which a terminal's hangup never reaches, and would
    otherwise run to their own end, past every timeout. Their system prompt file goes with them."""
    import signal
    import subprocess
    import sys

    from conftest import ROOT

    marker = _marker(28)
    script = (
        "import threading, time\n"
        "from pimem.compactor.providers import Command\n"
        f"call = Command('cat > /dev/null; timeout 100 sleep {marker} | cat & sleep {marker}')\n"
        "threading.Thread(target=lambda: call.complete('s', '', 'task', 10), daemon=True).start()\n"
        "time.sleep(60)\n"
    )
    temp = tmp_path / "temp"
    temp.mkdir()
    pimem = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)})
    try:
        deadline = time.monotonic() + 30
        # (both sleeps up, timeout's too: a kill while the command's shell still forks may miss the child it is
        # making, so the test waits until there is none left to make)
        while len(_sleeping(marker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_sleeping(marker)) == 2, "the command did not start"
        pimem.send_signal(signum)
        assert pimem.wait(30) == -signum
        assert _gone(marker), "a command outlived the process that started it"
        assert list(temp.iterdir()) == []  # nor its system prompt file
    finally:
        pimem.kill()
        for pid in _alive(marker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_the_system_prompt_reaches_a_command_apart_from_the_task(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    apart = (f"printf %s {{system}} > {out}/arg; cp \"$PIMEM_SYSTEM_FILE\" {out}/file; cat > {out}/stdin; "
             "echo 'user: ok'")
    comp = Compactor({"provider": "command", "command": apart}, BuildState(tmp_path))
    assert comp.build(Task(0, 3, kind="user", text="the task's message"), "0+1|user: hi")[0] == "user: ok"
    assert (out / "arg").read_text() == SYSTEM and (out / "file").read_text() == SYSTEM
    stdin = (out / "stdin").read_text()
    assert SYSTEM not in stdin and stdin.startswith("<chat>\n0+1|user: hi\n</chat>\n\nCompaction: compress message 3")
    [system_file] = comp.provider()._system_files.values()
    comp.close()
    assert not Path(system_file).exists()
    # without {system}: one input, the system prompt first (commands that take a single prompt)
    whole = Compactor({"provider": "command", "command": f"cat > {out}/whole; echo 'user: ok'"}, BuildState(tmp_path))
    whole.build(Task(0, 3, kind="user", text="the task's message"))
    whole.close()
    assert (out / "whole").read_text().startswith(SYSTEM + "\n\n<chat>")


def test_a_quoted_system_placeholder_is_replaced_quotes_and_all(tmp_path):
    """``"{system}"`` as shells are written: the system prompt (backticks, quotes, parentheses) arrives whole,
    not as a syntax error in every call."""
    assert "`" in SYSTEM and "(" in SYSTEM
    out = tmp_path / "out"
    out.mkdir()
    command = (f"printf %s \"{{system}}\" > {out}/double; printf %s '{{system}}' > {out}/single; "
               "cat > /dev/null; echo 'user: ok'")
    comp = Compactor({"provider": "command", "command": command}, BuildState(tmp_path))
    assert comp.build(Task(0, 3, kind="user", text="the task's message"))[0] == "user: ok"
    comp.close()
    assert (out / "double").read_text() == SYSTEM and (out / "single").read_text() == SYSTEM


def test_a_system_placeholder_inside_a_longer_word_arrives_whole(tmp_path):
    """``"Rules: {system}"``, ``'Rules: {system}'`` and ``{system}.``: the system prompt (apostrophes, backticks,
    parentheses) arrives inside the word as written, never as a syntax error in every call or a backtick run."""
    assert "'" in SYSTEM and "`" in SYSTEM
    out = tmp_path / "out"
    out.mkdir()
    command = (f"printf %s \"Rules: {{system}}\" > {out}/double; printf %s 'Rules: {{system}}' > {out}/single; "
               f"printf %s {{system}}. > {out}/bare; printf %s '{{}}' > {out}/braces; cat > /dev/null; echo 'user: ok'")
    comp = Compactor({"provider": "command", "command": command}, BuildState(tmp_path))
    assert comp.build(Task(0, 3, kind="user", text="the task's message"))[0] == "user: ok"
    comp.close()
    assert (out / "double").read_text() == "Rules: " + SYSTEM and (out / "single").read_text() == "Rules: " + SYSTEM
    assert (out / "bare").read_text() == SYSTEM + "." and (out / "braces").read_text() == "{}"


def _temp_bytes_held(temp: Path) -> int:
    """Bytes of the files under ``temp`` this process holds open (deleted or not)."""
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(temp)):
                held += os.stat(f"/proc/self/fd/{fd}").st_size
        except OSError:
            pass
    return held


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_flood_of_output_is_read_in_bounded_memory_and_never_kept_on_disk(tmp_path, monkeypatch, stream):
    """What a command prints past its answer's first MiB is read and dropped, not stored: ``yes`` until the
    timeout would otherwise fill the temporary directory (gigabytes a second, eight calls at once)."""
    import threading

    from pimem.compactor.providers import COMMAND_OUTPUT, Command

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr("tempfile.tempdir", None)  # (read TMPDIR again)
    redirect = "" if stream == "stdout" else " >&2"
    call = Command(f"cat > /dev/null; echo 'user: the head'; head -c 67108864 /dev/zero{redirect}", timeout=60)
    most, done = [0], threading.Event()

    def watch():
        while not done.is_set():
            most[0] = max(most[0], _temp_bytes_held(temp))
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        reply = call.complete("the system prompt", "", "task", 10)
    finally:
        done.set()
        watcher.join()
        call.close()
    assert reply.text.startswith("user: the head\n")
    assert reply.finish == ("length" if stream == "stdout" else "stop") and len(reply.text) <= COMMAND_OUTPUT
    assert most[0] < COMMAND_OUTPUT, f"{most[0]:,} bytes of output kept on disk"


def test_a_daemon_holding_the_commands_output_does_not_hold_the_call(tmp_path):
    """A child that left the group (``setsid``) escapes the kill, but not with the call: the answer counts when
    the command exits."""
    marker = _marker(26)
    command = f"cat > /dev/null; setsid sleep {marker} & echo 'user: answered'; echo 'a warning' >&2"
    comp = Compactor({"provider": "command", "command": command, "timeout": 20}, BuildState(tmp_path))
    started = time.monotonic()
    try:
        text, _ = comp.build(Task(0, 0, kind="user", text="a long message"))
    finally:
        comp.close()
        for pid in _alive(marker):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
    assert text == "user: answered" and time.monotonic() - started < 10


@pytest.mark.parametrize(("command", "said"), [
    ("cat > /dev/null; echo 'rate limited' >&2; echo 'try again in 20 s' >&2; exit 3",
     "exited 3: rate limited try again in 20 s"),
    ("cat > /dev/null; exit 3", "exited 3"),
    ("cat > /dev/null; kill -TERM $$", "was killed by SIGTERM"),
    ("no-such-model-command -m x", "exited 127: /bin/sh: .*no-such-model-command: .*not found"),  # (dash, bash)
    ("cat > /dev/null; sh -c \"echo 'Error: unknown model x' >&2; exit 1\" | head -1",
     "exited 0 with no answer: Error: unknown model x"),  # (a pipeline exits as its last command)
    ("cat > /dev/null; printf ' \\n\\t\\n'", "exited 0 with no answer"),
])
def test_a_failed_command_says_how_it_ended_in_one_line(tmp_path, command, said):
    comp = Compactor({"provider": "command", "command": command}, BuildState(tmp_path))
    with pytest.raises(CallFailed) as failed:
        comp.build(Task(0, 3, kind="user", text="the task's message"))
    comp.close()
    assert re.fullmatch(re.escape(f"command {command!r} ") + said, str(failed.value))


def test_a_failed_commands_error_shows_its_command_line_redacted(tmp_path):
    """A key written in the command line is not in the error of a call that failed: the command is said as
    ``pimem model`` and ``status`` show it."""
    key = "sk-proj-" + "Xq7vR2mK9pL4tW8nB3cF6hJ1"
    comp = Compactor({"provider": "command", "command": f"OPENAI_API_KEY={key} cat > /dev/null; exit 3"},
                     BuildState(tmp_path))
    with pytest.raises(CallFailed) as failed:
        comp.build(Task(0, 3, kind="user", text="the task's message"))
    comp.close()
    assert key not in str(failed.value) and str(failed.value).endswith(" cat > /dev/null; exit 3' exited 3")


@pytest.mark.parametrize("end", ["exit 1", "exit 0"])
def test_a_failed_commands_stderr_that_echoes_a_secret_of_its_command_line_does_not_show_it(tmp_path, end):
    """The command line's secret was hidden in the error, but the command's stderr quoted in it was not: a tool
    that echoes its key (``invalid key K``) had it shown in build-tree's line, ``status`` and
    ``compactor.json`` (a key of no pattern pimem knows: a local server's). What is hidden in the command line
    is hidden in its stderr too, as an HTTP provider's key is in its server's words."""
    key = "Zx9kQ2mLp4Rt7vWb"
    command = f'MY_API_KEY={key} sh -c "echo invalid key \\$MY_API_KEY for the call >&2; {end}"'
    comp = Compactor({"provider": "command", "command": command}, BuildState(tmp_path))
    with pytest.raises(CallFailed) as failed:
        comp.build(Task(0, 3, kind="user", text="the task's message"))
    comp.close()
    assert key not in str(failed.value) and str(failed.value).endswith(": invalid key [hidden] for the call"), failed.value


def test_bytes_of_a_commands_answer_that_are_not_utf8_fail_its_call_unless_its_input_holds_u_fffd(tmp_path):
    """Bytes that are not UTF-8 are read as U+FFFD, never dropped unseen: an answer holding them is no summary
    (``compactor.junk``), unless the message it summarises holds U+FFFD itself (text decoded so before it was
    logged), when the line shows them as they came."""
    comp = Compactor({"provider": "command", "command": r"cat > /dev/null; printf 'user: port \377\376 of it \303(end)\n'"},
                     BuildState(tmp_path))
    with pytest.raises(CallFailed, match=r"^command returned no summary: its answer is not UTF-8 text \(3 U\+FFFD in its line\)$"):
        comp.build(Task(0, 3, kind="user", text="the task's message"))
    assert comp.build(Task(0, 3, kind="user", text="port \ufffd of it"))[0] == "user: port \ufffd\ufffd of it \ufffd(end)"
    comp.close()


def test_calls_at_once_share_one_system_file_and_leave_none(tmp_path, monkeypatch):
    import threading

    from pimem.compactor.providers import Command

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr("tempfile.tempdir", None)  # (read TMPDIR again)
    call = Command('cat > /dev/null; echo "$PIMEM_SYSTEM_FILE"; sleep 0.2')
    seen = []
    calls = [threading.Thread(target=lambda: seen.append(call.complete("the system prompt", "", "task", 10).text.strip()))
             for _ in range(8)]
    for thread in calls:
        thread.start()
    for thread in calls:
        thread.join(30)
    assert len(seen) == 8 and len(set(seen)) == 1 and Path(seen[0]).read_text() == "the system prompt"
    call.close()
    assert [p.name for p in temp.iterdir() if p.name.startswith("pimem-system-")] == []


def test_status_shows_the_share_of_input_read_from_the_prompt_cache(run, home, monkeypatch):
    import orjson

    from pimem import Memory

    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", usage="bytes", line_bytes=300) as server:
        Memory.at("m").append([{"kind": "user", "text": f"message {k}: " + "words " * 150} for k in range(12)])
        assert run("model", "m", "openai/m", "--base-url", server.url, "--key-env", "TEST_LLM_KEY",
                   "--price-in", "1", "--price-out", "5", "--price-cached-in", "0.1").exit_code == 0
        assert run("build-tree", "m").exit_code == 0
    spent = orjson.loads(run("status", "m", "--json").stdout)["spent"]
    assert 0 < spent["tokens_cached"] < spent["tokens_in"]
    share = f"{spent['tokens_cached'] / spent['tokens_in']:.0%} from the prompt cache"
    assert share in run("status", "m").stdout
    assert "price_cached_in" in run("model", "m", "--json").stdout


def test_a_providers_control_characters_are_shown_not_obeyed(run, home):
    from pimem import Memory

    Memory.at("m").append([{"kind": "user", "text": "words " * 200}])
    assert run("model", "m", "command", "--command", r"printf '\033[31mred\007 boom' >&2; exit 1").exit_code == 0
    assert run("build-tree", "m", "--retries", "0").exit_code == 6
    status = run("status", "m").stdout
    assert "^[[31mred^G boom" in status and "\x1b" not in status and "\x07" not in status


@pytest.mark.parametrize("api, status, whole, cut", [("openai", 200, True, 0), ("anthropic", 200, True, 0),
                                                     ("openai", 401, True, 300), ("openai", 200, False, 120)])
def test_a_reply_of_an_unknown_shape_that_quotes_the_api_key_does_not_show_it(tmp_path, monkeypatch, api, status,
                                                                               whole, cut):
    """A 200 reply that is JSON but no completion (a gateway's ``{"error": "bad key K"}``) failed the call with
    the reply quoted as it came: the API key it echoed was shown in the error, ``build-tree``'s line,
    ``status`` and ``compactor.json`` (a key no redaction pattern knows, a local server's, say), where an
    HTTP error's body has it hidden. And an HTTP error's body (cut at 300 characters) or a reply that is not
    JSON (at 120) was cut before the key was looked for: one across the cut had its first characters shown."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Echo(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["content-length"]))
            key = (self.headers.get("authorization") or self.headers.get("x-api-key") or "").split()[-1]
            data = json.dumps({"error": f"bad key {key}", "usage": {"prompt_tokens": 3}}).encode()
            if status != 200 or not whole:  # the key across the error's cut: a prefix of it stayed
                data = ("y" * (cut - 8) + key).encode()
            self.send_response(status)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    monkeypatch.setenv("TEST_LLM_KEY", "localkey4711abcd")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}" + ("/v1" if api == "openai" else "")
        comp = Compactor({"provider": api, "model": "m", "base_url": url, "key_env": "TEST_LLM_KEY"}, BuildState(tmp_path))
        with pytest.raises(CallFailed) as failed:
            comp.build(Task(0, 0, kind="user", text="x" * 900))
    finally:
        server.shutdown()
        server.server_close()
    assert "localkey" not in str(failed.value), failed.value
    assert cut or "bad key [API key]" in str(failed.value), failed.value
