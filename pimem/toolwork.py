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
# an error's name: an errno name, an exception's, a timeout as a test runner or library says it (mocha's "timeout
# of 2000ms exceeded", pytest-timeout's "Timeout >5.0s", Go's "i/o timeout"; not a setting's timeout=3), a refusal
# (``_error`` takes one only where the output reports it)
_ERROR_NAME = re.compile(rf"\b(?:E(?:{'|'.join(_ERRNO)})|[A-Z][A-Za-z]*(?:Error|Exception)"
                         r"|[Tt]imeout(?= of \d| exceeded| >\d|(?<=i/o timeout))|[Pp]ermission denied|[Nn]ot found)\b")
_EXCEPTION = ("Error", "Exception")
_WARNING = re.compile(r"warn|deprecat", re.I)  # a warning's line, before the name: npm WARN, DeprecationWarning:
_MARKER = re.compile(r"[ \t]*(?:E[ \t]+)?")  # a line's indentation, and pytest's E before an error
_MODULE = re.compile(r"[ \t]*(?:[A-Za-z_]\w*\.)*")  # the module path before an exception's name (requests.exceptions.)
_CODE = re.compile(r"\w\(|[{}=;#|]")  # what code holds and an error's words do not: raise KeyError("… not found")
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
    the work), for a result how it ended (``result`` True): ``exit N`` or ``error`` (a harness's error flag without
    a code) and the error's name when it failed; when it ended well its first test count, else ``exit 0`` if its
    exit code says so; when nothing says how it ended, its first count (failures first) and error name."""
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
            command = _command_in(text)
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
# the shell's ways to change a file in place or write one: ``sed -i``, ``perl -pi``, ``tee FILE``, sed's ``w FILE``,
# and the redirection of a program that only prints (``cat > FILE <<EOF``, ``echo x >> FILE``; ``pytest > log`` ran
# pytest)
_IN_PLACE = {"sed": re.compile(r"-[a-zA-Z]*i.*|--in-place.*"), "perl": re.compile(r"-(?![MmI])[a-zA-Z0-9]*i.*")}
_PRINTERS = frozenset("cat echo printf".split())
_SEPARATORS = frozenset("; ;; & && || | |& ( )".split())
_OUTPUTS = frozenset("> >> >| &> &>> >&".split())  # (``>&`` to a number copies a stream: ``2>&1`` writes no file)
# sed's ``w FILE`` command, or an ``s`` command's ``w`` flag (``s/a/b/gw out.txt``), in its script
_SED_WRITE = re.compile(r"(?:^|[;{}/!$\d\n]|/[gpiIme\d]*)\s*[wW]\s+(\S.*)")


def _commands(command: str) -> list[tuple[str, list[str], str, bool]]:
    """The simple commands of a shell command, in order, each as ``(program, arguments, file, writes)``: its
    arguments without its redirections and quotes, the file its output goes to (``""`` for none or
    ``/dev/null``), and whether it writes any file by redirection (``2> err.txt`` too). It is split at ``;``,
    ``&&``, ``||``, ``|``, ``&``, ``;;``, ``|&``, parentheses and line ends; a heredoc's lines and what follows an
    unclosed quote are left out, as is what comes before the program (assignments, ``sudo``)."""
    import shlex  # (only shell commands need it)

    out: list[tuple[str, list[str], str, bool]] = []
    heredoc = ""
    for line in command.split("\n"):
        if heredoc:
            heredoc = "" if line.strip() == heredoc else heredoc
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, ""
        words: list[str] = []
        try:
            words.extend(lexer)
        except ValueError:  # an unclosed quote: the words before it
            pass
        words.append(";")
        args: list[str] = []
        target, writes, k = "", False, 0
        while k < len(words):
            word = words[k]
            if word in _SEPARATORS:
                while args and ("=" in args[0] or args[0] in _PROGRAM_SKIP):
                    args.pop(0)
                if args:
                    out.append((args[0].rsplit("/", 1)[-1], args[1:], target, writes))
                args, target, writes = [], "", False
            elif word.startswith("<"):  # (its input: ``< in.txt``, a heredoc's ``<<EOF``)
                if word == "<<" and k + 1 < len(words):  # (``<<-EOF`` comes as ``<<`` and ``-EOF``)
                    heredoc = words[k + 1].lstrip("-")
                k += 1
            elif word in _OUTPUTS:
                fd = args.pop() if word[0] == ">" and args and args[-1].isdigit() else ""  # ``2>``: a stream's
                to = words[k + 1] if k + 1 < len(words) and words[k + 1] not in _SEPARATORS else ""
                k += 1
                if to and to != "/dev/null" and not (word == ">&" and (to.isdigit() or to == "-")):
                    writes = True
                    target = to if fd in ("", "1") else target
            else:
                args.append(word)
            k += 1
    return out


def _sed_script(args: list[str]) -> tuple[list[str], list[str]]:
    """A ``sed``'s scripts and the other words it is given: the words after ``-e`` (``-ne``), else its first word
    that is no option."""
    scripts, rest, k = [], [], 0
    while k < len(args):
        word = args[k]
        if word.startswith("--expression="):
            scripts.append(word.split("=", 1)[1])
        elif word.startswith("-") and not word.startswith("--") and word[-1] in "ef" and k + 1 < len(args):
            k += 1
            (scripts if word[-1] == "e" else rest).append(args[k])
        else:
            rest.append(word)
        k += 1
    if not scripts and not any(w.startswith(("-f", "--file")) or w.startswith("-") and w[-1] == "f" for w in args):
        first = next((i for i, w in enumerate(rest) if not w.startswith("-")), None)
        if first is not None:
            scripts.append(rest.pop(first))
    return scripts, rest


def _in_place(prog: str, args: list[str]) -> bool:
    """Whether a ``sed`` or ``perl`` changes the files it is given (``-i``)."""
    return prog in _IN_PLACE and any(_IN_PLACE[prog].fullmatch(w) for w in args if w.startswith("-"))


def _written(prog: str, args: list[str], target: str) -> str:
    """The file one simple command edits or writes (``""`` for none): the last file ``sed -i`` or ``perl -pi`` is
    given, the file sed's ``w`` writes, the first ``tee`` writes, where a printing program's output goes."""
    if _in_place(prog, args):
        return next((w for w in reversed(args) if not w.startswith("-") and names_file(w)), "")
    if prog == "sed":
        found = next((m for s in _sed_script(args)[0] for m in [_SED_WRITE.search(s)] if m), None)
        return found.group(1).split("\n", 1)[0].strip() if found else ""
    if prog == "tee":
        return next((w for w in args if not w.startswith("-")), "")
    return target if prog in _PRINTERS else ""


def edited_file(command: str) -> str:
    """The file a shell command edits or writes (``sed -i 's/a/b/' src/db/pool.py`` edits ``src/db/pool.py``):
    the first that one of its commands writes (``_written``), ``""`` for none."""
    for prog, args, target, _ in _commands(command):
        found = _written(prog, args, target)
        if found and names_file(found):
            return found
    return ""


_READERS = frozenset("cat nl head tail sed less more bat".split())  # programs that print the files they are given


def read_file(command: str) -> str:
    """The file a shell command only reads (``sed -n '1,80p' src/app.py``, ``cat``, ``nl -ba``, ``head``, ``tail``
    of a file): the first file named in its first command past set-up, when that command is a reader (a ``sed``
    that writes nothing), the first of its pipeline (``nl -ba app.py | sed -n '90,108p'`` reads app.py; ``git show
    x | sed -n 1p`` ran git), and none of its commands writes a file (``> out.txt``, ``2> err.txt``, ``tee``;
    ``2>/dev/null`` is none); ``""`` for none. A file is a word ``names_file`` takes (``cat Makefile`` ran cat)."""
    commands = _commands(command)
    if any(writes or _in_place(prog, args) or _written(prog, args, "") for prog, args, _, writes in commands):
        return ""
    prog, args = next(((p, a) for p, a, _, _ in commands if p not in _SETUP), ("", []))
    if prog not in _READERS:
        return ""
    if prog == "sed":
        args = _sed_script(args)[1]
    return next((w for w in args if not w.startswith("-") and names_file(w)), "")


def _arguments(text: str) -> dict:
    """A call's JSON arguments (``edit({"path": "src/app.py", …})``), or ``{}``."""
    head, paren, rest = text.partition("(")
    if not paren or not rest.startswith("{") or not rest.endswith(")") or not re.fullmatch(r"[\w.:-]*", head):
        return {}
    try:
        arguments = orjson.loads(rest[:-1])
    except orjson.JSONDecodeError:
        return {}
    return arguments if isinstance(arguments, dict) else {}


def argument_path(text: str) -> str:
    """The path a call's JSON arguments name (``edit({"path": "src/app.py", …})``, Claude Code's
    ``file_path``), or ``""``."""
    arguments = _arguments(text)
    return next((v for k in _PATH_KEYS if isinstance(v := arguments.get(k), str) and v.strip()), "")


def _command_in(text: str) -> str:
    """The command a shell call's text runs: its JSON arguments' ``command`` or ``cmd``, else the first quoted
    string after one of those keys or after its ``(`` (``bash('pytest -x')``), up to its closing quote."""
    arguments = _arguments(text)
    command = arguments.get("command", arguments.get("cmd"))
    if isinstance(command, str):
        return command
    found = (re.search(r"""["'](?:command|cmd)["']?\s*[:=]\s*\[?\s*(["'])((?:\\.|(?!\1).)+)""", text, re.S)
             or re.search(r"""\(\s*(["'])((?:\\.|(?!\1).)+)""", text, re.S))
    return found.group(2) if found else ""


def names_file(word: str) -> bool:
    """Whether a word of a shell command names a file: a path ending in an extension (``src/app.py``,
    ``~/.bashrc``) or a name with one of ``_EXTENSIONS`` (``notes.txt``), not a task or a module
    (``mix phx.server``, ``rake db.migrate``, ``python -m app.main``), nor a pattern of files (``rg --glob
    '!**/*.map'``, ``ls src/*.ts``)."""
    return _FILE_WORD.fullmatch(word) is not None and not (word.startswith("!") or any(c in word for c in "*?["))


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
    none did), and the first error name it reports (``_error``)."""
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
    return first, _error(text)


def _error(text: str) -> str | None:
    """The first error name of at most ``TOOL_PIECE`` characters that ``text`` reports, not one in code it quotes, a
    warning or a quoted value (``Expected: "ECONNREFUSED"``): in a line that says no warning before it, out of
    quotes, at the start of a part of the line (the line past its indentation and pytest's ``E``, or what follows
    ``: `` or `` - ``), an exception's name (past its module path) followed by ``:``, white space or the line's end
    (``E   ValueError: …``, ``FAILED t.py::x - KeyError: …``, not ``raise KeyError(…)``, ``except TimeoutError:``);
    any other after words without code (``Error: connect ECONNREFUSED``, ``bash: x: command not found``, not
    ``raise KeyError(f"user {uid} not found")``). Each name's line and part are read on from the last name's, so a
    long line of names is read once."""
    end = seen = opens = scanned = -1  # the line's end, the last name's start, the part's start, code looked for up to
    warned, code = 0, None  # where the line's first warning ends, where the part's first code does
    for m in _ERROR_NAME.finditer(text):
        name, at = m.group(), m.start()
        if len(name) > TOOL_PIECE or at and text[at - 1] in "'\"`":
            continue
        if at > end:  # the first name of its line
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            warning = _WARNING.search(text, start, end)
            warned = warning.end() if warning else end + 1
            seen, opens = start, _MARKER.match(text, start).end()
            scanned = opens
            code = None
        if warned <= at:
            continue
        colon, dash = text.rfind(": ", seen, at), text.rfind(" - ", seen, at)
        if colon >= 0 or dash >= 0:  # a later part
            opens = scanned = colon + 2 if colon > dash else dash + 3
            code = None
        seen = at
        if name.endswith(_EXCEPTION):
            if _MODULE.match(text, opens, at).end() == at and (m.end() == len(text) or text[m.end()] in ": \t\r\n"):
                return name
            continue
        if code is None:
            found = _CODE.search(text, scanned, at)
            code, scanned = (found.end() if found else None), at
        if code is None:
            return name
    return None
