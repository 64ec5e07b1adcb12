from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import budget, naming, output
from ..errors import BadInput, NothingFound
from ..memory import Memory
from ..numbers import count, param
from ..options import MESSAGE_KINDS, Budget, Home, IncludeTools, Json, Name, apart, needs, offer


def command(
    name: Name = None,
    query: Annotated[Optional[list[str]], typer.Argument(help="Words to search for (none: list newest first).", metavar="QUERY…", show_default=False)] = None,
    ids: Annotated[Optional[list[str]], typer.Option("--ids", help="Read these messages: numbers or source entry ids, comma-separated (entry:ID forces an entry id).", metavar="IDS")] = None,
    file: Annotated[Optional[str], typer.Option("--file", help="Only messages naming a path containing this (case-sensitive).", metavar="PATH")] = None,
    kind: Annotated[Optional[str], typer.Option("--kind", help="user, pi, tool, echo, work, note, or assistant, tool_call, tool_result, bash, custom.", autocompletion=MESSAGE_KINDS)] = None,
    page: Annotated[Optional[int], typer.Option("--page", help="Page of results, from 1.", click_type=param(count, "INTEGER", lo=1))] = None,
    limit: Annotated[int, typer.Option("--limit", help="Results per page, 1-30.", click_type=param(count, "INTEGER", lo=1, hi=30))] = 8,
    raw: Annotated[bool, typer.Option("--raw", help="The stored messages as JSON; one long message pages by --offset/--raw-limit.")] = False,
    offset: Annotated[Optional[int], typer.Option("--offset", help="With --raw and one id: first character of its JSON to show.", click_type=param(count, "INTEGER"))] = None,
    raw_limit: Annotated[Optional[int], typer.Option("--raw-limit", help="With --raw and one id: most characters of its JSON to show.", click_type=param(count, "INTEGER"))] = None,
    source_class: Annotated[str, typer.Option("--source-class", help="primary, derived (summaries) or all.", autocompletion=offer("primary", "derived", "all"))] = "all",
    scope: Annotated[str, typer.Option("--scope", help="all (every branch) or lineage (only the active branch of imported pi sessions).", autocompletion=offer("all", "lineage"))] = "all",
    include_tools: IncludeTools = False,
    max_chars: Budget = budget.DEFAULT,
    json: Json = False,
    home: Home = None,
) -> None:
    """Bounded recall over a memory's messages, for agent tools: list, search or read.

    Without QUERY or --file, lists newest first; with them, searches (any word, rare words and paths
    first); with --ids, reads those messages in log order. Output never exceeds --budget characters and
    never cuts JSON: whole results only, omitted ids listed. Each result says how the view holds it
    (held). Tool calls and results only with --include-tools or a tool --kind. Exit 1 when nothing is found.

    Examples:
      pimem recall "refund rounding"
      pimem recall main "refund rounding"
      pimem recall main --file src/auth/session.ts --include-tools
      pimem recall main --ids 12,15 --raw
      pimem recall main --ids 40 --raw --offset 16000 --raw-limit 16000
      pimem recall main --kind user --limit 3
      pimem recall shop "mutex" --scope lineage
    """
    from .. import recall  # (here, not at the top: ``pimem --help`` imports every command's module)

    apart(("--ids", ids), ("--file", file), ("--kind", kind), ("--page", page),
          why="--ids names the messages to read; --file, --kind and --page narrow a search or a listing")
    for option in (("--offset", offset), ("--raw-limit", raw_limit)):
        needs(option, "--raw", raw)
        needs(option, "--ids", bool(ids))
    name, query = naming.words(name, query, home)
    if file == "":  # (every path contains it: not the search --file asks for)
        raise BadInput("empty --file: give a path or part of one")
    apart(("--ids", ids), ("QUERY", query), why="--ids names the messages to read; QUERY searches")
    named = recall.parse_ids(ids or [])
    for option in (("--offset", offset), ("--raw-limit", raw_limit)):
        needs(option, "one message: give one id in --ids", len(named) == 1)
    request = recall.Request(
        query=naming.joined(query, "empty query: give words to search for, or none to list the newest"), ids=named, file=file, kind=kind, page=page if page is not None else 1, limit=limit,
        raw=raw, offset=offset, raw_limit=raw_limit, source_class=source_class, scope=scope, include_tools=include_tools,
        budget=max_chars, as_json=json,
    )
    naming.searched_in(name, query or [], home, "recall")
    mem = Memory.open(name, home)
    mem.patient = output.note  # (a long catch-up of the search index: waited for, said first)
    request.check()
    found = recall.find(mem, request)
    output.line(recall.render(mem, request, found))
    if not found.records:
        hidden, unlike = found.tools_matching, found.unlike
        if found.total and request.page > 1:  # (they matched: the page is past them)
            said = ("the one result is on" if found.total == 1
                    else f"the {found.total:,}{'+' if found.capped else ''} results end on")
            raise NothingFound(f"nothing recalled on page {request.page:,}: {said} page {recall.last_page(found, request):,}")
        if unlike:
            one = len(unlike) == 1
            raise NothingFound(f"nothing recalled: {budget.clip(', '.join(unlike), 200)} {'is' if one else 'are'} not "
                               f"{request.source_class} (drop --source-class to read {'it' if one else 'them'})")
        raise NothingFound(f"nothing recalled: {output.count(hidden, 'tool call or result matches', 'tool calls and results match')}; "
                           f"add --include-tools to show {'it' if hidden == 1 else 'them'}" if hidden else "nothing recalled")
