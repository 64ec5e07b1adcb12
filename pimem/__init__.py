"""pimem: endless, lossless memory for LLM chats and coding agents.

    >>> from pimem import Memory
    >>> mem = Memory.at("main")  # created by its first append
    >>> mem.append([{"kind": "user", "text": "remember port 5433"}])
    [0]
"""

from .errors import PimemError

__all__ = ["Memory", "PimemError"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """``Memory``, imported when first asked for: every command imports this package, and ``pimem --version``
    needs none of the store."""
    if name == "Memory":
        from .memory import Memory

        return Memory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
