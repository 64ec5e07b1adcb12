from __future__ import annotations

from ..options import Home


def command(home: Home = None) -> None:
    """Serve the memories to an MCP client over stdio (reads, and memory proposals).

    Tools: list_memories, search, view, zoom, message, since, recall, memory_search (all read-only: they
    never take the writer lock or write to a memory), and memory_propose (writes a provisional memory only,
    which the user confirms or drops). Every message and hit carries `held`; tool calls and results are
    returned only when a call sets include_tools. Needs the `mcp` extra: pip install '.[mcp]' in pimem's checkout.

    Examples:
      pimem mcp
      pimem mcp --home ~/.pi/memory
    """
    import os

    from .. import env, stopping

    if home is not None:  # (an MCP client starts it in a project's directory: a home in each, as for the hook)
        env.absolute(os.fspath(home), "--home")
    with stopping.deferring():  # (pydantic, whose core is Rust: see stopping.deferring)
        from .. import mcp_server
    mcp_server.serve(home, signals=True)
