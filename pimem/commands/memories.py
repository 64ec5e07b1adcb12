from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import budget, memories, naming, output
from ..errors import BadInput, IntegrityError, NothingFound, NotFound
from ..memory import Memory
from ..numbers import count, param
from ..options import Budget, Home, IncludeTools, Json, Name, Session, apart, offer


def command(
    name: Name = None,
    words: Annotated[Optional[list[str]], typer.Argument(help="Rank by these words (BM25-style).", metavar="WORDS…", show_default=False)] = None,
    status: Annotated[Optional[str], typer.Option("--status", help="live (default: pinned, active, provisional), pinned, active, provisional, resolved, superseded or all.", autocompletion=offer("live", "all", *memories.STATUSES))] = None,
    kind: Annotated[Optional[str], typer.Option("--kind", help="Only this kind (fact, preference, constraint, decision, working, derived).", autocompletion=offer(*memories.KINDS))] = None,
    record_id: Annotated[Optional[str], typer.Option("--id", help="Read one memory whole, as JSON, paged by --offset/--limit characters.", metavar="ID")] = None,
    offset: Annotated[int, typer.Option("--offset", help="Skip this many records (with --id: characters of its text).", click_type=param(count, "INTEGER"))] = 0,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Records per page, 1-100 (default 30; with --id: characters, default 4000).", click_type=param(count, "INTEGER", lo=1))] = None,
    session: Session = None,
    include_tools: IncludeTools = False,
    max_chars: Budget = budget.DEFAULT,
    json: Json = False,
    home: Home = None,
) -> None:
    """List, search or read authoritative memories, within an output budget.

    Lists live memories (pinned, then active, then provisional; newest first) or ranks them by WORDS. Each
    record shows at most 600 characters; --id reads one whole, paged by --offset. Memories derived by
    compaction rules quote tool traffic (paths, commands), so they are listed only with --include-tools.
    Output never exceeds
    --budget characters; what did not fit is counted, with the --offset that continues it. Exit 1 when
    nothing matches.

    Examples:
      pimem memories
      pimem memories main
      pimem memories main pnpm --status all
      pimem memories main --kind derived --include-tools
      pimem memories main --kind constraint --json | jq '.records[].content'
      pimem memories main --id mem_3f9a0c1d2e4b5a6c --offset 4000
    """
    apart(("--id", record_id), ("--status", status), ("--kind", kind), why="--id reads that one memory")
    name, words = naming.words(name, words, home)
    apart(("--id", record_id), ("WORDS", words), why="--id reads that one memory, WORDS rank a listing")
    naming.memory_id(record_id, "--id"), naming.text_argument(session)
    ranked = naming.joined(words, "empty WORDS: give words to rank by, or none to list every memory")
    naming.searched_in(name, words, home, "memories")
    mem = Memory.open(name, home)
    damaged: list[str] = []
    visible = memories.records(mem, session, include_tools, on_damage=damaged.append)
    if record_id is not None:
        record = next((r for r in visible if r["id"] == record_id), None)
        if record is None:  # (past the damage, it may be there: the damage is what to say)
            if damaged:
                raise IntegrityError(damaged[0])
            shown = f"{budget.clip(record_id, 80)!r} in '{mem.name}'"
            if not include_tools and any(r["id"] == record_id for r in memories.records(mem, session, True)):
                raise NotFound(f"memory {shown} is derived from tool traffic; add --include-tools to read it")
            raise NotFound(f"no memory {shown}")
        output.line(memories.read(record, offset, limit, max_chars))
        if damaged:  # (it was read before the damage; say what is left out, as a listing does)
            raise IntegrityError(damaged[0])
        return
    found = memories.find(visible, ranked, status, kind)
    if limit is not None and limit > 100:
        raise BadInput("--limit is 1-100 records")
    hidden = 0  # (when nothing matches, memories derived from tool traffic left out may: how many, and the option)
    if not found and not include_tools and not damaged:
        hidden = len(memories.find(memories.records(mem, session, True), ranked, status, kind))
    output.line(memories.listing(found, offset, limit or 30, max_chars, json, hidden))
    if damaged:
        raise IntegrityError(damaged[0])
    if not found:
        raise NothingFound(f"no memories match: {output.count(hidden, 'memory', 'memories')} derived from tool traffic "
                           f"{'matches' if hidden == 1 else 'match'}; add --include-tools to show them"
                           if hidden else "no memories match")
    if offset >= len(found):  # (a pager's loop ends here, as at a search's last page)
        raise NothingFound(f"no more memories past --offset {offset}: {output.count(len(found), 'memory', 'memories')} "
                           f"{'matches' if len(found) == 1 else 'match'}")
