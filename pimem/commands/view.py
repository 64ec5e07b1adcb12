from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import naming, output
from ..errors import BadInput
from ..memory import Memory
from ..numbers import param, seconds
from ..options import Home, IncludeTools, Json, Name


def command(
    name: Name = None,
    compactor: Annotated[bool, typer.Option("--compactor", help="The compactor's view (cut at its first unbuilt line).")] = False,
    wait: Annotated[Optional[float], typer.Option("--wait", help="First wait up to S seconds for summaries a running watcher is writing.", metavar="S", click_type=param(seconds, "S"))] = None,
    stats: Annotated[bool, typer.Option("--stats", help="Bytes, lines and lines per level instead of the lines.")] = False,
    include_tools: IncludeTools = False,
    json: Json = False,
    home: Home = None,
) -> None:
    """Print the view: one line per span, old spans coarse, new ones fine, each as ID+N|text.

    This is what the model reads each turn. A long message not summarised yet shows a placeholder telling the
    model to zoom it. Tool calls and results quoted verbatim in lines are shown as markers unless
    --include-tools, and so is what a summary quotes from its span's tool output: [tool output hidden].
    --json gives one object per line: label, level, index, bytes (of the line as the model reads it) and text
    (null for a placeholder).

    Examples:
      pimem view main
      pimem view main --wait 8
      pimem view main --stats
      pimem view main --compactor --json | jq .label
    """
    if wait is not None and wait < 0:
        raise BadInput("--wait takes a number of seconds ≥ 0")
    mem = Memory.open(naming.given(name), home)
    mem.patient = output.note  # (a long catch-up of the search index: waited for, said first)
    views = mem.views.current()
    if wait:
        views = _wait(mem, views, wait, include_tools)
    rows = mem.views.shown(views, include_tools=include_tools, compactor=compactor)
    if stats:
        _stats(views.cview if compactor else views.view, views.T, rows, json, mem,
               0 if compactor else mem.views.held_back(views).lines, compactor)
        return
    from ..tree import label
    from ..view import render_line

    for l, i, text, cost in rows:
        if json:
            output.json_line({"label": label(l, i), "level": l, "index": i, "bytes": cost - 1, "text": text})
        else:
            output.line(render_line(l, i, text))


def _wait(mem, views, seconds: float, include_tools: bool):
    """Poll until the view has no placeholder it shows (a tool message's is shown as its marker without
    ``include_tools``) and no batch held up, or ``seconds`` pass (only while a watcher holds the memory's
    lease and answers, or a watcher of the whole home is about to take it, as ``context`` waits: without one
    nothing would change; ``_no_watcher`` says why, before the wait or during it), or the compactor starts failing
    as ``context`` takes it (``context.stalled``: a node refused meanwhile with a long ``Retry-After``, or for the
    third time in a row), as ``context`` stops then too: it looked only before the wait, and waited out all of it."""
    import time

    from ..lease import wait_for_builder

    def pending(v) -> bool:
        return bool(mem.views.waiting(v, include_tools) or v.view.waiting() and v.view.total > v.view.hi)

    if not pending(views):
        return views
    since = time.time()
    why = _no_watcher(mem, since)
    if why:
        output.info(f"{why}; not waiting")
        return views
    from ..context import stalled

    why = stalled(mem, seconds)
    if why:
        output.info(f"{why}; not waiting")
        return views
    latest, gave_up = [views], []

    def ready(left: float) -> bool:
        latest[0] = mem.views.current()
        if not pending(latest[0]):
            return True
        why = stalled(mem, left)
        if why:
            gave_up.append(why)
        return bool(why)

    if not wait_for_builder(mem, seconds, ready):
        why = _no_watcher(mem, since)  # (it stopped answering or went away during the wait)
        if why:
            output.info(f"{why}; not waiting any longer")
        else:
            n = len(mem.views.waiting(latest[0], include_tools))
            output.info(f"{output.count(n, 'line')} still wait{'s' if n == 1 else ''} for a summary after {seconds:g} s")
    elif gave_up:
        output.info(f"{gave_up[0]}; not waiting any longer")
    return latest[0]


def _no_watcher(mem, since: float) -> str | None:
    """Why no watcher will write ``mem``'s summaries (``lease.builder``: none holds its lease nor is about to
    take it, or the one that is is not answering: its heartbeat ``lease.QUIET`` seconds late), or None;
    ``since``: when the wait began."""
    import time

    from ..lease import QUIET, STALE, builder, live, watcher

    found = builder(mem, since, STALE)
    if found is None:
        home = watcher(mem.path.parent)
        refused = home.get("refused") if home is not None else None
        if isinstance(refused, list) and mem.name in refused:
            return f"the watcher of the home (pid {home.get('pid')}) refused '{mem.name}' (its stderr or --log says why)"
        return f"no watcher is building '{mem.name}' (start one with 'pimem watch {mem.name}')"
    if not live(found, QUIET):
        if "scanned" in found:  # (the home's watch.json: a watcher about to take it)
            who = f"the watcher of the home (pid {found.get('pid')}), which has not taken '{mem.name}' yet,"
        else:
            who = f"the watcher building '{mem.name}' (pid {found.get('pid')})"
        return f"{who} is not answering (stopped?: its last heartbeat was {max(0.0, time.time() - found['beat']):.0f} s ago)"
    return None


def _stats(v, messages: int, rows, json: bool, mem, back: int = 0, compactor: bool = False) -> None:
    """``back``: the view's oldest lines shown by the spans that tile them (``ViewFile.held_back``).
    ``compactor``: the compactor's view, which stops at its first unbuilt line: the messages after it (``cut``)
    are in no line, and wait for their summaries."""
    from ..builder import shown_marks, suspect_marks
    from ..tree import label

    marked = suspect_marks(mem)  # (a line shows a mark: its own, or a free line's that it joins)
    suspect = [label(l, i) for l, i, text, _ in rows if marked and text is not None and shown_marks(
        l, i, lambda l, i: marked.get((l, i)), lambda l, i: mem.tree.stored(l, i) is not None)]
    levels: dict[int, int] = {}
    for l, *_ in rows:
        levels[l] = levels.get(l, 0) + 1
    total = sum(cost for *_, cost in rows)
    waiting = set(v.placeholders())  # (a tool message's shows its marker, but waits for its summary all the same)
    pending = sum((l, i) in waiting or text is None for l, i, text, _ in rows)  # (and the spans held back)
    shown = v.start(back)  # the first message shown by its own line
    spans = sum((i + 1) << l <= shown for l, i, _, _ in rows)
    unbuilt = sum((i + 1) << l <= shown and text is None for l, i, text, _ in rows)  # (a span may be a line built)
    cut = messages - max(((i + 1) << l for l, i, _, _ in rows), default=0)
    if json:
        output.json_line({"bytes": total, "lines": len(rows), "messages": messages, "pending": pending,
                          "levels": {str(l): levels[l] for l in sorted(levels)}, "suspect": suspect,
                          "held_back": {"lines": back, "messages": shown, "spans": spans, "view_bytes": v.total}
                          if back else None} | ({"cut": cut} if compactor else {}))
        return
    output.line(f"bytes     {total:,}  (budget {v.lo:,}–{v.hi:,})")
    if compactor and cut:
        output.line(f"lines     {len(rows):,}  for {messages - cut:,} of {output.count(messages, 'message')} (it stops at its "
                    f"first unbuilt line: {output.count(cut, 'message')} after it {'waits' if cut == 1 else 'wait'} for a summary)")
    else:
        output.line(f"lines     {len(rows):,}  for {output.count(messages, 'message')} ({pending:,} waiting for a summary)")
    if back:
        some = "" if unbuilt == spans else f", {unbuilt:,}"
        output.line(f"held back {output.count(back, 'line')} (messages 0–{shown - 1:,}), shown as {output.count(spans, 'span')}"
                    f"{some} not summarized yet: the view is {v.total:,} bytes, past twice its budget, and waits for the "
                    "compactor")
    if suspect:
        output.line(f"suspect   {output.count(len(suspect), 'line')} {'names' if len(suspect) == 1 else 'name'} what their "
                    f"messages do not hold: {', '.join(suspect[:10])}")
    for l in sorted(levels):
        output.line(f"level {l:<3} {levels[l]:>5} line{'s' if levels[l] != 1 else ' '} of {output.count(1 << l, 'message')}")
