"""pimem: endless, lossless memory for LLM chats and coding agents.

    >>> from pimem import Memory
    >>> mem = Memory.at("main")  # created by its first append
    >>> mem.append([{"kind": "user", "text": "remember port 5433"}])
    [0]
"""

from .errors import PimemError
from .memory import Memory

__all__ = ["Memory", "PimemError"]
__version__ = "0.1.0"
