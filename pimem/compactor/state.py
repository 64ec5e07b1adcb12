"""``<memory>/compactor.json``: what the compactor learned and what is failing, kept across runs.

- ``extra_tokens``: per model label, the extra ``max_tokens`` a reasoning model needed (it answered
  ``length`` with almost no text once; from then on it gets the headroom on the first try);
- ``failures``: per node label, the last error, when, how many tries failed, when it is retried, and by which
  compactor (its model and server: a retry time one server asked for does not hold back another), and
  ``parked``: true while the running builder holds that leaf back until some call is answered (a failed probe,
  ``Builder.parked``; a record without it, an earlier pimem's, is not parked), and ``refused``: true when the
  server refused the last call for what it holds (an HTTP 400, 413 or 422: too long, say; ``Builder._fresh``);
  cleared once built;
- ``unbuilt_cost``: per local day (the builder's that paid them), the dollars paid for calls that built no node
  (a billed empty or unreadable reply, a reasoning model's first request when its second failed), which no node
  records: a daily cap counts them after a restart too (the last 31 days are kept; only a builder reads a day's,
  for its own today, and ``status`` their sum);
- ``capped``, ``capped_until``: the local day a watcher's daily spend cap was reached (``--max-cost-per-day``),
  in the watcher's time zone, and when that day ends (RFC 3339, in UTC): it builds nothing more until then, so
  ``context`` does not wait for it and ``status`` says so. A reader compares its clock with ``capped_until``,
  never its own date with the day: a reader in another time zone (the watcher a service on UTC, the shell
  in Tokyo) is on another date for part of every day; a mark with the day alone (an earlier pimem's) is taken
  for a day of the reader's time zone, as that pimem read it;
- ``capped_below``: with ``capped``, when the cap is below one call's worst case (no day's spending ever lets
  that call go: nothing is built until the cap is raised), ``{"max_cost_per_day", "next_call"}`` in dollars;
- ``capped_setting``: with ``capped``, the cap reached when it was the memory's ``max_cost_per_day`` setting (not
  a watcher's ``--max-cost-per-day``): a reader compares it with the setting now, as the next watcher would
  (``cap_lifts``: a cap raised or taken away since, the next watcher looks at the day afresh);
- ``overbilled``: why the watcher calls this memory's compactor no more (a call billed past its worst case
  under a daily cap: no cap holds with such bills), until a builder takes the memory again; meanwhile
  ``context`` does not wait for it and ``status`` says so;
- ``key_refused``: ``{"error", "at", "compactor"}`` when the server refused the compactor's API key (HTTP 401,
  or a 403 saying the key may not do this: ``providers.KeyRefused``) and the builder stopped calling it there,
  its error the line it was left with (which variable, what to do); ``status`` says it while the memory's
  compactor is that one, until a builder takes the memory again (and tries the key anew);
- ``pending``: per node label, the calls of a capped watcher in flight, at their worst case and with the local
  day (the sender's) each was sent, then at what it was billed once answered, until its node is written, its
  failure recorded, or it is found never to have gone out (no proxy could carry it: ``unsent``): a watcher
  killed (SIGKILL, a crash) with calls in flight, or answered and not yet written (a builder writes its nodes
  at least every 0.2 s), leaves them here, and the next builder of the memory counts them as paid, at those
  costs, in ``unbuilt_cost`` (the provider bills them all the same; nothing else records them).

State, not configuration: deleting the file only costs one relearning call and the failure history.
"""

from __future__ import annotations

import threading
from pathlib import Path

import orjson

from ..home import write_atomic
from ..nofollow import read_bytes

FILE = "compactor.json"


class BuildState:
    def __init__(self, directory: Path):
        self.path = directory / FILE
        self._lock = threading.Lock()
        try:
            data = orjson.loads(read_bytes(self.path))
        except (FileNotFoundError, orjson.JSONDecodeError):
            data = {}
        if not isinstance(data, dict):  # (another shape: state lost, as an unreadable file's is)
            data = {}
        # each entry of the shape this module writes; another (a hand edit) is dropped, never miscounted
        self.extra_tokens: dict[str, int] = _entries(data, "extra_tokens", lambda n: type(n) is int and n >= 0)
        self.failures: dict[str, dict] = _entries(data, "failures", lambda f: isinstance(f, dict) and type(
            f.get("tries")) is int and isinstance(f.get("error"), str) and isinstance(f.get("at"), str))
        # a retry time that is no date-time with its offset (a hand edit's "tomorrow") is dropped: the node is
        # taken for one not retried in this run, rather than one shown by status as retried "next tomorrow"
        for entry in self.failures.values():
            if "retry" in entry and not _moment(entry["retry"]):
                del entry["retry"]
        self.unbuilt_cost: dict[str, float] = _entries(data, "unbuilt_cost", lambda cost: type(cost) in (int, float)
                                                       and 0 <= cost < float("inf"))
        self.capped: str | None = data.get("capped") if isinstance(data.get("capped"), str) else None
        self.capped_until: str | None = data.get("capped_until") if self.capped and _moment(data.get("capped_until")) else None
        below = data.get("capped_below") if self.capped else None
        self.capped_below: dict | None = below if isinstance(below, dict) and all(
            type(below.get(k)) in (int, float) and 0 <= below[k] < float("inf") for k in ("max_cost_per_day", "next_call")) else None
        setting = data.get("capped_setting") if self.capped else None
        self.capped_setting: float | None = setting if type(setting) in (int, float) and 0 <= setting < float("inf") else None
        self.overbilled: str | None = data.get("overbilled") if isinstance(data.get("overbilled"), str) else None
        refused = data.get("key_refused")
        self.key_refused: dict | None = refused if isinstance(refused, dict) and all(
            isinstance(refused.get(k), str) for k in ("error", "at", "compactor")) else None
        self.pending: dict[str, dict] = _entries(data, "pending", lambda call: isinstance(call, dict) and isinstance(
            call.get("day"), str) and type(call.get("cost")) in (int, float) and 0 <= call["cost"] < float("inf"))

    def save(self) -> None:
        with self._lock:
            data = {"extra_tokens": self.extra_tokens, "failures": self.failures}
            if self.unbuilt_cost:
                data["unbuilt_cost"] = self.unbuilt_cost
            if self.capped:
                data["capped"] = self.capped
                if self.capped_until:
                    data["capped_until"] = self.capped_until
                if self.capped_below:
                    data["capped_below"] = self.capped_below
                if self.capped_setting is not None:
                    data["capped_setting"] = self.capped_setting
            if self.overbilled:
                data["overbilled"] = self.overbilled
            if self.key_refused:
                data["key_refused"] = self.key_refused
            if self.pending:
                data["pending"] = self.pending
            write_atomic(self.path, orjson.dumps(data, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n")

    def remember_extra(self, model: str, tokens: int) -> None:
        if self.extra_tokens.get(model, 0) < tokens:
            self.extra_tokens[model] = tokens
            self.save()

    def failed(self, label: str, error: str, at: str, retry: str | None = None, compactor: str | None = None,
               parked: bool = False, refused: bool = False) -> None:
        """The call for node ``label`` failed at ``at`` and may be retried at ``retry``, no sooner (by this builder,
        or by the next of the same ``compactor``: a builder waits for a retry time still to come; None: not in
        this run; both RFC 3339); what it was billed, if anything, is in ``paid_unbuilt``; ``parked``: held back
        until some call is answered (``park``); ``refused``: the server refused it for what it holds."""
        entry = self.failures.get(label) or {"tries": 0}
        self.failures[label] = {"error": error, "at": at, "tries": entry["tries"] + 1, **({"retry": retry} if retry else {}),
                                **({"compactor": compactor} if compactor else {}), **({"parked": True} if parked else {}),
                                **({"refused": True} if refused else {})}
        with self._lock:
            self.pending.pop(label, None)
        self.save()

    def sending(self, label: str, day: str, worst: float) -> None:
        """A call for node ``label`` that may cost ``worst`` dollars is about to be sent on local ``day``: kept
        until ``settled`` (its node written) or ``failed``, so that a process dying meanwhile leaves it counted."""
        with self._lock:
            self.pending[label] = {"day": day, "cost": worst}
        self.save()

    def answered(self, costs: dict[str, float]) -> None:
        """The pending calls of ``costs`` (node label -> dollars) were answered and billed that much: a process
        dying before their nodes are written leaves them counted at what they cost, not their worst case."""
        with self._lock:
            changed = [label for label, cost in costs.items() if label in self.pending
                       and self.pending[label]["cost"] != cost]
            for label in changed:
                self.pending[label] = {**self.pending[label], "cost": costs[label]}
        if changed:
            self.save()

    def settled(self, labels) -> None:
        """The nodes ``labels`` are written (their cost recorded on them): their calls are pending no more."""
        with self._lock:
            gone = [self.pending.pop(label, None) for label in labels] if self.pending else []
        if any(call is not None for call in gone):
            self.save()

    def unsent(self, label: str) -> None:
        """The call for node ``label`` never went out (``Unusable``: no request was made): not billed, so not
        pending either."""
        self.settled([label])

    def abandoned(self, labels=None) -> None:
        """The pending calls ``labels`` (None: all of them, left by a builder that died) will never be settled:
        each counts as paid at its worst case on the day it was sent, as a call that built nothing."""
        with self._lock:
            gone = [self.pending.pop(label) for label in (list(self.pending) if labels is None else labels)
                    if label in self.pending]
            for call in gone:
                self.unbuilt_cost[call["day"]] = round(self.unbuilt_cost.get(call["day"], 0.0) + call["cost"], 9)
            self.unbuilt_cost = dict(sorted(self.unbuilt_cost.items())[-31:])
        if gone:
            self.save()

    def paid_unbuilt(self, day: str, cost: float) -> None:
        """``cost`` dollars paid on local ``day`` (YYYY-MM-DD) for a call that built nothing."""
        with self._lock:
            self.unbuilt_cost[day] = round(self.unbuilt_cost.get(day, 0.0) + cost, 9)
            self.unbuilt_cost = dict(sorted(self.unbuilt_cost.items())[-31:])
        self.save()

    def cap_lifted(self) -> None:
        """The daily cap was changed: not capped until it is reached again."""
        if self.capped is not None:
            self.capped = self.capped_until = self.capped_below = self.capped_setting = None
            self.save()

    def cap_reached(self, day: str, until: str | None, below: dict | None = None, setting: float | None = None) -> None:
        """The daily spend cap was reached on local ``day`` (YYYY-MM-DD), which ends at ``until`` (RFC 3339);
        ``below``: ``{"max_cost_per_day", "next_call"}`` when the call held back costs more than the cap at its
        worst case, whatever was spent; ``setting``: the cap, when it is the memory's ``max_cost_per_day``."""
        if (self.capped, self.capped_until, self.capped_below, self.capped_setting) != (day, until, below, setting):
            self.capped, self.capped_until, self.capped_below, self.capped_setting = day, until, below, setting
            self.save()

    def cap_lifts(self, now, setting):
        """When the daily spend cap a watcher reached lifts, if it still holds at ``now`` (an aware datetime),
        else None; a mark with its day alone (an earlier pimem's) lifts at that day's end in ``now``'s time zone.
        ``setting``: the memory's ``max_cost_per_day`` now; a mark of the setting (``capped_setting``) it has been
        raised above since (and to one call's worst case, if that was above it), or one taken away, holds no more:
        the next watcher looks at the day afresh (its calls go, if what was spent that day leaves room for them:
        else it is marked again)."""
        import datetime

        from ..when import day_end

        if self.capped is None:
            return None
        if self.capped_setting is not None and (setting is None or setting > self.capped_setting) and (
                not self.capped_below or setting is None or setting >= self.capped_below["next_call"]):
            return None  # (a cap raised but still below one call's worst case: that holds still)
        try:
            until = datetime.datetime.fromisoformat(self.capped_until) if self.capped_until else day_end(self.capped, now)
            return until if now < until else None
        except (ValueError, OverflowError):  # (a hand edit's day, or one at the end of the range of dates)
            return None

    def calls_stopped(self, why: str | None) -> None:
        """The builder calls the compactor no more (``why``: a call billed past its worst case), or a builder
        took the memory again (None: its predecessor's stop is not its own)."""
        if self.overbilled != why:
            self.overbilled = why
            self.save()

    def refused_key(self, compactor: str) -> dict | None:
        """``key_refused`` when it is the refusal of ``compactor``'s key (its ``asked_of``): one of another compactor
        (the memory's changed since) says nothing of this one."""
        refused = self.key_refused
        return refused if refused and refused["compactor"] == compactor else None

    def key_refusal(self, error: str | None, at: str | None = None, compactor: str | None = None) -> None:
        """The server refused the API key of ``compactor`` (its ``asked_of``) at ``at`` (RFC 3339), and the builder
        calls it no more (``error``: the line it said); None: a builder took the memory again."""
        refused = None if error is None else {"error": error, "at": at, "compactor": compactor}
        if self.key_refused != refused:
            self.key_refused = refused
            self.save()

    def park(self, parked=(), released=()) -> None:
        """The failing leaves ``parked`` wait for some call to be answered (the running builder's ``parked``); those
        ``released`` wait no more (one write for both; labels with no failure recorded are passed over)."""
        changed = False
        for labels, on in ((released, False), (parked, True)):
            for label in labels:
                entry = self.failures.get(label)
                if entry is not None and (entry.get("parked") is True) != on:
                    if on:
                        entry["parked"] = True
                    else:
                        del entry["parked"]
                    changed = True
        if changed:
            self.save()

    def unpark_all(self) -> None:
        """A builder starts: the leaves an earlier one parked are not parked by this one (not yet)."""
        self.park(released=[label for label, entry in self.failures.items() if "parked" in entry])

    def succeeded(self, label: str) -> None:
        if self.failures.pop(label, None) is not None:
            self.save()


def _entries(data: dict, key: str, fits) -> dict:
    """The entries of the object ``data[key]`` whose value ``fits``."""
    entries = data.get(key)
    return {k: v for k, v in entries.items() if fits(v)} if isinstance(entries, dict) else {}


def _moment(text) -> bool:
    """Whether ``text`` is a date-time with its UTC offset, as ``failed`` writes a retry time (RFC 3339)."""
    import datetime

    try:
        return datetime.datetime.fromisoformat(text).tzinfo is not None
    except (TypeError, ValueError):
        return False
