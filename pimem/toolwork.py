"""Tool work in a few words: what a tool call ran (``ran pytest``, ``edited app.py``, ``read …renderer.ts``) and how
its result ended (``exit 1: ECONNREFUSED``, ``12 passed``), from the call's command or the path its arguments name
(for a message not imported, its ``meta.file``; an imported one's names the transcript) and the result's exit code,
test counts and error names. A piece copied from tool traffic is at most ``TOOL_PIECE`` characters, so a line
shown without tools can say what ran without quoting a tool's output (``privacy`` masks runs of 16).

The offline compactor makes its tool units from these pieces; the read paths that hide tool traffic show
them in a tool message's marker. Small and quick to import: ``view`` runs every turn.
"""

from __future__ import annotations

import re
import unicodedata

import orjson

from .privacy import ANSI

# characters: the longest piece taken from tool traffic. Privacy masks runs of 16, and a piece sits between
# connectives whose edge characters (a space, a comma) the tool's text may hold around it too
TOOL_PIECE = 13
SCAN_HEAD, SCAN_TAIL = 6_000, 2_000  # characters of a long message considered (errors come last)
SEAM = "\n\n"  # between the two: a blank line, which no pattern of the offline compactor matches across

# (no ``\b`` ahead of the digits, so the engine skips to the next digit at C speed: ``outcome`` checks it). A number
# of tests is one when a test runner's summary says it: ``51 tests passed``, ``Ran 4 tests in 0.2s``, vitest's ``(16
# tests | 1 failed``, not npm's ``> app@0.0.51 test`` or ``51 test`` in any text
_COUNTS = re.compile(r"\d+ (?:(?:passed|failed|errors?|skipped|warnings?)\b|tests? (?=passed|failed|in \d|\|))")
_COUNT_AFTER = frozenset(" \t\n(|,;[")  # what a count's number follows (not a version's 0.0.51, a name's v2)
_FAILING = re.compile(r"fail|error")  # a count that says something went wrong
# POSIX's errno names (not any capital word opening with E: "EXTREMELY" is no error), longest first
_ERRNO = sorted("""2BIG ACCES ADDRINUSE ADDRNOTAVAIL AFNOSUPPORT AGAIN ALREADY BADF BADMSG BUSY CANCELED CHILD
    CONNABORTED CONNREFUSED CONNRESET DEADLK DESTADDRREQ DOM DQUOT EXIST FAULT FBIG HOSTDOWN HOSTUNREACH IDRM ILSEQ
    INPROGRESS INTR INVAL IO ISCONN ISDIR LOOP MFILE MLINK MSGSIZE MULTIHOP NAMETOOLONG NETDOWN NETRESET NETUNREACH
    NFILE NOBUFS NODATA NODEV NOENT NOEXEC NOLCK NOLINK NOMEM NOMSG NOPROTOOPT NOSPC NOSR NOSTR NOSYS NOTCONN NOTDIR
    NOTEMPTY NOTRECOVERABLE NOTSOCK NOTSUP NOTTY NXIO OPNOTSUPP OVERFLOW OWNERDEAD PERM PIPE PROTO PROTONOSUPPORT
    PROTOTYPE RANGE ROFS SPIPE SRCH STALE TIME TIMEDOUT TXTBSY WOULDBLOCK XDEV""".split(), key=len, reverse=True)
_ERROR_NAME = re.compile(rf"\b(?:E(?:{'|'.join(_ERRNO)})|[A-Z][A-Za-z]*(?:Error|Exception)|[Tt]imeout|[Pp]ermission denied|[Nn]ot found)\b")
_PROGRAM_SKIP = frozenset("sudo env time nice command exec uv uvx npx pnpm poetry bundle".split())
_SETUP = frozenset("cd pushd export source . set".split())  # commands that only prepare the next one
_COMMANDS = re.compile(r"&&|\|\||;")  # (a quoted separator splits too: the first command is still the one run)
_EDIT_TOOLS = re.compile(r"edit|write|patch|replace|create|str_replace", re.I)
_READ_TOOLS = re.compile(r"(?:read|view|open)(?:_?file)?", re.I)  # (a tool's whole name: pi's read, Claude Code's Read)
_PATH_KEYS = ("path", "file_path", "filePath", "file", "filename", "target_file", "notebook_path")
# the extensions that make a word without a slash a file name (phx.server, db.migrate, app.main: tasks, modules)
_EXTENSIONS = ("py|pyi|ipynb|js|jsx|mjs|cjs|ts|tsx|vue|svelte|go|rs|c|h|cpp|hpp|java|kt|swift|rb|php|ex|exs|lua|"
               "sh|zsh|sql|md|rst|txt|log|csv|json|jsonl|toml|yaml|yml|ini|cfg|conf|lock|xml|css|scss|html")
_PATH_IN_TEXT = re.compile(rf"[\w.~-]*/[\w.@+/-]+\.\w+|\b[\w.-]+\.(?:{_EXTENSIONS})\b")
_FILE_WORD = re.compile(rf"\S*/[^\s/]*\.[A-Za-z0-9]{{1,8}}|[\w.-]+\.(?:{_EXTENSIONS})")
_SHELLS = ("bash", "shell", "exec", "Bash", "shell_command", "local_shell")
_BREAKS = frozenset(" \t\n，。！？；：、,.;:!?")
# the bidirectional controls (marks, embeddings, overrides, isolates): unseen, they reorder what follows on a line
BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def scan(text: str, head: int = SCAN_HEAD, tail: int = SCAN_TAIL) -> str:
    """The first ``head`` and last ``tail`` characters of a long ``text``, joined by ``SEAM``. Each is cut at a
    space or punctuation when there is one near the cut (a word or Chinese clause is never cut in two), else at
    the nearest end of a word: no word or number is ever cut in two (``_between_words``), so nothing read holds
    half of one."""
    if len(text) <= head + tail:
        return text
    end = next((k + 1 for k in range(head - 1, max(-1, head - 200), -1)
                if text[k] in _BREAKS and _between_words(text, k + 1)), None)
    if end is None:  # no punctuation near: back to the start of the word the cut falls in
        end = next(k for k in range(head, -1, -1) if _between_words(text, k))
    cut = len(text) - tail
    start = next((k for k in range(cut, min(cut + 200, len(text))) if text[k] in _BREAKS and _between_words(text, k)), None)
    if start is None:  # on to the end of the word the cut falls in
        start = next(k for k in range(cut, len(text) + 1) if _between_words(text, k))
    return text[:end] + SEAM + text[start:]


def _between_words(text: str, at: int) -> bool:
    """True when position ``at`` of ``text`` is not inside a word or number: not between two word characters
    (letters with their combining marks, digits, ``_``), nor at a ``.``, ``,`` or ``:`` that has one on each side
    (``3.14``, ``1,200``, ``12:30``)."""
    if at <= 0 or at >= len(text):
        return True
    before, after = _in_word(text[at - 1]), _in_word(text[at])
    if before and after:
        return False
    if text[at - 1] in ".,:" and after and at >= 2 and _in_word(text[at - 2]):
        return False
    return not (text[at] in ".,:" and before and at + 1 < len(text) and _in_word(text[at + 1]))


def _in_word(ch: str) -> bool:
    """A character of a word: a letter, a digit, ``_``, or a combining mark (an accent, a vowel sign)."""
    return ch.isalnum() or ch == "_" or unicodedata.category(ch)[0] == "M"


def pieces(msg: dict) -> list[tuple[str, bool, float]]:
    """What tool message ``msg`` did, as ``(text, result, weight)``: for a call what it ran, edited or read (nothing
    for a call that polls a command already running or writes to its input, Codex's ``write_stdin``: the command is
    the work), for a
    result how it ended (``result`` True): ``exit N`` or ``error`` (a harness's error flag without a code) and
    the error's name when it failed; when it ended well its first test count, else ``exit 0`` if its exit code
    says so; when nothing says how it ended, its first count (failures first) and error name."""
    return work(msg)[0]


def work(msg: dict) -> tuple[list[tuple[str, bool, float]], str]:
    """``pieces`` of ``msg``, and the whole path of the file a call edited or read (``""`` for none): its piece
    names it in ``TOOL_PIECE`` characters, ``names`` tells several apart."""
    meta = msg.get("meta") or {}
    text = msg.get("text") or ""
    if msg.get("kind") == "tool":
        tool = meta.get("tool") if isinstance(meta.get("tool"), str) else ""
        command = meta.get("command") if isinstance(meta.get("command"), str) else ""
        if tool == "write_stdin" and (meta.get("polls") or _POLL.search(text)):  # (input to it: its work too)
            return [], ""
        edits = _EDIT_TOOLS.search(tool or text[:40])
        # an imported message's meta.file is the transcript it came from, never the file it edited
        path = meta.get("file") if isinstance(meta.get("file"), str) and not meta.get("source") else ""
        reads = not edits and _READ_TOOLS.fullmatch(tool or text.split("(", 1)[0])
        if not path and (edits or reads):
            path = argument_path(text)
        if not path and edits:
            found = _PATH_IN_TEXT.search(text)
            path = found.group() if found else ""
        if path and (edits or reads) and file_name(path):
            return [(("edited " if edits else "read ") + file_name(path), False, 1.5 if edits else 1.0)], path
        if not tool and re.match(r"\w+\(", text):  # "bash('pytest -x')" as some logs write a call
            tool = text.split("(", 1)[0]
        if not command and tool in _SHELLS:
            found = re.search(r"""["'](?:command|cmd)["']?\s*[:=]\s*\[?\s*["']([^"']+)""", text) or re.search(r"\(['\"]([^'\"]+)", text)
            command = found.group(1) if found else ""
        path = edited_file(command) if command else ""
        if path and file_name(path):
            return [("edited " + file_name(path), False, 1.5)], path
        path = read_file(command) if command else ""
        if path and file_name(path):
            return [("read " + file_name(path), False, 1.0)], path
        prog = program(command) if command else short(tool) if tool else program(text.split("(", 1)[0].split(":", 1)[0])
        return ([("ran " + prog, False, 1.0)] if prog else []), ""
    code = meta.get("exit_code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    flag = meta.get("is_error") if isinstance(meta.get("is_error"), bool) else None  # a harness's error flag
    if "\x1b" in text or "\x9b" in text:  # (coloured: "\x1b[31m3 failed" is no count, "31mTypeError" no name)
        text = ANSI.sub("", text)
    # one count (failures first): two side by side would quote the tool's own "1 failed, 12 passed"
    count, error = outcome(scan(text))
    if code == 0 or code is None and flag is False:  # it ended well: error names in its output are what it
        # printed (a file, a grep's hits)
        count = count if count and not _FAILING.search(count) else None  # ("400 errors" of a changelog it read)
        return ([(count, True, 1.5)] if count else [("exit 0", True, 1.0)] if code == 0 else []), ""
    out = []
    if code is not None or flag:
        said = f"exit {code}" if code is not None else "error"
        out.append((said + (f": {error}" if error else ""), True, 2.0))
        error = None
    out.extend((piece, True, 1.5) for piece in (count, error) if piece)
    return out, ""


_POLL = re.compile(r"""["']chars["']\s*:\s*["']["']""")  # write_stdin sending nothing: it waits for output
# the shell's ways to change a file in place or write one: ``sed -i``, ``perl -pi``, ``tee FILE``, and the
# redirection of a program that only prints (``cat > FILE <<EOF``, ``echo x >> FILE``; ``pytest > log`` ran pytest)
_IN_PLACE = {"sed": re.compile(r"-[a-zA-Z]*i.*|--in-place.*"), "perl": re.compile(r"-(?![Mm])[a-zA-Z0-9]*i.*")}
_PRINTERS = frozenset("cat echo printf".split())
_REDIRECT = re.compile(r"(?<![<>&\d])>>?\s*([^\s;&|<>]+)")


def edited_file(command: str) -> str:
    """The file a shell command edits or writes (``sed -i 's/a/b/' src/db/pool.py`` edits ``src/db/pool.py``):
    the last file ``sed -i`` or ``perl -pi`` is given, the first ``tee`` writes, the file a printing program's
    output goes to; ``""`` for none."""
    for part in re.split(r"&&|\|\|?|;", command.split("\n", 1)[0]):
        words = part.split()
        k = 0
        while k < len(words) and ("=" in words[k] or words[k] in _PROGRAM_SKIP):
            k += 1
        if k == len(words):
            continue
        prog, args = words[k].rsplit("/", 1)[-1], [w.strip("'\"") for w in words[k + 1 :]]
        found = ""
        if prog in _IN_PLACE and any(_IN_PLACE[prog].fullmatch(w) for w in args if w.startswith("-")):
            found = next((w for w in reversed(args) if not w.startswith("-") and names_file(w)), "")
        elif prog == "tee":
            found = next((w for w in args if not w.startswith("-")), "")
        elif prog in _PRINTERS and ">" in part:
            target = _REDIRECT.search(part)
            found = target.group(1).strip("'\"") if target else ""
        if found and names_file(found):
            return found
    return ""


_READERS = frozenset("cat nl head tail sed less more bat".split())  # programs that print the files they are given


def read_file(command: str) -> str:
    """The file a shell command only reads (``sed -n '1,80p' src/app.py``, ``cat``, ``nl -ba``, ``head``, ``tail``
    of a file): the first file named in its first command past set-up, when that command is a reader (a ``sed``
    without ``-i``), the first of its pipeline (``nl -ba app.py | sed -n '90,108p'`` reads app.py; ``git show x |
    sed -n 1p`` ran git), and nothing in the command redirects output into a file (``2>/dev/null`` is none);
    ``""`` for none. A file is a word ``names_file`` takes (``cat Makefile`` ran cat)."""
    if any(m.group(1).strip("'\"") != "/dev/null" for m in _REDIRECT.finditer(command)):
        return ""
    for part in _COMMANDS.split(command.split("\n", 1)[0]):
        words = part.split("|", 1)[0].split()
        k = 0
        while k < len(words) and ("=" in words[k] or words[k] in _PROGRAM_SKIP):
            k += 1
        if k == len(words) or words[k] in _SETUP:
            continue
        prog, args = words[k].rsplit("/", 1)[-1], [w.strip("'\"") for w in words[k + 1 :]]
        options = [w for w in args if w.startswith("-")]
        if prog not in _READERS or prog in _IN_PLACE and any(_IN_PLACE[prog].fullmatch(w) for w in options):
            return ""
        if prog == "sed" and not any(w in ("-e", "-f") or w.startswith(("--expression", "--file")) for w in options):
            args = [w for w in args if not w.startswith("-")][1:]  # (its first word that is no option is its script)
        return next((w for w in args if not w.startswith("-") and names_file(w)), "")
    return ""


def argument_path(text: str) -> str:
    """The path a call's JSON arguments name (``edit({"path": "src/app.py", …})``, Claude Code's
    ``file_path``), or ``""``."""
    head, paren, rest = text.partition("(")
    if not paren or not rest.startswith("{") or not rest.endswith(")") or not re.fullmatch(r"[\w.:-]*", head):
        return ""
    try:
        arguments = orjson.loads(rest[:-1])
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(arguments, dict):
        return ""
    return next((v for k in _PATH_KEYS if isinstance(v := arguments.get(k), str) and v.strip()), "")


def names_file(word: str) -> bool:
    """Whether a word of a shell command names a file: a path ending in an extension (``src/app.py``,
    ``~/.bashrc``) or a name with one of ``_EXTENSIONS`` (``notes.txt``), not a task or a module
    (``mix phx.server``, ``rake db.migrate``, ``python -m app.main``)."""
    return _FILE_WORD.fullmatch(word) is not None


def summary(msg: dict) -> str:
    """``pieces`` as a few words (``ran pytest``, ``exit 1: ECONNREFUSED, 1 failed``), or ``""``."""
    return ", ".join(text for text, _, _ in pieces(msg))


def short(piece: str) -> str:
    """At most ``TOOL_PIECE`` characters of a tool's text, as a suffix (a path keeps its file name), and none
    before a bidirectional control (it would reorder the line that shows it: ``BIDI``)."""
    piece = short_text(piece)
    if len(piece) <= TOOL_PIECE:
        return piece
    tail = piece[-TOOL_PIECE:]
    cut = tail.find("/")
    return tail[cut + 1 :] if 0 <= cut < len(tail) - 1 else ""


def file_name(path: str) -> str:
    """The file ``path`` names in at most ``TOOL_PIECE`` characters: ``short``'s tail of it when that holds the
    file's whole name (``src/app.py``), else its name alone if it fits (``tui-render.ts``), else ``…`` and the
    longest end of its name that fits and opens a word of its stem (after ``-`` or ``_``, at a capital after a small
    letter: ``…renderer.ts`` of ``tui-renderer.ts``), else the longest start of its name ending a word, and ``…``
    (``markdown.test…`` of ``markdown.test.ts``: ``…test.ts`` would name any test); ``""`` for no name."""
    got = short(path)
    if got:
        return got
    name = re.split(r"[/\\]", short_text(path))[-1]
    if len(name) <= TOOL_PIECE:
        return name
    dot = name.find(".", 1)
    stem = name[:dot] if dot > 0 else name
    for m in _NAME_WORD.finditer(stem, 1):
        if len(name) - m.start() <= TOOL_PIECE:
            return "…" + name[m.start() :]
    ends = [m.start() for m in _NAME_END.finditer(name, 1, TOOL_PIECE + 1)]
    return name[: ends[-1] if ends else TOOL_PIECE] + "…"


def names(paths: list[str]) -> dict[str, str]:
    """Names for several files, each in at most ``TOOL_PIECE`` characters (``file_name``'s, where it fits no other
    of them), no two alike: ``…reasoning…`` and ``…code.plugin…`` of ``codemie-code-reasoning.test.ts`` and
    ``codemie-code.plugin.ts`` (both ``codemie-code…``): the longest run of whole words of a file's path that fits
    none of the others, one of its name before one with a directory (``a/index.ts``, ``b/index.ts``); else the
    longest no other file is named by."""
    first = {path: file_name(path) for path in paths}
    out: dict[str, str] = {}
    for path, name in first.items():
        others = [other for other in paths if other != path]
        if any(_fits(name, other) for other in others):
            ways = sorted((key, got) for got, key in _windows(path).items())
            name = next((got for _, got in ways if not any(_fits(got, other) for other in others)), None) or next(
                (got for _, got in ways if got not in out.values() and all(got != first[o] for o in others)), name)
        out[path] = name
    return out


def _windows(path: str) -> dict[str, tuple]:
    """The ways to name ``path`` in at most ``TOOL_PIECE`` characters from whole words of its last part (``…`` where
    a word is left out), each with its order of preference: within its name, the longest, then one ending the path,
    then the latest."""
    path = short_text(path)
    end = len(path)
    starts = [0] + [m.end() for m in _PATH_WORD.finditer(path, max(1, end - 64))]
    stops = [m.start() for m in _PATH_WORD.finditer(path, max(1, end - 64))] + [end]
    out = {}
    for a in starts:
        for b in stops:
            if 0 < b - a <= TOOL_PIECE and path[a].isalnum() and path[b - 1].isalnum():
                name = ("…" if a and path[a - 1] not in "/\\" else "") + path[a:b] + ("…" if b < end else "")
                out.setdefault(name, ("/" in path[a:b] or "\\" in path[a:b], a - b, b != end, -a))
    return out


def _fits(name: str, path: str) -> bool:
    """Whether ``name`` (``file_name``'s, ``names``'s) could name ``path``: its text where its ``…`` allow, else at
    the end of the path, from the start of a part of it."""
    core = name.strip("…")
    if not name.endswith("…"):
        return path.endswith(core) and (name.startswith("…") or len(path) == len(core) or path[-len(core) - 1] in "/\\")
    at = path.find(core)
    while at >= 0:
        if name.startswith("…") or at == 0 or path[at - 1] in "/\\":
            return True
        at = path.find(core, at + 1)
    return False


_PATH_WORD = re.compile(r"[-_./\\]+|(?<=[a-z])(?=[A-Z])")  # between the words of a path


_NAME_WORD = re.compile(r"(?<=[-_])[^-_.]|(?<=[a-z])[A-Z]")  # where a word of a file's stem opens
_NAME_END = re.compile(r"[-_.]|(?<=[a-z])(?=[A-Z])")  # where a word of a file's name ends


def short_text(piece: str) -> str:
    """``piece`` stripped, without what comes before its last bidirectional control (``short``)."""
    piece = piece.strip()
    return BIDI.split(piece)[-1].strip() if not piece.isascii() else piece


def program(command: str) -> str:
    """The program a shell command runs: its first word that is not an assignment or a wrapper, in its first
    command that does more than set up the next (``cd /repo && git add .`` runs git)."""
    words, k = [], 0
    for part in _COMMANDS.split(command):
        at, skip = part.split(), 0
        while skip < len(at) and ("=" in at[skip] or at[skip] in _PROGRAM_SKIP or at[skip].startswith("-")):
            skip += 1
        if skip < len(at):
            words, k = at, skip
            if at[skip] not in _SETUP:
                break
    if k >= len(words):
        return ""
    prog = words[k].rsplit("/", 1)[-1]
    if prog.startswith("python") and k + 2 < len(words) and words[k + 1] == "-m":
        prog = words[k + 2]
    return short(prog) if re.fullmatch(r"[\w.+-]+", prog) else ""


def outcome(text: str) -> tuple[str | None, str | None]:
    """The first test count in ``text`` that says what failed or errored (else its first count: ``0 failed`` says
    none did), and its first error name of at most ``TOOL_PIECE`` characters."""
    first = None
    for m in _COUNTS.finditer(text):
        at = m.start()
        count = m.group().rstrip()
        if at and text[at - 1] not in _COUNT_AFTER or len(count) > TOOL_PIECE:
            continue  # inside a word or a version (not a count), or too long to be one (a card number "passed")
        if _FAILING.search(count) and not count.startswith("0 "):  # (cargo's "51 passed; 0 failed" failed none)
            first = count
            break
        first = first or count
    error = next((e for e in map(re.Match.group, _ERROR_NAME.finditer(text)) if len(e) <= TOOL_PIECE), None)
    return first, error
