"""What read paths show of tool traffic: tool calls and results (``tool``, ``echo``) only on request.

The view the model reads holds tool traffic like anything else: a short tool call is its own verbatim line,
and short lines are joined verbatim into their parents. So a reader that shows view lines (``view``,
``zoom``, ``context``, ``map``, the MCP server) takes tool messages out of them unless asked: a tool leaf
becomes a marker saying what it ran or how it ended (``tool: ran pytest (details hidden; …)``, ``echo: exit 1:
ECONNREFUSED (…)``: ``toolwork``, pieces of at most 13 characters), and inside a joined line so does every
copy of a tool leaf: its text verbatim, or the line a compactor wrote for a long one (what ran and its facts,
each short: a parent joins that line too). The tool leaf's own place in the line is told from the tree, and a
copy that is another node's whole line too (a model writing the same stock line for two spans) or that is in a
message other than a tool's is not tool text: it stays.
A summary may quote tool traffic too (a model summarising ``cat secrets.txt``): every run of at least
``RUN`` (16) characters of a line that occurs in the tool calls and results of its span and nowhere else in
the span is masked (``TOOL_TEXT``), unless it is other messages' words joined by a line's connectives. Texts
are compared folded (case, width, normal form, invisible characters and white space aside: ``flat``), so a
model that writes an output in capitals or full width, or joins a token wrapped over lines, quotes it all the
same. The
offline compactor never writes such a run (it copies at most 13 characters from tool traffic); the mask
catches what a model wrote. It reads the messages of a line's span
when it covers at most ``MASK_SPAN`` messages and asks the index about a longer one's runs (a line's text is
worked out once: ``lines.json`` keeps it).
"""

from __future__ import annotations

import collections
import functools
import re
import unicodedata
from typing import Callable, Iterable, Iterator

from .config import LINE_BYTES
from .message import is_tool, leaf_label
from .tree import ANSI, leaf_text

# a join of n verbatim leaves is n lines of at least "user: x" (8 bytes with its newline): only a line of at
# least 8n - 1 bytes can be one, so at the default 512 bytes only lines covering at most 64 messages can
LEAST_LEAF = 8
MAX_JOINED = LINE_BYTES // LEAST_LEAF
RUN = 16  # characters: a run this long found only in the span's tool traffic is masked
MASK_SPAN = 1024  # messages: a longer line is checked through the index, not by reading its span
TOOL_TEXT = "[tool output hidden]"
_CONNECTIVE = re.compile(r"\s*[,;:，；：→]\s*")  # what a line joins its pieces with
_HOLE = "\ud800"  # where a marker goes in: a lone surrogate, which no logged text holds (``decoder``)
_HOLES = re.compile(f"{_HOLE}(\\d+){_HOLE}")
# what the mask compares leaves out: Unicode's default-ignorable characters (zero-width spaces and joiners, the
# soft hyphen, bidirectional marks, variation selectors, tags), and writes dashes, the minus and curly quotes
# plain
_IGNORABLE = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
                        "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3"
                        "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]")
_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})')  # a JSON string escape, as call arguments are logged
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_PLAIN = {**dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
          **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032", "'"),
          **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033", '"')}
_FANCY = re.compile(f"[{''.join(_PLAIN)}]")  # (substituted: ``str.translate`` is slow on a long text)


def _joined_from(window: str, in_others: Callable[[str], bool]) -> bool:
    """Whether ``window`` holds a connective and each piece it joins occurs in the span's other messages."""
    pieces = _CONNECTIVE.split(window)
    return len(pieces) > 1 and all(in_others(piece) for piece in pieces if piece)


def marker(msg: dict, joined: bool = False, most: int | None = None) -> str:
    """What a line shows of tool message ``msg``: what it ran or how it ended (``toolwork``), the rest hidden;
    ``joined``: inside a line joining it with its neighbours, as briefly (``tool: ran ls (hidden)``). With
    ``most``, the bytes of the line it stands for, the first of those, ``tool: (hidden)`` and the kind alone
    that takes no more (a view counts a line by its bytes as logged: ``echo: ok`` shown as ``echo: exit 0
    (hidden)`` made a view of short tool messages pass its budget as shown)."""
    from . import toolwork  # (its patterns are compiled only for a view that shows tool traffic)

    work, kind = toolwork.summary(msg), msg["kind"]
    brief = f"{kind}: {work} (hidden)" if work else f"{kind}: (hidden)"
    forms = [brief] if joined else [f"{kind}: {work} (details hidden; include tools to see it)" if work
                                    else f"{kind}: (hidden; include tools to see it)", brief]
    if most is None:
        return forms[0]
    return next((form for form in (*forms, f"{kind}: (hidden)") if len(form.encode("utf-8")) <= most), kind)


def flat(text: str) -> str:
    """``text`` as the mask compares it: folded (``_fold``), every run of white space one space (a summary joins
    a quoted output's lines so)."""
    return " ".join(_fold(text).split())


def _fold(text: str) -> str:
    """``text`` in one case, width and normal form (NFKC, case folded), invisible characters left out, dashes
    and curly quotes plain: a model quoting an output may write it in capitals, in full-width letters, composed
    where it was decomposed, with zero-width spaces or typographic quotes in it."""
    if text.isascii():
        return text.lower()
    text = _IGNORABLE.sub("", text)
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return _FANCY.sub(lambda m: _PLAIN[m.group()], text)


@functools.lru_cache(maxsize=4096)
def _fold_char(char: str) -> str:
    """``_fold`` of one character and the combining marks after it (a line's are folded one by one)."""
    return _fold(char)


def _keyed(line: str, spaced: bool) -> tuple[str, list[int], list[int]]:
    """``flat(line)`` (``spaced``, else without its spaces) and where in ``line`` each of its characters starts
    and ends: a character is folded with the combining marks after it (an accent written apart)."""
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    space, k, n = None, 0, len(line)
    while k < n:
        end = k + 1
        if line[k].isascii():
            key = line[k].lower()
        else:
            while end < n and (unicodedata.combining(line[end]) or _IGNORABLE.match(line[end])):
                end += 1
            key = _fold_char(line[k:end])
        for c in key:
            if c.isspace():
                space = k if space is None else space
                continue
            if space is not None and out and spaced:
                out.append(" ")
                starts.append(space)
                ends.append(space + 1)
            space = None
            out.append(c)
            starts.append(k)
            ends.append(end)
        k = end
    return "".join(out), starts, ends


def _key_runs(line: str, find: Callable[[str], list[tuple[int, int]]], spaced: bool = True) -> list[tuple[int, int]]:
    """The runs ``find`` finds in ``flat(line)`` (``spaced``, else without its spaces), as runs of ``line``."""
    keyed, starts, ends = _keyed(line, spaced)
    return [(starts[start], ends[end - 1]) for start, end in find(keyed)]


def _unescaped(text: str) -> str:
    """``text`` with its JSON string escapes read (``\\n``, ``\\"``, ``\\u00e9``): a tool call's arguments are
    logged as JSON, so a file a call wrote is in its text with every line break and quote escaped, and a model
    quotes it as it reads."""
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1)) or chr(int(m.group(1)[1:], 16)), text)


def readings(text: str) -> list[str]:
    """The ways a tool text may be quoted: as logged, with its JSON escapes read (``_unescaped``), and each
    without its terminal escape sequences (colours)."""
    forms = [text]
    if "\\" in text and (plain := _unescaped(text)) != text:
        forms.append(plain)
    return forms + [plain for form in forms if "\x1b" in form and (plain := ANSI.sub("", form)) != form]


def _merged(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(runs):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def tool_runs(line: str, tools: list[str], others: list[str]) -> list[tuple[int, int]]:
    """The maximal ``[start, end)`` runs of ``line``, each at least ``RUN`` characters, whose every
    ``RUN``-character window occurs in one of the ``tools`` texts and in none of the ``others``, folded
    (``_fold``: case, width, normal form, invisible characters aside) and white space aside: a run that crossed
    a line break of the output is found with a space in its place, or with none; a tool text's JSON escapes
    are read too (``_unescaped``), and its terminal escape sequences (colours) left out."""
    if not tools:
        return []
    tools = [_fold(form).split() for text in tools for form in readings(text)]
    others = [_fold(text).split() for text in others]
    runs = []
    # (flat, then without spaces: a model joins a secret wrapped over short lines of output whole)
    for spaced, space in ((True, " "), (False, "")):
        tool_text, other_text = ("\0".join(space.join(words) for words in texts) for texts in (tools, others))
        runs += _key_runs(line, lambda keyed: runs_where(keyed, tool_text.__contains__, other_text.__contains__), spaced)
    return _merged(runs)


def runs_where(line: str, in_tools: Callable[[str], bool], in_others: Callable[[str], bool]) -> list[tuple[int, int]]:
    """``tool_runs`` with the span's texts asked through ``in_tools(s)`` and ``in_others(s)`` (whether some
    tool call or result, some other message, holds ``s``)."""
    if len(line) < RUN:
        return []
    # a run of RUN characters holds a whole aligned block of RUN // 2: look closer only around those found
    half = RUN // 2
    hits = [k for k in range(0, len(line) - half + 1, half) if in_tools(line[k : k + half])]
    if not hits:
        return []
    marked = bytearray(len(line))
    starts = sorted({s for k in hits for s in range(max(0, k + half - RUN), min(k, len(line) - RUN) + 1)})
    for s in starts:
        window = line[s : s + RUN]
        # (a window that is other messages' words joined by connectives, "WidgetTree, padd" of a line's
        # "renderWidgetTree, paddingOptions", is how a line joins pieces, not a quote of the output; nor is
        # one whose words another message holds, the space a connective put before them aside)
        if (in_tools(window) and not in_others(window) and not _joined_from(window, in_others)
                and not (window != (bare := window.strip()) and in_others(bare))):
            marked[s : s + RUN] = b"\1" * RUN
    runs, k = [], 0
    while k < len(line):
        if marked[k]:
            end = k
            while end < len(line) and marked[end]:
                end += 1
            runs.append((k, end))
            k = end
        else:
            k += 1
    return runs


def _masked(line: str, runs: list[tuple[int, int]]) -> str:
    """``line`` with each run replaced by ``TOOL_TEXT``, but for the white space at its ends: a run found with
    the output's own spaces around it (``printed drwxr-xr-x vault ok``) keeps those that separated it from the
    line's words (``printed [tool output hidden] ok``), and a joined line its line breaks."""
    for start, end in reversed(runs):
        while start < end and line[start].isspace():
            start += 1
        while end > start and line[end - 1].isspace():
            end -= 1
        if start < end:
            line = line[:start] + TOOL_TEXT + line[end:]
    return line


def mask_tool_text(line: str, msgs: list[dict]) -> str:
    """``line`` with every run it shares only with the tool traffic of ``msgs`` (its span) replaced by
    ``TOOL_TEXT``."""
    tools = [m["text"] for m in msgs if is_tool(m)]
    return _masked(line, tool_runs(line, tools, [m["text"] for m in msgs if not is_tool(m)]))


def mask_span(text: str, start: int, stop: int, messages: Callable[[int, int], Iterator[dict]],
              holds: Callable[[int, int], Callable[[str, bool], bool]]) -> str:
    """``text`` with every run it shares only with the tool traffic of messages ``[start, stop)`` masked, as in
    a summary of that span: the span read (``messages(start, stop)``) when it covers at most ``MASK_SPAN``
    messages, else asked through ``holds(start, stop)`` (``Memory.span_holds``)."""
    if stop - start <= MASK_SPAN:
        return mask_tool_text(text, list(messages(start, stop)))
    return _asked_masked(text, holds(start, stop))


def _asked_masked(text: str, asks: Callable[..., bool]) -> str:
    """``text`` masked as ``mask_tool_text`` masks it, the span's texts asked through ``asks(s, tools)``, white
    space aside too; in a line with other characters than ASCII, with the text as written too (``asks(s, tools,
    written)``: the index holds ``straße`` and ``２０２４`` as the log does, not as the fold writes them)."""
    if text.isascii():
        return _masked(text, _key_runs(text, lambda keyed: runs_where(keyed, lambda s: asks(s, True),
                                                                      lambda s: asks(s, False))))
    keyed, starts, ends = _keyed(text, True)

    def ask(s: str, tools: bool) -> bool:
        at = keyed.find(s) if s else -1
        return asks(s, tools, text[starts[at] : ends[at + len(s) - 1]]) if at >= 0 else asks(s, tools)

    return _masked(text, [(starts[a], ends[b - 1]) for a, b in runs_where(keyed, lambda s: ask(s, True),
                                                                          lambda s: ask(s, False))])


def _layout(text: str, l: int, i: int, msgs: list[dict],
            stored: Callable[..., str | None] | None) -> list[tuple[int, int, str]] | None:
    """The lines joined line ``text`` of node ``(l, i)`` is made of, in order, each with its node ``(l, i)``:
    verbatim leaves, and the lines a compactor wrote (``stored(i, l)``) where the tree has them (``Tree._text``);
    None when ``text`` is not so made (a line the tree no longer makes)."""
    first = i << l
    size = len(text.encode("utf-8"))
    verbatim = [leaf_text(m) if m.get("size", 0) <= size else None for m in msgs]  # (a longer one is not in it whole)
    out: list[tuple[int, int, str]] = []
    at = 0
    todo = [(l - 1, 2 * i + 1), (l - 1, 2 * i)]  # (the node's own line is a summary, not a join: its halves)
    while todo:
        l, i = todo.pop()
        start = (i << l) - first
        leaves = verbatim[start : start + (1 << l)]
        joined = "\n".join(leaves) if None not in leaves else None
        if joined is not None and _starts(text, at, joined):
            out += [(0, first + start + k, leaf) for k, leaf in enumerate(leaves)]
            at += len(joined) + 1
            continue
        line = stored(i, l) if stored is not None else None
        if line and _starts(text, at, line):
            out.append((l, i, line))
            at += len(line) + 1
        elif l == 0:
            return None
        else:
            todo += [(l - 1, 2 * i + 1), (l - 1, 2 * i)]
    return out if at == len(text) + 1 else None


def _starts(text: str, at: int, line: str) -> bool:
    """Whether ``text`` holds ``line`` whole at ``at``: the end of ``text`` or a line break after it."""
    return text.startswith(line, at) and text[at + len(line) : at + len(line) + 1] in ("", "\n")


def _tool_lines_out(layout: list[tuple[int, int, str]], msgs: list[dict], markers: list[str],
                    names: dict[int, str], hide: bool = True) -> str:
    """The joined line of ``layout`` (``_layout``) with its tool leaves' lines as holes for markers (added to
    ``markers``), and copies of those lines inside its other lines too, unless a copy is not only tool text: the
    whole line of another node (a model writing one line for two spans), or in a message other than a tool's
    (``hide``: else the tool leaves stay); and the kind a verbatim leaf opens with as a hole for its speaker
    (``_name_hole``). Tool leaves side by side take no more bytes than their lines did: their brief markers
    where those fit, else one marker for them all (``tool ×16, echo ×16 (hidden)``), else each the marker that
    fits its own line (``marker``'s ``most``)."""
    first = msgs[0]["i"]
    lines: list[str | None] = [text for _, _, text in layout]
    tools = {k for k, (l, i, _) in enumerate(layout) if hide and l == 0 and is_tool(msgs[i - first])}
    owns: dict[str, str] = {}  # a tool leaf's line: the hole for its copies
    for k in sorted(tools):
        owns.setdefault(lines[k], f"{_HOLE}{len(markers)}{_HOLE}")
        markers.append(marker(msgs[layout[k][1] - first], joined=True))
        lines[k] = f"{_HOLE}{len(markers) - 1}{_HOLE}"
    for own, hole in owns.items():
        if own in lines or any(own in leaf_text(m) for m in msgs if not is_tool(m)):
            continue
        lines = [text.replace(own, hole) if k not in tools else text for k, text in enumerate(lines)]
    for k, (l, i, own) in enumerate(layout):
        if l == 0 and k not in tools and own == leaf_text(msgs[i - first]):  # (a verbatim leaf, not a summary)
            lines[k] = _name_hole(lines[k], msgs[i - first], markers, names)
    runs: list[list[int]] = []
    for k in sorted(tools):
        if runs and k == runs[-1][-1] + 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    for run in runs:
        holes = [int(lines[k][1:-1]) for k in run]
        room = sum(len(layout[k][2].encode("utf-8")) + 1 for k in run) - 1
        if sum(len(markers[n].encode("utf-8")) + 1 for n in holes) - 1 <= room:
            continue
        kinds = collections.Counter(msgs[layout[k][1] - first]["kind"] for k in run)
        many = ", ".join(kind if n == 1 else f"{kind} ×{n}" for kind, n in kinds.items()) + " (hidden)"
        if len(run) > 1 and len(many.encode("utf-8")) <= room:
            markers.append(many)
            lines[run[0]] = f"{_HOLE}{len(markers) - 1}{_HOLE}"
            for k in run[1:]:
                lines[k] = None
            continue
        for k, n in zip(run, holes):
            markers[n] = marker(msgs[layout[k][1] - first], joined=True, most=len(layout[k][2].encode("utf-8")))
    return "\n".join(line for line in lines if line is not None)


def _name_hole(line: str, msg: dict, markers: list[str], names: dict[int, str]) -> str:
    """Verbatim leaf ``line`` of ``msg`` with the kind it opens with as a hole, when ``msg`` names its speaker:
    the kind in ``markers``, what a line says of a message alone (``message.leaf_label``: ``user Bob``) in
    ``names``, both under the hole's number (``_filled`` picks one)."""
    said = leaf_label(msg)
    kind = msg["kind"]
    if said == kind or not line.startswith(kind + ": "):
        return line
    names[len(markers)] = said
    markers.append(kind)
    return f"{_HOLE}{len(markers) - 1}{_HOLE}{line[len(kind):]}"


def _filled(text: str, markers: list[str], names: dict[int, str], line_bytes: int) -> str:
    """``text`` with its holes filled: each with its marker, but a speaker's hole with the speaker's label
    (``names``) while the line stays within ``line_bytes``, in the order the holes were made (a line that would
    pass it with every name keeps the kind of the leaves after)."""
    if not names:
        return _HOLES.sub(lambda m: markers[int(m.group(1))], text)
    room = line_bytes - len(_HOLES.sub(lambda m: markers[int(m.group(1))], text).encode("utf-8"))
    named = set()
    for n, said in names.items():
        more = len(said.encode("utf-8")) - len(markers[n].encode("utf-8"))
        if more > room:
            break
        named.add(n)
        room -= more
    return _HOLES.sub(lambda m: names[int(m.group(1))] if int(m.group(1)) in named else markers[int(m.group(1))], text)


def hide_tools(messages: Callable[[int, int], Iterator[dict]], lines: Iterable[tuple[int, int, str | None]],
               known: dict[int, dict] | None = None,
               holds: Callable[[int, int], Callable[[str, bool], bool]] | None = None,
               stored: Callable[..., str | None] | None = None, line_bytes: int = LINE_BYTES,
               hide: bool = True) -> list[str | None]:
    """The texts of view lines ``(l, i, text)`` with tool traffic taken out: tool leaves as markers, copies of
    them in joined lines as markers (verbatim, or the line ``stored(i)`` a compactor wrote for long message
    ``i``; ``stored(i, l)`` is node ``(l, i)``'s: ``Memory.leaf_line``), runs quoted only from the span's tool
    traffic masked. Reads the messages under lines covering at most ``MASK_SPAN`` messages (``messages(start,
    stop)``, e.g. ``Memory.messages``, or ``known``, messages by ``i`` the caller has read already, where it
    holds them all); a longer line's runs are looked up with ``holds(start, stop)(text, tools)``
    (``Memory.span_holds``: through the index). A verbatim leaf of a message naming its speaker
    (``meta.speaker``) says it as the compactor's line of one message does (``user Bob: …``, not ``user: …``),
    while its line stays within ``line_bytes``. ``hide`` False: the tool traffic stays, only the speakers are
    said."""
    lines = list(lines)
    spans = [(i << l, (i + 1) << l) for l, i, _ in lines]
    small = [k for k, (l, _, text) in enumerate(lines) if text is not None and (1 << l) <= MAX_JOINED]
    joined: dict[int, dict] = {}
    if small:  # the lines that may join tool leaves verbatim are recent and many: read their messages at once
        start, stop = min(spans[k][0] for k in small), max(spans[k][1] for k in small)
        if known is not None and all(k in known for k in range(start, stop)):
            joined = {k: known[k] for k in range(start, stop)}
        else:
            joined = {m["i"]: m for m in messages(start, stop)}
    out = []
    for k, (l, i, text) in enumerate(lines):
        first, end = spans[k]
        # (a line over MASK_SPAN messages is a summary, unless a larger ``line_bytes`` let it join them all)
        if text is None or (1 << l) > MASK_SPAN and (1 << l) * LEAST_LEAF - 1 > len(text.encode("utf-8")):
            if text is not None and holds is not None and hide:
                text = _asked_masked(text, holds(first, end))
            out.append(text)
            continue
        msgs = [joined[j] for j in range(first, end)] if (1 << l) <= MAX_JOINED else list(messages(first, end))
        inside = [m for m in msgs if is_tool(m)] if hide else []
        named = any("meta" in m and leaf_label(m) != m["kind"] for m in msgs)
        if not inside and not named:
            out.append(text)
            continue
        markers: list[str] = []
        names: dict[int, str] = {}
        if l == 0:
            text = marker(inside[0], most=len(text.encode("utf-8"))) if inside else _name_hole(text, msgs[0], markers, names) \
                if text == leaf_text(msgs[0]) else text
        else:
            # each copy of a tool leaf goes, then the mask runs, then the markers go in: a marker's words
            # ("exit 7: ECONNREFUSED") may be the output's too, and are still the line's to say
            layout = _layout(text, l, i, msgs, stored) if "\n" in text else None
            if layout is None:  # (a summary, or a line the tree no longer makes: every copy goes)
                for msg in inside:
                    own = leaf_text(msg)
                    if own not in text:  # (a joined line holds the leaf, or the line written for a long one)
                        own = stored(msg["i"]) if stored is not None and "\n" in text else None
                        if not own or own not in text:
                            continue
                    text = text.replace(own, f"{_HOLE}{len(markers)}{_HOLE}")
                    markers.append(marker(msg, joined=True, most=len(own.encode("utf-8"))))
            else:
                text = _tool_lines_out(layout, msgs, markers, names, hide)
            if inside:
                text = mask_tool_text(text, msgs)
        out.append(_filled(text, markers, names, line_bytes))
    return out
