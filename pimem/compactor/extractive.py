"""The offline compactor: deterministic, no key, no network, fast, and it writes only what its inputs hold.

A line says who spoke and what about. Each message yields **units**, exact substrings of its text: the
user's ask (the first sentence of a user message), key phrases (runs of words between stop words and
punctuation; Chinese clauses between its punctuation) scored by how distinctive their words are against the
whole memory (inverse document frequency over a sample of its log), and facts copied exactly: names,
numbers, dates, paths (Windows' too), identifiers, errors, quoted strings. A bare number is a fact only with what it
counts or names, its nearest words in its clause (``CentOS 7``, ``pool_size from 3 to 6``, ``3 kids``, ``2回目``), and a
path's line and column are one with it (``src/app.ts:225:19``). A number is one fact with its currency or sign, unit,
digit groups and a range to another (``US$ 3.781,20``, ``2.400 €``, ``52 300 ₽``, ``−2…+3 °C``, ``22:00–02:00``, ``entre 3 y
5``), a day with its month and year (``15. April 2026``, ``12 de mayo``; ``14時05分11秒``), and words joined to a number by
hyphens, a slash or colons are one (``prod-db-2``, ``OPS-4711``, ``release/2.4``, ``node:events:634:26``): no piece
holds part of a fact (one running into it takes it whole); in Japanese or Korean the words written against a
number are a whole katakana word, kanji or Hangul run (``コード137``, not ``了コード137で異常``), and an endpoint's
query is one fact with its path (``/api/v1/orders?status=pending&page=2``). No unit holds half a pair of quotes
(of any kind: ``„“``, ``«»``, ``「」``; a Hebrew abbreviation's ``"``, ``בע"מ``, is none) or of a code span's
backticks, a code fence's language (``ts`` of a "```ts" line), a key without its value or a value without its key
(``"beta_ui": true`` is one piece), a statement's operator at its edge (``const config =``) or a call's name without
its call (``size = int``: ``size = int(os.environ["SIZE"])`` when it fits), base64 or hex, minified code, a listing's line numbers
(``cat -n``) or a table's row numbers (``1 alice 34``), a diff's marks (``@@ -12,7 +12,9 @@``, a line's ``+``; a
merge's combined diff's too), a bidirectional control (it would reorder the line on a terminal) or another control
character (an escape sequence a tool printed, ``\\x05``: no line holds one; a message said as written, having
nothing to pick, has each escape sequence dropped and any other one made a space, as a model's reply); an ellipsis or
a dash ends a phrase (a Chinese clause too), a path from ``~`` or ``$HOME`` is copied with it, and a JSON string's
escapes (``\\n``) are no letters of its words. A ``grep -n`` line's file and line number are one fact
(``src/app.py:42``), its text read after them (a compiler's ``src/app.py:12:5: error: …`` is a path with its line and
column, and its error text one piece when it fits); so is any error, as written, to its line's end or ``ERROR`` bytes
cut between words (``psycopg2.OperationalError: could not connect to server: Connection refused``, ``Error: Invalid
hex color: #000cc``, ``fatal: …``, ``No space left on device``); a URL is one (``file://`` too), and so is a path with a space
in a name when it is quoted (one longer than a piece by its end), its space escaped, or it reads as one (``~/My
Documents/report 2024.pdf``). A piece in a clause holding a negation takes it, right before it (``never committed``,
``not optional``), a few words before it (``not a bug in the worker``, ``None of the replicas were promoted``) or after
it (``gehen in Latin-1 gar nicht``), up to the clause's end or a word that turns it (``but``, ``sondern``): never
``committed``, ``bug`` or ``gehen`` alone (one too long with it, or starting more than ``NEGATION_REACH``
characters past it, is left out); a negation is no piece alone but for a clause it is whole (``the logs…nothing``;
not one that leaves out what follows it, ``Apart from that,``, nor a name: ``Apart``).
So with a word that makes its clause a proposal, a question or a condition (``suggest``, ``maybe``, ``should``, ``if``,
``vielleicht``, ``quizás``, ``если``, ``אולי``; in Chinese and Japanese a mark in a clause's characters, ``建议``,
``是否``, ``要不要``, ``如果``, ``不``, or a particle after its words, ``吗``, ``吧``): ``suggest we bump the timeout``,
``建议…超时改成50秒``, never ``bump the timeout`` or ``超时改成50秒`` alone, a proposal said as done; such a word reaches
over a comma to its sentence's end (``If the cache is cold, restart``, ``如果…失败，就把副本数改成3个``), and a key with its
value is said with it as a number's words are (``not set max_retries=3``). A negation is also ``without``,
``impossible``, ``lack``, ``except`` (``ohne``, ``sans``, ``без``, ``außer``, ``кроме``…) or one of words (``far from``,
``instead of``, ``rather than``, ``apart from``, ``au lieu de``); ``only when``, ``only if`` (``nur wenn``, ``только если``) are a condition's, said with the run right
before them too (``tests pass only when run``); ``only`` right before a verb limits what its clause says after it as
a negation does (``I only added tests``, ``it only fails on CI``: not ``added tests``, ``fails, CI``). A run right
before a negation that is its verb's object or a value's other is said with it (``deleted nothing from the archive``, ``found no errors``, ``40 not 50``), and a negated value
with the value a word says is meant after it (``not 40, it's 50``, ``nicht 40, sondern 50``; after a comma alone it is
the next clause's, ``not in 1.2, 1.3 has it``), a negated verb with its subject of quantity (``few weren't able``); one said with a negation and ending
before a limit in time runs to its clause's end (``not migrate the database before the audit ends``); a negation
after a comma is said from the word before it, a correction's right value (``~2.3.1, not ^2.3.1``); one inside a
condition keeps the condition (``if it's not used anywhere else``). A number is said with its bound's or
approximation's word or mark right before it (``under 0.1%``, ``at most 200 jobs``, ``p99 < 200 ms``, ``to 5% of
traffic``, ``about 5%``, ``only 20%``, ``unter 5%``, ``moins de 2 Go``, ``около 20%``; a comparison's ``to`` with its
word: ``compared to 5%``, ``close to 90%``), a flag with its dashes
(``--no-cache``; a short one with its command, none of its phrase's four words: ``git commit -a``; after a few stop
words, with the words before them: ``run it with -v``) and a version with its range's sign (``^1.3.0``, ``~2.3.1``,
``>=2.31``). An interjection is no piece (``oops``, ``wow``, ``nope``; a word in mixed case is a name, no stop word:
``WoW``). A piece of a question runs to its question mark (``server down?``; in any language; a fact alone as it is), or, far from it in a sentence that asks from its start,
is said from that start (``Can you recommend some good hiking trails``), or is left out; a clause before the
question's is a statement, said as it is (``I restarted the server, is it up now?``). A fact after ``from`` (``von``, ``с``) is
said with it when a ``to`` follows in its sentence, and one after ``to`` when a ``from`` came before (``from
#444444``, ``to #585858``); a bare number takes what it is for (``200 for /v1/orders``); ``of mine`` goes on with its
run (``buddy of mine adopted``). A number with its
currency or unit ends there (``Итого 45 000 ₽``, not ``45 000 ₽ в``), and a URL where it ends: no Chinese punctuation,
nor Chinese written on after it (``见https://example.com/a文档``: ``https://example.com/a``). The first phrase of the
ask of the user asking a model runs over an article (``fix the login timeout``) and weighs ``HEAD`` times more: a merge
says what was asked by its verb and what it is done to, not by its nouns alone (``login timeout``).
A harness's notes (``[Request interrupted by user]``, a
slash command's name again in ``<command-message>``) and a numbered diff's marks (``+ 12``) are no pieces. Tool work becomes what ran and how it ended (``ran pytest → 12 passed``, ``edited app.py``, ``exit 1:
ECONNREFUSED``), from the call's
command or file and the result's exit code, test counts and error names (a result whose call is not in the line names
its tool, ``bash → exit 2``, or goes if it says only ``exit 0``); a piece taken from tool traffic is at most
13 characters, so no line shown without tools quotes a tool's output (``privacy`` masks what would). Calls of a span
that say the same are said once, with how many there were and how the last one ended (``ran pytest ×32 → exit 1,
1 failed``).

A line is the best units that fit in 512 bytes (greedy by score per byte, a word already said scoring
nothing again, each further unit of one message counting less, no piece twice in a speaker's part: one holding a
piece said before takes its place, and two pieces of one message that overlap in its text are one, the text they
cover (``ioredis gives up after 20 retries``, not ``ioredis gives, gives up after 20 retries``); a second piece of one sentence the user asked a model brings the sentence whole),
grouped by speaker (the user first, then
the other speakers, then the tool work), in log order within a group, joined by the fixed connectives
``: ``, ``, ``, ``; `` and ``→``. Nothing is reworded, so code is never re-punctuated. A merge's line is
headed by its span's days, from the messages' dates, as a reader says them (``8, 25 May 2023``; ISO for a
span in Chinese). A span whose units all weigh nothing (each of its words in more than about a third of the
memory's messages: one question asked again and again) is said by its first ask, each word weighing alike.

Offline it may read the span's original messages (it runs locally): ``Digest(mem)`` is one memory's
compactor; a merge draws on the units of its whole span, not on the two child lines: its children's pools
(kept per built node while its parent is pending, each the best ``POOL`` by what the line weighs them at),
down to the messages' own units (made once per message, from one forward read of the log). Every sum is
taken in text order, so lines do not depend on string hashing (``PYTHONHASHSEED``). ``leaf``/``merge``
without a memory (tests, a library user) work from the message or the two child lines alone.
"""

from __future__ import annotations

import bisect
import collections
import functools
import heapq
import itertools
import math
import operator
import re
import unicodedata

from .. import toolwork
from ..message import said_by as _label, speaker as _speaker
from ..privacy import ANSI
# (the bidirectional controls: unseen, they reorder how a terminal shows what follows them on a line. No piece
# holds one: each ends what it is in, a word, a phrase, a fact)
from ..toolwork import BIDI as _BIDI, SCAN_HEAD, SCAN_TAIL, scan as _scan
from .cut import CONTROLS as _CONTROLS, LINE_BYTES, boundary, cut_line as _cut_reply, flatten, strip_controls

POOL = 96  # units a span keeps for its parent to choose from
LEAF_UNITS = 16  # units a message offers its spans
LEAVES_KEPT = 1 << 14  # messages whose units are kept for the merges above them
PASSED_KEPT = 1 << 10  # messages read ahead, whole, until their units are asked for (a build holds ~50)
TOOL_SCAN_HEAD, TOOL_SCAN_TAIL = 1_000, 500  # characters of a tool's text its own leaf takes facts from
STATS_SAMPLE = 20_000  # messages read for the memory's term statistics, in evenly spaced runs
STATS_CHARS = 2_000  # of each message's text
FEW = 16  # messages: fewer give no word statistics (every other word counts the same)
IDF_KEPT = 1 << 18  # words whose weight a memory's statistics remember
COMMON = 1.0  # log of the share of messages past which a word counts for nothing (about 1 in 3)
SENTENCE = 120  # bytes: the longest unit (a sentence the user said)
NEGATION_REACH = 24  # characters: a piece starting farther past its negation is left out, not said with it
QUESTION_REACH = 24  # characters: a piece ending farther before its question's mark is left out, not run to it
ASK = 1.0  # weight of the user's first sentence (the ask)
HEAD = 2.0  # weight of the first phrase of words of the ask of the user asking a model (its verb and its object)
SAID = 1.0  # weight of the user's other sentences
SPREAD = 1.0  # each further unit of one message counts 1 / (1 + SPREAD × units taken)
DAYS = 4  # days a merge's head names one by one (a span over more says its first and last)
LABELLED = 64  # messages: a merge with nothing to say of a span this short names who spoke in it
USER = 3.0  # weight of what the user said against the other speakers (the user's asks first)
CODE_LINE = 256  # characters: a line this long may be minified code (``_minified``)

_HAN_RANGES = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Chinese characters (kanji, hanja too)
_HAN_KANA = "\u3040-\u30ff" + _HAN_RANGES  # and Japanese kana: scripts written without spaces between words
_CJK = _HAN_KANA + "\uac00-\ud7af"  # and Korean syllables
_CJK_RUN = re.compile(f"[{_CJK}]+")
_HAN = re.compile(f"[{_HAN_RANGES}]")
_KANA_HANGUL = re.compile("[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\uac00-\ud7af]")  # Japanese, Korean
_WORD = re.compile(r"[^\W_]+")
_MIXED = re.compile(r"[^\W_]*[a-z][A-Z][^\W_]*")  # (a word in mixed case: ``WoW``, ``getUser``)
STOP = frozenset(
    "a about after again all also am an and any are as at be because been before being both but by can could "
    "did do does doing done don't for from get got had has have having he her here hers him his how i i'm if "
    "in into is it it's its just let me more most my no nor not now of off oh on once only or other our out "
    "over own really same she should so some such than that that's the their them then there these they this "
    "those through to too under until up very was we were what when where which while who whom why will with "
    "would yeah yes you you're your yours hey hi hello thanks thank ok okay sure well like know think great "
    "good much lot lots way things thing something anything one also been going get got make made see "
    "though even still always never ever every many us them it's i've i'd you've we're they're can't "
    "user pi echo tool work note assistant "
    "oops whoa wow yay nope nah hmm ugh haha lol omg gosh geez yikes phew aww bout "  # (interjections: no piece alone)
    "的 了 是 我 你 他 她 它 们 在 和 也 就 都 而 及 与 着 或 一个 没有 我们 你们 这个 那个 然后 需要 可以 一下 什么".split()
)
# facts copied exactly: URLs, paths, file names, identifiers (CamelCase, camelCase, snake_case, ECODES,
# ACRONYMS), versions, numbers and dates, quotes. The alternatives that start a word sit behind one ``\b``
# and are sorted by the word's first character (a lowercase letter, a capital, a digit), keeping their order,
# so each word start tries only the few that can match there. A word's alternatives are tried only when what
# follows its first run of small letters and digits can make one of them (a capital, ``_``, ``.``, ``-``, a
# letter beyond ASCII), and a file name's only when a dot follows its first run of word characters; the
# quantifiers that cannot give back what they took are possessive: the same matches, in a quarter less time.
_EXTS = "py|js|mjs|ts|tsx|jsx|go|rs|c|h|cc|cpp|hpp|java|kt|rb|php|sh|md|json|jsonl|toml|yaml|yml|txt|sql|html|css|lock|cfg|ini|xml|csv|log"
_EXT = rf"(?=[\w-]*+\.)[\w.-]*\w\.(?:{_EXTS})\b"
# a relative path (ASCII, so it stops at Chinese around it): two slashes or more, or one before a file name
_PC, _PD = r"[A-Za-z0-9_@+-]", r"[A-Za-z0-9_.@+-]"
_REL = rf"(?=[\w.@+-]*+/){_PC}{_PD}*+/(?:(?:{_PD}++/)+{_PD}*{_PC} | {_PD}*\w\.(?:{_EXTS})(?![A-Za-z0-9_]))"
# a number's end: no letter, digit or _ after it (Chinese may follow: 22:00到), and no more of a dotted run
# (1.1 is not a fact of 1.1.1w); a dotted number may end in a few small letters (1.1.1w, 3.11.4rc1, 3.5kg)
_END = rf"(?![^\W{_CJK}])(?!\.\d)"
_SUFFIX = r"(?<=\d)(?:[a-z]{1,6}\d*)?"
_NUMBER = rf"\d[\d,._:/-]*\d(?:\s?(?:%|[kKMG]B|ms|s|px|am|pm|AM|PM)|{_SUFFIX}){_END}"
_DIGITS = rf"{_NUMBER}|\d+(?:[.:/-]\d+)+{_SUFFIX}{_END}|\d%?{_END}"  # a number, a date, a time, a share (99.95%)
_VERSION = rf"\d+(?:[.:/-]\d+)+{_SUFFIX}(?:-[A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*)?{_END}"  # after its v: v2.3.1, v2.3.1-rc.1
_MORE = r"(?:[A-Z_./\-]|[^\W\x00-\x7f])"  # what can follow a word's first run of small letters and digits in a fact
_SNAKE = rf"(?=[^\W_{_CJK}]*+_)[a-zA-Z][^\W{_CJK}]*_[^\W{_CJK}]+(?![^\W{_CJK}])"  # (not into Chinese around it)
# no fact starts inside a run of ``SENTENCE`` characters or more of names and paths without a space (a blob:
# base64, a hash, minified code): what it took there would be longer than a piece, or a slice of the blob; and
# the scans ahead (a path's ``/``, a file name's extension) never run over a whole blob from each of its words
_INSIDE = rf"(?<![\w.@+-]{{{SENTENCE}}})(?![\w.@+-]{{{SENTENCE}}})"
# a Windows path: from its drive (``C:\Program Files\app\bin``; a folder's name may hold a few spaces when a
# backslash follows it), or a relative one to a file (``src\app\main.py``); its backslashes doubled too, as a
# JSON string writes them
_WSEG = r"[\w.@+~$-]++"
_WIN = rf"(?:\\{{1,2}}{_WSEG}(?:[ ]{_WSEG}){{0,3}}(?=\\))*\\{{1,2}}[\w.@+~$-]*[\w@+~$-]"
_WIN_REL = rf"(?:\\{{1,2}}{_WSEG})*?\\{{1,2}}[\w.@+~$-]*\w\.(?:{_EXTS}|exe|dll|bat|cmd|ps1)(?!\w|\.\w)"
# (a pair of brackets in it is its own; it takes no Chinese or Japanese punctuation or curly quote, and no Chinese,
# Japanese or Korean written on after an ASCII character: ``见https://example.com/a文档``, ``https://x.y/z。``; a name in
# those scripts after a slash, a dot, ``?``, ``=``, ``&`` or ``#`` is its own: ``https://zh.wikipedia.org/wiki/北京``,
# ``https://例え.テスト/パス?q=日本語``)
_URL_NOT = "\u2014\u2018-\u201f\u2026\u3000-\u303f\uff00-\uffef" + _CJK
_URL_TEXT = (rf"""https?://(?:[^\s<>"'`()\]{_URL_NOT}]|(?<=[/.?=&#])[{_CJK}]+"""
             rf"""|\([^\s()<>{_URL_NOT}]*\))+""")
# and a file's URL (``file:///home/a/q3.pdf``), a bucket's: one fact too, not a path of its own beside it (found with
# the URLs, ``_blobs``: in the facts' pattern each further scheme cost every text a tenth of its scan)
_URL_ANY = _URL_TEXT.replace("https?", "(?:https?|file|s?ftp|s3|gs)", 1)
# (an absolute path ends before a sentence's full stop; a quoted string is one string: its quotes open and close
# it, with no word (but a Chinese or Japanese one) or quote outside them and no space just inside them, never the
# code between two strings: ``Text("", 1, (t) => bg("x", t))`` gave ``, 1, (t) => bg(``)
# a path's start that says where it is without a ``/``: the home directory (``~``, ``~alice``) or a variable (``$HOME``,
# ``${XDG_CONFIG_HOME}``), not after a word: one name after it makes a path (``~/.bashrc``)
_HOME = (rf"(?:~(?<![^\W{_CJK}~$]~)(?:[A-Za-z_][\w.-]*)?"
         rf"|\$(?<![^\W{_CJK}~$]\$)(?:\{{[A-Za-z_]\w*\}}|[A-Za-z_]\w*))")
# a name in such a path (between its slashes): a name with a space or two is one when it is unambiguous: each word
# after a space opens with a capital or a digit and a slash follows (a folder: ``My Documents/``) or its last word has
# an extension (a file: ``report 2024.pdf``), and none but that last word holds a dot (``a.txt B.txt`` are two
# files); or its spaces are escaped (``My\\ Documents``, as a shell reads it)
_SEG = (r"(?:(?=[\w@+-]++[ ][A-Z0-9])(?:[\w@+-]++(?:[ ][A-Z0-9][\w@+-]*+){1,3}+(?=/)"
        r"|[\w@+-]++(?:[ ](?=[A-Z0-9])[\w@+-]++){0,2}[ ](?=[A-Z0-9])[\w@+-]*?\.[A-Za-z]\w{0,4}(?![\w.]))"
        r"|[\w.@+-]+(?:\\[ ][\w.@+-]+)*)")  # (the first two only where a space and a capital or digit follow a word)
# a quoted path holding a space (``"/tmp/a b/c.txt"``, ``'~/My Documents/x'``): whole (one longer than a piece by its end,
# ``_path_end``), from the home directory or a variable, else with two slashes or more (no ``"/help me"``); its quote
# not right after a word or another quote (``it's``). (It opens with its quote, not a group: the engine passes over an
# alternative that opens with a character it is not at, and this one is tried at every position of a text)
_QUOTED_PATH = (r"""["'`](?<=(["'`]))(?=[~$./])(?<![\w"'`].)"""
                r"""(?=(?:~[\w.-]*|\$\{?\w+\}?)/|\.{0,2}/[^/"'`\n]+/)(?=[^"'`\n]*[ ])"""
                rf"""[^"'`\n]{{2,{4 * SENTENCE}}}(?<!\s)\1(?!\w)""")
# a file's line (and column) after it, as a compiler, a linter, a stack trace or a link writes them (``src/app.ts:225:19``,
# ``[a.ts](/x/a.ts:99)``): one fact with its file, not a number alone (``225:19`` is no time)
_AT_LINE = r"(?::\d{1,7}(?::\d{1,4})?(?!\w|:\d))?"
# words joined to a number, one fact and not the number alone (``2`` of them read as a count, ``634:26`` as a
# time): by hyphens (``prod-db-2``, ``OPS-4711``, ``Latin-1``, ``UTF-8``, ``pkg-1.2.3``, ``db-2.internal:5432``), by a
# slash (a branch: ``release/2.4``, ``HTTP/1.1``), by colons (``node:events:634:26``, a host's port
# ``cache.internal:6380``). (Tried only where a hyphen, a slash, a colon or a dot follows the word's first run)
_JOINED = (rf"(?=[A-Za-z0-9]*+[-/:.])(?:[A-Za-z][A-Za-z0-9]*+(?=[A-Za-z0-9.-]*?-\d)(?:-[A-Za-z0-9]++(?:\.[A-Za-z0-9]++)*+)++"
           rf"(?::\d{{1,5}})?(?![^\W{_CJK}]|[.:-]\w) | [A-Za-z][A-Za-z0-9_.-]*+/\d(?:[A-Za-z0-9_.-]*[A-Za-z0-9])?(?![\w/]|\.\w)"
           rf" | (?:[A-Za-z][A-Za-z0-9_.-]*+:)++\d{{1,7}}(?::\d{{1,5}})?(?![\w:]|\.\d))")
# an endpoint's query after its path (``/api/v1/orders?status=pending&page=2``): one fact with it (ASCII: it stops at
# Chinese written after it)
_QUERY = r"\?[A-Za-z0-9_.%~+-]+=[A-Za-z0-9_.%~+/:-]*(?:&[A-Za-z0-9_.%~+-]+=[A-Za-z0-9_.%~+/:-]*)*(?<![.:])"
_FACT_PATTERN = rf"""(?x)
    {_URL_TEXT}
    | (?: {_HOME}/{_SEG}(?:/{_SEG})* | \.{{0,2}}/{_SEG}(?:/{_SEG})+ )(?<!\.)(?:{_QUERY}|{_AT_LINE})
    WINDOWS    | (?<![\w./]){_INSIDE}\.{_REL}{_AT_LINE}
    | [-−](?<![\w.,)\]}}-].)\$?(?=\d)(?:{_DIGITS})
    | START(?: (?=[a-z0-9]*+(?:{_MORE}|:\w)|v\d)(?=[a-z]){_INSIDE}(?: {_REL}{_AT_LINE} | {_EXT}{_AT_LINE} | [a-z]++(?:[A-Z][a-z0-9]*)+\b | {_SNAKE} | v{_VERSION} | {_JOINED} )
          | (?=[A-Z][a-z0-9]*+(?:{_MORE}|:\w)){_INSIDE}(?: {_REL}{_AT_LINE} | {_EXT}{_AT_LINE} | (?:[A-Z][a-z]++){{2,}}(?:Error|Exception|Warning)?\b | {_SNAKE}
                       | {_JOINED} | E[A-Z]{{3,}}\b | [A-Z]{{2,}}[0-9]*\b | V{_VERSION} )
          | (?=\d){_INSIDE}(?: {_EXT}{_AT_LINE} | DATE{_DIGITS} )
          | (?![a-zA-Z0-9]){_INSIDE}{_EXT}{_AT_LINE} )
    | \$(?:{_NUMBER}|\d\b) | \#(?<![\w&].)\d+\b
    | {_QUOTED_PATH}
    | `[^`\n]{{1,60}}` | "(?<![^\W{_CJK}]")(?<!"")[^"\s][^"\n]{{1,59}}(?<!\s)"(?![^\W{_CJK}])
    """
_WINDOWS = rf"""| [A-Za-z](?<![\w\\][A-Za-z]):{_WIN}
    | (?<![\w.@+~$%\\-])(?=%?[\w.@+~$-]{{1,{SENTENCE}}}%?\\)(?:%[A-Za-z_]\w*%|{_WSEG}){_WIN_REL}
"""
# a date or a time written in Chinese or Japanese, one fact: 2026年3月4日, 2026年3月, 3月4日, 14時05分11秒, 14点05分 (not
# its numbers apart: 年3月, 月4日, 時05分)
_CJK_DATE = r"(?:\d{4}年\d{1,2}月(?:\d{1,2}[日号])?|\d{1,2}月\d{1,2}[日号]|\d{1,2}[時时点]\d{1,2}分(?:\d{1,2}秒)?)(?!\d) | "
_FACT = re.compile(_FACT_PATTERN.replace("START", r"\b").replace("WINDOWS", "").replace("DATE", ""))
# in text with Chinese a fact may start right after a Chinese character too ("修改max_pool_size参数")
_FACT_CJK = re.compile(_FACT_PATTERN.replace("START", rf"(?:\b|(?<=[{_CJK}]))").replace("WINDOWS", "")
                       .replace("DATE", _CJK_DATE))
# and in text with a backslash, a Windows path (the patterns without it are a fifth quicker on the rest)
_FACT_WIN, _FACT_CJK_WIN = (re.compile(_FACT_PATTERN.replace("START", start).replace("WINDOWS", _WINDOWS)
                                       .replace("DATE", date))
                            for start, date in ((r"\b", ""), (rf"(?:\b|(?<=[{_CJK}]))", _CJK_DATE)))
# a list item's number ("1. ", "2) " opening a line): it orders the list, it is not a fact of it
_LIST_MARKER = re.compile(r"\d{1,2}[.)][ \t]")


def _list_marker(text: str, start: int) -> int:
    """The length of the list item's number at ``start`` in ``text`` (digits opening their line, then ``.`` or
    ``)`` and a space), else 0."""
    m = _LIST_MARKER.match(text, start)
    return m.end() - start if m and not text[text.rfind("\n", 0, start) + 1 : start].strip() else 0


# a negation right before a piece (only spaces between): the piece says the opposite without it ("themes no longer
# crash" is not "longer crash", "not optional" not "optional"), so it takes it; a negation is never a piece alone
_NEGATION = re.compile(r"(?<![\w'’-])(?:[Nn]o|NO|[Nn]ot|NOT|[Nn]ever|NEVER|[Nn]or|[Cc]annot|[Ww]ithout|\w+n['’]t)[ \t]+\Z|(?:不|没有?|别|未)\Z")
_NEGATION_ENDS = frozenset(" \t不没有别未")  # (what a piece right after a negation follows: most follow none)
_NEGATION_LAST = frozenset("oOtTrR")  # (the last letter of one before its spaces)


def _negation(text: str, pos: int) -> re.Match | None:
    """The negation right before ``pos`` in ``text`` (``_NEGATION``), if any."""
    if text[pos - 1] in " \t" and text[max(0, pos - 12) : pos].rstrip(" \t")[-1:] not in _NEGATION_LAST:
        return None  # (most pieces follow a space, few a negation's last letter: no search)
    return _NEGATION.search(text, max(0, pos - 12), pos)


# the words that negate a clause, in the languages a phrase is read in (Chinese and Japanese are read in clauses,
# which hold theirs): a phrase in a clause holding one takes it (``_phrases``), whether it comes before the words
# it negates (``not a bug``, ``не удаляйте``, ``לא עולה``, ``ne répond pas``) or after them (German's ``gehen in
# Latin-1 gar nicht``). Lowercase, as a token is looked up
_WITHOUT = "without ohne zonder sans sin senza sem без bez utan uten uden בלי بدون बिना χωρίς tanpa olmadan"
_EXCEPT = "except excluding außer ausgenommen sauf excepté excepto salvo tranne eccetto exceto кроме"
_NEGATORS = frozenset(
    "not no never nor none neither nobody nothing nowhere cannot "
    "don't doesn't didn't isn't aren't wasn't weren't won't wouldn't can't couldn't shouldn't mustn't needn't "
    "hasn't haven't hadn't ain't shan't mightn't "
    "nicht kein keine keinen keinem keiner keines nie niemals niemand nichts weder "  # German
    "niet geen nooit niets "  # Dutch
    "ne pas jamais aucun aucune rien ni "  # French (n'est: its pas)
    "nunca jamás ningún ninguno ninguna nada nadie tampoco "  # Spanish
    "non nessuno nessuna niente nulla né não nenhum nenhuma ninguém nem "  # Italian, Portuguese
    "не ни нет никогда ничего никто нигде нельзя ні ніколи нічого ніхто "  # Russian, Ukrainian
    "nigdy nic nikt żaden żadna żadne inte ikke ej aldrig aldri ingen "  # Polish, Swedish, Norwegian, Danish
    "לא ולא שלא אין אינו אינה אינם מעולם "  # Hebrew
    "لا ولا فلا لم ولم لن ولن ليس ليست لست "  # Arabic
    "नहीं मत δεν μην όχι değil yok tidak bukan jangan belum không chưa đừng "  # Hindi, Greek, Turkish, Malay, Vietnamese
    "안 못 않다 않아 않아요 않습니다 않는다 않았다 않았습니다 없다 없어 없어요 없습니다 없음 아니다 아닙니다 "  # Korean
    # and without, which negates what follows it as not does (``went out without any tests being run``: not ``tests``,
    # ``run``)
    f"{_WITHOUT} "
    # and the words that say a thing cannot be or is not had (``impossible to restore the backup``, ``lack the
    # permissions to restart``)
    "impossible imposible impossibile unmöglich невозможно unable lack lacks lacked lacking "
    # and except, which leaves out what follows it (``Except for the billing service, every service was upgraded``: not
    # ``billing service``, ``upgraded``)
    f"{_EXCEPT}".split())
_NEGATORS |= {word.replace("'", "’") for word in _NEGATORS}
# and the negations of more than one word, one negation each (``far from full``: not ``far``, ``full``; ``instead of
# MySQL``, ``rather than``); found in a text before its tokens are read (``_phrases``)
_NEGATION_PHRASES = ("far from", "instead of", "rather than", "loin d'être", "au lieu de", "en vez de", "en lugar de",
                     "lejos de", "invece di", "em vez de", "statt dass", "apart from")
# and the conditions of more than one word, a proposal's word each, said with the run right before them too (``The
# tests pass only when run with --no-cache``: not ``tests pass``, read as always; not ``only after``, ``only once``: said
# so, they cost 2 of LoCoMo's tuning questions their zoom path)
_ONLY_PHRASES = ("only when", "only if", "nur wenn", "seulement si", "solo si", "solo cuando",
                 "только если", "только когда")
# (those that leave out or stand for what follows them: alone in their clause, their object a stop word, none is a
# piece, ``Apart from that,``, ``Without it,``: words that say nothing)
_LEAVING_OUT = frozenset(f"{_WITHOUT} {_EXCEPT}".split()) | frozenset(_NEGATION_PHRASES)
_PHRASE_HEADS = frozenset(phrase.split()[0].capitalize() for phrase in _NEGATION_PHRASES + _ONLY_PHRASES)  # (``Apart``)
_NEGATION_PHRASE = re.compile(r"(?<![\w'’-])(?i:" + "|".join(_NEGATION_PHRASES + _ONLY_PHRASES) + r")(?![\w'’-])")
_NEGATION_HINTS = ("ar from", "nstead of", "ather than", "oin d", "ieu de", "vez de", "ugar de", "ejos de", "nvece di",
                   "tatt dass", "nly ", "ur wenn", "eulement si", "olo ", "олько ", "part from")  # (past a first letter, a capital)
# and ``only`` right before a verb, which limits what its clause says after it as a negation reverses it (``I only
# added tests``, ``it only fails on CI``: not ``added tests``, ``fails, CI``, read as all that was done, as failing
# everywhere): a verb's, known by the word before it, a subject's pronoun or an auxiliary (``it only``, ``can only``), or
# a word that is no stop word before a verb's -s or -ed form (``the job only runs``); never before a stop word or a
# number (``only 20%``: a small amount's, ``_BOUNDS``), nor ``the only fix``, ``not only``
_ONLY_AFTER = frozenset("i you we they he she it who which that can can't cannot could couldn't will would should must "
                        "may might shall do does did don't doesn't didn't i'll you'll we'll they'll he'll she'll it'll "
                        "i've you've we've they've i'd you'd we'd they'd he'd she'd".split())
_ONLY_VERB = re.compile(r"(?<![\w'’-])(?i:only)[ \t]+([A-Za-z][a-z]+)(?![\w'’-])")
_WORD_BEFORE = re.compile(r"(?<![\w'’-])([A-Za-z][A-Za-z'’]*)[ \t]+\Z")


# (the stop words as a token is written but in mixed case, and but ``only``: one look-up in ``_phrases``)
_STOP_CASED = frozenset(form for word in STOP if word != "only" for form in (word, word.capitalize(), word.upper()))


def _limits(text: str, at: int) -> bool:
    """Whether ``only`` at ``at`` of ``text`` limits the verb after it (``_ONLY_AFTER``, ``_ONLY_VERB``)."""
    verb = _ONLY_VERB.match(text, at)
    if not verb or verb.group(1).lower() in STOP:
        return False
    before = _WORD_BEFORE.search(text, max(0, at - 16), at)
    if not before:
        return False
    word = before.group(1).lower().replace("’", "'")
    if word in _ONLY_AFTER:
        return True
    verb = verb.group(1)
    return word not in STOP and (verb.endswith("ed") or verb.endswith("s") and not verb.endswith("ss"))


# and the words after which a clause says something else, its negation's reach ending there (``not in the parser
# but in the lexer``: the lexer is said; ``didn't start because the port was taken``); none a common word of
# another language (Polish ``ma``, English ``car``, ``men``)
_TURNS = frozenset(
    "but because although though whereas unless however aber sondern weil obwohl mais parce puisque pero sino "
    "porque aunque però perché porém embora но потому хотя однако але хоча lecz ponieważ maar omdat eftersom "
    "אבל אלא כי למרות لكن ولكن بل لأن fakat çünkü".split())
# the word before a comma a negation follows (``A, not B``: a correction; ``~2.3.1, not ^2.3.1``), whole, its sigils too
_CORRECTED = re.compile(r"""(?<!\S)[^\s()\[\]{}<>"“”«»,;]{1,40},[ \t]{1,4}\Z""")
# the value a negated one is corrected to right after its clause (``It's not 40, it's 50``, ``nicht 40, sondern 50``): a
# number or a version, with no words of its own to be said by (``50`` alone is no piece), after a word that says it is
# the one meant; said with the negation's run, ``not 40, it's 50``, not ``not 40`` alone (after a comma alone, the next
# clause's number: ``not in 1.2, 1.3 has it``, never ``not in 1.2, 1.3``)
_CORRECTING = (r"it['’]s|it is|it was|that['’]s|that is|but|rather|actually|just|instead|sondern|eher|es ist|es sind"
               r"|mais|plutôt|c['’]est|sino|pero|es|son|ma|è|mas|é|а|но|это")
_RIGHT_VALUE = re.compile(rf",?[ \t]{{1,4}}(?:(?i:{_CORRECTING})[ \t]{{1,4}}){{1,3}}"
                          r"[~^$€£¥₽]?\d[^\s,;:!?()\[\]{}\"“”]{0,30}(?<![.])(?=[.,;:!?)\]]*(?:\s|$))")
# the negations said with the run right before them (``deleted nothing``, ``found none``, ``found no errors``, ``themes
# must NEVER explode``, ``n'a pas été effectué``), as any is after a value (``40 not 50``); not a verb's ``n't``
# (``Caroline can't wait``: said apart, as before, it costs a reader's questions nothing); ``no`` only when it opens
# a run (``yeah no``: no object)
_OBJECTS = frozenset("nothing none nobody nowhere not never no nichts niemanden nirgends nie niemals rien personne pas "
                     "jamais nada nadie nunca niente nulla nessuno ninguém ничего никого нигде не никогда nic nikogo "
                     "nikt niets niemand inget ingenting ingen".split())
_OBJECTS_ONLY = _OBJECTS | frozenset(_ONLY_PHRASES)
# a quantity that is a verb's subject right before its ``n't`` (``but a few weren't able``): said with it, never
# ``weren't able`` alone, read as the clause's subject before (``close friends kept supporting, weren't able``)
_QUANTIFIED = re.compile(r"(?<![\w'’-])(?i:few|many|most|some|several|others|both|all|half)[ \t]{1,4}\Z")
# the words that limit a negation in time, after it in its clause (``not … before the audit ends``, ``nicht … bis``,
# ``не … до``): a run said with the negation before one is said to its clause's end (``_negated``)
_LIMIT = re.compile(r"(?<![\w'’-])(?i:before|until|till|once|bis|bevor|avant|jusqu|antes|hasta|prima|finché|até|до|пока"
                    r"|voordat|totdat|innan|tills|przed|dopóki)(?![\w-])")
# (those that may follow the words they negate, as a verb's: ``gehen in Latin-1 gar nicht``, ``hazır değil``)
_AFTER = frozenset("nicht nie niemals nichts niet nooit niets inte ikke ej aldrig aldri değil yok 않다 않아 않아요 않습니다 "
                   "않는다 않았다 않았습니다 없다 없어 없어요 없습니다 없음 아니다 아닙니다".split())
# the words that make a clause a proposal, a question or a condition, in the languages of ``_NEGATORS``: a piece of
# a clause holding one takes it as it would a negation (``suggest we bump the timeout``, not ``bump the timeout``:
# a proposal said as done). None a common word of another language (``se``, Spanish's pronoun, Italian's and
# Portuguese's if; ``om``, Swedish's about and if)
_MODALS = frozenset(
    "suggest suggests suggested suggesting suggestion propose proposes proposed proposing proposal recommend "
    "recommends recommended maybe perhaps possibly if whether should could would might shall "
    "vielleicht eventuell möglicherweise vorschlag vorschlagen schlage empfehle empfehlen sollten sollte "
    "könnten könnte würde würden wenn falls ob "  # German
    "misschien wellicht voorstel voorstellen zou zouden indien "  # Dutch
    "peut-être suggère suggérer proposer devrait devrions devriez pourrait pourrions pourriez si "  # French
    "quizás quizá sugiero propongo propuesta deberíamos debería podríamos podría "  # Spanish
    "forse magari suggerisco propongo proposta dovremmo dovrebbe potremmo potrebbe "  # Italian
    "talvez sugiro proponho proposta deveríamos devêssemos deveria poderíamos poderia "  # Portuguese
    "возможно может можно наверное предлагаю предлагаем давайте если ли "  # Russian
    "можливо може пропоную якщо "  # Ukrainian
    "proponuję sugeruję jeśli jeżeli powinniśmy "  # Polish (może: Russian's too)
    "kanske kanskje måske föreslår foreslår borde bør ifall hvis "  # Swedish, Norwegian, Danish
    "אולי מציע מציעה מציעים כדאי אם האם ربما أقترح اقترح إذا لو هل "  # Hebrew, Arabic
    "शायद अगर यदि ίσως προτείνω αν εάν μήπως belki eğer acaba "  # Hindi, Greek, Turkish
    "mungkin barangkali sebaiknya jika kalau apakah nếu liệu "  # Malay, Vietnamese
    "아마 아마도 만약 만일 혹시 제안 제안합니다 어떨까요".split())  # Korean
# (the stop words a run of the user's ask goes on over: ``_phrases``)
_DETERMINERS = frozenset("a an the this that these those my our your its their his her some any".split())
_ROLE = (dict.fromkeys(STOP, 0) | dict.fromkeys(_MODALS, 3) | dict.fromkeys(_TURNS, 2)
         | dict.fromkeys(_NEGATORS, 1) | dict.fromkeys(_NEGATION_PHRASES, 1)
         | dict.fromkeys(_ONLY_PHRASES, 3))  # (a token's, in one look-up)
# in Chinese and Japanese, read in clauses, the same marks inside a run of their characters: a negation's (not
# ``不过``, but; ``不错``, fine; ``特别``, especially; ``未来``, future), a proposal's, a question's or a condition's
# before the words they qualify (``建议``, ``是否``, ``要不要``, ``如果``; ``もし``), a question's or a suggestion's
# particle after them (``吗``, ``呢``, ``吧``; ``かもしれない``, ``べき``)
_CJK_NOT = "不(?![过错同断少仅但管论])|没|别(?<![特区分类级个识告差性]别)|未(?!来)|无法"
_CJK_MODAL = re.compile("建议|提议|是否|要不要|能不能|可不可以|可否|也许|或许|可能|大概|如果|假如|要是|万一|应该|考虑|打算|"
                        "もし|多分|たぶん|提案")
_CJK_MARK = re.compile(f"{_CJK_NOT}|{_CJK_MODAL.pattern}")
_CJK_AFTER = re.compile("[吗呢吧]|かもしれ|べき|ましょうか|でしょうか")
# (either, in one scan of a text that skips to the first characters of their alternatives)
_CJK_MARKS = re.compile(f"(?=[不没别未无建提是要能可也或大如假万应考打も多た吗呢吧かべまで])(?:{_CJK_MARK.pattern}|{_CJK_AFTER.pattern})")
_CJK_LATER = re.compile(rf"[^\s，。！？；、：,;:!?\n]{{0,{NEGATION_REACH}}}?(?:{_CJK_AFTER.pattern})")


_NAME = re.compile(r"\b[A-Z][a-z]{2,}(?:\s[A-Z][a-z]{2,})*\b(?!['’](?:t|re|ve|ll|d|m)\b)")  # not ``Don`` of ``Don't``
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])|\n+")
# a clause runs to the next punctuation mark, but not out of a bracket or a quote it opened (「」, 『』, 《》, “”):
# "退款测试（a、b）暂不处理" is one clause; a bracket or quote left open or closed without its pair (in its sentence)
# ends one: no clause holds half a pair; nor does an ASCII ``?`` between a path and its query (``/api/v1/orders?page=2``)
# and, in chat typed without punctuation, at a space between two Chinese or Japanese characters (Korean spaces its
# words) and at a full stop before a space (Korean ends its sentences so); an ellipsis or a dash ends one as it
# ends a phrase ("日志……什么也没有", "部署——本周": two clauses each), written ``……``, ``——``, ``―`` or ``...``
_HAN_KANA_RUN = re.compile(f"[{_HAN_KANA}]+")
# (the plain characters first: no other alternative starts with one of them)
_CJK_CLAUSE = re.compile(rf"(?:[^，。！？；、：,;:!?\n（）() \t.…—―「」『』《》“”]|（[^（）。！？\n]{{0,60}}）|\([^()。！？\n]{{0,60}}\)"
                         rf"|「[^「」。！？\n]{{0,60}}」|『[^『』。！？\n]{{0,60}}』|《[^《》。！？\n]{{0,60}}》|“[^“”。！？\n]{{0,60}}”"
                         rf"|(?<=\d)[:,](?=\d)|(?<![{_HAN_KANA}])[ \t]|[ \t](?![{_HAN_KANA}])|(?<!\.)\.(?![ \t.]|$)"
                         rf"|(?<=[A-Za-z0-9_/])\?(?=[A-Za-z0-9_%]))+")
# (and quote marks of every kind, but an ASCII gershayim inside a Hebrew word: a phrase holds no half of a pair,
# ``„شركة``; and the sentence and clause marks of other scripts: danda, Arabic comma and question mark, Burmese, Khmer,
# Armenian and Ethiopic full stops, halfwidth and fullwidth stops); an ellipsis or a dash, spaced or not
# ("logs…nothing", "deploy—which": two words, not one), but for a range's en dash (1990–1995)
_BREAK = re.compile(r"[\n!?;()\[\]{}<>“”„‟«»‹›「」『』《》|—―…]|[.,:](?=\s|$)|\.(?=\.\.)|\s[-–]\s|–(?!(?<=\d–)\d)"
                    r'|"(?<![\u05d0-\u05ea]")|"(?![\u05d0-\u05ea])'  # (not a Hebrew abbreviation's gershayim: ``בע"מ``)
                    r"|[，。！？；：、।॥،؟؛။၊។៕։።፣｡．]")
# (the breaks that end a sentence: a negation's reach ends at any break, a proposal's or a condition's word's at these,
# over a comma, a colon, a quote, a bracket or a dash: ``If the cache is cold, restart the worker``, ``Maybe, we…``)
_SENTENCE_BREAKS = frozenset("\n!?;|<>{}[]。！？；।॥؟؛။។៕։።｡．")


def _ends_sentence(text: str, at: int) -> bool:
    """Whether the break at ``at`` in ``text`` (``_BREAK``) ends its sentence: a full stop (not an ellipsis's), a
    question or exclamation mark, a semicolon, a line break (``_SENTENCE_BREAKS``)."""
    c = text[at]
    if c == ".":
        return text[at - 1 : at] != "." and text[at + 1 : at + 2] != "."
    return c in _SENTENCE_BREAKS


def _proposes(text: str, at: int, to: int) -> bool:
    """Whether ``text[at:to]``, a clause's mark (``_phrases``), makes it a proposal, a question or a condition (not a
    negation, nor a particle after the words it qualifies: ``吗``): its reach runs on to its sentence's end."""
    role = _ROLE.get(text[at:to].lower())
    return role == 3 if role else bool(_CJK_MODAL.fullmatch(text, at, to))


# where a piece's sentence ends: a full stop, an exclamation mark or a semicolon before a space, a line break, their
# Chinese and Japanese forms, a question mark (in any language; not an ASCII one a URL's query follows, ``?page=2``)
_STOP = re.compile(r"""[.!;](?=[\s"'”’)\]]|$)|[\n|。！；]|\?(?![A-Za-z0-9_%=&/.:~+-])|[？؟]""")
_QUESTION_MARKS = frozenset("?？؟")
_SAID_TO_END = frozenset(".!;?？؟。！；")  # (what a piece said to its sentence's end ends in)
# (a clause before a question's: a statement, ``I restarted the server, is it up now?``, unless the sentence asks from
# its start, an auxiliary or a question word first, or its question offers an alternative, ``…, or is it slow?``)
_CLAUSE_BREAK = re.compile(r"[,:，、：]|\s[-–—]\s|—")
_ALTERNATIVE = re.compile(r"\s*(?:(?:or|oder|ou|o|или|либо|of|eller|oppure|czy)\b|还是|或者|或是|それとも)", re.I)
_ASKS_FIRST = re.compile(r"(?:[\W_]*()(?:(?:is|are|was|were|am|do|does|did|can|could|will|would|should|shall|may|might|"
                         r"must|has|have|had)(?:n['’]t)?|can['’]t|won['’]t|what|which|who|whom|whose|where|when|why|"
                         r"how)\b|[^¿]*()¿)", re.I)
_QUOTE_OR_BRACKET = re.compile(r"""[`"“”„‟«»‹›「」『』《》()\[\]{}<>‘]|(?<![^\W_])['’]|['’](?![^\W_])""")


# (a word holds dots, but no three in a row: "logs...nothing" is two words and an ellipsis)
_TOKEN = re.compile(r"[^\W_](?:[\w'’+#-]*\.(?!\.\.))*[\w'’+#-]*[^\W_]|[^\W_]")


@functools.cache
def _marks() -> str:
    """The combining marks (Unicode's Mn, Mc, Me: accents, vowel signs) as the body of a character class. Python's
    ``\\w`` leaves them out, so a word written with them (``é`` as ``e`` + U+0301, as macOS and Vietnamese input
    write it; every Thai or Devanagari word) would fall apart at each. Made on the first text that is not ASCII
    (~10 ms; no mark lies past U+1E950 but the variation selectors)."""
    body, start, last = [], None, None
    for lo, hi in ((0x300, 0x1E950), (0xE0100, 0xE01F0)):
        for c in range(lo, hi):
            if unicodedata.category(chr(c))[0] == "M":
                if last != c - 1:
                    if start is not None:
                        body.append(f"{chr(start)}-{chr(last)}")
                    start = c
                last = c
    body.append(f"{chr(start)}-{chr(last)}")
    return "".join(body)


@functools.cache
def _marked() -> tuple[re.Pattern, re.Pattern]:
    """``_WORD`` and ``_TOKEN`` for text that is not ASCII: a word holds its combining marks."""
    marks = _marks()
    return (re.compile(rf"[^\W_]+(?:[{marks}]+[^\W_]*)*"),
            re.compile(rf"[^\W_](?:(?:[\w'’+#\-{marks}]*\.(?!\.\.))*[\w'’+#\-{marks}]*(?:[^\W_]|[{marks}]))?"))


def _in_word(text: str, start: int, end: int) -> bool:
    """True when ``text[start:end]`` starts or ends inside a word: right after or before a combining mark (which
    belongs to the letter before it)."""
    return bool(start and unicodedata.category(text[start - 1])[0] == "M"
                or end < len(text) and unicodedata.category(text[end])[0] == "M")


def _words(text: str) -> list[str]:
    """Lowercase words of ``text``; runs of CJK characters as overlapping pairs (they have no spaces)."""
    text = text.lower()
    if text.isascii():
        return _WORD.findall(text)
    words = _marked()[0].findall(text)
    if not _CJK_RUN.search(text):
        return words
    out = []
    for word in words:
        if _CJK_RUN.search(word):
            for run in _CJK_RUN.findall(word):
                out.extend(run[k : k + 2] for k in range(max(1, len(run) - 1)))
            rest = _CJK_RUN.sub(" ", word).split()
            out.extend(rest)
        else:
            out.append(word)
    return out


@functools.lru_cache(maxsize=1 << 16)
def _wordset(piece: str) -> tuple[str, ...]:
    """The distinct words of ``piece`` in text order (an order that does not depend on string hashing, so
    sums over them are the same in every process). A word in mixed case that would be a stop word keeps its case
    (in ASCII): a name, weighed as its word is (``Stats``), not the interjection it spells (``WoW``, not ``wow``)."""
    words = _words(piece)
    if not piece.islower() and piece.isascii() and _CAMEL.search(piece) and any(
            m.group().lower() in STOP for m in _MIXED.finditer(piece)):
        words = [w if w.lower() in STOP and _CAMEL.search(w) else w.lower() for w in _WORD.findall(piece)]
    return tuple(dict.fromkeys(words))


class Stats:
    """Document frequencies of words over (a sample of) one memory's log: what makes a word distinctive."""

    def __init__(self, df: dict[str, int] | None = None, docs: int = 0, chinese: bool = False):
        self.df = df or {}
        self.docs = docs
        self.chinese = chinese  # most of its messages that are no tool work are in Chinese: its days said in digits
        self._idf: dict[str, float] = {}  # words already weighed (a bounded number)

    @classmethod
    def of(cls, messages) -> "Stats":
        df: collections.Counter[str] = collections.Counter()
        docs = said = chinese = 0
        for msg in messages:
            docs += 1
            text = msg["text"][:STATS_CHARS]
            df.update(set(_words(text)))
            if msg.get("kind") not in ("tool", "echo"):
                said += 1
                chinese += not text.isascii() and bool(_HAN.search(text)) and not _KANA_HANGUL.search(text)
        return cls(df, docs, 2 * chinese > said)

    def idf(self, word: str) -> float:
        got = self._idf.get(word)
        if got is None:
            got = self._weigh(word)
            if len(self._idf) < IDF_KEPT:
                self._idf[word] = got
        return got

    def weight(self, words) -> float:
        """The summed weights of ``words``, added in their order (the same float in every process)."""
        known, total = self._idf, 0.0
        for w in words:
            got = known.get(w)
            total += self.idf(w) if got is None else got
        return total

    def _weigh(self, word: str) -> float:
        if word in STOP or (len(word) < 2 and not word.isdigit() and not _CJK_RUN.match(word)):
            return 0.0
        if self.docs < FEW:  # no statistics, or too few to tell a rare word from a common one
            return 1.0
        # words in more than about one message in twenty say little about any one span
        # (its statistics are counted in lowercase: ``WoW`` as ``wow``, ``_wordset``)
        return max(0.0, math.log((self.docs + 1) / (self.df.get(word.lower(), 0) + 0.5)) - COMMON)


_NO_STATS = Stats()


class Unit:
    """A candidate piece of a line: ``text`` copied from message ``i`` at ``pos`` (``tool``: tool work,
    rendered with its connective), said by ``who`` (group ``rank``: 0 the user, 1 others, 2 tool work);
    ``words``: its distinct words in text order; ``size``: its bytes; ``value``: its score per byte (the
    user's words weighing ``USER`` times more); ``keep``: its weight for a span's pool (``top``). Units are
    shared by the pools of a span's nodes: never changed once made."""

    __slots__ = ("score", "i", "pos", "text", "who", "rank", "words", "result", "call", "tool", "size", "value",
                 "keep", "file")

    def __init__(self, score: float, i: int, pos: int, text: str, who: str, rank: int, words: tuple[str, ...],
                 result: bool = False, call=None, tool: str = "", file: str = ""):
        self.score, self.i, self.pos, self.text, self.who, self.rank = score, i, pos, text, who, rank
        self.words = words
        self.result = result  # a tool result's outcome: joined to its own call with " → "
        self.call = call  # tool work: which call it is or answers (its call id, else the call's message)
        self.tool = tool  # a result's tool, as its message names it: said when its call is not in the line
        self.file = file  # the whole path of the file a call edited or read (its text names it in a few characters)
        self.size = len(text) if text.isascii() else len(text.encode("utf-8"))
        self.value = score * (USER if rank == 0 else 1.0) / (self.size + 6)
        # what the line will weigh it at, the user's ``USER`` times when the user talks to a model (an unnamed
        # user); named speakers, people talking to each other, keep their own weights, so each keeps pieces
        # to choose from. (Without it a model's long replies fill the pool, and the user's facts never reach
        # the merges above.)
        self.keep = score * USER if rank == 0 and who == "user" else score

    def told(self, who: str, rank: int) -> "Unit":
        """The same piece said by ``who`` in group ``rank``."""
        return Unit(self.score, self.i, self.pos, self.text, who, rank, self.words, self.result, self.call, self.tool,
                    self.file)

    def __repr__(self) -> str:
        return f"Unit({self.text!r}, i={self.i}, who={self.who!r}, score={self.score:.3f})"


def units(msg: dict, stats: Stats = _NO_STATS, head: int = SCAN_HEAD, tail: int = SCAN_TAIL) -> list[Unit]:
    """The candidate units of one message (see the module's docstring), from the first ``head`` and the last
    ``tail`` characters of a long one."""
    who, rank = _speaker(msg)
    if rank == 2:
        return _tool_units(msg, stats)
    i = msg.get("i", 0)
    text = read = _scan(msg.get("text") or "", head, tail)
    bidi = not text.isascii() and _BIDI.search(text)
    if bidi:  # (a line break, of the same length, in their place: no piece runs over one)
        text = _BIDI.sub("\n", text)
    if "\x1b" in text or "\x9b" in text:  # a terminal's colours: line breaks too (``31mError`` is no word)
        text = ANSI.sub(lambda m: "\n" * len(m.group()), text)
    if _CONTROLS.search(text):  # other control characters (NUL, BEL, a lone ESC): line breaks too, no piece holds one
        text = _CONTROLS.sub("\n", text)
    if "</" in text and _HARNESS_TAG.search(text):  # a harness's tags: its words are inside them
        text = _unwrapped(text)
    if "[Request interrupted" in text:  # (a harness's note that the user stopped a turn: no words of the user's)
        text = _HARNESS_NOTE.sub(lambda m: "\n" * len(m.group()), text)
    if "\t" in text or "→" in text or "\\t" in text or _ROW_START.search(text):
        text = _ungutted(text)  # a listing's line numbers (``cat -n``), a table's row numbers: not its text
    # (minified code is found before the escapes are read: its own, ``"\x1f"``, would cut its line in pieces)
    code = _minified(text) if len(text) >= CODE_LINE else []
    if "\\" in text and _ESCAPED.search(text):  # a JSON string's escapes: line breaks (``\n`` is not a word's n)
        text = _unescaped(text)
    if "```" in text or "~~~" in text:  # a code fence's line, its language's name too (``ts`` of "```ts"): no words
        text = _FENCE.sub(lambda m: "\n" * len(m.group()), text)
    grep = errors = []
    if ":" in text and _GREP_MARK.search(text):  # grep's lines: a file with its line, then the line's text
        text, grep, errors = _grepped(text)
    if "@@ -" in text:  # a unified diff's hunk headers and line marks: not its code
        text = _undiffed(text)
    if "+ " in text and ("\n" in text or "\\n" in text) and _DIFF_ADDED.search(text):  # a numbered diff's marks and numbers
        text = _unnumbered(text)
    out: list[Unit] = []
    seen: set[str] = set()
    weight = stats.weight

    widen = None  # (once the facts are found: ``_widener``)
    asks = "?" in text or "？" in text or "؟" in text  # (a question may end a sentence: ``_STOP``)

    def add(piece: str, pos: int, bonus: float = 1.0, most: int = SENTENCE, named: bool = False,
            counted: bool = False) -> None:
        if piece[:1].isdigit() or piece[:1].isspace():
            lead = len(piece) - len(piece.lstrip())
            marker = _list_marker(text, pos + lead) if piece[lead : lead + 1].isdigit() else 0
            if marker:  # "1. " says where in a list, not what
                piece, pos = piece[lead + marker :], pos + lead + marker
        if "`" in piece:  # a code span it cuts: whole (or left out)
            if spans:
                piece, pos = _spanned(text, spans, piece, pos, most)
            if piece.count("`") % 2:
                piece, pos = _code_span(text, piece, pos)
        if "**" in piece and _bare(piece).count("**") % 2:  # half of a bold span: the larger side
            cut = piece.rfind("**")
            before, after = piece[:cut], piece[cut + 2 :]
            piece, pos = (before, pos) if len(before) >= len(after) else (after, pos + cut + 2)
        start, end = _bared(piece)
        piece, pos = piece[start:end], pos + start
        if pos and (counted or piece[:1].isdigit() or piece[:1] in _CURRENCIES) and (
                bound := _bound_before(text, pos, piece)) < pos:
            piece, pos = text[bound : pos + len(piece)], bound  # (``under 0.1%``, not ``0.1%``: a bound read as the value)
        if pos and text[pos - 1] in "-~^=" and (sigil := _sigil_before(text, pos, piece)) < pos:
            piece, pos = text[sigil : pos + len(piece)], sigil  # (``--no-cache``, ``^1.3.0``: a flag, a version's range)
        if pos and text[pos - 1] in _NEGATION_ENDS and (negation := _negation(text, pos)):
            piece, pos = text[negation.start() : pos + len(piece)], negation.start()  # "never committed", not "committed"
        if "=" in piece or "&&" in piece or "||" in piece:  # "const config =", "= loadConfig();": half of a
            # statement, taken without its operator
            head, tail = _DANGLING_HEAD.match(piece), _DANGLING_TAIL.search(piece)
            if head or tail:
                start, end = head.end() if head else 0, tail.start() if tail else len(piece)
                start, end = _bared(piece[start:end], start) if start < end else (0, 0)
                piece, pos = piece[start:end], pos + start
            if "=" in piece and text.startswith("(", pos + len(piece)) and piece[-1:].isalnum():  # a call's name
                piece = _called(text, piece, pos, most)  # ("size = int": the call whole, or the name it sets)
        if piece and (not piece.isascii() or '"' in piece) and _PAIR_MARK.search(piece) and _unpaired(piece):
            piece, pos = _paired_part(piece, pos)  # half a pair of quotes: the larger side
        if widen is not None and piece and (wide := widen(pos, pos + len(piece), most)):  # a fact it cuts: whole in it
            pos, piece = wide[0], text[wide[0] : wide[1]]  # (``von 46`` of ``von 46,7%``, ``April 2026`` of a date)
        if asks and not named and piece and piece[-1] not in _SAID_TO_END and (
                stop := _STOP.search(text, pos + len(piece))) and stop.group() in _QUESTION_MARKS and not _stated(
                text, pos, pos + len(piece), stop.start()):
            # a piece of a question runs to its mark (``server down?``, not ``server down``, said; a fact alone, a
            # path, a name, a date, an error as printed, says nothing of it: ``named``), or, too far before it or a
            # quote or a bracket between them, is said from the sentence's start when that asks (``Can you recommend
            # hiking trails near Lake Tahoe``), else left out; from
            # the negation or proposal's word before it in its clause (the words it runs over may be theirs:
            # ``要不要把 pool_size 改成 6？``, not ``pool_size 改成 6？``)
            if stop.start() - pos - len(piece) > QUESTION_REACH or _QUOTE_OR_BRACKET.search(text, pos + len(piece),
                                                                                              stop.start()):
                opener = _asking(text, pos)
                if opener is None or _QUOTE_OR_BRACKET.search(text, opener, pos):
                    return
                piece, pos = text[opener : pos + len(piece)], opener
            else:
                if _BREAK.search(text, pos + len(piece), stop.start()):  # (over a comma: from its clause's start, as
                    # that clause says it, ``预发数据库迁移到端口5433，这个问题怎么处理？``, not ``移到端口5433，…``)
                    clause = text.rfind("\n", 0, pos) + 1
                    for m in _BREAK.finditer(text, max(clause, pos - SENTENCE), pos):
                        clause = m.end()
                    pos = clause + len(text[clause:pos]) - len(text[clause:pos].lstrip())
                pos = _negation_before(text, pos)
                piece = text[pos : stop.end()]
        if bidi and "\n" in piece and _BIDI.search(read, pos, pos + len(piece)):
            return  # (a name or number over one)
        if not piece or piece in seen or (len(piece) if piece.isascii() else _size(piece)) > most:
            return
        seen.add(piece)
        ws = _wordset(piece)
        score = weight(ws) * bonus
        if score > 0:
            out.append(Unit(score, i, pos, piece, who, rank, ws))

    spans = [m.span() for m in _CODE_SPAN.finditer(text)] if "`" in text else None
    urls, blobs = _blobs(text, code)
    ask = 0  # where the ask of the user asking a model ends (``_phrases``)
    if msg.get("kind") == "user":  # the ask (the user's first sentence) and what the user said of themselves
        at = 0
        for n, sentence in enumerate(_sentences(text.strip())):
            if n == 0 and sentence and who == "user" and not _CJK_RUN.search(sentence):
                ask = text.find(sentence) + len(sentence)
            if 0 < len(sentence.encode("utf-8")) <= SENTENCE:
                at = text.find(sentence, at)
                if not (blobs and _inside(blobs, at, at + len(sentence))):  # (no sentence holding a blob)
                    add(sentence, at, ASK if n == 0 else SAID)
    cjk = not text.isascii() and _CJK_RUN.search(text)
    marks = not text.isascii()  # (a fact or name next to a combining mark is part of a word)
    paths: list[tuple[int, int]] = []
    facts_at: list[tuple[int, int]] = []  # (where the facts are that no other piece may cut: ``_widener``)
    facts = (_FACT_CJK_WIN if cjk else _FACT_WIN) if "\\" in text else _FACT_CJK if cjk else _FACT
    for start, end in grep:
        paths.append((start, end))
        add(read[start:end], start, 1.3, named=True)
    # a diagnostic's error that fits in a piece is one, as written, and so is any error: none of its words or
    # numbers apart
    errors = [(start, end) for start, end in errors if _size(text[start:end]) <= SENTENCE]
    errors += [span for span in _error_statements(text) if not (errors and _inside(errors, *span))]
    for start, end in errors:
        add(text[start:end], start, ERROR_WEIGHT, ERROR, named=True)
    in_error = _overlap(errors) if errors else None  # (a tool's output may hold an error on every other line)
    others = [(start, end) for start, end in urls if not text.startswith("http", start)] if urls else []

    def found():
        for start, end in others:  # a URL not the pattern's (``file://``): a fact whole
            yield start, text[start:end]
        for m in facts.finditer(text):
            start, end = m.span()
            if not (marks and _in_word(text, start, end) or blobs and _inside(blobs, start, end)
                    or others and _inside(others, start, end)
                    or in_error and "/" not in m.group() and "\\" not in m.group() and in_error(start, end)):
                yield start, m.group()  # (an error's words are said with it, but for the path it names)

    units_at: list[int] = []  # where the numbers with a currency or unit end (``_phrases``)
    paired = -1  # where the last key's value ends
    numbered = -1  # where the last number made whole ends (``_number``)
    for start, piece in found():
        if start < paired:  # (a key's value: said with its key)
            continue
        end = start + len(piece)
        if text[end : end + 1] in _KEY_AFTER and (value := _KEY_VALUE.match(text, end)) and (
                piece[0] in "\"'" or "_" in piece or "=" in value.group() or _CAMEL.search(piece)):
            # a key with its value, as written (``"new_pricing": false``, ``max_connections=200``): one piece, no
            # key without its value nor value without its key (but a path, a fact alone: its key is no piece)
            seen.add(piece)
            if "/" in value.group() or "\\" in value.group():
                paths.append((start, value.start() + len(value.group()) - len(value.group().lstrip("\"' \t:="))))
                continue
            start -= text[start - 1 : start] in "\"'" and text[start - 1] == text[end : end + 1]
            paired = value.end()
            paths.append((start, paired))
            at = _negation_before(text, start)  # (with a negation or a proposal's word before it in its clause, as a
            add(text[at:paired], at, 1.3)  # number's words: ``not set max_retries=3``, never ``max_retries=3`` alone)
            continue
        if start < numbered:  # (a number of the one before: its date's year, its range's end, a group of its digits)
            continue
        if not (piece.isdecimal() or "/" in piece or "\\" in piece):  # (a path's: ``paths``)
            facts_at.append((start, start + len(piece)))
        if (piece[0].isdigit() or piece[0] in "-−$") and (piece[-1].isdigit() or piece[-1] == "%") and (
                whole := _number(text, start, start + len(piece), marks)):
            at, numbered = whole
            facts_at.append(whole)
            if not text[numbered - 1].isdigit():  # (with its currency or unit: no phrase runs on past them)
                units_at.append(numbered)
            if piece.isdecimal():  # (a bare number made whole, said with its words: ``entre 3 y 5 días``)
                at, end = _counted(text, at, numbered)
                if units_at and units_at[-1] == numbered:  # (its currency or unit says what it counts: ``45 000 ₽``,
                    end = numbered  # not ``45 000 ₽ в``)
                if at < whole[0]:  # (its words, with a negation or a proposal's word before them in its clause)
                    at, end = _marked_before(text, at, end, cjk)
                if not (in_error and in_error(at, end)):
                    add(text[at:end], at, 1.3, counted=True)
                continue
            start, piece = at, text[at:numbered]
        if piece.isdecimal() and piece.isascii():  # a bare number: a fact with what it counts or names, else none
            at, end = _counted(text, start, start + len(piece))
            if at < start and (text[at - 1 : at] in _SLASHES or (urls or blobs) and _inside(urls + blobs, at, start)):
                at = start  # (a word of a path or a URL is none of its words)
            if end > start + len(piece) and (_ROLE.get(text[start + len(piece) : end].strip().lower()) == 1 or (
                    _NEGATION_PHRASE.match(text, end - len(text[start + len(piece) : end].lstrip())))):
                end = start + len(piece)  # (a negation after it negates what follows: ``200 לא``, ``1 nicht``,
                # ``40 instead of 50``)
            if (at, end) == (start, start + len(piece)) and (what := _NUMBER_OF.match(text, end)) and (
                    what.group(1).lower() not in STOP):  # (none of its own: what it is for, ``but 200 for /v1/orders``)
                end = what.end()
            if at != start or end != start + len(piece):  # (its words, with a negation before them in its clause)
                at, end = _marked_before(text, at, end, cjk)
            if (at, end) != (start, start + len(piece)) and not (in_error and in_error(at, end)):
                add(text[at:end], at, 1.3, counted=True)
            continue
        if cjk and piece[0].isdigit() and piece[-1].isdigit() and (unit := _COUNTER.match(text, start + len(piece))):
            seen.add(piece)  # (what it counts with it, ``3.5 元``; not the number alone)
            piece += unit.group()
        if len(piece) > SENTENCE and "://" in piece[:8]:  # a long URL: up to a path boundary
            piece = piece[: max(piece.rfind(c, 0, SENTENCE) for c in "/?#&")]
            if piece.count("/") < 3:
                continue
        elif "/" in piece or "\\" in piece:  # a path (or a string holding one): no name is a folder of it, and no
            # phrase holds part of it (a quoted one's quotes are not the path's: a phrase may run up to them)
            if cjk and not piece.isascii() and piece[0] not in "`\"" and "://" not in piece:
                into = _PATH_INTO_CJK.search(piece)  # (Chinese written on after it: not its file's name)
                piece = piece[: into.start()].rstrip(".") if into else piece
            paths.append((start + 1, start + len(piece) - 1) if piece[0] in "`\"'" else (start, start + len(piece)))
            # a quoted one too long for a piece: its end (not an unquoted one: it may be names glued together)
            if piece[0] in "`\"'" and _size(piece) > SENTENCE and (at := _path_end(piece)):
                start, piece = start + at, piece[at:].rstrip("`\"'")
        if text[start - 1 : start] == " " and (way := _way(text, start, start + len(piece))) < start:
            seen.add(piece)  # (not said alone: not as a phrase either)
            start, piece = way, text[way : start + len(piece)]  # (``from #444444``, ``to #585858``)
        add(piece, start, 1.3, named=True)
    widen = _widener(facts_at) if facts_at else None
    skip = urls + blobs + paths + errors
    for m in _NAME.finditer(text):  # (a negation is no name: ``None``, ``Neither``, ``Nothing``, ``Apart`` of ``Apart
        # from``; nor is ``Maybe``)
        if not (marks and _in_word(text, m.start(), m.end()) or skip and _inside(skip, m.start(), m.end())
                or _ROLE.get(m.group().lower()) in (1, 3)
                or m.group() in _PHRASE_HEADS and _NEGATION_PHRASE.match(text, m.start())):
            add(m.group(), m.start(), 1.2, named=True)
    for start, end in urls + blobs:  # no clause or phrase runs into a URL or a blob (a line break ends them)
        text = text[:start] + "\n" * (end - start) + text[end:]
    if cjk:
        for m in _CJK_CLAUSE.finditer(text):
            piece = m.group().strip()
            if _CJK_RUN.search(piece) and len(piece.encode("utf-8")) <= 90 and not (
                    in_error and in_error(m.start(), m.end())):
                at = m.start() + m.group().find(piece)
                if m.start() and not _CJK_MARKS.search(piece) and (before := _negation_before(text, at)) < at:
                    # a clause after a proposal's or a condition's in its sentence: with it (``如果…失败，就把副本数改成
                    # 3个``, not ``就把副本数改成3个``), or left out
                    piece, at = text[before : at + len(piece)], before
                    if len(piece.encode("utf-8")) > 90:
                        continue
                add(piece, at)
    for pos, phrase, negated in _phrases(text, bool(cjk), ask, units_at):
        if pos < ask and " " in phrase:  # the ask's first phrase of words: what is asked, its verb with what it is
            bonus, ask = HEAD, 0  # done to (said before its nouns; Chinese clauses hold theirs)
        else:
            bonus = 1.0
        if in_error and in_error(pos, pos + len(phrase)):
            continue  # (a diagnostic's error: said whole)
        if "'" in phrase or "’" in phrase or "‘" in phrase:  # (half a pair of quotes in it: the words on each side)
            parts = _quoted(phrase)
            if negated and len(parts) > 1:
                continue  # (each side apart from its negation)
            for at, part in parts:
                start, end = pos + at, pos + at + len(part)
                if text[start - 1 : start] not in _SLASHES and text[end : end + 1] not in _SLASHES and not (
                        paths and _astride(paths, start, end)):
                    add(part, start, bonus)
        elif phrase.isdecimal():
            continue  # (a bare number: its fact, with its words)
        elif text[pos - 1 : pos] not in _SLASHES and text[pos + len(phrase) : pos + len(phrase) + 1] not in _SLASHES \
                and not (paths and _astride(paths, pos, pos + len(phrase))):
            add(phrase, pos, bonus, counted=bool(_NUMBER_SOON.match(phrase)))  # (a path's part: its fact)
    return out


# the words a bare number is read with: up to four before it in its clause (and its sentence: no word ends in its full
# stop, ``restarts. It's 40`` is two sentences) (it ends at punctuation other than a
# ``key: value``'s or ``key=value``'s, or a table's cell's: ``alice | 34``, ``alice,34``, a tab), the nearest that is
# no stop word or number its start; the word right after it; in Chinese, Japanese or Korean the characters it is
# written against (``2回目``, ``端口5433``); what it counts in those scripts, its counter or unit, spaced or not, whole
# and alone (``1500 毫秒``, ``6 次``, ``12 楼``: not ``6 次之``)
_LEAD = re.compile(r"(?<![\w'’+#.-])(?:[^\W_](?:[\w'’+#-]|\.(?=[\w'’+#-]))*(?: +| *[:=|] *|\t+|,)){1,4}\Z")
_LEAD_WORD = re.compile(r"[^\W_][\w'’+#.-]*")
# a key's value after it (``"beta_ui": true``, ``rollout_pct=25``, ``"env": "prod"``): a literal, a number or a short
# string (a word after a colon is prose as often: ``TODO: fix``)
_KEY_AFTER = frozenset(":= \"'")
_KEY_VALUE = re.compile(r"""["']?[ \t]?(?::[ \t]*|[ \t]?=[ \t]?)(?:true|false|null|nil|True|False|None"""
                        r"""|-?\d+(?:[.,:]\d+)*(?:%|[A-Za-z]{1,3})?|"[^"\n]{0,40}"|'[^'\n]{0,40}')(?!\w|[.,:]\d)""")
_CAMEL = re.compile(r"[a-z][A-Z]")
_COUNTERS = sorted(("毫秒 微秒 纳秒 秒钟 秒 分钟 小时 天 周 个月 月 年 日 次 遍 回目 回 轮 个 位 名 人 条 行 页 章 节 台 件 项 "
                    "份 张 本 倍 岁 层 楼 元 块钱 块 万元 亿元 美元 万 亿 千 百 米 公里 千米 厘米 毫米 千克 公斤 克 斤 吨 升 毫升 "
                    "度 核 字节 兆 点 个人 円 時間 分 秒間 日間 週間 ヶ月 か月 年間 件目 個 번 개 명 원").split(), key=len, reverse=True)
_COUNTER = re.compile(rf" ?(?:{'|'.join(_COUNTERS)})")
_TRAIL = re.compile(rf"(?: ?| *\| *|\t+|,)[^\W_{_CJK}](?:[\w'’+#-]*[^\W_])?(?!\w|\.\w)|{_COUNTER.pattern}"
                    rf"|[{_CJK}]{{1,3}}")
_CJK_LEAD = re.compile(f"[{_CJK}]{{1,4}}\\Z")
# Japanese and Korean (kana or Hangul near the number) are cut only where their script allows: a word of katakana, a
# run of kanji or of Hangul is taken whole (of at most 8 characters) or not at all, a run of hiragana (particles and
# endings: ``で``, ``は``) not at all (a counter is a word: ``3か月``); ``終了コード137で異常`` gave ``了コード137で異常``
_KATAKANA, _KANJI, _HANGUL = "\u30a1-\u30fa\u30fc-\u30ff", _HAN_RANGES + "\u3005", "\uac00-\ud7af"
_SCRIPT_LEAD = re.compile("|".join(rf"(?<![{c}])[{c}]{{1,8}}\Z" for c in (_KATAKANA, _KANJI, _HANGUL)))
_SCRIPT_TRAIL = re.compile(rf"(?: ?| *\| *|\t+|,)[^\W_{_CJK}](?:[\w'’+#-]*[^\W_])?(?!\w|\.\w)"
                           rf"|{_COUNTER.pattern}|"
                           + "|".join(rf" ?[{c}]{{1,8}}(?![{c}])" for c in (_KATAKANA, _KANJI, _HANGUL)))


# a tag an agent's harness wraps text in (Claude Code's ``<command-name>/mcp</command-name>``,
# ``<local-command-stdout>``, ``<system-reminder>``): a name of words joined by hyphens, which no prose tag has
_HARNESS_TAG = re.compile(r"</?([a-z]+(?:-[a-z]+)+)>")


# its notes that are no one's words: a slash command's name again, without its slash (``<command-message>mcp
# </command-message>``), and Claude Code's mark of a turn the user stopped (``[Request interrupted by user]``)
_HARNESS_NOTE = re.compile(r"<command-message>[^<\n]{0,200}</command-message>|\[Request interrupted by user[^\]\n]{0,40}\]")


def _unwrapped(text: str) -> str:
    """``text`` with the harness's tags it closes written over by line breaks: what they hold is read as text,
    their names are no pieces (``command-name, command-args`` said nothing of a slash command); its notes
    (``_HARNESS_NOTE``) go whole."""
    closed = {m.group(1) for m in _HARNESS_TAG.finditer(text) if m.group().startswith("</")}
    if "<command-message>" in text:
        text = _HARNESS_NOTE.sub(lambda m: "\n" * len(m.group()), text)
    return _HARNESS_TAG.sub(lambda m: "\n" * len(m.group()) if m.group(1) in closed else m.group(), text)


# an error as a program says it, copied whole (up to its line's end, a quote or bracket it opened in, or ``ERROR``
# bytes, cut between words): an exception's name and its message (``psycopg2.OperationalError: could not connect
# to server: Connection refused``), a line a program opens with ``Error:``, ``error[E0382]:``, ``fatal:``,
# ``panic:``, ``ERROR``, and the system's own error strings (``No space left on device``; after its errno's name:
# ``ENOENT: no such file or directory, open 'a.json'``); none of its words apart, but for a path
ERROR = 200  # bytes: the longest error piece
ERROR_WEIGHT = 1.5  # its weight against a phrase's: an error is what a reader looks for
_SYSTEM_ERRORS = re.compile(
    r"(?<![\w-])(?i:no such file or directory|no space left on device|connection refused|connection reset by peer"
    r"|connection timed out|permission denied|operation not permitted|address already in use|broken pipe"
    r"|too many open files|read-only file system|network is unreachable|no route to host|disk quota exceeded"
    r"|device or resource busy|resource temporarily unavailable|cannot allocate memory|directory not empty)\b")
_SYSTEM_HINTS = ("o such file", "o space left", "onnection re", "onnection timed", "ermission denied", "ot permitted",
                 "lready in use", "roken pipe", "pen files", "ead-only file", "s unreachable", "o route to host",
                 "uota exceeded", "esource busy", "emporarily unavailable", "allocate memory", "irectory not empty")
# (found from the end of the error's name, which a text's scan finds fast, then read back to its start)
_ERROR_HINTS = ("rror", "xception", "atal", "anic:")
_ERROR_AT = re.compile(r"(rror|xception|atal|FATAL|anic|ERROR)(?:\[\w+\])?(?::|(?<=ERROR)\b)")
_ERROR_HEAD = re.compile(r"(?:(?<![\w.])(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)|(?<![\w-])(?:Error|Exception|Fatal|FATAL|ERROR)"
                         r"|(?:^|(?<=\n)|(?<=\\n)|(?<=`))(?:error|fatal|panic))\Z")  # (opening its line or a quote: ``error: any``
# in code is indented)
_RUN_BACK = re.compile(r"[\w.]*")  # (read backwards)
_ERRNO_BEFORE = re.compile(r"\bE[A-Z0-9]{2,15}: \Z")
_SENTENCE_STOP = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
# where the speaker's words resume after an error's message: a clause a conjunction opens with a pronoun or an
# article after it (`` and I think``, `` whenever the form``; a message's `` and 'str'``, `` but got`` go on), a
# comma's ``then``, ``so`` or ``but``, Chinese or Japanese punctuation, and their script after the message's text
_PROSE_AGAIN = re.compile(
    r"[,;]?\s+(?:and|but|so|then|when|whenever|because|while)\s+(?:I|I'm|I've|I'll|I'd|we|we're|you|they|he|she|it"
    r"|then|the|this|that|nobody)\b|,\s+(?:then|so|but)\s|[，。；！？]"
    rf"|(?<=[!-9;-~])\s?(?=[{_HAN_KANA}\uac00-\ud7af])")
_CLOSERS = {"`": "`", '"': '"', "'": "'", "(": ")", "[": "]", "“": "”"}


def _error_statements(text: str) -> list[tuple[int, int]]:
    """Where ``text``'s errors are (see ``ERROR``), each up to its line's end, the end of the quote or bracket it
    opens in or of its sentence, or ``ERROR`` bytes (cut between words), without the full stop."""
    starts = []
    if any(hint in text for hint in _ERROR_HINTS):
        for m in _ERROR_AT.finditer(text):
            end = m.end(1)  # (its head is in the run of word characters and dots before it: searched from the run's start)
            start = end - _RUN_BACK.match(text[max(0, m.start() - SENTENCE) : end][::-1]).end()
            head = _ERROR_HEAD.search(text, start, end)
            if head:
                starts.append(head.start())
    if any(hint in text for hint in _SYSTEM_HINTS):
        for m in _SYSTEM_ERRORS.finditer(text):  # (with its errno's name before it: ``ENOENT: no such file``)
            errno = _ERRNO_BEFORE.search(text, max(0, m.start() - 20), m.start())
            starts.append(errno.start() if errno else m.start())
    out, last = [], -1
    for start in sorted(starts):
        if start < last:  # (inside the one before: "…Error: could not connect to server: Connection refused")
            continue
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        closer = _CLOSERS.get(text[start - 1 : start]) if start else None
        if closer and (close := text.find(closer, start, end)) >= 0:
            end = close
        if stop := _SENTENCE_STOP.search(text, start, end):
            end = stop.start()
        if prose := _PROSE_AGAIN.search(text, start, end):
            end = prose.start()
        last = end
        said = text[start:end].rstrip().rstrip(".,;:").rstrip()
        if _size(said) > ERROR:  # (cut between words, none of its last a stop word: not ``… and show a``)
            words = said.encode("utf-8")[: ERROR + 1].decode("utf-8", "ignore").split(" ")[:-1]
            while words and words[-1].lower().rstrip(",;:(") in STOP:
                words.pop()
            said = " ".join(words).rstrip(" ,;:(")
        if ":" in said.rstrip(":") or said.startswith("ERROR ") or _SYSTEM_ERRORS.match(said):  # (a message after it)
            out.append((start, start + len(said)))
    return out


# a change of one value to another (``from #444444 to #585858``, ``von 3.11 auf 3.12``, ``с 8080 на 9090``): each
# value is said with its word, which says which is the old one and which the new (``#444444, #585858`` said neither)
_FROM_TO = {"from": "to", "von": "auf|zu|nach", "de": "à|a", "desde": "hasta|a", "с": "на", "от": "до"}
_WAY = re.compile(rf"(?<![\w'’-])(?i:({'|'.join(_FROM_TO)})|({'|'.join(sorted(set('|'.join(_FROM_TO.values()).split('|'))))}|→|->))"
                  r"[ \t]{1,2}\Z")
_WAYS_FROM = {word: re.compile(rf"(?<![\w'’-])(?i:{to}|→|->)[ \t]") for word, to in _FROM_TO.items()}
_WAYS_TO = {to: re.compile(rf"(?<![\w'’-])(?i:{'|'.join(w for w, tos in _FROM_TO.items() if to in tos.split('|'))})[ \t]")
            for to in set("|".join(_FROM_TO.values()).split("|"))}


def _way(text: str, start: int, end: int) -> int:
    """Where the fact at ``start:end`` of ``text`` is said from: its ``from`` or ``to`` before it when its sentence
    says the change both ways (a ``to`` after a ``from``'s fact, a ``from`` before a ``to``'s), else ``start``."""
    way = _WAY.search(text, max(0, start - 8), start)
    if not way:
        return start
    if way.group(1):
        stop = _STOP.search(text, end, end + 100)
        return way.start() if _WAYS_FROM[way.group(1).lower()].search(text, end, stop.start() if stop else end + 100) \
            else start
    if way.group(2) in ("→", "->"):
        return start  # (an arrow says which is new without its word)
    back = max(0, way.start() - 100)
    for stop in _STOP.finditer(text, back, way.start()):
        back = stop.end()
    return way.start() if _WAYS_TO[way.group(2).lower()].search(text, back, way.start()) else start


# an owner said by a pronoun after ``of`` (``a buddy of mine adopted``): one run with the words before and after it
_OF_WHOSE = re.compile(r" (?:mine|yours|his|hers|ours|theirs)\b")
# what a number with no words of its own is of or for, a word or a fact after it (``returns 404 for /v2/orders but
# 200 for /v1/orders``: ``200 for /v1/orders``, not the second path bare, read as 404 too)
_NUMBER_OF = re.compile(r"""[ \t](?:for|of|on|in|at|per|with|by)[ \t]([^\s,;:!?()\[\]{}"“”]{1,60}?)(?=[.,;:!?)\]]*(?:\s|$))""")


# the words and marks that make a number a bound, right before it (an article between: ``over the 2 GB upload limit``):
# said with it, ``stays under 0.1%``, ``at most 200 jobs``, ``p99 < 200 ms``, ``unter 5%``, ``moins de 2 Go``, never
# ``0.1%`` alone, read as the value; ``to`` before a share (``roll out to 5% of traffic``); and so are an approximation's
# and a small amount's (``about 5%``, ``only 20%``, ``nearly 2 GB``: not ``5%``, read as exact, nor ``20%``, as a lot)
_BOUNDS = ("at least|at most|no more than|no less than|not more than|not less than|more than|less than|fewer than"
           "|greater than|up to|under|over|above|below|beyond|within|exceeding"
           "|about|around|approximately|approx\\.|roughly|nearly|almost|circa|ca\\.|only|just|barely"
           "|mindestens|höchstens|mehr als|weniger als|bis zu|unter|über|unterhalb|oberhalb|innerhalb"  # German
           "|etwa|ungefähr|rund|fast|knapp|nur|kaum"
           "|au moins|au plus|plus de|moins de|jusqu['’]à|sous|au-dessus de|en dessous de"  # French
           "|environ|presque|à peu près|près de|seulement"
           "|al menos|como mucho|más de|menos de|hasta|por encima de|por debajo de"  # Spanish
           "|aproximadamente|alrededor de|casi|cerca de|unos|unas|solo|sólo|apenas"
           "|не более|не менее|более|менее|больше|меньше|свыше|выше|ниже|минимум|максимум|до"  # Russian
           "|около|примерно|приблизительно|почти|порядка|только|лишь|всего")
_BOUND = re.compile(rf"(?<![\w'’-])(?i:{_BOUNDS})(?:[ \t]{{1,4}}(?i:the|a|an))?[ \t]{{1,4}}\Z"
                    r"|(?:(?<=[\w)\]])|(?<=[^\s<>=-][ \t]))(?:[<>]=?|[≤≥])[ \t]?\Z")
_BOUND_SHARE = re.compile(r"(?<![\w'’-])(?i:to|auf|à|al|на)[ \t]{1,4}\Z")  # (before a share)
# (a comparison's word before that ``to``: said with it, ``compared to 5% last week``, ``close to 90%``, never ``to 5%``,
# read as a target reached)
_COMPARED = re.compile(r"(?<![\w'’-])(?i:compared|relative|close|similar|equal|comparé|comparée|par rapport|comparado"
                       r"|comparada|respecto|frente)[ \t]{1,4}\Z")
_SHARE = re.compile(r"\d[\d.,]{0,24}[ \t]?%")


# (a number's words before it that may end its bound: ``de 2 Go`` of ``moins de 2 Go``, ``als 3`` of ``mehr als 3``; looked
# for in a number's words and phrases only, ``counted``: in every piece it cost a build 4% of its units' time)
_NUMBER_SOON = re.compile(r"(?:[^\W\d_]{1,12}+[ \t]{1,4}+){1,2}+(?=\d)")  # (possessive: fails at once)


def _bound_before(text: str, pos: int, piece: str) -> int:
    """Where the number opening ``piece`` at ``pos`` of ``text`` (or right after a word or two of it) is said from:
    its bound's word or mark right before it (``_BOUND``), else ``pos``."""
    if piece[:1].isdigit() or piece[:1] in _CURRENCIES:
        at = pos
    elif words := _NUMBER_SOON.match(piece):
        at = pos + words.end()
    else:
        return pos
    bound = _BOUND.search(text, max(0, at - 24), at)
    if bound and bound.start() >= pos:
        return pos  # (a bound the piece holds: said as it is)
    if bound is None and _SHARE.match(piece):
        bound = _BOUND_SHARE.search(text, max(0, pos - 8), pos)
        if bound and (compared := _COMPARED.search(text, max(0, bound.start() - 16), bound.start())):
            bound = compared
    return bound.start() if bound else pos


# a flag's dashes (``--no-cache``, ``-rf``: not ``no-cache``, read as words) and a version's range or pin (``^1.3.0``,
# ``~2.3.1``, ``==2.0``, ``~=1.4``: not ``1.3.0``, an exact pin read for a range), written against a piece's start
_FLAG_BEFORE = re.compile(r"(?<![^\s(\[{`'\"=])--?\Z")
_SIGIL_BEFORE = re.compile(r"(?:(?<![\w.^~])[~^]|[=!~]=)\Z")


def _sigil_before(text: str, pos: int, piece: str) -> int:
    """Where ``piece`` at ``pos`` of ``text`` is said from with its flag's dashes or its version's sigil
    (``_FLAG_BEFORE``, ``_SIGIL_BEFORE``), else ``pos``."""
    if piece[:1].isalpha() and not (piece[:1] in "vV" and piece[1:2].isdigit()):
        sigil = _FLAG_BEFORE.search(text, max(0, pos - 2), pos)
    elif piece[:1].isdigit() or piece[:1] in "vV":
        sigil = _SIGIL_BEFORE.search(text, max(0, pos - 2), pos)
    else:
        return pos
    return sigil.start() if sigil else pos


# (the stop words between a run and a short flag after it: ``run it with -v``)
_STOP_WORDS_GAP = re.compile(r"(?:[ \t]+[A-Za-z'’]+){0,3}[ \t]+")


def _stop_words_only(text: str, at: int, to: int) -> bool:
    """Whether ``text[at:to]`` holds spaces and at most three stop words between them (``_STOP_WORDS_GAP``)."""
    gap = _STOP_WORDS_GAP.fullmatch(text, at, to)
    return bool(gap) and all(_ROLE.get(word.lower()) == 0 for word in text[at:to].split())


def _counted(text: str, start: int, end: int) -> tuple[int, int]:
    """Where the bare number at ``start:end`` of ``text`` is read with its words (``_LEAD``, ``_TRAIL``):
    ``CentOS 7``, ``pool_size from 3 to 6``, ``3 people``, ``port 8080``, ``2回目``; ``start:end`` when it has none."""
    at = start
    lead = _LEAD.search(text, max(0, start - 80), start)
    if lead and lead.start() and unicodedata.category(text[lead.start() - 1])[0] == "M":
        lead = None  # (it would start inside a word: after a combining mark)
    words = list(_LEAD_WORD.finditer(lead.group())) if lead else []
    for m in reversed(words):
        word = m.group().lower()
        if not (word in STOP or word.isdecimal() or len(word) < 2):
            at = lead.start() + m.start()
            break
    kana = not text.isascii() and _KANA_HANGUL.search(text, max(0, start - 12), end + 12)
    if not lead and start and _CJK_RUN.match(text, start - 1):
        lead = (_SCRIPT_LEAD if kana else _CJK_LEAD).search(text, max(0, start - (9 if kana else 4)), start)
        at = lead.start() if lead else start
    trail = (_SCRIPT_TRAIL if kana else _TRAIL).match(text, end)
    if trail and trail.group().strip().lower() not in STOP and not trail.group().strip().isdecimal():
        end = trail.end()
    elif at == start and words and len(words[-1].group()) > 1 and not words[-1].group().isdecimal():
        # only stop words before it, none after: a line that opens with it and the word before it names it by
        # that word (``note 8: …``, ``Part 2``)
        opens = lead.start() + words[-1].start()
        at = opens if text[opens - 1 : opens] in ("", "\n") else start
    # an ordinal's 第 right before it, spaced or not, is its own (``第 42 行``: line 42, not 42 lines), with no word
    # before it but one written against it
    first = text.rfind("第", max(0, start - 2), start)
    if first >= 0 and text[first + 1 : start].strip():
        first = -1
    if first >= 0 and (at > first or any(c.isspace() for c in text[at:first])):
        at = first
    return at, end


# a number is one fact with its currency or sign before it (``€1.299,00``, ``US$ 3.781,20``, ``₪18,340``, ``+15,4 %``),
# the groups of its digits (``52 300``, ``1 234 567,89``: spaced in text that is not ASCII, else by a no-break or thin
# space), its unit or currency after it, spaced or not (``2.400 €``, ``92,9 %``, ``−2…+3 °C``), a range to another
# number (``22:00–02:00``, ``0,3 % à 2,75 %``, ``entre 3 y 5``), and a day's month and year (``15. April 2026``,
# ``12 de mayo``, ``May 12, 2026``): none of it cut off, and no number of it a fact of its own
_CURRENCY = "$¢£¤¥֏؋৲৳฿៛\u20a0-\u20cf"
_CURRENCIES = frozenset("$¢£¤¥֏؋৲৳฿៛" + "".join(map(chr, range(0x20A0, 0x20D0))))
_NUMBER_NEXT = frozenset(" \u00a0\u202f\u2009.,%‰°–—…") | _CURRENCIES  # (what follows a number that may say more)
_NUMBER_BEFORE = re.compile(rf"(?<![^\W{_CJK}]|\$)(?:[A-Z]{{1,3}}(?=\$))?[{_CURRENCY}][ \u00a0\u202f]?\Z"
                            r"|(?<![\w.,)\]}+−-])\+\Z")
_GROUPS = re.compile(r"(?:[\u00a0\u202f\u2009]\d{3}(?![\d]))+(?:,\d+(?![\d.,]\d))?")
_GROUPS_SPACED = re.compile(r"(?:[ \u00a0\u202f\u2009]\d{3}(?![\d]))+(?:,\d+(?![\d.,]\d))?")
_UNIT = re.compile(rf"[ \u00a0\u202f\u2009]?(?:%|‰|°[CF]?|[{_CURRENCY}])(?![\w%])")
_RANGE_TO = re.compile(r"[ \u00a0\u202f]?[–—…][ \u00a0\u202f]?|[ \u00a0](?:(to|bis|à|a|al|hasta|até|tot|до|по)"
                       r"|(and|und|et|y|e|en|и))[ \u00a0](?=[+−-]?\d)")
_BETWEEN = re.compile(r"(?i:between|zwischen|entre|tra|fra|tussen|между)[ \u00a0]\Z")  # (``and`` makes a range after it)
_RANGE_END = re.compile(r"[+−-]?\d+(?:[.,:]\d+)*(?![\w])")
_MONTH_NAMES = (
    "january february march april june july august september october november december "
    "januar jänner februar märz juni juli oktober dezember "
    "janvier février mars avril mai juin juillet août septembre octobre novembre décembre "
    "enero febrero marzo abril mayo junio julio agosto septiembre setiembre octubre noviembre diciembre "
    "gennaio febbraio aprile maggio giugno luglio settembre ottobre dicembre "
    "janeiro fevereiro março maio junho julho setembro outubro dezembro "
    "januari februari maart mei augustus "
    "января февраля марта апреля мая июня июля августа сентября октября ноября декабря")
_MONTH = ("(?:(?i:" + "|".join(sorted(set(_MONTH_NAMES.split()), key=len, reverse=True))
          + r")\b|May\b|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec|Mär|Okt|Dez)\b\.?)")  # (``may`` is a verb)
_DAY_MONTH = re.compile(rf"\.?[ \u00a0](?:de |del |of )?{_MONTH}(?!\w)(?:,?[ \u00a0](?:de |del )?\d{{4}}(?!\d))?")
_MONTH_DAY = re.compile(rf"(?<!\w){_MONTH}[ \u00a0]\Z")
_DAY_DOT = re.compile(rf"(?<!\d)\d{{1,2}}\.([ \u00a0]+){_MONTH}")  # (a day's full stop, then its month)
_YEAR = re.compile(r"(?:st|nd|rd|th)?,?[ \u00a0]\d{4}(?![\d])")


def _sentences(text: str) -> list[str]:
    """``text`` cut into sentences (``_SENTENCE_END``), but at a day's full stop (``am 15. April 2026``)."""
    if "." not in text or not (days := [m.span(1) for m in _DAY_DOT.finditer(text)]):
        return _SENTENCE_END.split(text)
    out, last = [], 0
    for m in _SENTENCE_END.finditer(text):
        if m.span() not in days:
            out.append(text[last : m.start()])
            last = m.end()
    out.append(text[last:])
    return out


def _number(text: str, start: int, end: int, spaced: bool) -> tuple[int, int] | None:
    """Where the number at ``start:end`` of ``text`` is whole (``_CURRENCY``'s comment above), or None when it is
    already; ``spaced``: its digits may be grouped by plain spaces (text that is not ASCII)."""
    before = text[start - 1 : start]
    if text[end : end + 1] not in _NUMBER_NEXT and before not in _CURRENCIES and before != "+":
        return None
    at, to, first = start, end, start
    if before in _CURRENCIES or before in " \u00a0\u202f+":
        if prefix := _NUMBER_BEFORE.search(text, max(0, start - 6), start):
            at = prefix.start()
    bare = text[start:end].isdecimal()
    if bare and end - start <= 2:  # a day of a month
        date = _DAY_MONTH.match(text, end)
        if date:
            return at, date.end()
        month = _MONTH_DAY.search(text, max(0, start - 12), start)
        if month:
            year = _YEAR.match(text, end)
            return month.start(), year.end() if year else end
    for _ in range(2):  # (the number, then the one its range runs to)
        if bare and to - start <= 3 and (groups := (_GROUPS_SPACED if spaced else _GROUPS).match(text, to)):
            to = groups.end()
        if unit := _UNIT.match(text, to):
            to = unit.end()
        if _ == 1 or not (range_to := _RANGE_TO.match(text, to)) or not (last := _RANGE_END.match(text, range_to.end())):
            break
        if range_to.group(2) and not _BETWEEN.search(text, max(0, first - 12), first):
            break
        start, to = last.start(), last.end()
        bare = last.group().isdecimal()
    return (at, to) if (at, to) != (first, end) else None


# a path's last name running from ASCII into Chinese or Japanese: "修改~/.config/x文件", "写到/etc/app/config.yaml里"
# (a folder's or file's name in those scripts stays whole: "/home/张三/文档")
_PATH_INTO_CJK = re.compile(rf"(?<=[A-Za-z0-9_.@+-])[{_HAN_KANA}][^/\\]*$")


def _path_end(path: str) -> int:
    """Where the end of a path too long for a piece starts, a closing quote aside: after the first slash (or
    backslash) from which the rest is half a piece at most (``tools/bash.ts``), else its last name
    (``Screenshot 2025-11-21 at 01.27.21.png`` of a screenshot's path in a temporary folder); 0 when not even that
    fits in a piece."""
    body = path.rstrip("`\"'")
    last = 0
    for m in _SEPARATORS.finditer(body):
        if _size(body[m.end() :]) <= SENTENCE // 2:
            return m.end()
        last = m.end()
    return last if _size(body[last:]) <= SENTENCE else 0


_SEPARATORS = re.compile(r"[/\\]+")


def _astride(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """True when ``start:end`` starts or ends inside one of ``spans``: a phrase holding part of a path, not all
    of it (``config/x`` of ``~/.config/x``, ``HOME/.config`` of ``$HOME/.config``)."""
    return any(s < end and start < e and (start > s or end < e) for s, e in spans)


_URL = re.compile(_URL_ANY)
_SLASHES = ("/", "\\")  # (a path's, a Windows path's)
# text written as a JSON string (a tool call's arguments, a quoted log line) or a string in code escapes its
# quotes and line breaks: ``\"chalk\";\n\tprivate`` read as words gave ``from \``, ``n\tprivate``, ``tthis.x``.
# Such text (an escaped quote, or a line break escaped before another escape, a quote, a space or the end) reads
# each escape as line breaks of its length (a quote's escape before the quote), but for an escaped backslash
# (``C:\\Users\\nathan`` keeps its n)
_ESCAPED = re.compile(r'\\"|\\[nrt](?:[\\"\'\s]|$)')
_ESCAPE = re.compile(r'\\(?:[nrt"]|u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|\\)')


def _unescaped(text: str) -> str:
    """``text`` with its escapes read (``_ESCAPED``), but in a code span (``printf "%s\n"`` is a fact whole)."""
    spans = [m.span() for m in _CODE_SPAN.finditer(text)] if "`" in text else []

    def read(m: re.Match) -> str:
        escape = m.group()
        if escape == "\\\\" or spans and _inside(spans, *m.span()):
            return escape
        return '\n"' if escape == '\\"' else "\n" * len(escape)

    return _ESCAPE.sub(read, text)


# a listing's line number (``cat -n``, ``nl``, an editor tool's ``     1→``) or a table's row number (``1 alice 34``,
# ``| 1 | alice |``, ``1,alice,34``, a data frame's index): digits opening a line (a real one, or one a JSON string
# escapes, or its first), then a tab or an arrow (group 2), a column's bar (3), or a space or a comma (4)
_GUTTER = re.compile(r"(?m)(?:^|(?<=\\n)|(?<=\")) *(?:\| *)?(\d{1,7})(?:(\t|→|\\t)|( *\|)|( +(?=\S)|,(?!\d)))")
_ROW_START = re.compile(r"(?:\n|\\n) *\|? *\d{1,7}[\t ,|]")  # (where a numbered line may open: most texts have none)
ROWS = 3  # lines: a run of row numbers separated by a space or a comma from their row (a tab or a bar: 2)


def _blank(text: str, spans: list[tuple[int, int]], fill: str = " ") -> str:
    """``text`` with each of ``spans`` written over by spaces (or ``fill``): every other character stays where it
    was."""
    out, at = [], 0
    for start, end in spans:  # (in order; one may overlap the one before)
        start = max(start, at)
        if end <= start:
            continue
        out.append(text[at:start])
        out.append(fill * (end - start))
        at = end
    out.append(text[at:])
    return "".join(out)


def _ungutted(text: str) -> str:
    """``text`` without the line numbers of a listing in it (``     1\\timport os``) or the row numbers of a table
    (``1 alice 34``, ``| 2 | bob | 17 |``): a number opening a line, then a tab or an arrow, a bar, a space or a
    comma, where it counts up one a line from the one before, the same mark after each, over 2 lines or more
    (``ROWS`` after a space or a comma: ``1 apple``, ``2 pears`` may say how many). They number the listing or the
    table, they say nothing of it (each was a fact, ``1\\timport os`` a phrase, and short numbers outweigh the
    names and values of the rows); what follows them is read as the row's or the code's own text. A table's first
    column that holds numbers not counting up one a line (ids) is left alone."""
    found = list(_GUTTER.finditer(text))
    if len(found) < 2:
        return text
    spans, run = [], []
    for m in found + [None]:
        if run and (m is None or int(m.group(1)) != int(run[-1].group(1)) + 1 or m.lastindex != run[-1].lastindex):
            if len(run) >= (ROWS if run[0].lastindex == 4 else 2):
                spans.extend(r.span() for r in run)
            run = []
        if m is not None:
            run.append(m)
    return _blank(text, spans) if spans else text


# a diff as an agent's tool shows it, each line marked and numbered (`` + 11 ### Fixed``, ``- 12 old``): the marks and
# numbers say where, not what (``+ 12``, ``11 ### Fixed`` were pieces); the lines' text is read as text
_DIFF_ADDED = re.compile(r"\+[ \t]+\d")  # (what one of its rows holds: most texts holding "+ " have none)
_DIFF_ROW = re.compile(r"(?m)(?:^|(?<=\\n))[ \t]*([+-])[ \t]+(\d{1,6})(?=[ \t]|$|\\n)")


def _unnumbered(text: str) -> str:
    """``text`` without the marks and numbers of a numbered diff's lines (``_DIFF_ROW``): a run of 2 lines or more
    each numbered as the one before or one more, one of them added (a ``-`` list of two counts, ``- 1 cup``,
    ``- 2 eggs``, is no diff)."""
    spans, run = [], []
    for m in list(_DIFF_ROW.finditer(text)) + [None]:
        if run and (m is None or not 0 <= int(m.group(2)) - int(run[-1].group(2)) <= 1):
            if len(run) >= 2 and any(r.group(1) == "+" for r in run):
                spans.extend((r.start(1), r.end(2)) for r in run)
            run = []
        if m is not None:
            run.append(m)
    return _blank(text, spans) if spans else text


# a line of ``grep -n`` (``rg -n``) over files: the file (a path, or a name with an extension), its line number, then
# the line (``src/app.py:42:    def run(self):``); a context line (``-C``) has dashes (``src/app.py-41-…``)
_GREP = re.compile(r"(?m)(?:^|(?<=\\n))((?:\.{0,2}/)?[\w.@+-]+(?:/[\w.@+-]+)*)([:-])(\d{1,7})\2")
_GREP_MARK = re.compile(r":\d{1,7}:")  # (texts without one hold no grep line)
_COLUMN = re.compile(r"\d{1,4}:")  # (a diagnostic's column after the line: ``src/app.py:12:5: error: …``)
_FILE_END = re.compile(r"\.[A-Za-z]\w*$")


def _grepped(text: str) -> tuple[str, list[tuple[int, int]], list[tuple[int, int]]]:
    """``text`` with the heads of its ``grep -n`` lines written over by line breaks, and where their files with
    their lines are (``src/app.py:42``: a fact whole, where the path and the number were two and the line's code
    ran on from the number, ``42:    def run``). A context line's head (``README.md-17-``) goes only when a line of
    the same file matched (it is a grep's, not a name with dashes): its code stays, its file is said by that line.
    A line with a column after its line number is a compiler's or a linter's diagnostic (``main.c:3:10: fatal
    error: …``), not grep's: left as it is, its file with its line and column is a fact as any path's, and where
    its error's text is (to its line's end) comes third."""
    found, errors = [], []
    for m in _GREP.finditer(text):
        if "/" in m.group(1) or _FILE_END.search(m.group(1)):
            column = m.group(2) == ":" and _COLUMN.match(text, m.end())
            if not column:
                found.append(m)
                continue
            start, end = column.end(), text.find("\n", column.end())
            line = text[start : end if end >= 0 else len(text)]
            start += len(line) - len(line.lstrip())
            if line.strip():
                errors.append((start, start + len(line.strip())))
    matched = {m.group(1) for m in found if m.group(2) == ":"}
    spans, facts = [], []
    for m in found:
        if m.group(2) == ":":
            facts.append((m.start(), m.end(3)))
        elif m.group(1) not in matched:
            continue
        spans.append(m.span())
    return (_blank(text, spans, "\n"), facts, errors) if spans else (text, [], errors)


# a unified diff: a hunk's header (its counts: lines of the old file, of the new; then the function it is in, kept),
# the two file lines before it (``--- a/``, ``+++ b/``), and git's own (``diff --git a/… b/…``, ``index 83db48f..``),
# each opening a line (or a JSON string). A merge's combined diff (``git diff`` of a merge, ``diff --cc``) heads its
# hunks with one ``@`` more than its parents and one old range a parent (``@@@ -1,3 -1,3 +1,4 @@@``), marks its
# lines in one column a parent (`` +``, ``- ``, ``++``) and names the blobs of each (``index 1a2b3c4,5d6e7f8..``)
_HUNK = re.compile(r"(?m)(?:^|(?<=\"))(@@+)((?: -\d+(?:,\d+)?)+) \+\d+(?:,(\d+))? \1(?!@)")
_RANGE = re.compile(r"-\d+(?:,(\d+))?")
_DIFF_FILES = re.compile(r"(?m)(?:^|(?<=\"))(--- (?:a/)?)\S.*\n+(\+\+\+ (?:b/)?)\S.*\n+(?=@@+ -)")
_NO_NEWLINE = re.compile(r"\n+\\")  # (a hunk's last line may be followed by "\ No newline at end of file")
_GIT_HEAD = re.compile(r"(?m)(?:^|(?<=\"))(?:(diff --git a/)\S+( b/\S+)$|(diff --(?:cc|combined) )\S+$"
                       r"|index [0-9a-f]{7,}(?:,[0-9a-f]{7,})*\.\.[0-9a-f]{7,}(?: \d{6})?$)")


def _undiffed(text: str) -> str:
    """``text`` with a diff's marks written over: each hunk's header up to its function (``@@ -12,7 +12,9 @@``: its
    counts were facts, ``-12,7``), the marks opening its lines (``+``, ``-``; a combined diff's column of them a
    parent), as many lines as its counts say (blank lines not counted: a JSON string's escaped line breaks make
    them) and a ``\\ No newline`` line, the ``--- a/``, ``+++ b/`` of the file lines before it (the path stays) and
    git's header lines (``diff --git a/``, ``diff --cc``: the path stays). What is left is the diff's code and
    files, read as code."""
    spans = []
    for m in _HUNK.finditer(text):
        parents = len(m.group(1)) - 1
        ranges = _RANGE.findall(m.group(2))
        if len(ranges) != parents:
            continue
        spans.append(m.span())
        old, new = [int(count or 1) for count in ranges], int(m.group(3) or 1)
        at = text.find("\n", m.end())
        while at >= 0 and (new > 0 or any(n > 0 for n in old) or _NO_NEWLINE.match(text, at)):
            start = at + 1
            at = text.find("\n", start)
            marks = text[start : start + parents]
            if marks[:1] == "\\":  # ("\ No newline at end of file")
                spans.append((start, len(text) if at < 0 else at))
                continue
            if marks[:1] in ("\n", "\r", ""):
                continue
            if len(marks) < parents or marks.strip(" +-"):
                break
            for k, mark in enumerate(marks):  # a parent's line unless it was added for this one
                if mark != "+":
                    old[k] -= 1
            if "-" not in marks:  # a line of the merge's result
                new -= 1
            if marks.strip():
                spans.append((start, start + parents))
    if not spans:
        return text
    for m in _DIFF_FILES.finditer(text):
        spans.extend((m.start(k), m.end(k)) for k in (1, 2))
    for m in _GIT_HEAD.finditer(text):
        spans.extend([(m.start(1), m.end(1)), m.span(2)] if m.group(1) else [m.span(3)] if m.group(3) else [m.span()])
    spans.sort()
    return _blank(text, spans)


_CODE_SPAN = re.compile(r"`[^`\n]{1,60}`")
_FENCE = re.compile(r"(?m)^[ \t]*(?:`{3,}|~{3,})[^`\n]*$")
_UNSPACED = re.compile(r"\S{64,}")
_BASE64 = re.compile(r"[\w+/=.-]{16,}")


def _blobs(text: str, code: list[tuple[int, int]] | None = None) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Where ``text`` holds URLs, and base64 or hex outside them: in a run without spaces, its parts of 16
    characters or more of base64's alphabet, each an eighth or more capitals and as many small letters, with
    digits, or hex digits (not a path or an identifier; a commit's 40 hex digits alone are no blob), when they
    make 64 characters or more, or three quarters of the run: a token cut by ``=;(`` is one blob, not parts each
    too short to be one. A URL is a fact whole (or up to a path boundary), never a phrase's words or a name; a
    blob is none of them, nor is a line of minified code (``code``, else ``_minified``'s)."""
    urls = [m.span() for m in _URL.finditer(text)] if "://" in text else []
    blobs = code[:] if code is not None else _minified(text) if len(text) >= CODE_LINE else []
    if len(text) < 64 or max(map(len, text.split()), default=0) < 64:  # (no word that long: most texts)
        return urls, blobs
    for run in _UNSPACED.finditer(text):
        parts = [m.span() for m in _BASE64.finditer(text, *run.span()) if _random(m.group())]
        size = sum(end - start for start, end in parts)
        if size >= 64 or 4 * size >= 3 * (run.end() - run.start()):
            blobs.extend(span for span in parts if not _inside(urls, *span))
    return urls, blobs


def _minified(text: str) -> list[tuple[int, int]]:
    """Where ``text`` holds lines of minified code (a bundle's ``a.b=function(c){return c&&d(e)}…``): lines of
    ``CODE_LINE`` characters or more, fewer than one in 12 of them spaces (prose and code written for people
    space every fifth to eighth character) and one in 20 or more ``(){};=``. Its names were made short by a
    machine: any of them in a line, and the phrases between them, are a salad of one-letter words. A JSON
    string's escaped line breaks (``\\n``) end a line as its own do: an edit's code indented with tabs, written
    in one line of JSON (``"\\t\\tif (x) {\\n\\t\\t\\treturn;\\n…"``), is no minified line; a line of a
    bundle is tested whole if a part of it between them is one (a ``"\\n"`` in its code does not cut it)."""
    spans, at = [], 0
    for line in text.split("\n"):
        n = len(line)
        if n >= CODE_LINE and any(len(part) >= CODE_LINE and 12 * part.count(" ") < len(part)
                                  and 20 * sum(map(part.count, "(){};=")) >= len(part)
                                  for part in (line.split("\\n") if "\\n" in line else (line,))):
            spans.append((at, at + n))
        at += n + 1
    return spans


def _random(run: str) -> bool:
    """True when ``run`` reads as base64 (ASCII, an eighth or more of it capitals and as many small letters, with
    digits) or hex (digits and letters a to f)."""
    if not run.isascii():
        return False
    digits = sum(map(str.isdigit, run))
    if _HEX.fullmatch(run):
        return 0 < digits < len(run)
    return 8 * sum(map(str.isupper, run)) >= len(run) and 8 * sum(map(str.islower, run)) >= len(run) and digits > 0


_HEX = re.compile(r"[0-9a-f]+|[0-9A-F]+")


def _inside(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    return any(s < end and start < e for s, e in spans)


def _overlap(spans: list[tuple[int, int]]):
    """``_inside(spans, start, end)`` as a function of ``start, end``, its time not growing with the spans: of the
    spans starting before ``end`` (sorted by their starts), the furthest end is past ``start``."""
    spans = sorted(spans)
    starts, ends = [s for s, _ in spans], list(itertools.accumulate((e for _, e in spans), max))

    def inside(start: int, end: int) -> bool:
        k = bisect.bisect_left(starts, end)
        return k > 0 and ends[k - 1] > start

    return inside


def _widener(spans: list[tuple[int, int]]):
    """``widen(start, end)``: where a piece at ``start:end`` is with each of ``spans`` (facts) it cuts taken whole into
    it, or None when it cuts none: no piece holds part of a fact (``ein Anstieg von 46`` of ``46,7%``, ``2 % больше``
    of ``16,2 %``, ``April 2026 geplant`` of ``15. April 2026``). Its time grows with the log of the spans: once a
    piece is wider than ``most`` characters (too long to be one) it is widened no more, as facts that overlap one
    another may run on over the whole text (``12,50 € 12,50 € …``: each number took the currency on both sides)."""
    spans.sort()
    starts, ends = [s for s, _ in spans], list(itertools.accumulate((e for _, e in spans), max))

    def widen(start: int, end: int, most: int) -> tuple[int, int] | None:
        lo, hi = start, end
        while hi - lo <= most:
            k = bisect.bisect_left(starts, hi)  # (the spans starting before its end; of them, those ending after its start)
            wide_lo, wide_hi = lo, hi
            while k > 0 and ends[k - 1] > lo:
                k -= 1
                s, e = spans[k]
                if e > lo:
                    wide_lo, wide_hi = min(wide_lo, s), max(wide_hi, e)
            if (wide_lo, wide_hi) == (lo, hi):
                break
            lo, hi = wide_lo, wide_hi
        return (lo, hi) if (lo, hi) != (start, end) else None

    return widen


_QUOTES = " \t'\"“”‘’*"
# quotes, bold and quote marks, and a heading's or a bullet's marker before a space ("## ", "- "), at the start
_OPENING = re.compile(r"[\s'\"“”‘’*>]*(?:[#-]+\s[\s'\"“”‘’*>]*)*")
_OPENERS = frozenset("'\"“”‘’*>#-")  # (what it starts with, but for white space: its first character)


# a statement's operator at a piece's edge: the piece is half of a statement ("const config =" at a line's end)
_OPERATOR = r"(?:[-+*/%&|^!<>:?~]*=[=>]*|&&|\|\|)"
_DANGLING_HEAD, _DANGLING_TAIL = re.compile(rf"{_OPERATOR}\s+"), re.compile(rf"\s+{_OPERATOR}$")
_QUOTE_LIKE = re.compile(r"(?<![^\W_])'|'(?![^\W_])")  # a ' that is no apostrophe (not inside a word)
_QUOTE_MARK = re.compile(r"(?<!\w)['’]|['’](?!\w)|‘")  # (a ' or ’ not inside a word, a ‘)


def _quoted(phrase: str) -> list[tuple[int, str]]:
    """``phrase`` whole (at 0) when its quote marks pair up, each opening (not after a letter or digit) before
    one closing (not before one), else its parts between them, with where each starts: no phrase holds half a
    pair (``NO_COLOR' env`` of "the 'NO_COLOR' env", ``function 'appendWrite``)."""
    marks = [m.start() for m in _QUOTE_MARK.finditer(phrase)]
    if not marks:
        return [(0, phrase)]
    opens = [at == 0 or not phrase[at - 1].isalnum() for at in marks]
    closes = [at + 1 == len(phrase) or not phrase[at + 1].isalnum() for at in marks]
    if len(marks) % 2 == 0 and all(opens[k] != (k % 2) and closes[k] == (k % 2) for k in range(len(marks))):
        return [(0, phrase)]
    out, start = [], 0
    for at in marks + [len(phrase)]:
        part = phrase[start:at]
        lead = len(part) - len(part.lstrip())
        part = part.strip().rstrip("=:").rstrip()  # (host=, key: of host='a', key: 'b)
        if part:
            out.append((start + lead, part))
        start = at + 1
    return out


def _bare(piece: str) -> str:
    """``piece`` without the quotes and markup around it; the marks code ends in stay (``C#``, ``i--``)."""
    start, end = _bared(piece)
    return piece[start:end]


def _bared(piece: str, at: int = 0) -> tuple[int, int]:
    """Where ``piece`` starts and ends (from ``at``) without the quotes and markup around it (``_bare``), but for
    quotes of a kind it holds inside: those at its ends stay, so no piece holds half a pair (``"a" or "b"`` is
    not ``a" or "b``)."""
    first = piece[:1]
    if first not in _OPENERS and not first.isspace() and piece[-1:] not in _QUOTES:  # (nothing around it: most)
        return at, at + len(piece)
    start, end = _OPENING.match(piece).end(), len(piece.rstrip(_QUOTES))
    if start < end and (start or end < len(piece)):
        body = piece[start:end]
        for quotes, inside in (('"', '"' in body), ("“”", "“" in body or "”" in body),
                               ("'", "'" in body and _QUOTE_LIKE.search(body))):
            if inside:
                start = min([start] + [k for q in quotes if 0 <= (k := piece.find(q)) < start])
                end = max([end] + [k + 1 for q in quotes if (k := piece.rfind(q)) >= end])
    return at + start, at + end


def _spanned(text: str, spans: list[tuple[int, int]], piece: str, pos: int, most: int) -> tuple[str, int]:
    """``piece`` (at ``pos`` in ``text``) with the code spans it holds one backtick of (``n` reached `len`` of
    "`n` reached `len(b.items)`") whole when it then fits in ``most`` bytes, else without them; and where it
    starts."""
    start, end = pos, pos + len(piece)
    inner_start, inner_end = start, end
    for s, e in spans:
        if s >= end:
            break
        if (start <= s < end) != (start <= e - 1 < end):  # one of its backticks
            if s < start:
                start, inner_start = s, e
            else:
                end, inner_end = e, s
    if (start, end) == (pos, pos + len(piece)):
        return piece, pos
    if _size(text[start:end]) > most:
        start, end = inner_start, inner_end
        while start < end and text[start].isspace():
            start += 1
        end = max(start, len(text[start:end].rstrip()) + start)
    return text[start:end], start


def _called(text: str, piece: str, pos: int, most: int) -> str:
    """``piece`` (at ``pos`` in ``text``), a statement ending at a call's name (``size = int`` of ``size =
    int(os.environ["SIZE"])``), with the call whole when it closes on its line and fits in ``most`` bytes, else
    the part before its operator (the name it sets)."""
    depth, at, end = 0, pos + len(piece), min(len(text), pos + 4 * most)
    while at < end:
        c = text[at]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                whole = text[pos : at + 1]
                if _size(whole) <= most:
                    return whole
                break
        elif c == "\n":
            break
        at += 1
    return piece[: _OPERATOR_AT.search(piece).start()].rstrip()


_OPERATOR_AT = re.compile(rf"\s*{_OPERATOR}|$")
# quote marks that pair up (each family's marks counted together: German opens with „ and closes with “, Swedish
# writes ” for both, Danish »…«), and a Hebrew abbreviation's ASCII gershayim (``בע"מ``: inside a word, no quote)
_PAIRS = ('"„“”‟〝〞', "«»", "‹›", "「」", "『』", "《》")
_PAIR_MARK = re.compile("[" + "".join(_PAIRS) + "]")
_GERSHAYIM = re.compile('(?<=[\u05d0-\u05ea])"(?=[\u05d0-\u05ea])')


def _unpaired(piece: str) -> bool:
    """True when ``piece`` holds half a pair of quotes: an odd number of a family's marks (``_PAIRS``)."""
    gershayim = len(_GERSHAYIM.findall(piece)) if '"' in piece and not piece.isascii() else 0
    return any((sum(map(piece.count, family)) - (gershayim if family[0] == '"' else 0)) % 2 for family in _PAIRS)


def _paired_part(piece: str, pos: int) -> tuple[str, int]:
    """``piece`` (at ``pos``) cut at its unpaired quote marks (``_unpaired``), the larger side each time, and where
    it starts."""
    while piece and _unpaired(piece):
        marks = [m.start() for m in _PAIR_MARK.finditer(piece)
                 if not (piece[m.start()] == '"' and _GERSHAYIM.match(piece, m.start()))]
        cut = marks[-1] if len(piece) - marks[-1] <= marks[0] else marks[0]
        before, after = piece[:cut], piece[cut + 1 :]
        if len(before.strip()) >= len(after.strip()):
            piece = before.rstrip()
        else:
            pos += cut + 1 + len(after) - len(after.lstrip())
            piece = after.strip()
    return piece, pos


def _code_span(text: str, piece: str, pos: int) -> tuple[str, int]:
    """``piece`` (at ``pos`` in ``text``) holding an unpaired backtick, and where it starts, with its code
    span whole: up to the backtick that closes it right after the piece, else cut off at that backtick."""
    if text.startswith("`", pos + len(piece)):
        return piece + "`", pos
    cut = piece.rfind("`")
    return (piece[:cut], pos) if _bare(piece[:cut]) else (piece[cut + 1 :], pos + cut + 1)


def _phrases(text: str, cjk: bool = True, ask: int = 0, units: list[int] | tuple = ()):
    """Runs of up to four content words between stop words and punctuation, with their positions and whether a
    negation reaches them: one pass over the text's tokens (a token never spans a break), a run ending at a stop
    word, a Chinese or Japanese token (a clause, not a word: those are taken as clauses), its fourth word or a
    break between two tokens, or the end of a number's currency or unit (``units``: ``45 000 ₽``, not ``45 000 ₽
    в``). A negation (``_NEGATORS``) opens a run; in a clause that holds one (up to a break or a turn, ``_TURNS``)
    each run is said with it (``_negated``), and so with ``only`` before a verb (``_limits``); a negation alone is no
    run. So is a word that makes the clause a
    proposal, a question or a condition (``_MODALS``; in Chinese and Japanese a mark inside a run of their
    characters, ``_CJK_MARK``, ``_CJK_AFTER``), which reaches on over a comma, a colon, a quote or a dash to its
    sentence's end (``_ends_sentence``: ``If the cache is cold, restart the worker``).
    In the user's ask (its first ``ask`` characters) a run goes on over an article or a determiner between two of its
    words: what is asked is done to something (``fix the login timeout``, not ``fix`` and ``login timeout``: at a
    merge the ask was said by its nouns alone). A command's short flag that would open a run after up to three stop
    words ends the clause's run before them (``run it with -v``: alone, a letter, it weighs nothing)."""
    breaks = [m.start() for m in _BREAK.finditer(text)]
    breaks.append(len(text) + 1)
    c = 0  # the next of ``units``
    marks = [m.span() for m in _CJK_MARKS.finditer(text)] if cjk else ()  # (``_CJK_MARK``, ``_CJK_AFTER``)
    k = 0  # the next of them
    phrased = [m.span() for m in _NEGATION_PHRASE.finditer(text)] if any(
        hint in text for hint in _NEGATION_HINTS) else ()  # (``_NEGATION_PHRASES``)
    j = 0  # the next of them
    owner = -1  # (where the pronoun of a run's ``of mine`` starts)
    b = 0
    start = end = -1  # the run in hand
    words = 0
    runs: list[tuple[int, int]] = []  # the clause's runs, said when it ends (a negation may come after them)
    negations: list[tuple[int, int]] = []  # and its negations
    for m in (_TOKEN if text.isascii() else _marked()[1]).finditer(text):
        s, e = m.span()
        if breaks[b] < s:
            within = True  # (all the breaks since the run's last word are within a sentence: a comma, a quote)
            while breaks[b] < s:
                within = within and not _ends_sentence(text, breaks[b])
                b += 1
            if start >= 0:  # a break since the run's last word
                runs.append((start, end))
                start = -1
            # a proposal's or a condition's word reaches the clauses after it in its sentence (``If the cache is cold,
            # restart the worker``: not ``restart`` alone), and alone in its clause is no piece (``Maybe, we…``); those
            # in reach of the clause's words are carried, or the last (a run past them all is left out, ``_negated``)
            carried = [mark for mark in negations if _proposes(text, *mark)] if within and negations else []
            carried = [mark for mark in carried if s - mark[1] <= NEGATION_REACH] or carried[-1:]
            if not (carried and all(run in carried for run in runs)):
                yield from _clause(text, runs, negations)
            runs, negations = [], carried
        token = m.group()
        role = _ROLE.get(token.lower())
        flag = s and text[s - 1] == "-" and len(token) <= 2 and _FLAG_BEFORE.search(text, max(0, s - 2), s)
        if flag:  # a command's short flag, none of its words (``git commit -a``, ``sed -i``, ``docker run -it``)
            role = None
        if phrased and j < len(phrased) and phrased[j][0] <= s:  # (a negation of words: one, ``far from``)
            while j < len(phrased) and phrased[j][1] <= s:
                j += 1
            if j < len(phrased) and phrased[j][0] <= s:
                if s > phrased[j][0]:
                    continue
                role, e = _ROLE.get(text[s : phrased[j][1]].lower(), 1), phrased[j][1]
        if role == 0 and token not in _STOP_CASED:  # (``only``, or a stop word in mixed case)
            if token.lower() == "only" and _limits(text, s):
                role = 1  # (``I only added tests``: a negation's reach, ``_limits``)
            elif _CAMEL.search(token):
                role = None  # (a word in mixed case is a name, no stop word: ``WoW``, not the interjection ``wow``)
        if role:  # a negation, a turn: the run in hand ends
            if start >= 0:
                runs.append((start, end))
                start = -1
            if role != 2:  # (a negation, a proposal's word, opens a run)
                negations.append((s, e))
                start, end, words = s, e, 1
                continue
            yield from _clause(text, runs, negations)  # (a turn ends the negation's reach)
            runs, negations = [], []
            continue
        dotted = s and text[s - 1] == "." and (s == 1 or text[s - 2].isspace())  # (.github/…: a fact, whole)
        if s < ask and start >= 0 and role == 0 and token.lower() in _DETERMINERS:
            continue  # (the run goes on if a word of it follows)
        if start >= 0 and (s == owner or role == 0 and token == "of" and _OF_WHOSE.match(text, e)):
            owner, end = (e + 1, end) if s != owner else (-1, e)  # (``buddy of mine adopted``: whose it is goes on
            continue  # with the run, not ``mine adopted``)
        if dotted or role == 0 or (cjk and _HAN_KANA_RUN.search(token)):  # (Korean spaces its words: they run)
            if start >= 0:
                runs.append((start, end))
                start = -1
            if marks and k < len(marks) and marks[k][0] < e:  # (the first mark in a clause's characters: ``建议``)
                if marks[k][0] >= s:
                    negations.append(marks[k])
                while k < len(marks) and marks[k][0] < e:
                    k += 1
            continue
        if units and c < len(units) and units[c] <= s:  # (a number's currency or unit before it: the run ends there)
            while c < len(units) and units[c] <= s:
                c += 1
            if start >= 0:
                runs.append((start, end))
                start = -1
        if start >= 0 and words == 4:
            runs.append((start, end))
            start = -1
        if start < 0:
            start, words = s, 0
            if flag and runs and flag.start() - runs[-1][1] <= NEGATION_REACH and _stop_words_only(
                    text, runs[-1][1], flag.start()):
                start, words = runs.pop()[0], 4  # (a short flag alone weighs nothing: it ends the run before its
                # stop words, ``run it with -v``, not ``run``, read as run without it)
        end = e
        words += not flag  # (a command's flags count as none of its four words: ``tar -x -v -f backup.tar``)
    if start >= 0:
        runs.append((start, end))
    yield from _clause(text, runs, negations)


def _clause(text: str, runs: list[tuple[int, int]], negations: list[tuple[int, int]]):
    """One clause's runs as ``(start, run, negated)``: with its negations (``_negated``), else as they are."""
    if negations:
        yield from _negated(text, runs, negations)
    else:
        for at, to in runs:
            yield at, text[at:to], False


def _negated(text: str, runs: list[tuple[int, int]], negations: list[tuple[int, int]]):
    """The ``runs`` of one clause holding ``negations`` (in text order), each said with one: a run opened by one
    as it is, a run after one from the nearest before it (``not a bug``, ``Don't ever force-push``, ``None of the
    replicas were promoted``), a run before them all to the clause's end when one that may follow what it negates
    comes after it (``_AFTER``: ``gehen in Latin-1 gar nicht``), else as it is (``flaky test`` of ``The flaky test is
    not a regression``: the negation's words come after it). A negation alone is no run, but when it is the clause
    (``the logs…nothing``) and does not leave out what follows it (``_LEAVING_OUT``: ``Apart from that``). A run right
    before a negation is said to the end of the run it opens (``deleted nothing``, ``40 not 50``: not ``deleted``
    alone, nor ``40``). A run said with one, ending before a limit in time after it in
    the clause (``_LIMIT``: ``before``, ``until``, ``bis``, ``до``), runs to the clause's end (``not migrate the billing
    database before the audit ends``: not ``not migrate the billing database``, never where it said not yet). A clause
    a negation opens right after a comma (a correction, ``A, not B``) is said from the word before the comma
    (``~2.3.1, not ^2.3.1``, ``lexer, not in the parser``: not ``not ^2.3.1`` alone, the right value lost).
    (A run said without the negation that governs it says the opposite: ``bug``, ``force-push``, ``gehen``; one
    longer than a piece is none, and so is one starting more than ``NEGATION_REACH`` characters past the negation:
    widened back to it, it would cost the line its other words.)"""
    # (one that is its clause is said, ``the logs…nothing``, but one that leaves out what follows it: ``Apart from that``)
    alone = set(negations) if len(runs) > 1 else {
        (at, to) for at, to in negations if text[at:to].lower() in _LEAVING_OUT}
    # (after the first negation in the clause: not a condition's word of an earlier clause it carries, ``If it's
    # before noon, do not migrate … until``)
    limit = _LIMIT.search(text, max(negations[0][1], runs[0][0]), runs[-1][1]) if runs else None
    first = next((mark for mark in negations if runs and mark[0] == runs[0][0]), (-1, -1))  # (the one opening it)
    lead = first[0]  # (where what it governs is said from: a correction's right value before it)
    if lead >= 0 and _ROLE.get(text[lead : first[1]].lower()) == 1 and (
            right := _CORRECTED.search(text, max(0, lead - 48), lead)) and any(c.isalnum() for c in right.group()):
        lead = right.start()
    # (each run looks its negations up by where they are, not through them all: a clause of thousands of negations,
    # ``not the x not the x …``, took time growing with their square)
    words = [text[at:to].lower() for at, to in negations]
    starts, ends = [at for at, to in negations], [to for at, to in negations]
    opens: dict[int, str] = {}
    for at, word in zip(starts, words):
        opens.setdefault(at, word)
    negating = [(at, to) for (at, to), word in zip(negations, words) if _ROLE.get(word) == 1]  # (not a proposal's)
    negating_ends = [to for at, to in negating]
    following = [to for (at, to), word in zip(negations, words) if word in _AFTER or _CJK_AFTER.fullmatch(text, at, to)]
    following_at = next((at for (at, to), word in zip(reversed(negations), reversed(words))
                         if word in _AFTER or _CJK_AFTER.fullmatch(text, at, to)), -1)
    run_starts, run_ends, said = [at for at, to in runs], dict(runs), set(runs)
    right = _RIGHT_VALUE.match(text, runs[-1][1]) if runs else None  # (the value meant after the clause's last run)
    for start, end in runs:
        if (start, end) in alone:
            continue
        run = start, end
        opener = opens.get(start)
        # (a run its own negation opens is said as it is, one a proposal's word opens too but after a negation: a
        # negation governs what follows it, a proposal's word among it, ``don't think we should bump``, never
        # ``should bump``)
        if opener and _ROLE.get(opener) == 1:
            before = None
        elif (k := bisect.bisect_right(negating_ends, start)) > 0:
            before = negating, negating_ends, k
        elif opener:
            before = None
        else:
            k = bisect.bisect_right(ends, start)
            before = (negations, ends, k) if k else None
        opened = opener is not None and not before
        if before:
            marks, marks_ends, k = before
            near = bisect.bisect_left(marks_ends, start - NEGATION_REACH, 0, k)
            if near == k:
                continue  # (too far past it: with it, a long piece that costs the line its other words)
            start = marks[near][0]  # (from the first in reach: ``should not drop``, ``Maybe we could``)
        elif not opened and following and following_at >= end:
            end = max(runs[-1][1], following[-1])
        elif not opened and (o := bisect.bisect_right(starts, end)) < len(negations) and (
                not text[end : starts[o]].strip(" \t") and ((word := words[o]) in _OBJECTS_ONLY
                                                             and (word != "no" or negations[o] not in said)
                                                             or text[end - 1].isdigit() and _ROLE.get(word) == 1)):
            # a negation right after it is its verb's object or its value's other: said with it (``deleted nothing``,
            # ``ship nothing``, ``it's 40 not 50``), to the end of the run the negation opens
            end = run_ends.get(starts[o], ends[o])
            if end == ends[o]:  # (the negation alone: to the next run's end, ``deleted nothing from the archive``)
                r = bisect.bisect_left(run_starts, end)
                if r < len(runs) and run_starts[r] - end <= NEGATION_REACH:
                    end = runs[r][1]
        if limit and end <= limit.start() and (opened or (start, end) != run):
            end = runs[-1][1]  # (said with its negation, before the negation's limit: to the clause's end)
        if right and end == runs[-1][1] and any(c.isdigit() for c in text[max(start, end - 48) : end]):
            end = right.end()  # (the value meant after a negated one: ``not 40, it's 50``)
        if start == first[0]:
            start = lead
        elif opener and _ROLE.get(opener) == 1:
            k = bisect.bisect_right(ends, start) - 1
            while k >= 0 and start - ends[k] <= NEGATION_REACH:
                if _proposes(text, *negations[k]):
                    start = starts[k]  # (a negation inside a condition: with it, ``if it's not used anywhere else``,
                    break  # not ``not used anywhere else``, a hypothesis said as found)
                k -= 1
        if opens.get(start, "")[-3:] in ("n't", "n’t") and (
                whose := _QUANTIFIED.search(text, max(0, start - 12), start)):
            start = whose.start()  # (``few weren't able``: not ``weren't able``, read as the clause's subject before)
        yield start, text[start:end], True


def _marked_before(text: str, at: int, end: int, cjk) -> tuple[int, int]:
    """A number's words at ``at:end`` of ``text`` with the negation or the proposal's word before them in their clause
    (``_negation_before``), and in Chinese or Japanese with a question's particle after them (``改成50秒吗``)."""
    at = _negation_before(text, at)
    if cjk and (later := _CJK_LATER.match(text, end)):
        end = later.end()
    return at, end


def _stated(text: str, start: int, end: int, mark: int) -> bool:
    """Whether the piece ``text[start:end]``, in a sentence ending in a question mark at ``mark``, is in a clause
    before the question's (a comma, a colon or a dash between them): a statement, said as it is. Not when the
    sentence asks from its start (``Is …``, ``Did you …``, ``¿…``) or its question offers an alternative (``…, or is
    it …?``, ``…，还是…？``): the piece is then the question's."""
    last = None
    for last in _CLAUSE_BREAK.finditer(text, end, mark):
        pass
    return last is not None and not _ALTERNATIVE.match(text, last.end()) and _asking(text, start) is None


def _asking(text: str, at: int) -> int | None:
    """Where the sentence holding ``at`` starts asking, when it asks from its start (an auxiliary or a question
    word first, ``Can you…``, ``Is the…``; or a ``¿``), else None."""
    sentence = max(0, at - SENTENCE)
    for stop in _STOP.finditer(text, sentence, at):
        sentence = stop.end()
    opener = _ASKS_FIRST.match(text, sentence, at)
    return max(opener.end(1), opener.end(2)) if opener else None


def _negation_before(text: str, at: int) -> int:
    """Where the nearest negation (or word of a proposal, a question or a condition: ``_MODALS``, ``_CJK_MARK``)
    before ``at`` in its clause (up to a break or a turn, ``_phrases``; a proposal's word in its sentence, over a
    comma; at most 60 characters back) starts, else ``at``: a number's words said with it (``не нужно 3 реплики``,
    not ``нужно 3 реплики``)."""
    window = text[max(0, at - 60) : at]
    cut = clause = 0  # (where its sentence starts, where its clause starts: a proposal's word reaches over a comma)
    for m in _BREAK.finditer(window):
        clause = m.end()
        if _ends_sentence(window, m.start()):
            cut = clause
    found = -1
    negated = False  # (a negation found: a proposal's word after it is no nearer mark, ``don't think we should``)
    for m in (_TOKEN if window.isascii() else _marked()[1]).finditer(window, cut):
        role = _ROLE.get(m.group().lower())
        if role:
            if role == 2:
                found, negated = -1, False
            elif not (negated and role == 3 or role == 1 and m.start() < clause):
                found, negated = m.start(), role == 1
        elif not m.group().isascii():  # (``建议把超时改成 50``)
            mark = next((mark for mark in _CJK_MARK.finditer(m.group()) if m.start() >= clause
                         or _CJK_MODAL.fullmatch(mark.group())), None)
            if mark:
                found = m.start() + mark.start()
    return at - len(window) + found if found >= 0 else at


def _tool_units(msg: dict, stats: Stats) -> list[Unit]:
    i = msg.get("i", 0)
    meta = msg.get("meta") or {}
    call_id = meta.get("call_id")
    tool = toolwork.short(meta["tool"]) if isinstance(meta.get("tool"), str) else ""
    polled = meta.get("polls")  # a poll's result: how the command it polls ran (Codex's write_stdin)
    polled = polled if isinstance(polled, str) and polled else None
    if polled:  # (said, when the command's call is not in the line, by its program)
        call_id, program = polled, meta.get("polls_program")
        tool = toolwork.short(program) if isinstance(program, str) else ""
    out = []
    found, path = toolwork.work(msg)
    for piece, result, weight in found:
        ws = _wordset(piece)
        # a call's key: its id and message (an id may be used again), else its message; a result's: the id of the
        # call it answers, else the message before it (``_answered`` finds which call that is)
        if isinstance(call_id, str) and call_id:
            call = call_id if result else (call_id, i)
        else:
            call = i - 1 if result else i
        # (a poll's "exit 0" without its command's call says nothing: left out, as a result naming no tool)
        said = tool if result and not (polled and piece == "exit 0") else ""
        out.append(Unit(weight * (1.0 + stats.weight(ws) / 2), i, 0, piece, "", 2, ws, result, call, said,
                        path if not result else ""))
    return out


# ---- a line from units -----------------------------------------------------------------------------------


def compose(pool: list[Unit], head: str = "", limit: int = LINE_BYTES, asker: str | None = "user") -> str:
    """The best units of ``pool`` that fit in ``limit`` bytes, rendered as one line: greedy by gain (a unit's
    value per byte, times the share of its words not said yet, times how common those words are in the
    span, divided by 1 + ``SPREAD`` × the units its message has given), taken lazily from a heap. A second piece
    of one sentence of ``asker`` (the unnamed user, asking a model) brings the sentence whole in their place."""
    if not pool:
        return cut_line(head, limit)
    # where each word occurs; each unit's words not yet said, kept up to date as words are said: how many,
    # and their span frequencies summed (so a gain is arithmetic, not set operations)
    where: dict[str, list[int]] = {}
    for n, u in enumerate(pool):
        for w in u.words:
            got = where.get(w)
            if got is None:
                where[w] = [n]
            else:
                got.append(n)
    total_n = [len(u.words) for u in pool]
    fresh_n = total_n[:]
    fresh_df = [sum(map(len, map(where.__getitem__, u.words))) for u in pool]
    said: set[str] = set()
    log = math.log
    # a piece of what the user asked a model inside a longer one of the same message (the sentence it is a
    # phrase of): once a second piece of it would be said, the longer one is said in their place, the ask whole
    # rather than its words in fragments. (Named speakers, people talking to each other, say many things a line
    # names each in a few words.)
    within: dict[int, Unit] = {}
    asked: dict[int, list[int]] = {}
    for n, u in enumerate(pool):
        if u.rank == 0 and u.who == asker:
            asked.setdefault(u.i, []).append(n)
    for ns in asked.values():
        if len(ns) > 2:
            ns.sort(key=lambda n: -pool[n].size)
            for k, n in enumerate(ns):
                text = pool[n].text
                c = next((pool[m] for m in ns[:k] if pool[m].size > pool[n].size and text in pool[m].text
                          and _holds(pool[m].text, text)), None)
                if c is not None:
                    within[n] = c
    # units of one message all count less alike as it gives more: no need to re-weigh them for it
    spread = SPREAD if any(u.i != pool[0].i for u in pool) else 0.0

    chosen: dict[int, list[Unit]] = {}  # by message
    taken_bytes: dict[int, int] = {}  # what the units taken from each message cost
    groups: dict[str, list[Unit]] = {}  # by speaker: the pieces each says (tool work aside), none said twice
    # by message: where the pieces taken from it are in its text, in order (none overlap: ``_joined``)
    placed: dict[int, list[tuple[int, int]]] = {}
    used = len(head.encode("utf-8")) + (2 if head else 0)

    def take(u: Unit, mine: list[Unit], inside: list[Unit], cost: int) -> None:
        nonlocal used
        used += cost
        said_by = groups.setdefault(u.who, [])
        for c in inside:
            chosen[c.i].remove(c)
            taken_bytes[c.i] -= c.size + 2
            said_by.remove(c)
            if c.rank < 2:
                placed[c.i].remove((c.pos, c.pos + len(c.text)))
        mine.append(u)
        taken_bytes[u.i] = taken_bytes.get(u.i, 0) + u.size + 2
        if u.rank < 2:
            said_by.append(u)
            bisect.insort(placed.setdefault(u.i, []), (u.pos, u.pos + len(u.text)))
        for w in u.words:  # said now: the other units holding it have one fresh word less (``u`` is done)
            if w not in said:
                said.add(w)
                holders = where.get(w, ())  # (a word a joined piece makes whole is in no unit: ``_joined``)
                df = len(holders)
                if df > 1:
                    for m in holders:
                        fresh_n[m] -= 1
                        fresh_df[m] -= df

    # the gains while every word is fresh (in the loop's own arithmetic, so the floats are the same)
    heap = [(-(u.value if not t else u.value * t / t * (1.0 + 0.25 * log(1 + (d - t) / t))), n)
            for n, (u, t, d) in enumerate(zip(pool, total_n, fresh_df))]
    heapq.heapify(heap)
    heappop, heappushpop = heapq.heappop, heapq.heappushpop
    best = heappop(heap)
    while used < limit:
        n = best[1]
        u = pool[n]
        # (a unit that cannot fit, even in place of its message's units taken so far, is passed over)
        if u.size + 3 - taken_bytes.get(u.i, 0) <= limit - used:
            mine = chosen.get(u.i)
            if mine is None:
                mine = chosen[u.i] = []
            # its gain now (see the docstring)
            total = total_n[n]
            if not total:
                g = u.value / (1 + spread * len(mine))
            elif fresh_n[n]:
                fresh = fresh_n[n]
                topic = 1.0 + 0.25 * log(1 + (fresh_df[n] - fresh) / fresh)
                g = u.value * fresh / total * topic / (1 + spread * len(mine))
            else:
                g = 0.0
            if heap and g < -heap[0][0] - 1e-12:  # worth less than it was: back in, and the best one out
                best = heappushpop(heap, (-g, n))
                continue
            if g <= 0:
                break
            said_by = groups.get(u.who, ()) if u.rank < 2 else ()  # (tool work: "exit 0" of each call)
            whole = within.get(n) if mine else None
            if whole is not None and any(c.text in whole.text and _holds(whole.text, c.text) for c in mine) and not any(
                    whole.text in c.text and _holds(c.text, whole.text) for c in said_by):
                inside = [c for c in said_by if c.text in whole.text and _holds(whole.text, c.text)]
                cost = whole.size + 3 - sum(c.size + 2 for c in inside)
                if used + cost <= limit:
                    take(whole, mine, inside, cost)
                    if not heap:
                        break
                    best = heappop(heap)
                    continue
            text = u.text
            if not any(text in c.text and _holds(c.text, text) for c in said_by):  # (said already, here or before)
                over = None
                if u.rank < 2 and (spots := placed.get(u.i)):  # (one it holds whole is said by it: ``inside``)
                    end = u.pos + len(text)  # (the last taken piece starting before its end, before its start)
                    k = bisect.bisect_left(spots, (end,))
                    if k and spots[k - 1][1] > end or (k := bisect.bisect_left(spots, (u.pos,))) and spots[k - 1][1] > u.pos:
                        over = _over(u, mine)
                if over:  # pieces of its message it overlaps in the text: one piece over them all, or it is left out
                    u = _joined(u, over)
                    text = u.text
                    if u.size > 2 * SENTENCE:
                        if not heap:
                            break
                        best = heappop(heap)
                        continue
                inside = [c for c in said_by if c.text in text and _holds(text, c.text)]  # said again by it: they go
                if over:
                    inside += [c for c in over if c not in inside]
                cost = u.size + 3 + (_size(u.who) + 2 if u.who not in groups else 0) - sum(c.size + 2 for c in inside)
                if used + cost <= limit:
                    take(u, mine, inside, cost)
        if not heap:
            break
        best = heappop(heap)
    return cut_line(render([u for units_ in chosen.values() for u in units_], head), limit)


def _over(u: Unit, mine: list[Unit]) -> list[Unit]:
    """The units of ``mine`` (taken from ``u``'s message) that ``u`` overlaps in its message's text, and those they
    overlap in turn."""
    lo, hi = u.pos, u.pos + len(u.text)
    over: list[Unit] = []
    while True:
        more = [c for c in mine if c.rank < 2 and c not in over and c.pos < hi and lo < c.pos + len(c.text)]
        if not more:
            return over
        over += more
        lo, hi = min(lo, *(c.pos for c in more)), max(hi, *(c.pos + len(c.text) for c in more))


def _joined(u: Unit, over: list[Unit]) -> Unit:
    """One unit for ``u`` and the units of its message it overlaps (``_over``): the text they cover together, as
    written (``ioredis gives`` and ``gives up after 20 retries``: ``ioredis gives up after 20 retries``, never both,
    which said the words where they meet twice)."""
    parts = sorted([u, *over], key=lambda c: (c.pos, -len(c.text)))
    text, end = parts[0].text, parts[0].pos + len(parts[0].text)
    for c in parts[1:]:
        if c.pos + len(c.text) > end:
            text += c.text[end - c.pos :]
            end = c.pos + len(c.text)
    return Unit(u.score, u.i, parts[0].pos, text, u.who, u.rank, _wordset(text), u.result, u.call, u.tool, u.file)


def _holds(text: str, piece: str) -> bool:
    """True when ``piece`` occurs in ``text`` whole: not as part of a word of it (``40`` is no piece of
    ``topic40x0``; Chinese and Japanese, written without spaces, have no such parts)."""
    at = text.find(piece)
    while at >= 0:
        end = at + len(piece)
        if not (at and _joins(text[at - 1], piece[0]) or end < len(text) and _joins(piece[-1], text[end])):
            return True
        at = text.find(piece, at + 1)
    return False


def _joins(a: str, b: str) -> bool:
    """True when characters ``a`` and ``b`` side by side are one word (letters, digits, ``_``; not Chinese)."""
    return (a.isalnum() or a == "_") and (b.isalnum() or b == "_") and not (_CJK_RUN.match(a) or _CJK_RUN.match(b))


@functools.lru_cache(maxsize=1 << 16)
def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def cut_line(text: str, limit: int = LINE_BYTES) -> str:
    """``text`` as one line of at most ``limit`` bytes: as written when it fits (down to a code line's own
    ``;``), else cut as a model's reply is (``cut.cut_line``); without control characters, as a reply is
    (``strip_controls``: a speaker's name, a message said as written when it has nothing to pick)."""
    line = flatten(strip_controls(text))
    return line if len(line.encode("utf-8")) <= limit else _cut_reply(line, limit)


def render(chosen: list[Unit], head: str = "") -> str:
    """Units grouped by speaker (the user first, tool work last), in log order inside each group."""
    groups: dict[str, list[Unit]] = {}
    said = [u for u in chosen if u.rank < 2]  # (a line in Chinese: most of what is said, tool work aside)
    chinese = _chinese(said) and not any(_KANA_HANGUL.search(u.text) for u in said)
    order = sorted(chosen, key=lambda u: (u.rank, u.i, u.pos))
    for u in order:
        groups.setdefault(u.who, []).append(u)
    parts = []
    for who, members in sorted(groups.items(), key=lambda kv: (kv[1][0].rank, kv[1][0].i)):
        members.sort(key=lambda u: (u.i, u.pos))
        pieces: list[str] = []
        calls: dict[object, int] = {}  # a call shown: its piece
        answered: set[object] = set()
        for u in members:
            at = calls.get(u.call) if u.result else None
            if at is not None:  # a call and how it ended: "ran pytest → exit 1, 1 failed" (parallel calls too)
                pieces[at] += (", " if u.call in answered else " → ") + u.text
                answered.add(u.call)
            elif u.result:  # its call is not in the line: its tool, if its message names it ("bash → exit 0",
                # the tool's other such results after it), else how it ended if that says anything (a bare
                # "exit 0" did not)
                key = ("tool", u.tool) if u.tool else u.call
                at = calls.get(key)
                if at is not None:
                    pieces[at] += ", " + u.text
                elif u.tool or u.text != "exit 0":
                    calls[key] = len(pieces)
                    pieces.append(f"{u.tool} → {u.text}" if u.tool else u.text)
            else:
                if u.rank == 2:
                    calls[u.call] = len(pieces)
                pieces.append(u.text)
        if not pieces:
            continue
        body = _join(pieces, "，" if chinese else ", ")
        parts.append(f"{who}: {body}" if who else body)
    if chinese:  # (a part ending its sentence with 。 ends with the ； that sets the next speaker apart: 。pi: ran together)
        parts = [part[:-1] if part.endswith("。") and k < len(parts) - 1 else part for k, part in enumerate(parts)]
    line = _join(parts, "；" if chinese else "; ")
    return f"{head}: {line}" if head and line else head or line


def _join(pieces: list[str], by: str) -> str:
    """Pieces joined by ``by`` (in a line in Chinese ``，`` or ``；``, whatever the pieces end in: Japanese and
    Korean take ``, `` and ``; ``, as their writers do), but after a piece ending a sentence: nothing after
    ``。``, ``！``, ``？`` or ``；``, a space after ``.``, ``!`` or ``?`` (``sources., what`` doubled its stop)."""
    out = ""
    for piece in pieces:
        if out:
            last = out[-1]
            out += " " if last in ".!?" else "" if last in "。！？；" else by
        out += piece
    return out


_MONTHS = "January February March April May June July August September October November December".split()


def _day(date: str) -> tuple[int, int, int] | None:
    """(year, month, day) of a log date (``2026-10-08T09:30:00+08:00``), or None."""
    try:
        y, m, d = int(date[:4]), int(date[5:7]), int(date[8:10])
    except (TypeError, ValueError):
        return None
    return (y, m, d) if 1 <= m <= 12 and len(date) >= 10 and date[4] == date[7] == "-" else None


def _days(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    """The days of two adjacent spans (each a tuple of ``YYYY-MM-DD`` in date order, ``""`` standing for days
    left out): every day while there are at most ``DAYS``, else the earliest, ``""`` and the latest. In date
    order, not log order: a log may hold its messages out of it (a backfill, an import of several sources)."""
    days = sorted({*a, *b} - {""})
    if len(days) <= DAYS and "" not in a and "" not in b:
        return tuple(days)
    return (days[0], "", days[-1])


def _dates(days: tuple[str, ...], iso: bool = False) -> str:
    """A span's days (see ``_days``) as a reader says them: ``8 October 2026``, ``8, 9, 12 October 2026``,
    ``30 September, 2 October 2026``, ``30 December 2026, 2 January 2027``, or a range over more days than
    ``DAYS``: ``8..30 October 2026`` (a question asks "in May?", an answer says "7 May 2023"); ``iso``:
    ``2026-10-08`` or ``2026-10-08..2026-10-30`` (for a span in Chinese, whose readers write dates so)."""
    named = [(d, _day(d)) for d in days if d]
    if not named:
        return ""
    if iso or any(ymd is None for _, ymd in named):
        return named[0][0] if len(named) == 1 else f"{named[0][0]}..{named[-1][0]}"
    if "" in days:  # a range
        (y1, m1, d1), (y2, m2, d2) = named[0][1], named[-1][1]
        if (y1, m1) == (y2, m2):
            return f"{d1}..{d2} {_MONTHS[m2 - 1]} {y2}"
        return f"{d1} {_MONTHS[m1 - 1]}{'' if y1 == y2 else f' {y1}'}..{d2} {_MONTHS[m2 - 1]} {y2}"
    out = ""
    for k, (_, (y, m, d)) in enumerate(named):
        out += str(d)
        after = named[k + 1][1] if k + 1 < len(named) else None
        if after is None or after[:2] != (y, m):
            out += f" {_MONTHS[m - 1]}"
        if after is None or after[0] != y:
            out += f" {y}"
        if after is not None:
            out += ", "
    return out


def _chinese(pool: list[Unit]) -> bool:
    """True when most of ``pool``'s units are Chinese (Chinese characters, no kana or Hangul)."""
    return 2 * sum(1 for u in pool if not u.text.isascii() and _HAN.search(u.text)
                   and not _KANA_HANGUL.search(u.text)) > len(pool)


def top(pool: list[Unit], k: int = POOL) -> list[Unit]:
    """The ``k`` best units (by ``Unit.keep``)."""
    return pool if len(pool) <= k else heapq.nlargest(k, pool, key=_KEEP)


_KEEP = operator.attrgetter("keep")


# ---- one memory's offline compactor ----------------------------------------------------------------------


class Digest:
    """The offline compactor of one memory: term statistics from its log, the units of each built node kept
    until its parent is built (a node built earlier, or free, is read back from the log)."""

    def __init__(self, mem):
        self.mem = mem
        self.limit = int(mem.config["line_bytes"])  # each line's bytes, at most
        self._stats: Stats | None = None
        self._stats_count = 0  # the log's messages when the statistics were taken
        # (l, i) → its units, days and runs (``_runs``)
        self.pools: dict[tuple[int, int], tuple[list[Unit], tuple[str, ...], dict]] = {}
        self.leaves: dict[int, tuple[list[Unit], str]] = {}  # recent messages' units and dates (read once)
        self.passed: dict[int, dict] = {}  # messages the forward read passed, their units not made yet
        self._feed = None  # the forward read of the log that serves ``_leaf``
        self._next = -1  # the message it read last
        self.mine = None  # which messages' units it will be asked for (a worker's: ``compactor.worker``), if not all

    @property
    def stats(self) -> Stats:
        if self._stats is None:
            count = self._stats_count = self.mem.count()
            runs = 8
            each = max(1, STATS_SAMPLE // runs)
            if count <= STATS_SAMPLE:
                msgs = self.mem.messages(0, count)
                self._stats = Stats.of(msgs)
            else:
                def sample():
                    for k in range(runs):
                        start = k * (count - each) // (runs - 1)
                        yield from self.mem.messages(start, start + each)
                self._stats = Stats.of(sample())
        return self._stats

    def leaf(self, i: int, kind: str, text: str, meta: dict | None = None, date: str | None = None) -> str:
        self._grown(i + 1)
        msg = {"i": i, "kind": kind, "text": text, "meta": meta or {}, "date": date}
        found = units(msg, self.stats)
        self.pools[(0, i)] = (top(found), _leaf_days(date), _runs(found))
        self._keep(i, top(found, LEAF_UNITS), msg.get("date") or "")
        return leaf_line(msg, found, self.limit)

    def _keep(self, i: int, found: list[Unit], date: str) -> None:
        self.leaves[i] = (found, date)
        self.passed.pop(i, None)
        for kept, most in ((self.leaves, LEAVES_KEPT), (self.passed, PASSED_KEPT)):
            if len(kept) > most:  # the oldest half goes (dicts keep insertion order)
                for j in list(kept)[: most // 2]:
                    del kept[j]

    def _leaf(self, i: int) -> tuple[list[Unit], str]:
        """Message ``i``'s units and date: kept, or made from the log. Merges come in log order (lowest level
        first, then oldest), so one forward read of the log serves them: it keeps the messages it passes
        until their units are asked for (a long one among them may be built as a leaf first), and it starts
        again only for a message behind it that is no longer kept."""
        kept = self.leaves.get(i)
        if kept is not None:
            return kept
        msg = self.passed.pop(i, None)
        if msg is None:
            if self._feed is None or i <= self._next:
                self._feed = self.mem.messages(i)
            for msg in self._feed:
                j = self._next = msg["i"]
                if j == i:
                    break
                if j not in self.leaves and (self.mine is None or self.mine(j)):
                    self.passed[j] = msg
            else:  # logged after the read began
                self._feed = None
                msg = next(self.mem.messages(i, i + 1))
        self._keep(i, top(units(msg, self.stats), LEAF_UNITS), msg.get("date") or "")
        return self.leaves[i]

    def _grown(self, end: int) -> None:
        """Messages up to ``end`` are being summarised: once the log has doubled since the word statistics were
        taken (a watcher's, started on a small memory), they are taken again."""
        if end > 2 * self._stats_count > 0:
            self._stats = None

    def merge(self, l: int, i: int) -> str:
        self._grown((i + 1) << l)
        pool, days, runs = self._pool(l, i)
        self.pools[(l, i)] = (pool, days, runs)
        head = _dates(days, self.stats.chinese)  # (one form for a memory's lines while its statistics stand)
        line = compose(_paired(_folded(_answered(_named(pool)), runs)) if runs else pool, head, self.limit)
        if line == head:  # nothing to say of it: every word in it is common in the memory, or results ended well
            line = self._plainly(l, i, head)
        return line

    def _plainly(self, l: int, i: int, head: str) -> str:
        """A line for span ``(l, i)`` when its units weigh nothing (a memory saying the same again and again: each
        of its words in more than about one message in three): the first message of the user in its first
        ``LABELLED`` (else the first that is no tool work), each word weighing alike: the first thing asked; else,
        for tool work alone (results whose calls are elsewhere, each ending well), the tools that ran and how
        many times (``read ×4``; a command's polls are its program, once); else, for a span of at most ``LABELLED``
        messages, who spoke in it."""
        start = i << l
        msgs = list(self.mem.messages(start, start + min(1 << l, LABELLED)))
        first = next((m for m in msgs if m.get("kind") == "user"), None) or next(
            (m for m in msgs if _speaker(m)[1] < 2), None)
        line = compose(units(first), head, self.limit) if first is not None else head
        if first is None:
            tools: collections.Counter = collections.Counter()
            polled = set()
            for m in msgs:
                meta = m.get("meta") or {}
                name, command = meta.get("tool"), meta.get("polls")
                if isinstance(command, str) and command:  # a poll is its command's: its program, once a command
                    name = None if command in polled else meta.get("polls_program")
                    polled.add(command)
                if isinstance(name, str):
                    tools[toolwork.short(name)] += 1
            tools.pop("", None)
            if tools:
                said = ", ".join(f"{tool} ×{n}" if n > 1 else tool for tool, n in tools.items())
                line = cut_line(f"{head}: {said}" if head else said, self.limit)
        if line == head and (1 << l) <= LABELLED:
            labels = dict.fromkeys(_label(m.get("kind", ""), _speaker(m)[0]) for m in msgs)
            line = cut_line(f"{head}: {', '.join(labels)}" if head else ", ".join(labels), self.limit)
        return line

    def _pool(self, l: int, i: int) -> tuple[list[Unit], tuple[str, ...], dict]:
        """The units of node ``(l, i)``'s span, its days (``_days``) and its runs (``_runs``): kept since the node
        was built, else its children's (a message's own units at the bottom)."""
        kept = self.pools.pop((l, i), None)
        if kept is not None:
            return kept
        if l == 0:
            found, date = self._leaf(i)
            return found, _leaf_days(date), _runs(found)
        a, first, ran = self._pool(l - 1, 2 * i)
        b, last, then = self._pool(l - 1, 2 * i + 1)
        return top(a + b), _days(first, last), _added(ran, then)


def _runs(found: list[Unit]) -> dict:
    """The tool calls of a message's units, as a span's runs: what each did (``ran pytest``, ``edited`` and the
    file's whole path: ``_did``) → [how many calls did it, the last one's key (``Unit.call``)]."""
    return {_did(u): [1, u.call] for u in found if u.rank == 2 and not u.result} if found and found[0].rank == 2 else {}


def _did(u: Unit) -> str:
    """What a tool call did: its text, with the whole path of a file it edited or read (two files named alike in
    a few characters are two files: ``×2`` counts one file's edits)."""
    return f"{u.text.split(' ', 1)[0]} {u.file}" if u.file else u.text


def _named(pool: list[Unit]) -> list[Unit]:
    """``pool`` with the files its calls edited or read named apart (``toolwork.names``): ``edited …reasoning…``,
    ``edited …code.plugin…``, not ``edited codemie-code…`` for both."""
    files = {u.file: u.text.split(" ", 1)[1] for u in pool if u.file}
    if len(files) < 2:
        return pool
    named = toolwork.names(list(files))
    if all(named[f] == said for f, said in files.items()):
        return pool
    out = []
    for u in pool:
        if u.file and named[u.file] != files[u.file]:
            text = f"{u.text.split(' ', 1)[0]} {named[u.file]}"
            u = Unit(u.score, u.i, u.pos, text, u.who, u.rank, _wordset(text), u.result, u.call, u.tool, u.file)
        out.append(u)
    return out


def _answered(pool: list[Unit]) -> list[Unit]:
    """``pool`` with each result keyed as the call it answers (``Unit.call``): the latest call of its id before it
    (an id may be used again: ``call_0`` for each call), else, without an id, the call right before it, but for
    parallel calls (a call before that one, a result after it: which result is whose is not known); a result whose
    call the pool does not hold answers none of those it holds."""
    calls: dict[object, list[int]] = {}  # a call id → the messages of the pool's calls of that id
    for u in pool:
        if u.rank == 2 and not u.result:
            calls.setdefault(u.call[0] if isinstance(u.call, tuple) else None, []).append(u.i)
    bare = set(calls.get(None, ()))
    answers = {u.i for u in pool if u.rank == 2 and u.result and isinstance(u.call, int)} if bare else ()
    out = []
    for u in pool:
        if u.rank == 2 and u.result:
            if isinstance(u.call, str):
                before = [i for i in calls.get(u.call, ()) if i <= u.i]
                call = (u.call, max(before)) if before else u.call
            elif u.call in bare and not (u.call - 1 in bare and u.i + 1 in answers):
                call = u.call
            else:
                call = ("alone", u.i)
            if call != u.call:
                u = Unit(u.score, u.i, u.pos, u.text, u.who, u.rank, u.words, True, call, u.tool, u.file)
        out.append(u)
    return out


def _paired(pool: list[Unit]) -> list[Unit]:
    """``pool`` with each call whose results it holds joined to them, one piece (``ran pytest → exit 1, 4 failed``):
    a line takes a call's outcome with the call, or neither (a lone ``exit 1`` said nothing of what failed)."""
    results: dict[object, list[Unit]] = {}
    for u in pool:
        if u.rank == 2 and u.result:
            results.setdefault(u.call, []).append(u)
    calls = {u.call for u in pool if u.rank == 2 and not u.result and u.call in results} if results else ()
    if not calls:
        return pool
    out = []
    for u in pool:
        if u.rank == 2 and u.call in calls:
            if u.result:
                continue
            got = sorted(results[u.call], key=lambda r: (r.i, r.pos))
            words = tuple(dict.fromkeys(w for x in (u, *got) for w in x.words))
            u = Unit(u.score + sum(r.score for r in got), u.i, u.pos, f"{u.text} → {', '.join(r.text for r in got)}",
                     u.who, u.rank, words, False, u.call, u.tool, u.file)
        out.append(u)
    return out


def _added(a: dict, b: dict) -> dict:
    """The runs of two adjacent spans (``_runs``) as one span's: their counts added, the later span's last call."""
    if not a or not b:
        return a or b
    out = dict(a)
    for text, (n, last) in b.items():
        got = out.get(text)
        out[text] = [got[0] + n, last] if got else [n, last]
    return out


def _folded(pool: list[Unit], runs: dict) -> list[Unit]:
    """``pool`` with the calls that say the same (a program run again and again, a file edited again) as one:
    ``ran pytest ×32`` (its count from ``runs``: the span's, exact where the pool keeps only its best units), the
    last call's results after it; the other calls' results go (``3 failed, 0 failed, 2 failed`` said nothing of
    which run they were). When the pool lost the last call, its latest call that it holds stands for them, without
    results (they are not how the runs ended)."""
    standing: dict[str, Unit] = {}  # what the calls say → the call kept for them
    calls: dict[object, str] = {}  # each such call's key → what it says
    for u in pool:
        did = _did(u) if u.rank == 2 and not u.result else None
        if did is not None and runs.get(did, (1,))[0] > 1:
            calls[u.call] = did
            got, last = standing.get(did), runs[did][1]
            if got is None or u.call == last or got.call != last and u.i > got.i:
                standing[did] = u
    if not calls:
        return pool
    out = []
    for u in pool:
        text = calls.get(u.call) if u.rank == 2 else None
        if text is None:
            out.append(u)
            continue
        kept, (n, last) = standing[text], runs[text]
        if u.result:
            if u.call == kept.call == last:
                out.append(u)
        elif u is kept:
            out.append(Unit(u.score, u.i, u.pos, f"{u.text} ×{n}", u.who, u.rank, u.words, False,
                            u.call if u.call == last else ("runs", text), file=u.file))
    return out


def _leaf_days(date: str | None) -> tuple[str, ...]:
    return (date[:10],) if isinstance(date, str) and len(date) >= 10 else ()


def leaf_line(msg: dict, found: list[Unit], limit: int = LINE_BYTES) -> str:
    """One long message as a line: its kind (and speaker), then its best units in text order."""
    who, rank = _speaker(msg)
    label = _label(msg.get("kind", ""), who)
    if rank == 2:  # a tool leaf is shown only with --include-tools: what ran and how it ended, then its facts
        work = ", ".join(u.text for u in found)
        head = f"{label}: {work}" if work else label
        said = units({**msg, "kind": "note"}, head=TOOL_SCAN_HEAD, tail=TOOL_SCAN_TAIL)
        facts = [u.told("", 1) for u in top(said, POOL // 2) if u.text not in work]
        body = compose(facts, "", limit - len(head.encode("utf-8")) - 2)
        return cut_line(f"{head}; {body}" if work and body else f"{head}: {body}" if body else head, limit)
    body = compose([u.told("", u.rank) for u in found], "",
                   limit - len(label.encode("utf-8")) - 2, "" if who == "user" else None)
    if not body:  # nothing to pick (emoji, punctuation): its opening, cut between whole characters (and before a
        # bidirectional control, and a blob: base64, minified code is no text to show, the label alone says more;
        # without control characters, as a line is: ``cut_line``)
        text = msg.get("text") or ""
        blobs = _blobs(text)[1]
        text = _BIDI.split(flatten(strip_controls(text[: min(blobs)[0]] if blobs else text)), 1)[0]
        body = text[: boundary(text, 200) or 200]
    return cut_line(f"{label}: {body}" if body else label, limit)


# ---- without a memory: from the message, or the two child lines ------------------------------------------


def leaf(kind: str, text: str, limit: int = LINE_BYTES) -> str:
    """One line summarising message ``kind: text`` (no memory: no statistics beyond the message)."""
    msg = {"i": 0, "kind": kind, "text": text}
    return leaf_line(msg, units(msg), limit)


def merge(left: str, right: str, limit: int = LINE_BYTES) -> str:
    """One line merging two adjacent lines when only they are known (no memory to read the span from)."""
    pool = units({"i": 0, "kind": "note", "text": left}) + units({"i": 1, "kind": "note", "text": right})
    pool = [u.told("", 1) for u in pool]
    line = compose(pool, "", limit)
    if not line:  # nothing to pick (stop words alone, emoji, punctuation): the two lines as they are, cut
        parts = [strip_controls(text) for text in (left, right)]
        parts = [flatten(text) or " ".join(text.split()) for text in parts]  # (a code fence alone is no code)
        both = "; ".join(dict.fromkeys(part for part in parts if part))
        line = cut_line(both, limit) or _opening(both, limit)  # (a cut strips the separators it ends in)
    return line


def _opening(text: str, limit: int) -> str:
    """The start of one line ``text`` in at most ``limit`` bytes, cut between whole characters."""
    end = len(text.encode("utf-8")[:limit].decode("utf-8", "ignore"))
    return text[: boundary(text, end) or end]
