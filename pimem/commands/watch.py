from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import output
from ..numbers import dollars, money, param, usd
from ..options import Home, Json, Log


def command(
    names: Annotated[Optional[list[str]], typer.Argument(help="Memories to watch (default: all, including new ones).", metavar="NAME…", show_default=False)] = None,
    wait: Annotated[bool, typer.Option("--wait", help="If another watcher or a build-tree holds a memory, wait for it instead of exiting 4.")] = False,
    max_cost_per_day: Annotated[Optional[float], typer.Option("--max-cost-per-day", help="Spend at most this on each memory's compactor a local day (calls in flight at their worst case; default: max_cost_per_day in config.json); then wait for the next day.", metavar="USD", click_type=param(usd, "USD"))] = None,
    imports: Annotated[Optional[list[str]], typer.Option("--import", help="Also follow the session files under DIR (repeatable), as import --follow does.", metavar="DIR")] = None,
    log: Log = None,
    json: Json = False,
    home: Home = None,
) -> None:
    """Build summaries in the background as messages arrive, until stopped (SIGTERM, SIGHUP or Ctrl-C).

    One watcher per memory: it holds a lease in the memory's lock.json with a heartbeat, so a second watcher
    on the same memory exits 4 (or waits with --wait), and a watcher that died is taken over. New messages
    are noticed within half a second (a memory created later, within 2 seconds); failed nodes are retried after
    10 seconds (or when the server asks) for ever.
    A memory whose compactor's API key is not set here (exit 6 when nothing else named can be built), or is
    refused by the server (HTTP 401), is left with one line, and taken again once its settings change (pimem
    model); one refused is also tried again after 15 minutes (90 × retry_seconds). A memory moved or deleted behind
    its back (mv, rm -rf) is left with one line, and taken again once a memory is back at its name.
    On SIGTERM, SIGHUP or SIGINT, calls in flight get 15 seconds to finish and what they built is kept. Events
    go to stderr (--json: NDJSON on stdout). With --import DIR it also follows the agents' session files under
    DIR into one memory per project, as import --follow does, and builds those memories too (when no names are
    given); it follows them even while other builders (a watcher, a build-tree) hold every memory, and builds
    each memory once its holder lets go.

    Examples:
      pimem watch
      pimem watch main --json
      pimem watch --max-cost-per-day 2
      pimem watch --wait --log ~/.pi/memory/logs/watch.log &
      pimem watch --import ~/.codex/sessions --import ~/.claude/projects
    """
    output.log_to(log, "watch")
    from .. import scheduler

    def show(event: dict) -> None:
        if json:
            output.json_line(event)
            output.flush()
            if not _for_a_person(event):  # (said on stderr too: the events may go where nobody reads them)
                return
        if event["event"] == "built":
            output.info(f"{event['memory']} {event['node']} built by {event['model']} ({event['bytes']} B, {event['seconds']:.1f} s)")
        elif event["event"] == "failed":
            output.info(f"{event['memory']} {event['node']} failed: {output.flatten(event['error'])}")  # (a server's words)
        elif event["event"] == "capped":
            if event["next_call"] > event["max_cost_per_day"]:
                output.warn(scheduler.said_below_cap(event))
            else:
                output.info(f"{event['memory']}: spent {money(event['spent'])} of {dollars(event['max_cost_per_day'])} on "
                            f"{event['day']}; waiting for the next day")
        elif event["event"] == "refused":
            again = ("this watcher takes it again once its settings change" if event.get("settings")
                     else "this watcher takes it again once it is back" if event.get("gone")
                     else "the watcher's next start takes it again, once it is mended")
            output.warn(f"stopped building {event['memory']}: {event['error']} ({again})")
        elif event["event"] == "waiting":
            output.info(scheduler.said_waiting(event))
        elif event["event"] == "held":
            output.info(scheduler.said_held(event))
        elif event["event"] == "switched":
            output.info(f"{event['memory']}: its compactor settings changed; built by {event['model']} from now on")
        elif event["event"] == "imported":
            output.info(f"{event['memory']}: {event['messages']:,} imported from {event['file']}")
        else:
            output.info(f"{event['memory']}: {event['event']}" + (f": {event['error']}" if event.get("error") else ""))

    if not imports:
        scheduler.watch(list(names or []), home, on_event=show, wait=wait, max_cost_per_day=max_cost_per_day)
        return
    import threading

    from ..importers.follow import Follower

    def imported(memory: str, report) -> None:
        show({"event": "imported", "memory": memory, "file": report.file, "messages": report.imported})

    follower = Follower(imports, home, on_report=imported, on_warning=output.warn)
    stop = threading.Event()

    def follow() -> None:
        """Follow the imports until stopped; a failure the user can act on (a memory busy or damaged) is said
        once and the rounds go on, so that the watcher never stops importing silently."""
        from ..errors import as_error

        said: set[str] = set()
        while not stop.is_set():
            try:
                follower.run(stop)
            except Exception as exc:
                error = as_error(exc)
                if error is None:
                    raise  # (a bug: its traceback)
                if str(error) not in said:
                    said.add(str(error))
                    output.warn(f"importing: {error}; trying again every round")
                stop.wait(2.0)

    thread = threading.Thread(target=follow, name="pimem-follow", daemon=True)
    thread.start()
    try:
        scheduler.watch(list(names or []), home, on_event=show, wait=wait, max_cost_per_day=max_cost_per_day,
                        following=True)
    finally:
        stop.set()
        thread.join()


def _for_a_person(event: dict) -> bool:
    """A memory refused, or a daily cap below one call's worst case: nothing is built until a person acts; or a
    wait for a retry time an earlier run recorded (up to 5 minutes of silence otherwise), or for another builder
    to let go (for ever, of one stopped with Ctrl-Z)."""
    return (event["event"] in ("refused", "waiting", "held")
            or event["event"] == "capped" and event["next_call"] > event["max_cost_per_day"])
