"""The panorama (``pimem map``): one picture of a memory, laid out for what people open it for, by frequency:
checking what the model remembers now, and seeing the whole (how long, how fine).

From the top: a title (messages, since when, day N); two bars at one scale, everything said against what each
turn reads (lines summarising several messages in grey, one-message lines in green); a two-row timeline across
the whole history whose height is how fine the view holds each stretch (``16 - 2l`` eighths of a cell for a line
covering ``2^l`` messages); then the view's lines grouped by day, newest at the bottom (days in date order, a
day's lines in log order: an older session imported later still sits above the newer one).

The picture is rows of styled segments measured in terminal cells (East Asian wide characters count two), so
it never exceeds the width it is given; it renders as plain text, ANSI colour, or SVG.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from . import env, output, when
from .output import flatten

KIND_LABELS = {"user": "you", "pi": "pi", "tool": "tool", "echo": "result", "work": "work", "note": "note"}
SUMMARY, VERBATIM = "dim", "green"  # styles of lines summarising several messages / holding one
BLOCKS = " ▁▂▃▄▅▆▇█"
MIN_WIDTH = 20
MAX_WIDTH = 100_000  # (the widest --width taken: a picture is built whole, so a width is bounded)


@dataclass
class Span:
    """One line of the view: it covers messages ``[id, id+n)``."""

    id: int
    n: int
    text: str
    bytes: int  # what the line costs the model each turn
    day: str  # YYYY-MM-DD of its first message, the reader's day
    kind: str | None = None  # the message's kind, for a line covering one message
    summary: bool = False  # the line is a summary, not the original words

    @property
    def label(self) -> str:
        return f"{self.id}+{self.n}"

    @property
    def level(self) -> int:
        return self.n.bit_length() - 1


@dataclass
class Facts:
    name: str
    messages: int
    first: str | None  # RFC 3339 date of the message of the earliest day, in the reader's time zone
    today: date
    said: int  # bytes of every message
    spans: list[Span] = field(default_factory=list)


Segment = tuple[str, str | None]  # text, style
Row = list[Segment]


def cell_len(text: str) -> int:
    """The terminal cells ``text`` takes (rich's measure, imported when a picture is drawn: ``pimem --help``
    imports this module for ``map``'s narrowest width alone)."""
    from rich.cells import cell_len

    return cell_len(text)


def set_cell_size(text: str, cells: int) -> str:
    """``text`` cut or padded to ``cells`` terminal cells (rich's)."""
    from rich.cells import set_cell_size

    return set_cell_size(text, cells)


def human_bytes(n: int) -> str:
    for unit, size in (("MB", 1_000_000), ("kB", 1_000)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _fit(row: Row, width: int) -> Row:
    """``row`` cut to ``width`` cells, with an ellipsis where text was cut."""
    out, used = [], 0
    for text, style in row:
        text = text[: 4 * (width - used) + 1]  # more characters than could fit need not be measured
        cells = cell_len(text)
        if used + cells <= width:
            out.append((text, style))
            used += cells
            continue
        room = width - used
        if room > 0:
            out.append((set_cell_size(text, room - 1).rstrip() + "…", style))
        break
    return out


def _title(facts: Facts, width: int) -> Row:
    """The longest form that fits: ``main · 1,234 messages since 2026-10-01 · day 8``, then shorter ones."""
    if not facts.messages:
        return [(facts.name, "bold"), (" · no messages yet", None)]
    first_day = facts.first[:10]
    day_n = (facts.today - date.fromisoformat(first_day)).days + 1
    forms = (
        f" · {facts.messages:,} message{'s' if facts.messages != 1 else ''} since {first_day} · day {day_n}",
        f" · {facts.messages:,} msg{'s' if facts.messages != 1 else ''} · {first_day[5:]} · day {day_n}",
        f" · {facts.messages:,} · day {day_n}",
    )
    room = width - cell_len(facts.name)
    tail = next((f for f in forms if cell_len(f) <= room), forms[-1])
    return [(facts.name, "bold"), (tail, None)]


def _bars(facts: Facts, width: int) -> list[Row]:
    summary = sum(s.bytes for s in facts.spans if s.summary)
    verbatim = sum(s.bytes for s in facts.spans) - summary
    read = summary + verbatim
    labels = [f"said  {human_bytes(facts.said)} ", f"reads {human_bytes(read)} "]
    pad = max(cell_len(l) for l in labels)
    room = max(1, width - pad)
    scale = max(facts.said, read, 1)

    def cells(n: int) -> int:
        return round(n / scale * room) if n else 0

    said_row = [(labels[0].ljust(pad), None), ("█" * max(1 if facts.said else 0, cells(facts.said)), None)]
    grey = cells(summary)
    green = max(1 if verbatim else 0, min(room - grey, cells(read) - grey))
    read_row = [(labels[1].ljust(pad), None), ("▒" * grey, SUMMARY), ("█" * green, VERBATIM)]
    legend = [(" " * pad, None), ("▒", SUMMARY), (" summaries  ", None), ("█", VERBATIM), (" verbatim", None)]
    return [said_row, read_row, legend]


def _timeline(facts: Facts, width: int) -> list[Row]:
    """Two rows of eighth blocks: column c shows the finest line covering its stretch of messages."""
    total = facts.messages
    if not total or not facts.spans:
        return []
    top: Row = []
    bottom: Row = []
    spans = facts.spans
    k = 0
    for c in range(width):  # column c stands for messages [lo, hi), at least one
        lo = c * total // width
        hi = max(lo + 1, (c + 1) * total // width)
        while k + 1 < len(spans) and spans[k].id + spans[k].n <= lo:
            k += 1
        j, finest = k, spans[k]
        while j < len(spans) and spans[j].id < hi:
            if spans[j].n < finest.n:
                finest = spans[j]
            j += 1
        eighths = max(1, 16 - 2 * finest.level)
        style = SUMMARY if finest.summary else VERBATIM
        top.append((BLOCKS[max(0, eighths - 8)], style))
        bottom.append((BLOCKS[min(8, eighths)], style))
    return [_merge(top), _merge(bottom)]


def _merge(row: Row) -> Row:
    out: Row = []
    for text, style in row:
        if out and out[-1][1] == style:
            out[-1] = (out[-1][0] + text, style)
        else:
            out.append((text, style))
    return out


def _lines(facts: Facts, width: int, include_tools: bool) -> list[Row]:
    rows: list[Row] = []
    day = None
    shown = [s for s in facts.spans if include_tools or s.n > 1 or s.kind not in ("tool", "echo")]
    shown.sort(key=lambda s: s.day)  # days in date order, whatever order they were logged in; a day's lines in log order
    ids = max((len(s.label) for s in shown), default=0)
    for span in shown:
        if span.day != day:
            day = span.day
            head = f"── {day} {date.fromisoformat(day).strftime('%a')} "
            rows.append([(head + "─" * max(0, width - cell_len(head)), "cyan")])
        tag = f"{span.n} msgs" if span.n > 1 else KIND_LABELS.get(span.kind or "", span.kind or "")
        style = SUMMARY if span.summary else VERBATIM
        text = _unlabelled(span) if span.summary and span.n == 1 else span.text
        rows.append([(span.label.rjust(ids) + " ", "cyan"), (f"{tag:<6} ", style), (flatten(text[: 4 * width]), None)])
    return rows


def _unlabelled(span: Span) -> str:
    return _without_kind(span.text, span.kind or "")


def _without_kind(text: str, kind: str) -> str:
    """A message's line without the kind it opens with (``pi: Implemented, …``): the kind column says it. A
    speaker's name after it stays (``user Caroline: …`` shows ``Caroline: …``)."""
    if kind and text.startswith(kind + ": "):
        return text[len(kind) + 2 :]
    if kind and text.startswith(kind + " ") and ": " in text:
        return text[len(kind) + 1 :]
    return text


def rows(facts: Facts, width: int, include_tools: bool = False) -> list[Row]:
    """The whole picture, every row at most ``width`` cells."""
    width = max(MIN_WIDTH, width)
    picture = [_title(facts, width), *_bars(facts, width), [("", None)], *_timeline(facts, width), [("", None)]]
    picture += _lines(facts, width, include_tools)
    return [_fit(row, width) for row in picture]


def to_text(picture: list[Row]) -> str:
    """Plain lines, coloured when stdout is a terminal."""
    return "\n".join("".join(output.style(t, s) if s and t else t for t, s in row).rstrip() for row in picture) + "\n"


def to_svg(picture: list[Row], width: int, title: str) -> str:
    """The same picture as an SVG terminal screenshot (rich's exporter)."""
    import io

    from rich.console import Console
    from rich.text import Text

    console = Console(file=io.StringIO(), width=max(MIN_WIDTH, width), record=True, force_terminal=True, color_system="truecolor")
    for row in picture:
        line = Text(no_wrap=True, overflow="crop")
        for text, style in row:
            line.append(text, style=style or "")
        console.print(line, crop=True)
    return console.export_svg(title=title)


def facts_of(mem, include_tools: bool = False) -> Facts:
    """Read what the picture needs from a memory: one pass over the log (sizes, days, kinds), and its view
    (tool traffic inside joined lines taken out unless ``include_tools``). Days are the reader's, as ``since``
    and ``date`` take them: a date recorded in another time zone is moved into the reader's first."""
    from .tree import PLACEHOLDER, days_once

    said, days, kinds, big, first_date = 0, [], [], set(), None
    line_bytes = int(mem.config["line_bytes"])
    now = env.now()
    views = mem.views.current()  # (first: the messages read are then those it holds, whatever is logged meanwhile)
    for msg in mem.messages():
        if msg["i"] >= views.T:
            break
        local = when.in_zone(msg["date"], now)
        if first_date is None or local[:10] < first_date[:10]:  # (not message 0: an older session may come later)
            first_date = local
        said += msg["size"]
        days.append(local[:10])
        kinds.append(msg["kind"])
        if msg["size"] > line_bytes:
            big.add(msg["i"])
    rows = mem.views.shown(views, include_tools) if days else []
    spans = []
    for l, i, text, cost in rows:
        first = i << l
        if l == 0 and text is not None and first not in big:
            text = _without_kind(text, kinds[first])  # a verbatim leaf is "kind: text": the kind is shown as a tag
        elif l and text is not None:
            text = days_once(text)  # (a joined line says its days once, as in the view)
        summary = l > 0 or text is None or first in big
        spans.append(Span(first, 1 << l, PLACEHOLDER if text is None else text, cost, days[first],
                          kinds[first] if l == 0 else None, summary))
    return Facts(mem.name, len(days), first_date, now.date(), said, spans)
