"""The ways to reach a model: an OpenAI-compatible chat-completions endpoint, Anthropic's Messages API, or
any shell command that reads a prompt on stdin and prints the line.

Every failure (HTTP status, timeout, malformed JSON, a command's non-zero exit) becomes ``CallFailed``; the
scheduler retries it later. httpx is imported only when a remote provider is first used.
"""

from __future__ import annotations

import email.utils
import os
import subprocess
import time
from dataclasses import dataclass

import orjson

from ..errors import ProviderError

DEFAULT_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}


class CallFailed(ProviderError):
    """One model call failed; ``retry_after`` is the delay the server asked for, if any."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class Reply:
    text: str
    finish: str  # "stop", or "length" when the token limit cut the reply
    tokens_in: int
    tokens_out: int


def _estimate_tokens(text: str) -> int:
    return max(1, len(text.encode("utf-8")) // 4)


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (a number of seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


class HttpProvider:
    """Shared HTTP plumbing: one pooled client, key from the environment, errors as ``CallFailed``."""

    kind = ""

    def __init__(self, model: str, base_url: str | None = None, key_env: str | None = None, timeout: float = 60.0):
        self.model = model
        self.base_url = (base_url or DEFAULT_URLS[self.kind]).rstrip("/")
        self.key_env = key_env
        self.timeout = timeout
        self._client = None

    def key(self) -> str | None:
        if not self.key_env:
            return None
        value = os.environ.get(self.key_env)
        if not value:
            raise CallFailed(f"environment variable {self.key_env} (the API key for {self.kind}) is not set")
        return value

    def post(self, path: str, body: dict, headers: dict) -> dict:
        import httpx

        if self._client is None:
            self._client = httpx.Client(timeout=httpx.Timeout(self.timeout, connect=min(10.0, self.timeout)))
        url = self.base_url + path
        try:
            response = self._client.post(url, content=orjson.dumps(body), headers={**headers, "content-type": "application/json"})
        except httpx.TimeoutException:
            raise CallFailed(f"{url}: no answer within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise CallFailed(f"{url}: {type(exc).__name__}: {exc}") from None
        if response.status_code >= 400:
            detail = " ".join(response.text.split())[:300]
            raise CallFailed(f"{url}: HTTP {response.status_code}: {detail}", _retry_after(response.headers.get("retry-after")))
        try:
            data = response.json()
        except ValueError:
            raise CallFailed(f"{url}: the reply is not JSON: {response.text[:120]!r}") from None
        if not isinstance(data, dict):
            raise CallFailed(f"{url}: the reply is not a JSON object")
        return data

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class OpenAI(HttpProvider):
    """Any OpenAI-compatible ``/chat/completions`` endpoint (OpenAI, DeepSeek, OpenRouter, vLLM, Ollama, …)."""

    kind = "openai"

    def complete(self, system: str, user: str, max_tokens: int) -> Reply:
        headers = {}
        key = self.key()
        if key:
            headers["authorization"] = f"Bearer {key}"
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": max_tokens,
            "temperature": 0.2,
        }
        data = self.post("/chat/completions", body, headers)
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            finish = choice.get("finish_reason") or "stop"
        except (KeyError, IndexError, TypeError, AttributeError):
            raise CallFailed(f"unexpected chat-completions reply: {str(data)[:200]}") from None
        usage = data.get("usage") or {}
        return Reply(
            str(text),
            "length" if finish == "length" else str(finish),
            int(usage.get("prompt_tokens") or _estimate_tokens(system + user)),
            int(usage.get("completion_tokens") or _estimate_tokens(str(text))),
        )


class Anthropic(HttpProvider):
    """Anthropic's Messages API."""

    kind = "anthropic"

    def complete(self, system: str, user: str, max_tokens: int) -> Reply:
        headers = {"anthropic-version": "2023-06-01"}
        key = self.key()
        if key:
            headers["x-api-key"] = key
        body = {
            "model": self.model,
            "system": system,
            "messages": [{"role": "user", "content": user}],
            "max_tokens": max_tokens,
            "temperature": 0.2,
        }
        data = self.post("/v1/messages", body, headers)
        try:
            text = "".join(block.get("text", "") for block in data["content"] if block.get("type") == "text")
        except (KeyError, TypeError, AttributeError):
            raise CallFailed(f"unexpected messages reply: {str(data)[:200]}") from None
        usage = data.get("usage") or {}
        stop = data.get("stop_reason") or "end_turn"
        return Reply(
            text,
            "length" if stop == "max_tokens" else str(stop),
            int(usage.get("input_tokens") or _estimate_tokens(system + user)),
            int(usage.get("output_tokens") or _estimate_tokens(text)),
        )


class Command:
    """A shell command that reads the whole prompt on stdin and prints the line (``llm -m MODEL``)."""

    kind = "command"

    def __init__(self, command: str, model: str | None = None, timeout: float = 60.0):
        self.command = command
        self.model = model or command.split()[0]
        self.timeout = timeout

    def complete(self, system: str, user: str, max_tokens: int) -> Reply:
        prompt = f"{system}\n\n{user}\n"
        try:
            done = subprocess.run(self.command, shell=True, input=prompt.encode("utf-8"), capture_output=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise CallFailed(f"command {self.command!r} gave no answer within {self.timeout:g} s") from None
        if done.returncode != 0:
            detail = " ".join(done.stderr.decode("utf-8", "replace").split())[-300:]
            raise CallFailed(f"command {self.command!r} exited {done.returncode}: {detail}")
        text = done.stdout.decode("utf-8", "replace")
        return Reply(text, "stop", _estimate_tokens(prompt), _estimate_tokens(text))

    def close(self) -> None:
        pass
