from __future__ import annotations

import time
from typing import Annotated, Optional

import typer

from .. import naming, output
from ..numbers import count, dollars, money, param, seconds, usd
from ..options import Home, Json, Log, apart


def command(
    names: Annotated[Optional[list[str]], typer.Argument(help="Memories to build (default: all).", metavar="NAME…", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only print how many calls, tokens and money the rest would take.")] = False,
    max_cost: Annotated[Optional[float], typer.Option("--max-cost", help="Never spend more than this: calls in flight count at their worst case (needs prices: pimem model --price-in/--price-out).", metavar="USD", click_type=param(usd, "USD"))] = None,
    retries: Annotated[Optional[int], typer.Option("--retries", help="Retry a failed node this many times (after the retry delay) before giving up; one the server asks to wait more than a minute for (Retry-After) is left to the next run.", metavar="N", click_type=param(count, "N", hi=10**6))] = None,
    wait: Annotated[Optional[float], typer.Option("--wait", help="Wait up to S seconds for a running watcher or build to let go (default: exit 4 at once).", metavar="S", click_type=param(seconds, "S"))] = None,
    log: Log = None,
    json: Json = False,
    home: Home = None,
) -> None:
    """Build every buildable summary node once, then exit (for cron).

    Short messages and short joins need no model; the rest go to the memory's compactor (pimem model), 8
    calls at a time. Exit 0 when the tree is complete, 6 when some nodes failed (their errors are in
    'pimem status'; the next run retries them) or the server refused a memory's API key (that memory is left
    at once, with one line), 4 when a watcher is building the memory (the others are built
    first) or took its lease over mid-run (this run stalled past the heartbeat). A progress bar is
    shown on a terminal; --json prints one event per built or failed node and a summary per memory.

    Examples:
      pimem build-tree
      pimem build-tree main
      pimem build-tree main work --dry-run
      pimem build-tree main --max-cost 0.50 --json | jq -c 'select(.event=="failed")'
      pimem build-tree --retries 3 --log ~/.pi/memory/logs/build.log   # from cron, every 10 minutes
    """
    from .. import builder as builders, compactor, env, scheduler
    from ..errors import BadInput, Busy, ProviderError, as_error
    from ..memory import Memory
    from ..tree import label

    apart(("--dry-run", dry_run), ("--retries", retries), ("--wait", wait), why="a dry run builds nothing")
    if dry_run:
        output.read_only()
    output.log_to(log, "build-tree")
    mems = mems_named = Memory.named(names, home) if names else Memory.all(home)
    if not mems:
        naming.say_none(home, "build")
    refused = {}  # memory name -> what it was left on before building (its settings, its damaged log)

    def reading(mem, read):
        """``read(mem)``; a failure the user can act on leaves that memory out (named at the end), not the run."""
        try:
            return read(mem)
        except Exception as exc:
            error = as_error(exc)
            if error is None:
                raise
            gone = scheduler.went_away(mem)  # (renamed or deleted since it was listed)
            refused[mem.name], error = gone or exc, gone or error
            if json:
                output.json_line({"event": "refused", "memory": mem.name, "error": str(error), **({"gone": True} if gone else {})})
            return None

    estimates = [row for row in (reading(mem, builders.estimate) for mem in mems) if row is not None] \
        if dry_run or max_cost is not None else []
    if max_cost is not None:
        unpriced = [e["memory"] for e in estimates if e["cost"] is None and e["calls"]]
        if unpriced:
            others = f" (and so for {', '.join(unpriced[1:])})" if unpriced[1:] else ""
            raise BadInput(f"--max-cost needs prices for the compactor of {', '.join(unpriced)}: set them with "
                           f"'pimem model {unpriced[0]} PROVIDER/MODEL --price-in USD --price-out USD'{others}")
    if dry_run:
        configs = {mem.name: mem.config.get("compactor") or {} for mem in mems if mem.name not in refused}
        paths = {mem.name: mem.path for mem in mems}
        for row in estimates:
            wrong = None if row["offline"] or not row["calls"] else compactor.key_problem(configs[row["memory"]])
            if wrong:  # (the run would refuse it at once: said now, not after the estimate is trusted)
                row["key_problem"] = wrong
            elif not row["offline"] and row["calls"] and (at := _key_refused(paths[row["memory"]], configs[row["memory"]])):
                row["key_refused"] = at  # (the last run's: this one may be refused its key as well)
            if json:
                output.json_line(row)
            elif row["offline"]:  # (no call, no token, no cost: the nodes the build makes, as it says them after)
                long = f"{output.count(row['leaves'], 'long message')} to summarise; " if row["leaves"] else ""
                what = (f", no calls and no cost ({long}{output.count(row['pending'] - row['leaves'], 'merge')}, each "
                        "written or joined free)") if row["pending"] else ""
                output.line(f"{row['memory']}: {output.count(row['pending'], 'node')} to build offline with "
                            f"{row['model']}{what}; {row['built']:,} of {output.count(row['nodes'], 'node')} built")
            else:
                cost = "unknown cost (no prices set: pimem model --price-in/--price-out)" if row["cost"] is None else f"about {money(row['cost'])}"
                if row.get("cost_cached") is not None:
                    cost += f" ({money(row['cost_cached'])} at best with the prompt cache)"
                again = (f" and about {row['asked_again']:,} more the faithfulness guard asks again"
                         if row["asked_again"] else "")
                near = "" if not row["calls"] else "at most " if row["bound"] else "about "  # (nothing left is no guess)
                output.line(f"{row['memory']}: {near}"
                            f"{output.count(row['calls'], 'call')} to {row['model']} "
                            f"({output.count(row['leaves'], 'leaf', 'leaves')}, {output.count(row['merges'], 'merge')})"
                            f"{again}, {near and 'about '}{output.count(row['tokens_in'], 'token')} in and {row['tokens_out']:,} out, {cost}; "
                            f"{row['built']:,} of {output.count(row['nodes'], 'node')} built"
                            + (f"; but {wrong} here: the run would send nothing" if wrong else "")
                            + (f"; but the server refused its API key at {row['key_refused']} (see 'pimem status "
                               f"{row['memory']}')" if row.get("key_refused") else ""))
        _raise_first(refused, mems_named)
        return
    keyless = {}  # memories whose compactor cannot be called here: refused at once, never retried

    def key_problem(mem):
        cfg = mem.config.get("compactor") or {}
        wrong = compactor.key_problem(cfg)
        if wrong and builders.survey(mem)["pending"]:
            why = keyless[mem.name] = f"{wrong} (the API key of its compactor {compactor.label(cfg)})"
            if json:  # (as a memory left out for its log or its settings is)
                output.json_line({"event": "refused", "memory": mem.name, "error": why})
        return mem

    mems = [mem for mem in mems if reading(mem, key_problem) is not None and mem.name not in keyless]
    estimates = [e for e in estimates if e["memory"] in {mem.name for mem in mems}]
    progress = _Progress(mems) if not json and env.stderr_is_tty() else None

    def waiting(event: dict) -> None:
        """Say once that the run waits for the retry time an earlier run recorded for failed nodes (up to a
        minute of silence otherwise), or stands by for another builder to let go (--wait: up to S seconds of
        silence otherwise); with --json too (and the ``waiting`` or ``held`` event, as ``watch`` emits)."""
        if json:
            output.json_line(event)
        said = scheduler.said_held(event) if event["event"] == "held" else scheduler.said_waiting(event)
        (progress.say if progress is not None else output.info)(said)

    started = time.monotonic()
    try:
        sched = scheduler.build_tree(mems, on_event=output.json_line if json else None, max_cost=max_cost,
                                     retries=retries if retries is not None else 0, wait=wait if wait is not None else 0.0,
                                     on_progress=progress.update if progress else None, keep_going=True,
                                     on_wait=waiting)
    finally:
        if progress is not None:
            progress.close()
    took = round(time.monotonic() - started, 3)
    built = sched.builders + sched.retired
    # calls: lines written (a built event each); unwritten: lines built but not written (a write failed, the
    # memory was left, its lease taken over), which the next run builds again; seconds: how long the run took
    # (waits for retry times included); call_seconds: the calls' time, summed
    rows = [{"event": "done", "memory": b.name, **b.stats.as_dict(), "unwritten": len(b.unwritten), "seconds": took,
             "call_seconds": round(b.stats.seconds, 3), "gave_up": len(b.gave_up),
             **({"lost": True} if b in sched.lost else {}), **({"overbilled": True} if b in sched.overbilled else {})}
            for b in built]
    if json:
        for row in rows:
            output.json_line(row)
    if sched.signal is not None:  # stopped: the calls in flight were kept, nothing new was started
        # (a memory whose lease was still waited for counts too)
        pending = sum(builders.survey(mem)["pending"] for mem in mems if mem.name not in sched.refused)
        written = sum(row["calls"] for row in rows)
        output.info(f"pimem: interrupted: {output.count(pending, 'node')} still pending ({written:,} written in this "
                    "run; the next run builds the rest)" if pending else
                    f"pimem: interrupted: no node pending ({written:,} written in this run)")
        raise typer.Exit(128 + sched.signal)
    failed = sum(row["gave_up"] for row in rows)
    for builder, row in zip(built, rows):
        if not json:
            cost = f", {money(row['cost'])}" if row["cost"] else ""
            output.info(f"{builder.name}: {row['calls']} written by {builder.compactor.label}, {row['free']} free"
                        f"{cost}" + (f"; {row['unwritten']:,} built but not written (the next run builds them again)"
                                     if row["unwritten"] else "")
                        + (f"; {row['gave_up']:,} failed (see 'pimem status {builder.name}')" if row["gave_up"] else ""))
    refused.update(sched.refused)
    if not names:  # (a run over every memory: one the user renamed or deleted meanwhile is no failure)
        for mem in mems_named:
            if mem.name in refused and scheduler.went_away(mem) is not None:
                del refused[mem.name]
                output.info(f"{mem.name}: renamed or deleted during this run; left out")
    _raise_first(refused, mems_named)
    if sched.lost:
        raise Busy(f"{', '.join(b.name for b in sched.lost)}: another builder took over the lease (this run "
                   "stalled past its heartbeat); stopped building there, and kept what was written")
    if keyless:
        raise ProviderError(f"{'; '.join(f'{name}: {why}' for name, why in keyless.items())}; nothing was sent")
    if sched.overbilled and max_cost is not None:
        pending = sched.pending()
        raise ProviderError(f"stopped: {next(iter(sched.overbilled.values()))}; spent {money(sched.spent())} against "
                            f"--max-cost {dollars(max_cost)}" + (f"; {_remain(pending)}" if pending else ""))
    if sched.stopped_for_cost:
        raise ProviderError(f"stopped before spending more than {dollars(max_cost)} (spent {money(sched.spent())}, and the next "
                            f"call may cost up to {money(sched.next_worst)} at its worst case); "
                            f"{_remain(sched.pending())}")
    capped = [sched.capped[b] for b in built if sched.capped_today(b)]
    if capped:  # (the watcher's event and words: the calls wait for the next day, the next run's)
        raise ProviderError("; ".join(_said_capped(event, builders.survey(Memory.open(event["memory"], home))["pending"])
                                      for event in capped))
    if failed:
        # (the first in the log: its first message, then the smaller node, as status lists them)
        builder, node = next((b, node) for b in built for node in sorted(b.gave_up, key=lambda n: (n[1] << n[0], n[0])))
        entry = builder.state.failures.get(label(*node), {})
        error = entry.get("error", "")[:200]
        if node in builder.deferred and node not in builder.tries:  # (sent nothing: its old error alone read as new)
            error = f"not sent before {entry.get('retry')}, the retry time recorded when it failed: {error}"
        raise ProviderError(f"{failed} node{'s' if failed != 1 else ''} could not be built (first {builder.name} "
                            f"{label(*node)}: {error}); the next run retries them")


def _key_refused(path, cfg: dict) -> str | None:
    """When the server last refused the API key of the compactor ``cfg`` of the memory at ``path``, if it did and
    no builder has tried it since (compactor.json's ``key_refused``)."""
    from ..builder import asked_of
    from ..compactor.state import BuildState

    refused = BuildState(path).refused_key(asked_of(cfg))
    return refused["at"] if refused else None


def _said_capped(event: dict, pending: int) -> str:
    """Why a memory's build stopped at its daily cap (its ``capped`` event), and the nodes left for a later run."""
    from ..scheduler import said_below_cap

    if event["next_call"] > event["max_cost_per_day"]:  # (build-tree's cap is always the setting)
        return f"{said_below_cap(event, setting=True)}; {_remain(pending)}"
    return (f"stopped: {event['memory']}: spent {money(event['spent'])} of the daily cap of "
            f"{dollars(event['max_cost_per_day'])} on {event['day']} (max_cost_per_day; the next call may cost up to "
            f"{money(event['next_call'])} at its worst case); {_remain(pending)}: a run after that day builds them")


def _remain(pending: int) -> str:
    return f"{output.count(pending, 'node')} remain{'s' if pending == 1 else ''} unbuilt"


def _raise_first(refused: dict, mems: list) -> None:
    """Say the first memory left out (in the order of ``mems``) in its own words and exit with its code (a
    damaged log: 5), naming the others left out; one held by a watcher (4, the usual under a watcher) is said
    only when no other was left out for a reason a person must mend."""
    from ..errors import Busy, PimemError, as_error

    if not refused:
        return
    order = {mem.name: k for k, mem in enumerate(mems)}
    names = sorted(refused, key=lambda name: (isinstance(as_error(refused[name]), Busy), order.get(name, len(order))))
    name, error = names[0], as_error(refused[names[0]])
    said = f"{error}" if str(error).startswith(f"{name}: ") else f"{name}: {error}"
    if names[1:]:
        said += f" (also not built: {', '.join(names[1:])})"
    raise PimemError(said, error.code)


class _Progress:
    """A rich progress bar per memory on stderr: nodes built of the full tree."""

    def __init__(self, mems):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        from ..builder import tree_size

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                            console=Console(stderr=True), transient=True)
        self.tasks = {mem.name: self.bar.add_task(mem.name, total=tree_size(mem.count())) for mem in mems}
        self.bar.start()

    def update(self, builders) -> None:
        for builder in builders:
            self.bar.update(self.tasks[builder.name], completed=builder.settled)

    def say(self, text: str) -> None:
        """A line on stderr above the bars."""
        from ..errors import readable

        self.bar.console.print(readable(text), markup=False, highlight=False, soft_wrap=True)

    def close(self) -> None:
        self.bar.stop()
