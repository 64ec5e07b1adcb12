from __future__ import annotations

import time

from .. import naming, output
from ..memory import Memory
from ..options import Home, Json, Name


def command(name: Name = None, json: Json = False, home: Home = None) -> None:
    """Show one memory's state: messages, files on disk, and the summary tree: nodes built and pending,
    the compactor, money spent, the running builder, and failing nodes with their last error.

    Examples:
      pimem status main
      pimem status main --json | jq .tree
    """
    from .. import builder, compactor, env, lease, when
    from ..compactor.state import BuildState

    mem = Memory.open(naming.given(name), home)
    row = mem.summary()
    files = mem.log.files()
    row.update(path=str(mem.path), log_files=len(files), log_bytes=sum(p.stat().st_size for p in files))
    found = builder.survey(mem)
    row["tree"] = {k: found[k] for k in ("nodes", "built", "pending", "leaves", "merges_ready")}
    row["compactor"] = compactor.describe(mem.config.get("compactor") or {})
    row["spent"] = builder.spent(mem)
    row["builder"] = lease.holder(mem)
    state = BuildState(mem.path)
    row["spent"]["cost_unbuilt"] = round(sum(state.unbuilt_cost.values()), 9)  # (billed calls that built nothing)
    failures = state.failures
    row["failures"] = [{"node": node, **info} for node, info in sorted(failures.items(), key=lambda kv: kv[1].get("at", ""))]
    now = env.now()
    lifts = state.cap_lifts(now)  # (the daily cap: until the watcher's day ends, whatever the time zone here)
    row["capped"] = state.capped if lifts else None  # (the watcher's local day)
    row["capped_until"] = when.rfc3339(lifts.astimezone(now.tzinfo)) if lifts else None
    row["stopped"] = state.overbilled if row["builder"] else None  # (an overbilled call: until the watcher restarts)
    if json:
        output.json_line(row)
        return
    output.line(f"memory    {row['name']}  ({row['path']})")
    output.line(f"messages  {row['messages']:,}  in {output.count(row['log_files'], 'daily file')}, {output.count(row['log_bytes'], 'byte')}")
    if row["messages"]:
        output.line(f"from      {row['first']}")
        output.line(f"to        {row['last']}")
    tree = row["tree"]
    waiting = f" ({output.count(tree['leaves'], 'message')} wait{'s' if tree['leaves'] == 1 else ''} for a summary)" if tree["leaves"] else ""
    output.line(f"tree      {tree['built']:,} of {output.count(tree['nodes'], 'node')} built, {tree['pending']:,} pending{waiting}")
    model = row["compactor"]
    key = f"  (key from ${model['key_env']})" if model.get("key_env") else ""
    output.line(f"model     {model['model']}{key}")
    spent = row["spent"]
    if spent["calls"]:
        models = ", ".join(f"{model} {n:,}" for model, n in sorted(spent["models"].items()))
        cost = f", ${spent['cost']:.4f}" if spent["cost"] else ""
        cached = f" ({spent['tokens_cached'] / spent['tokens_in']:.0%} from the prompt cache)" if spent["tokens_cached"] else ""
        output.line(f"spent     {output.count(spent['calls'], 'summary', 'summaries')} written ({models}), "
                    f"{output.count(spent['tokens_in'], 'token')} in{cached}, "
                    f"{spent['tokens_out']:,} out{cost}")
    if spent["cost_unbuilt"]:
        output.line(f"{'' if spent['calls'] else 'spent':<10}${spent['cost_unbuilt']:.4f} more on calls that built nothing "
                    "(empty or refused answers; a capped watcher's calls given up at a stop or cut off by its death, at "
                    "their worst case; over the last 31 days)")
    if spent["suspect"]:
        shown = ", ".join(spent["suspect"][:10]) + (" …" if len(spent["suspect"]) > 10 else "")
        marked = len(spent["suspect"])
        output.line(output.style(f"suspect   {output.count(marked, 'summary', 'summaries')} {'names' if marked == 1 else 'name'} "
                                 f"a number, path or identifier their messages do not hold: {shown}", "yellow"))
    builder = row["builder"]
    if builder:
        ago = max(0.0, time.time() - builder["beat"])
        output.line(f"builder   pid {builder['pid']} on {builder['host']} since {builder['started']} (heartbeat {ago:.0f} s ago)")
    else:
        output.line("builder   none (run 'pimem watch' or 'pimem build-tree')")
    if row["capped"]:
        output.line(output.style(f"capped    the daily spend cap was reached on {row['capped']} (the watcher's day): "
                                 f"nothing more is built until {row['capped_until']}", "yellow"))
    if row["stopped"]:
        output.line(output.style(f"stopped   {output.flatten(row['stopped'])}; the watcher calls the compactor no "
                                 "more until it is started again", "red"))
    retrying = builder and not (row["capped"] or row["stopped"])  # (a capped or stopped watcher retries nothing)
    for fail in row["failures"]:
        # (with no builder running, nothing retries it until one starts, so a time then would say what will not
        # happen)
        retry = _retry(fail, builder, now) if retrying else ""
        output.line(output.style(f"failing   {output.flatten(fail['node'])}: {output.flatten(fail['error'])} "
                                 f"({output.count(fail['tries'], 'try', 'tries')}, last {output.flatten(fail['at'])}{retry})", "red"))


def _retry(fail: dict, builder: dict, now) -> str:
    """When the running ``builder`` tries the failing node ``fail`` again: ``, next`` its retry time while that is
    to come (an earlier run's too: a builder waits for it), or ``, being retried`` once it is past or when the
    node failed before the builder took the memory with none recorded (a builder tries every unbuilt node from
    its start: an earlier run's failure, recorded with no retry time, showed none while a watcher retried it);
    nothing when this run gave it up (build-tree past --retries)."""
    import datetime

    def moment(text):
        try:
            return datetime.datetime.fromisoformat(text) if isinstance(text, str) else None
        except ValueError:
            return None

    at, started, retry = moment(fail.get("at")), moment(builder.get("started")), moment(fail.get("retry"))
    try:
        if retry is not None and retry > now:
            return f", next {fail['retry']}"
        if retry is not None or at is not None and started is not None and at < started:
            return ", being retried"
    except TypeError:  # (a hand-edited time without its offset)
        return ""
    return ""
