"""SHA-256 and BLAKE2b without loading OpenSSL: importing ``hashlib`` loads libcrypto (about 2.5 ms of every
start of a command that hashes: the hook, import, the memory chains), while CPython builds in its own
implementations of both, which give the same digests. ``hashlib`` is the fallback where they are missing."""

from __future__ import annotations

try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter built without its own blake2
    from hashlib import blake2b

try:
    from _sha256 import sha256  # CPython 3.11
except ImportError:  # pragma: no cover - 3.12 and later name it _sha2
    try:
        from _sha2 import sha256
    except ImportError:
        from hashlib import sha256

__all__ = ["blake2b", "sha256"]
