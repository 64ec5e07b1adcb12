"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions or the Anthropic Messages API,
records every request body, and injects faults on request (used by the tests and the benchmarks)."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = ("500", "400", "413", "422", "429", "401", "403", "403-region", "403-flagged", "403-other", "400-key", "hang", "malformed",
          "empty", "nochoices", "long", "length", "redirect")
BAD_COUNTS = {"negative": -5, "text": "1000", "fraction": 999.5}  # faults: the reply's input count so


def summary_for(body: str) -> str:
    """A deterministic reply naming the node the task asks for (so duplicates would show)."""
    task = body.rsplit("Compaction:", 1)[-1]
    m = re.search(r"message (\d+)", task) or re.search(r"lines (\d+\+\d+ and \d+\+\d+)", task)
    what = m.group(1) if m else "?"
    return f"user: summary of {what}; pi: done. Extra words to pad the line a little."


def filler(size: int) -> str:
    """``size`` characters of padding: words that differ and hold no number (the same word over and over is no
    summary, ``pimem/compactor/junk.py``; a number would be a fact the faithfulness guard looks for)."""
    words = (chr(97 + k % 26) + chr(97 + k // 26 % 26) + chr(97 + k // 676 % 26) + "o" for k in range(size // 5 + 1))
    return "".join(" " + word for word in words)[:size]


class Server(ThreadingHTTPServer):
    """A thread per connection, and a listen backlog for a client's every connection at once: with the default
    of 5, the 6th to 8th of a build's 8 first connections were dropped and tried again a second later (TCP's
    retry), so calls the builder sent first reached the server after hundreds of others, holding the
    compactor's view back that long."""

    daemon_threads = True
    request_queue_size = 128


CACHE_LEAST = 1024  # tokens: a shorter prefix Anthropic does not cache


def cache_marks(body: dict) -> list[str]:
    """The prefixes of an Anthropic request that end at a ``cache_control`` mark, shortest first (the system
    blocks, then the messages' content blocks, in order)."""
    blocks = [*(body.get("system") if isinstance(body.get("system"), list) else []),
              *(block for message in body.get("messages", []) if isinstance(message.get("content"), list)
                for block in message["content"])]
    marks, text = [], ""
    for block in blocks:
        text += block.get("text", "")
        if block.get("cache_control"):
            marks.append(text)
    return marks


class FakeLLM:
    """``FakeLLM("openai", faults=[…])``: the n-th request gets ``faults[n]`` (None = a normal answer), or
    ``faults`` may be a function ``(n, body) -> fault``. ``latency`` delays every answer: seconds, or a function
    ``(n, body) -> seconds`` (calls that take their time apart, as a real provider's do). ``retry_after``: what
    the "429" fault's ``Retry-After`` header says."""

    def __init__(self, api: str = "openai", faults=None, latency: float = 0.0, hang: float = 3.0, reasoning: bool = False,
                 pad: int = 0, line_bytes: int | None = None, usage: str = "fixed", retry_after: str = "1"):
        self.api = api
        self.retry_after = retry_after
        self.pad = pad  # bytes of filler added to every normal answer (so merges of answers are not free)
        self.line_bytes = line_bytes  # every normal answer padded or cut to exactly this many bytes
        # "fixed": 1000 tokens in, 100 out; "bytes": a token per 4 bytes of the prompt and the answer, with the
        # bytes the prompt shares with the previous request's (from its start, in 1024-byte blocks) reported as
        # cached, as OpenAI's automatic prefix cache would; for Anthropic, the longest prefix up to a cache_control
        # mark that an earlier request wrote is read from the cache, and the longer ones it marks are written
        self.usage = usage
        self._previous = ""
        self._cached: set[str] = set()  # the prefixes Anthropic's cache holds (``usage="bytes"``)
        self.faults = faults or []
        self.latency = latency
        self.hang = hang
        self.reply = None  # callable(body) -> the text of every normal answer, instead of ``summary_for``
        self.reasoning = reasoning  # answer "length" with no text unless max_tokens ≥ 1000
        self.location = "/moved/chat/completions"  # where the "redirect" fault sends the client (307)
        self.requests: list[dict] = []
        self.raw: list[bytes] = []
        self.headers: list[dict] = []
        self.paths: list[str] = []  # each request's path
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                # headers and body go out in separate writes: without this, Nagle and delayed ACKs add 40 ms
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                with server._lock:
                    n = len(server.raw)
                    server.raw.append(raw)
                    server.headers.append(dict(self.headers))
                    server.paths.append(self.path)
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        body = {}
                    server.requests.append(body)
                fault = server.fault(n, body)
                latency = server.latency(n, body) if callable(server.latency) else server.latency
                if latency:
                    time.sleep(latency)
                server.answer(self, body, fault)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}" + ("/v1" if api == "openai" else "")
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def fault(self, n: int, body: dict):
        if callable(self.faults):
            return self.faults(n, body)
        return self.faults[n] if n < len(self.faults) else None

    def text_of(self, body: dict) -> str:
        """The prompt's text: the system prompt and the messages, content blocks joined."""
        def text(content) -> str:
            return content if isinstance(content, str) else "".join(b.get("text", "") for b in content or [])

        if self.api == "openai":
            return "\n".join(text(m.get("content", "")) for m in body.get("messages", []))
        return text(body.get("system", "")) + "\n" + "\n".join(text(m.get("content", "")) for m in body.get("messages", []))

    def answer(self, handler, body: dict, fault) -> None:
        if fault == "hang":
            time.sleep(self.hang)
            return self.send(handler, 200, b"{}")
        if fault == "500":
            return self.send(handler, 500, b'{"error": "internal"}')
        if fault in ("400", "413", "422"):  # (what a provider says of a request it refuses: too long, say)
            return self.send(handler, int(fault), b'{"error": "the request is too long for this model"}')
        if fault == "401":  # (the key it was sent, echoed as a gateway does: every error must hide it)
            key = handler.headers.get("x-api-key") or handler.headers.get("authorization", "").removeprefix("Bearer ")
            return self.send(handler, 401, self.error("authentication_error", "invalid_api_key",
                                                      f"Incorrect API key provided: {key}"))
        if fault == "403":  # (Anthropic's words for a key that may not use the model)
            return self.send(handler, 403, self.error("permission_error", "permission_denied", "Your API key does "
                                                      "not have permission to use the specified resource."))
        if fault == "403-region":  # (OpenAI's)
            return self.send(handler, 403, self.error("request_forbidden", "unsupported_country_region_territory",
                                                      "Country, region, or territory not supported"))
        if fault == "403-flagged":  # (OpenRouter's moderation: this request's content, not the key)
            return self.send(handler, 403, b'{"error": {"code": 403, "message": "m1 requires moderation on OpenRouter. '
                                           b'Your input was flagged for \\"harassment\\". No credits were charged."}}')
        if fault == "400-key":  # (Google's, at its OpenAI-compatible endpoint, for a key that is not valid)
            return self.send(handler, 400, json.dumps([{"error": {
                "code": 400, "message": "API key not valid. Please pass a valid API key.", "status": "INVALID_ARGUMENT",
                "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                             "domain": "googleapis.com"}]}}]).encode())
        if fault == "403-other":  # (a 403 whose words name neither)
            return self.send(handler, 403, b'{"error": "try again later"}')
        if fault == "429":
            return self.send(handler, 429, b'{"error": "slow down"}', {"Retry-After": self.retry_after})
        if fault == "redirect":
            return self.send(handler, 307, b"", {"Location": self.location})
        if fault == "malformed":
            return self.send(handler, 200, b'{"choices": [ {"message": ')
        prompt = self.text_of(body)
        text, finish = summary_for(prompt) + filler(self.pad // 7 * 7), "stop"
        if self.line_bytes:
            text = (text + filler(self.line_bytes + 7)).encode()[: self.line_bytes].decode("utf-8", "ignore")
        if self.reply is not None:
            text = self.reply(body)
        if fault == "empty":
            text = ""
        elif fault == "long":
            text = (filler(2000) + "; ") * 2  # about 4 KB
        elif fault == "length" or (self.reasoning and body.get("max_tokens", 0) < 1000):
            text, finish = "", "length"
        tokens_in, tokens_out, cached = 1000, 100, 0
        if self.usage == "bytes":
            with self._lock:
                shared = len(os.path.commonprefix([prompt, self._previous]))
                self._previous = prompt
            tokens_in, tokens_out = len(prompt.encode()) // 4, len(text.encode()) // 4
            cached = min(tokens_in, shared // 1024 * 1024 // 4)
        written = 0
        if self.usage == "bytes" and self.api == "anthropic":  # its cache keeps the prefixes marked cache_control
            marks = cache_marks(body)
            with self._lock:
                hit = max((mark for mark in marks if mark in self._cached), key=len, default="")
                new = [mark for mark in marks if len(mark) > len(hit) and len(mark.encode()) // 4 >= CACHE_LEAST]
                self._cached.update(new)
            cached = len(hit.encode()) // 4
            written = len(new[-1].encode()) // 4 - cached if new else 0
        if fault == "overcached":  # more tokens from the cache than the prompt had (a server's mistake)
            cached = 100 * tokens_in
        elif fault == "overbilled":  # a million tokens for a few kilobytes sent
            tokens_in = 1_000_000
        elif fault == "overbilled_huge":  # 200 million
            tokens_in = 200_000_000
        if self.api == "openai":
            reply = {"id": "x", "object": "chat.completion", "model": body.get("model"),
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
                     "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                               "total_tokens": tokens_in + tokens_out}}
            if cached:
                reply["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
            if fault == "nochoices":  # (no choice at all, the tokens still counted)
                reply["choices"] = []
            elif fault == "parts":  # the text as content parts, as some servers send it
                reply["choices"][0]["message"]["content"] = [{"type": "text", "text": text}]
            elif fault == "number":
                reply["choices"][0]["message"]["content"] = 12345
        else:  # Anthropic counts cached input apart from input_tokens
            reply = {"id": "x", "type": "message", "role": "assistant", "model": body.get("model"),
                     "content": [{"type": "text", "text": text}] if text else [],
                     "stop_reason": "max_tokens" if finish == "length" else "end_turn",
                     "usage": {"input_tokens": tokens_in - cached - written, "output_tokens": tokens_out}}
            if cached:
                reply["usage"]["cache_read_input_tokens"] = cached
            if written:
                reply["usage"]["cache_creation_input_tokens"] = written
            if fault == "written":  # the prompt written to the cache (billed at 1.25× the input price)
                reply["usage"]["cache_creation_input_tokens"] = 2000
            elif fault == "number":
                reply["content"] = None
        if fault in BAD_COUNTS:  # an input count that is no count
            reply["usage"]["prompt_tokens" if self.api == "openai" else "input_tokens"] = BAD_COUNTS[fault]
        self.send(handler, 200, json.dumps(reply).encode())

    def error(self, kind: str, code: str, message: str) -> bytes:
        """An error reply's body in this API's shape."""
        if self.api == "openai":
            return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()

    @staticmethod
    def send(handler, status: int, data: bytes, headers: dict | None = None) -> None:
        try:
            handler.send_response(status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            for key, value in (headers or {}).items():
                handler.send_header(key, value)
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:
            pass  # the client gave up (a timeout test)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


if __name__ == "__main__":  # a server in its own process (bench/): prints its URL, serves until killed
    import argparse
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("--api", default="openai")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--pad", type=int, default=0)
    parser.add_argument("--line-bytes", type=int)
    parser.add_argument("--usage", default="fixed", choices=("fixed", "bytes"))
    args = parser.parse_args()
    with FakeLLM(args.api, latency=args.latency, pad=args.pad, line_bytes=args.line_bytes, usage=args.usage) as server:
        print(server.url, flush=True)
        sys.stdin.read()  # until the parent closes our stdin
