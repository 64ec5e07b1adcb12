"""Secret redaction: what leaves the machine for a compactor has its secrets replaced by placeholders.

Only the outgoing request is redacted; the log keeps every original byte. The patterns aim at things that
are secrets by their shape (provider key prefixes, private key blocks, credentials inside URLs) or by the
name they are assigned to (``password=…``, ``"api_key": "…"``, ``Authorization: Bearer …``).
"""

from __future__ import annotations

import functools
import re

# (pattern, placeholder, hints): a pattern runs only when one of its hints occurs in the text (in lower
# case), which keeps redaction of a 30 KB request well under a millisecond
_PATTERNS: list[tuple[re.Pattern, str, tuple[str, ...]]] = [
    (re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY( BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\Z)", re.S),
     "[private key redacted]", ("private key",)),
    # scheme://user:password@host
    (re.compile(r"\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s/@]+(@)", re.I), r"\1[password redacted]\2", ("://",)),
    (re.compile(r"\bsk-ant-[A-Za-z0-9_-]{16,}"), "[anthropic key redacted]", ("sk-ant-",)),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "[api key redacted]", ("sk-",)),
    (re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"), "[aws key redacted]", ("akia", "asia", "abia", "acca")),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b|\bgithub_pat_[A-Za-z0-9_]{30,}"), "[github token redacted]",
     ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), "[gitlab token redacted]", ("glpat-",)),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), "[slack token redacted]", ("xox",)),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), "[google key redacted]", ("aiza",)),
    (re.compile(r"\b(?:sk|rk|pk)_live_[A-Za-z0-9]{16,}"), "[stripe key redacted]", ("_live_",)),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), "[huggingface token redacted]", ("hf_",)),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), "[jwt redacted]", ("eyj",)),
    (re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{12,}", re.I), r"\1 [token redacted]", ("bearer", "basic", "token")),
    # name = value, name: value, "name": "value" for secret-looking names (AWS secret keys included)
    (re.compile(
        r"""(?ix)
        ((?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|auth)[\w.-]*
         ["']?\s*[:=]\s*["']?)
        (?!\[|(?:bearer|basic|token)\s|\d+(?![^\s"',;]))([^\s"',;]{6,})"""),
     r"\1[secret redacted]", ("pass", "pwd", "secret", "token", "key", "auth")),
]


def redact(text: str) -> str:
    """``text`` with every secret the patterns recognise replaced by a placeholder naming what it was."""
    lower = text.lower()
    for pattern, placeholder, hints in _PATTERNS:
        if any(hint in lower for hint in hints):
            text = pattern.sub(placeholder, text)
            lower = text.lower()
    return text


@functools.lru_cache(maxsize=1 << 14)
def redact_line(line: str) -> str:
    """``redact`` for one line of the compactor's view (cached: the same lines are sent with many calls)."""
    return redact(line)
