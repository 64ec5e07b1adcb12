"""The compactor: writes one tree node (a line of at most 512 bytes) from a message or two child lines.

``Compactor(config, state)`` wraps one provider with the harness every provider shares: the prompt with the
compactor's view as ``<chat>``, secret redaction of everything sent, the ``max_tokens`` budget, the
reasoning-model retry remembered per model, the cut to one line, and the build metadata (model, tokens,
cost, seconds). ``extractive`` is the offline default and needs none of it.

Configuration (``config.json`` → ``compactor``, set with ``pimem model``)::

    {"provider": "openai", "model": "gpt-4o-mini", "base_url": "https://api.openai.com/v1",
     "key_env": "OPENAI_API_KEY", "price_in": 0.15, "price_out": 0.6}

Keys are read from the environment variable named by ``key_env``; they are never written anywhere.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from ..config import PROVIDERS, VAR_NAME_RULE, compactor_knob, is_url, is_var_name
from ..errors import BadInput
from .cut import LINE_BYTES, cut_line, strip_controls
from .providers import NO_CHOICE, CallFailed, strip_userinfo, without_password

__all__ = ["Compactor", "Task", "CallFailed", "parse_spec", "describe", "PROVIDERS", "PRESETS"]

CACHE_WRITE = 1.25  # a token written to the provider's prompt cache costs this many input tokens (Anthropic)
TOKENS = ("tokens_in", "tokens_out", "tokens_cached", "tokens_written")  # a reply's billed tokens, as ``cost`` takes them
REASONING_EXTRA = 1024  # more tokens for a model that spent its budget thinking
THIN_REPLY = 256  # bytes: a "length" reply shorter than this was starved, not verbose
INPUT_BYTES = 48_000  # a leaf's message beyond this is sent as head and tail (it is summarised to 512 B anyway)

# provider/model shortcuts for well-known OpenAI-compatible services: the first word names the preset
PRESETS = {
    "openai": {"provider": "openai", "base_url": "https://api.openai.com/v1", "key_env": "OPENAI_API_KEY"},
    "anthropic": {"provider": "anthropic", "base_url": "https://api.anthropic.com", "key_env": "ANTHROPIC_API_KEY"},
    "deepseek": {"provider": "openai", "base_url": "https://api.deepseek.com", "key_env": "DEEPSEEK_API_KEY"},
    "openrouter": {"provider": "openai", "base_url": "https://openrouter.ai/api/v1", "key_env": "OPENROUTER_API_KEY"},
    "ollama": {"provider": "openai", "base_url": "http://localhost:11434/v1", "key_env": None},
    "command": {"provider": "command", "base_url": None, "key_env": None},
    "extractive": {"provider": "extractive", "base_url": None, "key_env": None},
}
# a model of each preset, for the hint when none is named
EXAMPLES = {"anthropic": "claude-haiku-4-5", "deepseek": "deepseek-chat", "openrouter": "qwen/qwen3-8b",
            "ollama": "llama3.2"}
# the keys ``pimem model`` owns; setting a new model resets all of them
SPEC_KEYS = ("provider", "model", "base_url", "key_env", "command", "price_in", "price_out", "price_cached_in")


def parse_spec(spec: str, base_url: str | None = None, key_env: str | None = None, command: str | None = None,
               price_in: float | None = None, price_out: float | None = None,
               price_cached_in: float | None = None) -> dict:
    """The ``compactor`` config for ``PROVIDER/MODEL`` (``openai/gpt-4o-mini``, ``deepseek/deepseek-chat``,
    ``openrouter/qwen/qwen3-8b``, ``ollama/llama3.2``, ``anthropic/claude-haiku-4-5``, ``command``,
    ``extractive``) and the options given with it. ``BadInput`` for anything else."""
    word, _, model = spec.partition("/")
    preset = PRESETS.get(word)
    if preset is None:
        raise BadInput(f"unknown provider {word!r} in {spec!r}: use one of {', '.join(PRESETS)} (as PROVIDER/MODEL)")
    cfg = dict.fromkeys(SPEC_KEYS)
    cfg.update(preset)
    provider = cfg["provider"]
    if provider in ("openai", "anthropic") and not model:
        raise BadInput(f"{spec!r} names no model: write {word}/MODEL, e.g. {word}/{EXAMPLES.get(word, 'gpt-4o-mini')}")
    if provider == "command" and not (command and command.strip()):
        raise BadInput("the command provider needs --command CMD (a shell command reading the prompt on stdin)")
    if provider == "extractive" and (model or base_url or key_env or command
                                     or any(p is not None for p in (price_in, price_out, price_cached_in))):
        raise BadInput("the extractive compactor takes no model, URL, key, command or price (it calls nothing)")
    if provider != "command" and command:
        raise BadInput("--command only goes with the command provider")
    if key_env is not None and not is_var_name(key_env):
        raise BadInput(f"--key-env wants the NAME of an environment variable ({VAR_NAME_RULE}), not a key or other "
                       "value (not shown here)")
    if base_url is not None and not is_url(base_url):
        raise BadInput("--base-url must be an http:// or https:// URL naming a host, without spaces, not "
                       f"{without_password(base_url)!r}")
    if model and not model.isprintable():
        raise BadInput(f"the model name {model!r} holds a control character")
    for label, price in (("--price-in", price_in), ("--price-out", price_out), ("--price-cached-in", price_cached_in)):
        if price is not None and price < 0:
            raise BadInput(f"{label} must not be negative")
    if (price_in is None) != (price_out is None) or price_cached_in is not None and price_in is None:
        raise BadInput("--price-in and --price-out go together (and --price-cached-in with them): a cost or a cap "
                       "counted with half the prices would take the other tokens for free")
    cfg["model"] = model or None
    cfg["base_url"] = base_url or cfg["base_url"]
    cfg["key_env"] = key_env or cfg["key_env"]
    cfg["command"] = command
    cfg["price_in"], cfg["price_out"], cfg["price_cached_in"] = price_in, price_out, price_cached_in
    return cfg


def key_problem(cfg: dict) -> str | None:
    """What is wrong with the API key of this compactor here (``$VAR is not set``), when no call could use it:
    unset, blank, or holding a control character within it (a line break pasted in with it: the spaces and
    line end around a key are dropped when it is used) or a character that is not ASCII (``HttpProvider.key``)."""
    var = cfg.get("key_env")
    if (cfg.get("provider") or "extractive") not in ("openai", "anthropic") or not var:
        return None
    key = os.environ.get(var)
    if not key:
        return f"${var} is not set"
    if not key.strip():
        return f"${var} is blank"
    if not key.strip().isprintable():
        return f"${var} holds a control character (a line break pasted in with the key?)"
    if not key.strip().isascii():
        return f"${var} holds a character no HTTP header can carry (not ASCII)"
    return None


def unsent_password(cfg: dict) -> str | None:
    """Why the user and password of this compactor's URL are never sent, when they are not: an OpenAI-compatible
    API takes its key in the ``Authorization`` header, which they would take too (``HttpProvider.post``: the key
    wins). Anthropic's key has a header of its own, so both go."""
    url = cfg.get("base_url")
    if cfg.get("provider") != "openai" or not cfg.get("key_env") or not url or strip_userinfo(url) == url:
        return None
    return (f"the user and password in the base URL are not sent: the API key from ${cfg['key_env']} goes in the "
            "Authorization header they would take")


def label(cfg: dict) -> str:
    """``provider/model`` as recorded on every node it builds."""
    provider = cfg.get("provider") or "extractive"
    model = cfg.get("model")
    return f"{provider}/{model}" if model else provider


def describe(cfg: dict) -> dict:
    """The compactor settings worth showing (never a key: only the name of its variable; the URL without the
    user and password it may carry and with its query's values hidden, which config.json keeps to send them; a
    command with its secrets redacted, as a request's are)."""
    out = {"model": label(cfg)}
    for key in ("base_url", "key_env", "command", "price_in", "price_out", "price_cached_in"):
        if cfg.get(key) is not None:
            out[key] = shown_setting(key, cfg[key])
    return out


def shown_setting(key: str, value):
    """A compactor setting as pimem shows or records it: ``base_url`` as ``without_password`` shows it, a
    ``command`` redacted (``OPENAI_API_KEY=sk-… llm …``); any other as it is."""
    if key == "base_url" and isinstance(value, str):
        return without_password(value)
    if key == "command" and isinstance(value, str):
        from .redact import redact_shown

        return redact_shown(value)
    return value


def offline_meta(label: str, seconds: float) -> dict:
    """The build metadata of a node the offline compactor wrote (in this process or a worker's)."""
    return {"model": label, "tokens_in": 0, "tokens_out": 0, "cost": 0.0, "seconds": seconds}


@dataclass(frozen=True)
class Task:
    """One node to write: a leaf ``(0, i)`` from message ``kind: text``, or a merge ``(l, i)`` from the two
    child lines ``left`` and ``right``."""

    l: int
    i: int
    kind: str = ""
    text: str = ""
    left: str = ""
    right: str = ""
    meta: dict | None = field(default=None, compare=False)  # a leaf's message meta and date (the offline
    date: str | None = None  # compactor reads the speaker, the command and the exit code from them)
    limit: int = field(default=LINE_BYTES, compare=False)  # the memory's line_bytes

    @property
    def label(self) -> str:
        n = 1 << self.l
        return f"{self.i * n}+{n}"

    def prompt(self) -> str:
        from . import prompt

        if self.l == 0:
            text = self.text
            data = text.encode("utf-8")
            if len(data) > INPUT_BYTES:
                half = INPUT_BYTES // 2
                cut = len(data) - 2 * half
                text = (data[:half].decode("utf-8", "ignore") + f"\n[… {cut} bytes not sent …]\n"
                        + data[-half:].decode("utf-8", "ignore"))
            return prompt.leaf_task(self.i, self.kind, text, self.limit)
        return prompt.merge_task(self.i << self.l, 1 << self.l, self.left, self.right, self.limit)


class Compactor:
    """One configured provider plus the harness. ``build`` is safe to call from several threads at once."""

    def __init__(self, cfg: dict, state=None):
        self.cfg = cfg
        self.state = state
        self.label = label(cfg)
        self.provider_name = cfg.get("provider") or "extractive"
        if self.provider_name not in PROVIDERS:
            raise BadInput(f"config.json names an unknown compactor provider {self.provider_name!r}: run 'pimem model'")
        self.max_tokens = int(compactor_knob(cfg, "max_tokens"))
        self.price_in = cfg.get("price_in")
        self.price_out = cfg.get("price_out")
        self.price_cached_in = cfg.get("price_cached_in")  # None: cached input costs price_in
        self._provider = None
        self.digest = None  # the offline compactor bound to one memory (``for_memory``)

    def for_memory(self, mem) -> "Compactor":
        """This compactor for building ``mem``'s tree: the offline one reads the memory's messages and term
        statistics (it runs locally), so it gets its own digest per memory; a model compactor is shared."""
        if not self.offline:
            return self
        from . import extractive  # (imported for a build only: its patterns take a tenth of a second to compile,
        # which status and view --stats, importing this module, need not pay)

        bound = Compactor(self.cfg, self.state)
        bound.digest = extractive.Digest(mem)
        return bound

    @property
    def offline(self) -> bool:
        """True when no model is called: no context is needed and nothing leaves the machine."""
        return self.provider_name == "extractive"

    def provider(self):
        if self._provider is None:
            from . import providers

            timeout = float(compactor_knob(self.cfg, "timeout"))
            if self.provider_name == "openai":
                self._provider = providers.OpenAI(self.cfg["model"], self.cfg.get("base_url"), self.cfg.get("key_env"), timeout)
            elif self.provider_name == "anthropic":
                self._provider = providers.Anthropic(self.cfg["model"], self.cfg.get("base_url"), self.cfg.get("key_env"), timeout)
            else:
                if not self.cfg.get("command"):
                    raise BadInput("the command compactor has no command: run 'pimem model NAME command --command CMD'")
                self._provider = providers.Command(self.cfg["command"], self.cfg.get("model"), timeout)
        return self._provider

    def cost(self, tokens_in: int, tokens_out: int, tokens_cached: int = 0, tokens_written: int = 0) -> float | None:
        """Dollars for a call (None without prices); ``tokens_cached`` of ``tokens_in`` came from the provider's
        prompt cache and cost ``price_cached_in`` when that is set, ``tokens_written`` went into it and cost
        ``CACHE_WRITE`` times ``price_in`` (Anthropic's price for its five-minute cache)."""
        if self.price_in is None and self.price_out is None:
            return None
        cached_price = self.price_in if self.price_cached_in is None else self.price_cached_in
        # (parts of ``tokens_in``: a reply claiming more is held to it, so no call costs less than nothing)
        tokens_cached = min(tokens_cached, tokens_in)
        tokens_written = min(tokens_written, tokens_in - tokens_cached)
        dollars = ((tokens_in - tokens_cached + (CACHE_WRITE - 1) * tokens_written) * (self.price_in or 0)
                   + tokens_cached * (cached_price or 0) + tokens_out * (self.price_out or 0))
        return round(dollars / 1e6, 8)

    def worst_cost(self, task: Task, context: str = "") -> float | None:
        """The most a call for ``task`` can cost (None without prices): every byte sent taken for a token (no
        tokenizer makes more tokens than bytes; 16 more for the framing), none of it from the cache, every
        output token used, and, until this model is known not to need it, the second request a reasoning
        model may take; twice that, for the faithfulness guard may ask for the line once more."""
        if self.offline:
            return 0.0
        from . import prompt

        sent = len(prompt.SYSTEM.encode()) + len(prompt.chat(context).encode()) + len(task.prompt().encode()) + 16
        extra = self.state.extra_tokens.get(self.label) if self.state is not None else None
        write = sent if self.provider_name == "anthropic" else 0  # (all of it may go into its cache)
        tokens_in, tokens_out = (sent, self.max_tokens + extra) if extra else (2 * sent, 2 * self.max_tokens + REASONING_EXTRA)
        # (all of it from the cache instead, when that is priced above the rest)
        once = max((self.cost(tokens_in, tokens_out, 0, tokens_in if write else 0),
                    self.cost(tokens_in, tokens_out, tokens_in)), key=lambda c: c or 0)
        return None if once is None else 2 * once

    def build(self, task: Task, context: str = "") -> tuple[str, dict]:
        """The node's line (at most ``task.limit`` bytes: 512) and its build metadata; ``CallFailed`` when the call failed or the
        model wrote nothing usable: no text, or an answer that is no summary (``junk``)."""
        started = time.perf_counter()
        if self.offline:
            from . import extractive

            if self.digest is not None:
                text = (self.digest.leaf(task.i, task.kind, task.text, task.meta, task.date) if task.l == 0
                        else self.digest.merge(task.l, task.i))
            elif task.l == 0:
                text = extractive.leaf(task.kind, task.text, task.limit)
            else:
                text = extractive.merge(task.left, task.right, task.limit)
            return text, offline_meta(self.label, round(time.perf_counter() - started, 4))
        from . import junk, prompt
        from .redact import redact, redact_line

        provider = self.provider()
        system = prompt.SYSTEM
        sources = [task.text] if task.l == 0 else [task.left, task.right]
        sources.append(context)  # (what the model was given: a line copying it is never refused as junk)
        context = "\n".join(redact_line(line) for line in context.split("\n")) if context else ""
        chat, task_text = prompt.chat(context), redact(task.prompt())
        extra = self.state.extra_tokens.get(self.label, 0) if self.state is not None else 0
        tokens = dict.fromkeys(TOKENS, 0)  # what the requests answered so far were billed

        def bill() -> dict:  # (tokens written to a cache only where there were some: Anthropic bills them)
            return {**{k: tokens[k] for k in TOKENS if tokens[k] or k != "tokens_written"}, "cost": self.cost(**tokens)}

        def ask(max_tokens: int):
            try:
                reply = provider.complete(system, chat, task_text, max_tokens)
            except CallFailed as exc:  # (an answer we could not read is billed all the same, and so are those before it)
                for key in TOKENS:
                    tokens[key] += exc.spent.get(key) or 0
                exc.spent = bill()
                raise
            for key in TOKENS:
                tokens[key] += getattr(reply, key)
            return reply

        reply = ask(self.max_tokens + extra)
        if reply.finish == "length" and len(reply.text.strip().encode("utf-8")) < THIN_REPLY and not extra:
            # a reasoning model spent the budget thinking: ask once more with room, and from now on give it that
            if self.state is not None:
                self.state.remember_extra(self.label, REASONING_EXTRA)
            reply = ask(self.max_tokens + REASONING_EXTRA)
        text = cut_line(strip_controls(junk.text_of(reply.text)), task.limit)
        paid = bill()
        if not text:
            why = "the reply holds no choice" if reply.finish == NO_CHOICE else f"finish: {reply.finish}"
            raise CallFailed(f"{self.label} returned no text ({why})", spent=paid)
        wrong = junk.why(text, reply.text, sources)
        if wrong:  # (bytes that were not text, characters no text holds, one phrase over and over: never a node)
            raise CallFailed(f"{self.label} returned no summary: {wrong}", spent=paid)
        return text, {"model": self.label, **paid, "seconds": round(time.perf_counter() - started, 3)}

    def close(self) -> None:
        if self._provider is not None:
            self._provider.close()
