"""Terms for ranked retrieval: what a text is indexed as and what a query asks for (``pimem.ranker``).

Text is NFKC-normalised and lowercased, then cut into runs of letters, digits and ``_ . / - :``:

- a run of one word (``deploys``) gives its English stem (Snowball, PyStemmer: ``deploy``); stop words
  (``the``, ``did``, ``what``) give nothing, in texts and queries alike;
- first-person words (``I``, ``me``, ``my``, ``myself``: ``FIRST_PERSON``) are terms of a text, but
  not of a query's ``query_terms``: the ranker weighs them apart (``first_person``), as who is speaking;
- a run with separators (a path ``src/auth/session.ts``, an identifier ``max_pool_size``, a number ``3.14``,
  a date ``2023-05-08``) is kept whole, and each of its parts counts too (stemmed like words);
- scripts written without spaces (Chinese, Japanese, Thai, Khmer, Lao, Myanmar) are cut into characters
  and overlapping character pairs; a query's run gives its pairs (a single character: itself), so ``蓝鲸``
  finds ``一头蓝鲸`` and ``鲸`` finds both.

A term is at least two characters long, except digits (``8`` in ``8 May``), ``i`` and unspaced characters.
A run's terms are cached, and a word's (chat vocabulary is small next to its length).
"""

from __future__ import annotations

import re
import unicodedata

_RUN = re.compile(r"[\w./:-]+")
_SEPARATORS = re.compile(r"[./:_-]+")
_UNSPACED_CHARS = "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+"
_unspaced_re = None  # compiled on the first text that is not ASCII (its charset costs ~1 ms to compile)
_TRIM = "./:-_"
# the usual English stop list (NLTK's, with the contractions' pieces and a few chat fillers)
STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between
both but by can could did do does doing down during each few for from further had has have having he her
here hers herself him himself his how if in into is it its itself just let more most no nor
not now of off on once only or other our ours ourselves out over own same she should so some such than that
the their theirs them themselves then there these they this those through to too under until up very was we
were what when where which while who whom why will with would you your yours yourself yourselves
s t d ll m re ve don doesn didn isn aren wasn weren hasn haven hadn won wouldn shouldn couldn
also yes oh ok okay hey hi please thanks thank us got get
""".split())
# the asker's own words: a question in the first person ("what did I cook for my friend?") is about the turns
# its asker wrote in the first person (measured on LongMemEval's tuning half: recall@5 82.7 -> 92.3)
FIRST_PERSON = frozenset(("i", "me", "my", "myself"))

_runs: dict[str, tuple[str, ...]] = {}  # a run's terms, cached: chat repeats its words
_words: dict[str, set[str] | tuple[str, ...]] = {}  # a whitespace-separated word's terms (``bag``), and how many runs it has
_word_runs: dict[str, int] = {}
WORD_CACHE = 200_000  # (words; with _compact about 100 MB at most)
_LONG = 64  # (a word this long is not cached)
# characters a word is cut at into pieces for the cache (``_learn``): punctuation that is no run character
# and stays none under NFKC, lowercase and its neighbours (not ``' ^ ` · ‧``: they change how ``Σ`` lowercases)
BREAKS = ('!"#$%&()*+,;?@[\\]{|}~！＂＃＄％＆（）＊＋，；？＠［＼］｛｜｝～、。〃〄〈〉《》「」『』【】〒〓〔〕〖〗〘〙〚〛〜〝〞〟'
          '‐‑‒–—―‖‗‚‛“”„‟†‡•‣«»‹›')
_PIECES = re.compile("[^" + re.escape(BREAKS) + "]+")
_stemmer = None


def fold(text: str) -> str:
    """The form every comparison uses: NFKC, lowercase (ASCII is its own NFKC form, and common)."""
    if text.isascii() or unicodedata.is_normalized("NFKC", text):  # (the quick check is ~400x cheaper)
        return text.lower()
    return unicodedata.normalize("NFKC", text).lower()


def stem(word: str) -> str:
    """The Snowball English stem of a folded word."""
    global _stemmer
    if _stemmer is None:
        import Stemmer  # PyStemmer: imported only by the commands that rank

        _stemmer = Stemmer.Stemmer("english")
    return _stemmer.stemWord(word) if word.isalpha() else word


def terms(text: str) -> list[str]:
    """Every term of ``text`` in order, repeats included."""
    out: list[str] = []
    for run in _RUN.findall(fold(text)):
        out.extend(_terms_of(run))
    return out


def bag(text: str) -> tuple[set[str], int]:
    """The distinct terms of ``text`` and its length in words (runs, stop words included): what the
    index keeps of a text, as ``runs_bag`` defines it. Its inner loops run in C over the text's
    whitespace-separated words, whose terms are cached (``_learn``; chat repeats its words)."""
    if len(_words) > WORD_CACHE:
        _words.clear()
        _word_runs.clear()
    words = text.split()
    distinct = set(words)
    found = list(map(_words.get, distinct))
    if None not in found:
        return set().union(*found), sum(map(_word_runs.__getitem__, words))
    once = [word for word, known in zip(distinct, found) if known is None and not _learn(word)]
    found = list(map(_words.__getitem__, distinct))
    length = sum(map(_word_runs.__getitem__, words))
    for word in once:
        del _words[word], _word_runs[word]
    return set().union(*found), length


def runs_bag(text: str) -> tuple[set[str], int]:
    """``bag`` by its definition: the terms of the runs of the folded text, and how many runs it has."""
    runs = _RUN.findall(fold(text))
    distinct = set(runs)
    found = list(map(_runs.get, distinct))
    if None in found:
        found = [known if known is not None else _terms_of(run) for known, run in zip(found, distinct)]
    return set().union(*found), len(runs)


def _learn(word: str) -> bool:
    """Caches a word's terms and runs (``runs_bag``), from those of its pieces between ``BREAKS`` (each
    cached too: ``句子，句子`` or ``f(x,`` share them); whether it is kept (a long word is not: Chinese
    sentences and hashes are rarely seen twice). Whitespace and ``BREAKS`` are safe places to cut a text:
    what they and their neighbours turn into under NFKC and lowercasing holds no run character and joins
    nothing across them (tests/test_terms.py checks every break against the characters that could)."""
    pieces = _PIECES.findall(word)
    if len(pieces) == 1 and len(pieces[0]) == len(word):
        found, length = runs_bag(word)
    else:
        new = [piece for piece in dict.fromkeys(pieces) if piece not in _words]
        for piece in new:
            found, _word_runs[piece] = runs_bag(piece)
            _words[piece] = _compact(found)
        found = set().union(*map(_words.__getitem__, pieces))
        length = sum(map(_word_runs.__getitem__, pieces))
        for piece in new:
            if len(piece) >= _LONG:
                del _words[piece], _word_runs[piece]
    _words[word], _word_runs[word] = _compact(found), length
    return len(word) < _LONG


def _compact(found: set[str]) -> set[str] | tuple[str, ...]:
    """A cached word's terms: a set while small (``bag`` unites sets fastest), else a tuple (a Chinese
    clause's characters and pairs as a set took ~2 KB a word: 80 MB for 40,000 words)."""
    return found if len(found) <= 4 else tuple(found)


def _terms_of(run: str) -> tuple[str, ...]:
    found = _runs.get(run)
    if found is None:
        found = _run_terms(run)
        if len(run) < 64:  # (long runs are rarely seen twice: Chinese sentences, hashes)
            if len(_runs) > 500_000:
                _runs.clear()
            _runs[run] = found
    return found


def _unspaced():
    """The pattern of runs of unspaced scripts, compiled when first needed (never for ASCII)."""
    global _unspaced_re
    if _unspaced_re is None:
        _unspaced_re = re.compile(_UNSPACED_CHARS)
    return _unspaced_re


def _run_terms(run: str) -> tuple[str, ...]:
    if run.isascii() and run.isalnum():  # a plain word or number: most runs
        if run.isdigit():
            return (run,)
        return () if run in STOPWORDS or (len(run) < 2 and run != "i") else (stem(run),)
    out: list[str] = []
    if run.isascii():  # a path, an identifier, a number with a point
        _spaced(run, out)
        return tuple(out)
    pos = 0
    for piece in _unspaced().finditer(run):
        _spaced(run[pos : piece.start()], out)
        chars = piece.group()
        out.extend(chars)
        out.extend(chars[k : k + 2] for k in range(len(chars) - 1))
        pos = piece.end()
    _spaced(run[pos:], out)
    return tuple(out)


def _spaced(run: str, out: list[str]) -> None:
    run = run.strip(_TRIM)
    if not run:
        return
    parts = [p for p in _SEPARATORS.split(run) if p]
    if len(parts) > 1:
        out.append(run)  # a path, an identifier, a number with a point: whole, and its parts below
    for part in parts:
        if part in STOPWORDS or (len(part) < 2 and not part.isdigit() and part != "i"
                                 and not "\uac00" <= part <= "\ud7af"):  # (Hangul)
            continue
        out.append(stem(part))


def query_terms(query: str) -> list[str]:
    """The distinct terms a query asks for, in order: a text's terms, except that a run of unspaced
    characters asks for its character pairs only (its single characters when it is one character), and
    first-person words are left to ``first_person``."""
    folded = fold(query)
    if folded.isascii():
        return list(dict.fromkeys(t for t in terms(folded) if t not in FIRST_PERSON))
    wanted: list[str] = []
    for run in _unspaced().split(folded):
        wanted.extend(t for t in terms(run) if t not in FIRST_PERSON)
    for piece in _unspaced().findall(folded):
        wanted.extend([piece] if len(piece) == 1 else (piece[k : k + 2] for k in range(len(piece) - 1)))
    return list(dict.fromkeys(wanted))


def first_person(query: str) -> list[str]:
    """The first-person words of a query (``FIRST_PERSON``, each once, in order)."""
    return list(dict.fromkeys(w for w in _RUN.findall(fold(query)) if w in FIRST_PERSON))
