from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import output
from ..errors import NothingFound
from ..memory import Memory
from ..message import kind_of
from ..numbers import count, index, param
from ..options import MESSAGE_KINDS, Home, IncludeTools, Json, apart


def command(
    query: Annotated[str, typer.Argument(help='Words that must all occur, or a "quoted phrase".', metavar="QUERY", show_default=False)],
    names: Annotated[Optional[list[str]], typer.Argument(help="Memories to search (default: all).", metavar="NAME…", show_default=False)] = None,
    any_term: Annotated[bool, typer.Option("--any", help="Match messages holding any of the words, not all.")] = False,
    rank: Annotated[bool, typer.Option("--rank", help="Ranked retrieval: messages holding any of the words, best first (stems, BM25, neighbour context).")] = False,
    kind: Annotated[Optional[list[str]], typer.Option("--kind", "-k", help="Only these kinds (repeatable).", autocompletion=MESSAGE_KINDS)] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Only messages from #I on, or dated at or after WHEN (2026-10-08, 3d, yesterday 9:30, last monday).", metavar="WHEN")] = None,
    until: Annotated[Optional[str], typer.Option("--until", help="Only messages before #I, or dated before WHEN.", metavar="WHEN")] = None,
    before: Annotated[Optional[int], typer.Option("--before", help="Only messages numbered below I (the next page after a hit #I).", metavar="I", click_type=param(index, "I"))] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="At most this many hits.", click_type=param(count, "N", lo=1))] = 20,
    offset: Annotated[int, typer.Option("--offset", help="Skip the first N hits (the next page of --rank).", metavar="N", click_type=param(count, "N"))] = 0,
    include_tools: IncludeTools = False,
    json: Json = False,
    home: Home = None,
) -> None:
    """Search the original messages of one or all memories; exit 1 when nothing matches.

    Case-insensitive substring search, Chinese included, one- and two-character words too. Every word must
    occur (--any: at least one); "a quoted phrase" must occur exactly. Newest first. --rank asks a
    question instead: any of its words, stemmed, best first.
    Each hit: memory, #i, date, kind and a snippet around the match. Tool calls and results are searched
    only with --include-tools (or --kind tool/echo).

    Examples:
      pimem search 'staging db'
      pimem search '"connection refused"' main --include-tools
      pimem search --rank 'when did we move the staging db?'
      pimem search 蓝鲸 --since 3d --json | jq .i
      pimem search port --kind user --before 120 --limit 5
      pimem search --rank 'theme selector port' --limit 5 --offset 5
    """
    from .. import naming
    from .. import search as searching

    apart(("--rank", rank), ("--any", any_term), why="--rank finds messages holding any of the words already")
    naming.text_argument(query)  # (said once, before any memory is read: not once per memory, naming it)
    bounds = searching.bounds(since, until, before, ("--since", "--until"))
    unread = output.Unread()
    naming.searched_for(query, names or [], home)
    memories = Memory.named(names, home) if names else Memory.all(home, refused=unread)
    try:
        hits = searching.search(
            memories,
            query,
            any_term=any_term,
            rank=rank,
            kinds={kind_of(k) for k in kind} if kind else None,
            include_tools=include_tools,
            **bounds,
            limit=limit + 1,  # (one past the page: whether a next page has anything to show)
            offset=offset,
            unread=unread,
            on_note=output.note,  # (a long catch-up: waited for, said first)
        )
    finally:
        for mem in memories:
            mem.close()
    if not hits:
        unread.check()
        why = f" past --offset {offset}" if offset else f" before #{before}" if before is not None else ""
        if rank:
            from ..ranker import query_words

            if not query_words(query):
                why += ": it holds no word --rank ranks (stop words and symbols are not); search for it without --rank"
        raise NothingFound(f"no message matches {query!r}{why}")
    more, hits = len(hits) > limit, hits[:limit]
    terms = searching.parse(query)
    for hit in hits:
        if json:
            output.json_line(hit)
            continue
        text = searching.highlight(output.flatten(hit["snippet"]), terms, lambda s: output.style(s, "match"))
        shown = {"verbatim": "", "inside": f"[inside {hit.get('label')}] "}.get(hit.get("held"), f"[{hit.get('held')}] ")
        held = output.style(shown, "dim") if "held" in hit and shown else ""
        head = output.style(f"{hit['memory']} #{hit['i']}", "cyan")
        output.line(f"{head} {output.style(hit['date'], 'dim')} {output.style(hit['kind'] + ':', 'bold')} {held}{text}")
    # (ranked as one collection: the next page of all the memories at once; so is one paged by --offset, which
    # --before would not continue: given with the --offset, the offset's first hits below it were skipped)
    if more and (rank or offset):
        output.info(f"pimem: {output.count(limit, 'hit')} shown; for more: --offset {offset + limit}")
    elif more:
        last = {h["memory"]: h["i"] for h in hits}  # each memory's oldest hit shown
        if len(memories) == 1:
            output.info(f"pimem: {output.count(limit, 'hit')} shown; for more: --before {hits[-1]['i']}")
        else:  # --before pages one memory's numbering: the next page of several is one memory at a time
            pages = ", ".join(f"{name} --before {i}" for name, i in last.items() if i)  # (none below a #0)
            others = "" if len(last) == len(memories) else " (and the other memories alone)" if pages else "the other memories alone"
            output.info(f"pimem: {output.count(limit, 'hit')} shown; for more, one memory at a time: {pages}{others}")
    unread.check()
