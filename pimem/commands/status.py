from __future__ import annotations

import time

from .. import naming, output
from ..errors import escaped
from ..memory import Memory
from ..numbers import dollars, money
from ..options import Home, Json, Name


FAILING_SHOWN = 10  # failing nodes a line each, first in the log first (a server down for a day fails a probe a round)


def command(name: Name = None, json: Json = False, home: Home = None) -> None:
    """Show one memory's state: messages, files on disk, and the summary tree: nodes built and pending,
    the compactor, money spent, the running builder, and failing nodes with their last error. Times are shown
    in the local time zone (the JSON's as recorded, RFC 3339, with their offsets).

    Examples:
      pimem status main
      pimem status main --json | jq .tree
    """
    from .. import builder, compactor, env, lease, when
    from ..compactor.state import BuildState

    mem = Memory.open(naming.given(name), home)
    row = mem.summary()
    files = mem.log.files()
    row.update(path=escaped(str(mem.path)), log_files=len(files), log_bytes=sum(p.stat().st_size for p in files))
    found = builder.survey(mem)
    row["tree"] = {k: found[k] for k in ("nodes", "built", "pending", "leaves", "merges_ready")}
    row["compactor"] = compactor.describe(mem.config.get("compactor") or {})
    row["spent"] = builder.spent(mem)
    row["builder"] = lease.holder(mem)
    row["builder_gone"] = None if row["builder"] else lease.dead(mem)  # (killed or crashed: it never let go)
    # a watcher of every memory running that left this one (its log, damaged, say, or its settings): said, not "none"
    watching = None if row["builder"] else lease.watcher(mem.home)
    refused_by = watching if watching and mem.name in (watching.get("refused") or []) else None
    row["watcher_refused"] = {"pid": refused_by["pid"], "host": refused_by["host"]} if refused_by else None
    state = BuildState(mem.path)
    # billed calls that built nothing; with no builder running, a capped watcher's calls cut off by its death too,
    # at what they were billed if answered, else at their worst case, as the next builder counts them
    cut_off = 0.0 if row["builder"] else sum(call["cost"] for call in state.pending.values())
    row["spent"]["cost_unbuilt"] = round(sum(state.unbuilt_cost.values()) + cut_off, 9)
    failures = state.failures
    row["failures"] = [{"node": node, **info} for node, info in sorted(failures.items(), key=_place)]
    now = env.now()
    # the daily cap: until the watcher's day ends, whatever the time zone here, unless the memory's setting it
    # reached was raised since (or taken away): the next watcher looks at the day afresh, as a running one does
    setting = mem.config.get("max_cost_per_day")
    lifts = state.cap_lifts(now, setting)
    row["capped"] = state.capped if lifts else None  # (the watcher's local day)
    row["capped_until"] = when.rfc3339(lifts.astimezone(now.tzinfo)) if lifts else None
    row["capped_below"] = state.capped_below if lifts else None  # (no call fits the cap, whatever the day)
    if row["capped_below"] and state.capped_setting is not None:  # (raised since, but not enough)
        row["capped_below"] = {**row["capped_below"], "max_cost_per_day": setting}
    row["stopped"] = state.overbilled if row["builder"] else None  # (an overbilled call: until the watcher restarts)
    asker = builder.asked_of(mem.config.get("compactor") or {})
    refused = state.refused_key(asker)  # (the server refused the key of the memory's compactor: no builder calls it now)
    row["key_refused"] = {"error": refused["error"], "at": refused["at"]} if refused else None
    # a capped or stopped watcher retries nothing; with no builder running, the next one waits for a retry time
    # still to come (``Builder._deferred``)
    idle = row["builder"] and (row["capped"] or row["stopped"])
    for fail in row["failures"]:
        fail["next"], fail["being_retried"] = (None, False) if idle else _retry(fail, row["builder"], asker, now)
        # a leaf the running builder holds back until some call is answered (``Builder.parked``): not retried
        # meanwhile; a mark no builder running stands behind is dropped (the next one parks its own)
        if fail.pop("parked", None) is True and row["builder"] and not idle:
            fail.update(parked=True, next=None, being_retried=False)
    if json:
        output.json_line(row)
        return

    def local(text):
        return _local(text, now)

    output.line(f"memory    {row['name']}  ({output.flatten(row['path'])})")
    output.line(f"messages  {row['messages']:,}  in {output.count(row['log_files'], 'daily file')}, {output.count(row['log_bytes'], 'byte')}")
    if row["messages"]:
        output.line(f"from      {local(row['first'])}")
        output.line(f"to        {local(row['last'])}")
    tree = row["tree"]
    waiting = f" ({output.count(tree['leaves'], 'message')} wait{'s' if tree['leaves'] == 1 else ''} for a summary)" if tree["leaves"] else ""
    output.line(f"tree      {tree['built']:,} of {output.count(tree['nodes'], 'node')} built, {tree['pending']:,} pending{waiting}")
    model = row["compactor"]
    key = f"  (key from ${model['key_env']})" if model.get("key_env") else ""
    output.line(f"model     {model['model']}{key}")
    spent = row["spent"]
    if spent["calls"]:
        models = ", ".join(f"{model} {n:,}" for model, n in sorted(spent["models"].items()))
        cost = f", {money(spent['cost'])}" if spent["cost"] else ""
        cached = f" ({spent['tokens_cached'] / spent['tokens_in']:.0%} from the prompt cache)" if spent["tokens_cached"] else ""
        output.line(f"spent     {output.count(spent['calls'], 'summary', 'summaries')} written ({models}), "
                    f"{output.count(spent['tokens_in'], 'token')} in{cached}, "
                    f"{spent['tokens_out']:,} out{cost}")
    if spent["cost_unbuilt"]:
        output.line(f"{'' if spent['calls'] else 'spent':<10}{money(spent['cost_unbuilt'])} more on calls that built nothing "
                    "(empty or refused answers; a capped run's calls given up at a stop or cut off by its death, at "
                    "what they were billed if answered, else at their worst case; over the last 31 days)")
    if spent["suspect"]:
        shown = ", ".join(spent["suspect"][:10]) + (" …" if len(spent["suspect"]) > 10 else "")
        marked = len(spent["suspect"])
        output.line(output.style(f"suspect   {output.count(marked, 'summary', 'summaries')} {'names' if marked == 1 else 'name'} "
                                 f"a number, path or identifier their messages do not hold: {shown}", "yellow"))
    builder, gone = row["builder"], row["builder_gone"]
    if builder:
        ago = max(0.0, time.time() - builder["beat"])
        if ago > lease.QUIET:  # (alive: its lease is kept, but a reader waits for it no more)
            output.line(output.style(f"builder   pid {builder['pid']} on {builder['host']} since {local(builder['started'])} "
                                     f"is not answering (stopped?; heartbeat {ago:.0f} s ago)", "yellow"))
        else:
            output.line(f"builder   pid {builder['pid']} on {builder['host']} since {local(builder['started'])} (heartbeat {ago:.0f} s ago)")
    elif gone and gone["alive"]:  # (its pid is there, its heartbeat stale, and its record cannot tell its process)
        ago = max(0.0, time.time() - gone["beat"])
        output.line(output.style(f"builder   none: pid {gone['pid']} on {gone['host']} (since {local(gone['started'])}) is "
                                 f"not answering (stopped?; heartbeat {ago:.0f} s ago); the next 'pimem watch' or "
                                 "'pimem build-tree' takes the memory over", "yellow"))
    elif gone:
        ago = max(0.0, time.time() - gone["beat"])
        output.line(output.style(f"builder   none: pid {gone['pid']} on {gone['host']} (since {local(gone['started'])}) is "
                                 f"gone without letting the memory go, killed or crashed (heartbeat {ago:.0f} s ago); "
                                 "run 'pimem watch' or 'pimem build-tree'", "yellow"))
    elif row["watcher_refused"]:
        by = row["watcher_refused"]
        output.line(output.style(f"builder   none: the watcher of the home (pid {by['pid']} on {by['host']}) refused "
                                 f"it (its output says why, and so does 'pimem build-tree {mem.name}')", "yellow"))
    else:
        output.line("builder   none (run 'pimem watch' or 'pimem build-tree')")
    if row["capped_below"]:
        below = row["capped_below"]
        output.line(output.style(f"capped    a call may cost up to {money(below['next_call'])} at its worst case, more than the "
                                 f"daily spend cap of {dollars(below['max_cost_per_day'])}: nothing is built until the cap is "
                                 "raised", "yellow"))
    elif row["capped"]:
        output.line(output.style(f"capped    the daily spend cap was reached on {row['capped']} (the builder's local day): "
                                 f"nothing more is built until {row['capped_until']}", "yellow"))
    if row["stopped"]:
        output.line(output.style(f"stopped   {output.flatten(row['stopped'])}; the watcher calls the compactor no "
                                 "more until it is started again", "red"))
    if row["key_refused"]:
        output.line(output.style(f"stopped   {output.flatten(row['key_refused']['error'])} (at "
                                 f"{output.flatten(local(row['key_refused']['at']))})", "red"))
    for fail in row["failures"][:FAILING_SHOWN]:
        retry = (", waiting for an answered call" if fail.get("parked") else f", next {local(fail['next'])}" if fail["next"]
                 else ", being retried" if fail["being_retried"] else "")
        output.line(output.style(f"failing   {output.flatten(fail['node'])}: {output.flatten(fail['error'])} "
                                 f"({output.count(fail['tries'], 'try', 'tries')}, last {output.flatten(local(fail['at']))}{retry})", "red"))
    if len(row["failures"]) > FAILING_SHOWN:
        more = len(row["failures"]) - FAILING_SHOWN
        output.line(output.style(f"failing   and {more:,} more {'node' if more == 1 else 'nodes'} further along the log "
                                 f"('pimem status {row['name']} --json' lists them all)", "red"))


def _place(item) -> tuple:
    """Where failing node ``(label, record)`` lies in the log (its first message, then its size): the first
    hold back the rest (a label that is not ``I+N``, from a hand edit, last)."""
    start, _, size = item[0].partition("+")
    return (0, int(start), int(size)) if start.isdigit() and size.isdigit() else (1, 0, 0)


def _moment(text):
    """The date-time ``text`` (RFC 3339, with its offset), else None."""
    import datetime

    try:
        moment = datetime.datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return moment if moment is not None and moment.tzinfo is not None else None


def _local(text, now) -> str:
    """The date-time ``text`` (RFC 3339) in the time zone of ``now``, the reader's, as ``capped_until`` is shown
    (a builder's times are in its own: a service's UTC beside the shell's +08:00); else ``text`` as it is."""
    from .. import when

    return when.in_zone(text, now) if isinstance(text, str) else text


def _retry(fail: dict, builder: dict | None, asker: str, now) -> tuple[str | None, bool]:
    """When the failing node ``fail`` is tried again: its retry time while that is to come, whether a builder
    runs (``builder``, else None) or not (the next to start waits for it: ``Builder._deferred``), unless another
    compactor than the memory's (``asker``: ``builder.asked_of``) was asked it (the memory's was switched since:
    its builder does not wait for it); else whether
    the running builder is retrying it: its retry time is past, or the node failed before the builder took the
    memory with none recorded (a builder tries every unbuilt node from its start). ``(None, False)``: no time to
    wait for and nothing retrying it (no builder runs, or this run gave it up: build-tree past --retries)."""
    at, retry = _moment(fail.get("at")), _moment(fail.get("retry"))
    if retry is not None and retry > now and fail.get("compactor", asker) == asker:
        return fail["retry"], False
    started = _moment(builder.get("started")) if builder else None
    return None, bool(builder) and (retry is not None or at is not None and started is not None and at < started)
