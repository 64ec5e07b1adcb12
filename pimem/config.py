"""``config.json``: the one place pimem's defaults are written, and how a memory's settings are layered.

A memory's settings are ``DEFAULTS``, overlaid by ``<home>/config.json`` (the defaults for memories without
settings of their own), overlaid by ``<memory>/config.json``; objects merge key by key. The compactor's
optional knobs (``timeout``, ``retry_seconds``, ``max_tokens``) are not written into ``DEFAULTS["compactor"]``
(``pimem model`` shows a compactor as configured) but read through ``compactor_knob``, whose defaults are here.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import orjson

from . import env, home as homes
from .errors import BadInput, library, shown
from .message import DEFAULT_CAP
from .numbers import MAX_SECONDS
from .nofollow import read_bytes

LINE_BYTES = 512  # a tree node's line, in UTF-8 bytes
LEAST_LINE_BYTES = 64  # the shortest line a memory may set: a short clause (under it, a summary is "u" or "user: me")
MOST_LINE_BYTES = 1 << 20  # the longest: a line of a MiB is already no summary

DEFAULTS = {
    "view": {"hi": 128_000, "lo": 64_000},
    "cview": {"hi": 32_000, "lo": 16_000},
    "line_bytes": LINE_BYTES,
    "max_text_bytes": DEFAULT_CAP,
    "compactor": {"provider": "extractive"},
    "max_cost_per_day": None,  # dollars a local day watch and build-tree may spend on this memory's compactor
    "context_wait": 8.0,  # seconds `context` waits for a running watcher's summaries of the newest messages
}

COMPACTOR_KNOBS = {
    "timeout": 60.0,  # seconds per call
    "retry_seconds": 10.0,  # before a failed node is tried again, doubled each time it fails again up to 6 times
    # it (``builder.BACKOFF``); what the server asks for instead when it says Retry-After
    "max_tokens": 170,  # ≈512 bytes of English; the harness cuts whatever comes back
}


def compactor_knob(cfg: dict, key: str):
    """A compactor setting from its config object, else its default."""
    value = cfg.get(key)
    return COMPACTOR_KNOBS[key] if value is None else value  # (0 seconds between retries is 0, not the default)


def merged(base: dict, over: dict) -> dict:
    """``base`` overlaid by ``over``, objects merged key by key (neither is changed)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def read_json(path: Path, default=None):
    try:
        return orjson.loads(read_bytes(path))
    except FileNotFoundError:
        return default


MAX_PRICE = 1e6  # dollars per million tokens, at most (--price-in and the rest too): a cost that stays finite
# the compactor providers, as pimem.compactor names them (importing it here would load the offline compactor
# at every start)
PROVIDERS = ("extractive", "openai", "anthropic", "command")
# (the patterns here are strings: re compiles one when first used, and most commands use none)
_URL = r"https?://[^\s/?#]+[^\s]*"  # an http:// or https:// URL naming a host, as --base-url takes

# what each setting a person may write must be, for a hand-edited config.json to be refused in one line
_NUMBER, _COUNT = (int, float), int
_SHAPES = {"view": dict, "cview": dict, "line_bytes": _COUNT, "max_text_bytes": _COUNT, "compactor": dict,
           "max_cost_per_day": (*_NUMBER, type(None)), "context_wait": _NUMBER}
# the compactor object's settings (``pimem model`` writes them; each may also be null: unset)
_COMPACTOR_SHAPES = {"provider": str, "model": str, "base_url": str, "key_env": str, "command": str,
                     "price_in": _NUMBER, "price_out": _NUMBER, "price_cached_in": _NUMBER, "timeout": _NUMBER,
                     "retry_seconds": _NUMBER, "max_tokens": _COUNT, "workers": (int,)}  # (0 workers: inline)
_COMPACTOR_MOST = {"timeout": MAX_SECONDS, "retry_seconds": MAX_SECONDS,  # seconds: a year, as --timeout takes
                   "price_in": MAX_PRICE, "price_out": MAX_PRICE, "price_cached_in": MAX_PRICE}
_COMPACTOR_RULES = {"provider": f"one of {', '.join(PROVIDERS)}", "base_url": "an http:// or https:// URL naming a host",
                    **dict.fromkeys(("price_in", "price_out", "price_cached_in"),
                                    f"dollars per million tokens, from 0 to {MAX_PRICE:,.0f}"),
                    "timeout": f"seconds above 0, at most {MAX_SECONDS:,.0f}",
                    "retry_seconds": f"seconds, from 0 to {MAX_SECONDS:,.0f}",
                    "max_tokens": "a whole number of tokens above 0",
                    "workers": "a whole number of worker processes, 0 or more"}  # (said as "use …")
_COMPACTOR_NONZERO = {"timeout"}  # (a call given no time at all always fails)
_MOST = {"context_wait": MAX_SECONDS, "max_cost_per_day": 1e9, "line_bytes": MOST_LINE_BYTES}  # (as --wait and --max-cost-per-day take)
# what a setting refused takes (said as "use …"; line_bytes's is said with its least)
_RULES = {"max_text_bytes": "a whole number of bytes above 0",
          "context_wait": f"seconds, from 0 to {MAX_SECONDS:,.0f}",
          "max_cost_per_day": f"dollars, from 0 to {_MOST['max_cost_per_day']:,.0f}, or null",
          **dict.fromkeys(("view", "cview"), "an object of hi and lo, in bytes")}
_END_RULE = "a whole number of bytes above 0, lo at most hi"  # a view's hi or lo
_API_KEY = r"(?i)(\w*[_-])?api[_-]?key|key"  # a setting that would hold an API key itself
_LARGEST = 2**63 - 1  # a number JSON keeps here at most (orjson writes no larger integer, and NaN as null)


def _wrong(value, shape, most: float = float("inf")) -> bool:
    """Whether ``value`` is not of ``shape``: a bool is no number, a number is never negative nor past ``most``,
    a count never 0."""
    if not isinstance(value, shape) or isinstance(value, bool):
        return True
    return isinstance(value, (int, float)) and (not value >= 0 or value > min(most, _LARGEST)  # (NaN: not >= 0)
                                                or (shape is _COUNT and value == 0))


def is_url(text: str) -> bool:
    """Whether ``text`` is an http:// or https:// URL naming a host, as ``--base-url`` takes, that a call can go
    to: one with a bracket left open (``http://[::1/v1``) or a port that is no number failed every call with
    a traceback."""
    import urllib.parse  # (pathlib's own import: no cost)

    if not re.fullmatch(_URL, text):
        return False
    try:
        urllib.parse.urlsplit(text).port
    except ValueError:
        return False
    return True


VAR_NAME_RULE = "letters, digits and _, not starting with a digit"


def is_var_name(text: str) -> bool:
    """Whether ``text`` names an environment variable, as ``key_env`` takes: letters, digits and ``_``, not
    starting with a digit, and no key pasted in its place (``sk-proj-…`` is refused by its ``-``; one made of
    name characters, ``ghp_…``, ``sk_live_…``, ``AKIA…``, by its shape: 16 characters or more with a digit, and
    a run of 16 without ``_`` or digits inside words in two places, where a variable's name is words and
    numbers joined by ``_``, in any case: ``MyCompany_OpenAI_Key2``, ``AZURE_OPENAI_API_KEY_2025``)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        return False
    if len(text) >= 16 and any(c.isdigit() for c in text):
        return max(map(len, text.split("_"))) < 16 and len(re.findall(_INNER_DIGITS, text)) < 2
    return True


_INNER_DIGITS = r"(?<=[A-Za-z])[0-9]+(?=[A-Za-z])"  # (GPT4o once is a name; aB3dE6g… a key)


def _wrong_knob(knob: str, value) -> bool:
    """Whether a compactor setting (not null) is one ``pimem model`` would not write: of the wrong type or out
    of range, an unknown provider, a base URL that is not http(s), a ``key_env`` that is no variable's name."""
    if knob == "provider":
        return value not in PROVIDERS
    if knob == "base_url":
        return not (isinstance(value, str) and is_url(value))
    if knob == "key_env":
        return not (isinstance(value, str) and is_var_name(value))
    shape = _COMPACTOR_SHAPES.get(knob)
    return shape is not None and (_wrong(value, shape, _COMPACTOR_MOST.get(knob, float("inf")))
                                  or knob in _COMPACTOR_NONZERO and value == 0)


def settings(path: Path) -> dict:
    """A ``config.json``'s own settings ({} when there is none); ``BadInput`` naming the file when it is not
    a JSON object or a setting is of the wrong type (a hand edit gone wrong: every command says so)."""
    try:
        data = read_bytes(path)
        own = orjson.loads(data) if data.strip() else {}  # (an emptied file: no settings of its own)
    except FileNotFoundError:
        return {}
    except orjson.JSONDecodeError as exc:
        raise BadInput(f"{path}: not valid JSON ({exc}); fix it or remove it") from None
    if not isinstance(own, dict):
        raise BadInput(f"{path}: not a JSON object; fix it or remove it")
    return _shaped(own, path)


def _shaped(own: dict, path: Path) -> dict:
    """``own``, the settings of the file ``path``, once each is known and of its shape; ``BadInput`` naming the
    first that is not."""
    _known(own, path)
    for key, value in own.items():
        shape, rule = _SHAPES.get(key), f" (use {_RULES[key]})" if key in _RULES else ""
        wrong = shape is not None and _wrong(value, shape, _MOST.get(key, float("inf")))
        if key in ("view", "cview") and not wrong:
            for end in ("hi", "lo"):
                if end in value and (type(value[end]) is not int or not 0 < value[end] <= _LARGEST):
                    key, value, wrong, rule = f"{key}.{end}", value[end], True, f" (use {_END_RULE})"
                    break
        elif key == "line_bytes":  # (said with its range however it is wrong: 1e20 is past it, not "no number")
            wrong, rule = wrong or value < LEAST_LINE_BYTES, f" (use a whole number of bytes from {LEAST_LINE_BYTES} to {MOST_LINE_BYTES:,})"
        elif key == "compactor" and not wrong:
            for knob, knob_value in value.items():
                if knob_value is not None and _wrong_knob(knob, knob_value):
                    rule = f" (use {_COMPACTOR_RULES[knob]})" if knob in _COMPACTOR_RULES else ""
                    key, value, wrong = f"compactor.{knob}", knob_value, True
                    if knob == "base_url" and isinstance(value, str):  # (never its password, as status shows it)
                        from .compactor.providers import without_password

                        value = without_password(value)
                    break
        if wrong and key == "compactor.key_env" and isinstance(value, str):  # (a key pasted there: never said)
            raise BadInput(f"{path}: compactor.key_env must name an environment variable ({VAR_NAME_RULE}), not hold "
                           "a key or other value (not shown here); fix it or remove it")
        if wrong:
            raise BadInput(f"{path}: {key} cannot be {_said(value)}{rule}; fix it or remove it")
    return own


def _known(own: dict, path: Path) -> None:
    """``BadInput`` naming the first setting of ``own`` (the file ``path``'s) that pimem does not know, with the
    one likely meant: a misspelled ``max_cost_per_day`` taken silently is no cap at all. An API key is said to
    come from the environment (its value never repeated)."""
    for key, value in own.items():
        within, names = "", _SHAPES
        if key in ("view", "cview") and isinstance(value, dict):
            within, names = f"{key}.", ("hi", "lo")
        elif key == "compactor" and isinstance(value, dict):
            within, names = "compactor.", _COMPACTOR_SHAPES
        for name in value if within else [key]:
            if name in names:
                continue
            name = name if isinstance(name, str) else repr(name)  # (a dict from Python may have any key)
            if re.fullmatch(_API_KEY, name):
                raise BadInput(f"{path}: {within}{name}: pimem reads API keys only from the environment, from the "
                               "variable the compactor's key_env names (pimem model NAME PROVIDER/MODEL --key-env VAR); "
                               "remove it")
            import difflib

            likely = difflib.get_close_matches(name, names, n=1)
            meant = (f"did you mean {within}{likely[0]}?" if likely
                     else f"the settings are {', '.join(within + n for n in names)}")
            raise BadInput(f"{path}: {within}{orjson.dumps(name).decode()[1:-1][:80]} is no setting ({meant}); fix it or remove it")


def _said(value) -> str:
    """``value`` as JSON, shortened (a number JSON cannot keep, as Python writes it)."""
    try:
        return orjson.dumps(value).decode()[:80] if value == value else "NaN"
    except TypeError:
        return shown(value)[:80]


def of_home(home: str | os.PathLike | None = None) -> dict:
    """The defaults for memories without settings of their own: ``DEFAULTS``, overlaid by the home's."""
    path = env.home(home) / "config.json"
    return _checked(merged(DEFAULTS, settings(path)), path)


def _checked(cfg: dict, *paths: Path) -> dict:
    """``cfg``, as the files ``paths`` (and the defaults) set it together, once the settings that go together
    agree: each view's ``lo`` at most its ``hi`` (a view folds down to ``lo`` past ``hi``), a model provider's
    model and a command provider's command named, both prices or neither (a cost counted with one would take
    the other tokens for free); ``BadInput`` naming the files otherwise."""
    def where() -> str:
        return " with ".join(str(p) for p in paths if p.exists()) or str(paths[0])

    for key in ("view", "cview"):
        if cfg[key]["lo"] > cfg[key]["hi"]:
            raise BadInput(f"{where()}: {key} lo {cfg[key]['lo']} is above its hi {cfg[key]['hi']} "
                           f"(the default lo is {DEFAULTS[key]['lo']}); fix it or remove it")
    compactor = cfg["compactor"]
    provider = compactor.get("provider") or "extractive"
    needed = {"openai": "model", "anthropic": "model", "command": "command"}.get(provider)
    named = compactor.get(needed)
    if needed and not (isinstance(named, str) and named.strip() and (needed == "command" or named.isprintable())):
        raise BadInput(f"{where()}: compactor.{needed} cannot be {orjson.dumps(named).decode()[:80]} with provider "
                       f"{provider} ('pimem model' sets both); fix it or remove it")
    price_in, price_out, price_cached_in = (compactor.get(k) for k in ("price_in", "price_out", "price_cached_in"))
    if (price_in is None) != (price_out is None) or price_cached_in is not None and price_in is None:
        raise BadInput(f"{where()}: compactor.price_in and price_out go together (and price_cached_in with them): a "
                       "cost counted with half the prices would take the other tokens for free; fix it or remove it")
    return cfg


@library  # (what the system refuses: a PimemError, as every failure of the library)
def save_home(home: str | os.PathLike | None, changes: dict) -> None:
    """Merge ``changes`` into ``<home>/config.json`` (creating the home if needed; a None removes its setting,
    back to the default: ``_changed``)."""
    directory = env.home(home)
    path = directory / "config.json"
    _storable(changes, path)
    own = _shaped(_changed(settings(path), changes), path)
    _checked(merged(DEFAULTS, own), path)
    _write(homes.ensure_dir(directory), own)


def of_memory(path: Path, home: Path) -> dict:
    """A memory's settings: the home's defaults, overlaid by its own ``config.json``."""
    return _checked(merged(of_home(home), settings(path / "config.json")), env.home(home) / "config.json",
                            path / "config.json")


def save(directory: Path, home: Path, changes: dict) -> None:
    """Merge ``changes`` into the ``config.json`` of the memory at ``directory`` (which exists), of the home
    ``home`` (a None removes its setting: ``_changed``); ``BadInput`` (the file as it was) when a setting is not of
    its shape or the memory's settings would not agree with each other or with the home's, as every command would
    read them."""
    path = directory / "config.json"
    _storable(changes, path)
    own = _shaped(_changed(settings(path), changes), path)
    _checked(merged(of_home(home), own), env.home(home) / "config.json", path)
    _write(directory, own)


def _storable(changes, path: Path, depth: int = 0) -> None:
    """``BadInput`` when a library caller's ``changes`` hold text that is not UTF-8 (a lone surrogate: JSON cannot
    write it) or objects nested past any setting's depth (merging them would recurse through them), before they
    are merged; every other value is checked where its setting is (``_shaped``, which names it)."""
    from .naming import is_utf8

    if depth > 8:  # (a setting is two or three levels deep)
        raise BadInput(f"{path}: the settings given are nested over 8 levels deep, which no setting is; nothing "
                       "was written")
    for key, value in changes.items() if isinstance(changes, dict) else enumerate(changes):
        for text in (key, value):
            if isinstance(text, str) and not is_utf8(text):
                raise BadInput(f"{path}: the settings given hold text that is not valid UTF-8 (a lone surrogate), "
                               "which JSON cannot store; nothing was written")
        if isinstance(value, (dict, list, tuple)):
            _storable(value, path, depth + 1)


def _changed(own: dict, changes: dict, within: str = "") -> dict:
    """``own`` (a file's settings) with ``changes`` merged in, objects key by key, a None removing its setting, so
    that what lies under it applies again (the home's, else the default): written as null, it would hide them, a
    memory's ``"max_cost_per_day": null`` the home's cap, and most settings cannot be null at all. A compactor's
    knob is the exception: null there is the knob unset in this file, not taken from the home's compactor
    (``pimem model`` writes every knob it does not set so, and a memory's model takes no price or URL of the
    home's)."""
    out = dict(own)
    for key, value in changes.items():
        if value is None and within != "compactor":
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = _changed(out[key] if isinstance(out.get(key), dict) else {}, value, within or key)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _write(directory: Path, own: dict) -> None:
    homes.write_atomic(directory / "config.json", orjson.dumps(own, option=orjson.OPT_INDENT_2) + b"\n")
