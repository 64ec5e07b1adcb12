"""View quality on the development sets (../shared/data, see its README): answer coverage and zoom-path success.

Each conversation (LoCoMo) or instance (LongMemEval) is logged as one memory with a 32,000-byte view
(``view.hi`` 32,000, ``lo`` 16,000), its tree built by ``build-tree`` with each offline compactor in turn, and
then measured, in one run, against baselines over the same questions and the same view:

- ``new``: the offline compactor as shipped (``pimem.compactor.extractive``);
- ``old``: the offline compactor before issue 15 (``bench/baselines/extractive_old.py``);
- ``yake`` (with ``--variants new,old,yake``): the new one with YAKE! key phrases (the ``yake`` package) in
  place of its own stop-word runs;
- ``lexrank`` (with ``--variants new,old,lexrank``): a sentence-scoring library in place of the hand-written
  weights: each line is the merge's days (as ``new`` writes them) and the span's sentences that LexRank (the
  ``sumy`` package's, with its English stop words and Snowball stemmer) rates most central, as many as fit,
  in text order under their speakers;
- ``head``: the new run's view, every line replaced by the first 512 bytes of its span (``kind: text`` lines
  joined by newlines), its halves likewise;
- ``window``: as many bytes as the view holds, of the most recent turns verbatim (coverage only).

**Answer coverage**: the share of the answer's content words (lowercase ``\\w+``, stop words removed) found in
the view lines holding the evidence turns. **Zoom-path success**: the view's lines ranked by BM25 (k1 1.5,
b 0.75, lowercase ``\\w+``, stop words removed) against the question; a success when a top-3 line holds an
evidence turn and, zooming down from it, at every level the half holding that turn scores strictly higher
than its sibling (BM25 with the view's statistics). Means over the questions with an answer and evidence
(LoCoMo's adversarial category has neither).

Zoom-path success is also printed as its two steps, for ``new`` and ``head``: a top-3 line holds an evidence
turn, and the descent from the line holding it passes (whatever that line's rank); and its **bound**, zoom-path
with every step between two summarised halves taken as passed: the steps between two halves shown verbatim
(a span whose turns fit in one line) are the same for every line maker, so with the same top-3 lines no
summaries below them can do better.

``--cuts 0.55,0.7,0.85,1`` logs each instance up to each of those shares of its turns, one memory each, and asks
the questions on the logged turns: the view's lines move with its phase (it is merged down to ``lo`` each time
it passes ``hi``), and the figures at one point of that cycle can be a lucky or an unlucky one.

Tuning is kept apart from reporting: the compactor was tuned on LoCoMo conv-26 and conv-30 and on the
LongMemEval instances at even positions; each table row gives all, the tuning part and the untuned part.

    python bench/view_quality.py [--data ../shared/data] [--only locomo|longmemeval] [--part tuned|untuned]
                                 [--limit N] [--variants new,old] [--cuts 0.55,0.7,0.85,1]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False  # (the variable was read at start-up: this process writes its bytecode too)
os.environ.setdefault("PIMEM_EMBEDDER", "off")  # build-tree would also embed every message (the semantic extra)
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pimem import Memory, builder, scheduler  # noqa: E402
from pimem.compactor import Compactor  # noqa: E402
from pimem.tree import span as node_span  # noqa: E402

VIEW = {"hi": 32_000, "lo": 16_000}  # a 32,000-byte budget, lo at half as by default (``--lo 32000``: always full)
LOCOMO_TUNED = {"conv-26", "conv-30"}
STOP = frozenset(
    "a an and are as at be but by can could did do does for from had has have he her hers him his how i if in "
    "into is it its me my no not of on or our she so than that the their them then there they this to was we "
    "were what when where which who whom why will with would you your yes".split()
)
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in STOP]


# ---- the sets --------------------------------------------------------------------------------------------


def locomo(data: Path) -> list[dict]:
    out = []
    for path in sorted((data / "locomo_dev").glob("*.messages.ndjson")):
        name = path.name.split(".")[0]
        msgs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        records = [{"kind": m["kind"], "text": m["text"], "date": m["date"] + "+00:00", "meta": {"speaker": m["speaker"]}}
                   for m in msgs]  # as the data's README logs it (image captions are not part of the text)
        qa = [json.loads(line) for line in (data / "locomo_dev" / f"{name}.qa.ndjson").read_text().splitlines() if line.strip()]
        questions = [{"question": q["question"], "answer": str(q["answer"]), "evidence": q["evidence_i"]}
                     for q in qa if q.get("answer") not in (None, "") and q.get("evidence_i")]
        out.append({"name": name, "records": records, "questions": questions, "tuned": name in LOCOMO_TUNED})
    return out


def longmemeval(data: Path) -> list[dict]:
    out = []
    for k, inst in enumerate(json.loads((data / "longmemeval_s_dev.json").read_text())):
        records, evidence = [], []
        for session, date in zip(inst["haystack_sessions"], inst["haystack_dates"]):
            stamp = datetime.strptime(date.split(" (")[0] + " " + date.split(") ")[1], "%Y/%m/%d %H:%M").isoformat() + "+00:00"
            for turn in session:
                if turn.get("has_answer"):
                    evidence.append(len(records))
                records.append({"kind": "user" if turn["role"] == "user" else "pi", "text": turn["content"] or "(empty)",
                                "date": stamp})
        questions = [{"question": inst["question"], "answer": str(inst["answer"]), "evidence": evidence}] if evidence else []
        out.append({"name": inst["question_id"], "records": records, "questions": questions, "tuned": k % 2 == 0})
    return out


def cut(inst: dict, share: float) -> dict:
    """``inst`` logged up to ``share`` of its turns, with the questions whose evidence lies in them."""
    if share >= 1:
        return inst
    n = int(len(inst["records"]) * share)
    return {**inst, "records": inst["records"][:n],
            "questions": [q for q in inst["questions"] if max(q["evidence"]) < n]}


# ---- compactors ------------------------------------------------------------------------------------------


def old_compactor() -> Compactor:
    """Today's harness with the pre-issue-15 extractive functions (a copy kept in bench/baselines)."""
    spec = importlib.util.spec_from_file_location("extractive_old", ROOT / "bench" / "baselines" / "extractive_old.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Old(Compactor):
        def for_memory(self, mem):
            return self

        def build(self, task, context=""):
            text = module.leaf(task.kind, task.text) if task.l == 0 else module.merge(task.left, task.right)
            return text, {"model": "extractive-old", "tokens_in": 0, "tokens_out": 0, "cost": 0.0, "seconds": 0.0}

    return Old({})


def lexrank_compactor() -> Compactor:
    """The ``lexrank`` variant (``pip install sumy numpy``): a line is the span's days, then the sentences sumy's
    LexRank rates most central among the span's (over more than eight messages: among the ``EACH`` each half
    rated best), as many as fit in 512 bytes, shown in text order under their speakers."""
    import numpy
    from sumy.models.dom import ObjectDocumentModel, Paragraph, Sentence
    from sumy.nlp.stemmers import Stemmer
    from sumy.summarizers.lex_rank import LexRankSummarizer
    from sumy.utils import get_stop_words

    from pimem.compactor import extractive

    EACH = 96  # sentences a span keeps for its parent to rate
    rater = LexRankSummarizer(Stemmer("english"))
    rater.stop_words = get_stop_words("english")

    class Words:  # sumy's tokenizer interface, without the nltk data its own needs
        language = "english"

        @staticmethod
        def to_words(text):
            return _WORD.findall(text)

    class Lex(Compactor):
        def for_memory(self, mem):
            self.mem, self.rated = mem, {}
            return self

        def sentences(self, l: int, i: int) -> list[tuple[int, int, str, str]]:
            """Node (l, i)'s candidate sentences, best first: (message, position, speaker, sentence)."""
            if (l, i) in self.rated:
                return self.rated[(l, i)]
            start, end = node_span(l, i)
            found = []
            if end - start <= 8 or l == 0:
                for msg in self.mem.messages(start, end):
                    who = extractive._speaker(msg)[0]
                    for k, text in enumerate(extractive._SENTENCE_END.split(msg["text"] or "")):
                        if text.strip():
                            found.append((msg["i"], k, who, text.strip()))
            if not found or len(found) > EACH:
                found = self.sentences(l - 1, 2 * i) + self.sentences(l - 1, 2 * i + 1) if l else found[:EACH]
            doc = ObjectDocumentModel([Paragraph([Sentence(t[3], Words) for t in found])])
            words = [rater._to_words_set(s) for s in doc.sentences]  # (LexRank's own steps, for its ratings)
            tf, idf = rater._compute_tf(words), rater._compute_idf(words)
            with numpy.errstate(invalid="ignore"):  # (sentences of stop words only: no centrality, all NaN)
                scores = numpy.nan_to_num(rater.power_method(rater._create_matrix(words, rater.threshold, tf, idf),
                                                             rater.epsilon))
            best = [t for _, t in sorted(zip(scores, found), key=lambda st: -st[0])][:EACH]
            self.rated[(l, i)] = best
            return best

        def build(self, task, context=""):
            start, end = node_span(task.l, task.i)
            days = ()
            for msg in self.mem.messages(start, end):
                days = extractive._days(days, extractive._leaf_days(msg.get("date")))
            head = extractive._dates(days)
            chosen, used = [], len(head.encode()) + 2
            for t in self.sentences(task.l, task.i):
                size = len(t[3].encode()) + len(t[2]) + 3
                if used + size <= task.limit:
                    chosen.append(t)
                    used += size
            parts, who = [], None
            for t in sorted(chosen):
                parts.append(t[3] if t[2] == who else f"{t[2]}: {t[3]}")
                who = t[2]
            text = extractive.cut_line(f"{head}: {' '.join(parts)}" if head else " ".join(parts), task.limit)
            return text, {"model": "lexrank", "tokens_in": 0, "tokens_out": 0, "cost": 0.0, "seconds": 0.0}

    return Lex({})


class YakePhrases:
    """The ``yake`` variant: the new compactor with its key phrases taken from YAKE! (``pip install yake``)
    instead of its own runs of words between stop words; everything else the same."""

    def __init__(self):
        import yake

        self.extractor = yake.KeywordExtractor(lan="en", n=3, top=12)
        self.saved = None

    def phrases(self, text: str):
        lower = text.lower()
        for phrase, _ in self.extractor.extract_keywords(text):
            at = lower.find(phrase.lower())
            if at >= 0:
                yield at, text[at : at + len(phrase)]

    def __enter__(self):
        from pimem.compactor import extractive

        self.saved, extractive._phrases = extractive._phrases, self.phrases
        return self

    def __exit__(self, *exc):
        from pimem.compactor import extractive

        extractive._phrases = self.saved


def build(home: Path, name: str, records: list[dict], compactor: Compactor | None) -> tuple[Memory, float]:
    mem = Memory.at(name, home)
    mem.path.mkdir(parents=True, exist_ok=True)
    mem.save_config({"view": dict(VIEW)})
    mem.append(records)
    started = time.perf_counter()
    scheduler.build_tree([mem], compactor=compactor)
    seconds = time.perf_counter() - started
    mem = Memory.open(name, home)
    return mem, seconds


# ---- measures --------------------------------------------------------------------------------------------


class BM25:
    def __init__(self, docs: list[list[str]], k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b
        self.n = len(docs)
        self.avg = sum(map(len, docs)) / max(1, self.n)
        self.df = Counter(w for d in docs for w in set(d))

    def score(self, query: list[str], doc: list[str]) -> float:
        tf = Counter(doc)
        out = 0.0
        for q in set(query):
            f = tf.get(q)
            if not f:
                continue
            idf = math.log(1 + (self.n - self.df.get(q, 0) + 0.5) / (self.df.get(q, 0) + 0.5))
            out += idf * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * len(doc) / self.avg))
        return out


_MARKER = re.compile(r"(?<!\S)\d{1,2}\.(?=\s|$)")  # a list item's number ("1. 2. 3."): says nothing of the answer


def coverage(answer: str, texts: list[str], markers: bool = True) -> float | None:
    """The share of the answer's content words found in ``texts`` (``markers=False``: list numbers such as
    "1. 2." left out of the texts, so an answer "5" is not found in a bare enumeration)."""
    want = set(words(answer))
    if not want:
        return None
    text = "\n".join(texts)
    have = set(words(text if markers else _MARKER.sub(" ", text)))
    return len(want & have) / len(want)


def zoom_steps(question: str, lines: list[tuple[int, int, str]], evidence: list[int], node_text, verbatim) -> dict:
    """Zoom-path success and its two steps. ``zoom``: a top-3 line (by BM25) holds an evidence turn, and from it
    each level's half holding that turn scores strictly higher than its sibling. ``top3``: a top-3 line holds an
    evidence turn. ``descent``: from the view line holding an evidence turn, whatever its rank, every level's half
    holding it scores higher. ``bound``: ``zoom`` with every step between two summarised halves taken as passed,
    only the steps between two halves shown verbatim (``verbatim(l, i)``, the same for every line maker) counted:
    what the best lines could reach on this view."""
    docs = [words(text) for _, _, text in lines]
    model = BM25(docs)
    q = words(question)
    ranked = set(sorted(range(len(lines)), key=lambda k: -model.score(q, docs[k]))[:3])

    def down(l: int, i: int, e: int) -> tuple[bool, bool]:
        """(every step passes, every step between verbatim halves passes) from node (l, i) to turn e."""
        strict = loose = True
        while l > 0 and loose:
            l -= 1
            left, right = 2 * i, 2 * i + 1
            hold, other = (left, right) if e < (right << l) else (right, left)
            if model.score(q, words(node_text(l, hold))) <= model.score(q, words(node_text(l, other))):
                strict = False
                loose = not (verbatim(l, hold) and verbatim(l, other))
            i = hold
        return strict, loose

    out = dict.fromkeys(("zoom", "top3", "descent", "bound"), False)
    for k, (l, i, _) in enumerate(lines):
        start, end = node_span(l, i)
        for e in evidence:
            if start <= e < end:
                strict, loose = down(l, i, e)
                out["descent"] |= strict
                if k in ranked:
                    out["top3"] = True
                    out["zoom"] |= strict
                    out["bound"] |= loose
    return out


def measure(inst: dict, mem: Memory, texts_of, records: list[dict], verbatim) -> list[dict]:
    """Per question: coverage and zoom success (with its steps: ``zoom_steps``) for the view of ``mem`` with node
    texts from ``texts_of``."""
    views = mem.views.current()
    rows = [(l, i) for l, i, _, _ in views.view.rows()]
    lines = [(l, i, texts_of(l, i) or "") for l, i in rows]
    starts = [node_span(l, i)[0] for l, i in rows]
    import bisect

    out = []
    for q in inst["questions"]:
        held = sorted({bisect.bisect_right(starts, e) - 1 for e in q["evidence"]})
        cov = coverage(q["answer"], [lines[k][2] for k in held])
        if cov is None:
            continue
        out.append({"coverage": cov, "coverage*": coverage(q["answer"], [lines[k][2] for k in held], markers=False),
                    **zoom_steps(q["question"], lines, q["evidence"], texts_of, verbatim), "line": rows[held[0]]})
    return out


def head_texts(records: list[dict]):
    lines = [f"{r['kind']}: {r['text']}" for r in records]

    def text(l: int, i: int) -> str:
        start, end = node_span(l, i)
        data = "\n".join(lines[start:end]).encode("utf-8")[:512]
        return data.decode("utf-8", "ignore")

    return text


def verbatim_spans(records: list[dict], limit: int = 512):
    """Whether node (l, i) is shown verbatim: its span's ``kind: text`` lines joined by newlines fit in a line
    (DESIGN: a leaf that fits is stored as it is, a merge whose two child lines fit joined is that join)."""
    sizes = [len(f"{r['kind']}: {r['text']}".encode("utf-8")) for r in records]

    def verbatim(l: int, i: int) -> bool:
        start, end = node_span(l, i)
        return sum(sizes[start:end]) + (end - start - 1) <= limit

    return verbatim


def window_coverage(inst: dict, records: list[dict], budget: int) -> list[float]:
    kept, used = set(), 0
    for k in range(len(records) - 1, -1, -1):
        size = len(f"{records[k]['kind']}: {records[k]['text']}".encode("utf-8")) + 1
        if used + size > budget:
            break
        used += size
        kept.add(k)
    out = []
    for q in inst["questions"]:
        texts = [f"{records[e]['kind']}: {records[e]['text']}" for e in q["evidence"] if e in kept]
        cov = coverage(q["answer"], texts)
        if cov is not None:
            out.append((cov, coverage(q["answer"], texts, markers=False)))
    return out


def run_set(label: str, instances: list[dict], variants: list[str]) -> dict:
    results: dict[str, dict[str, list]] = {}
    build_seconds: Counter = Counter()
    nodes: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        for n, inst in enumerate(instances):
            part = "tuned" if inst["tuned"] else "untuned"
            per: dict[str, list] = {}
            verbatim = verbatim_spans(inst["records"])  # (the same for every variant's view)
            for variant in variants:
                compactor = old_compactor() if variant == "old" else lexrank_compactor() if variant == "lexrank" else None
                if variant == "yake":
                    with YakePhrases():
                        mem, secs = build(home, f"{variant}-{n}", inst["records"], compactor)
                else:
                    mem, secs = build(home, f"{variant}-{n}", inst["records"], compactor)
                build_seconds[variant] += secs
                count = mem.count()
                nodes[variant] += builder.tree_size(count)
                texts, head = (lambda l, i, mem=mem, count=count: mem.tree.text(l, i, count) or ""), head_texts(inst["records"])
                per[variant] = measure(inst, mem, texts, inst["records"], verbatim)
                per["head" if variant == variants[0] else f"head@{variant}"] = measure(inst, mem, head, inst["records"], verbatim)
                for row in per[variant]:  # the evidence's line the same in both (a span shown verbatim) or not
                    row["alike"] = texts(*row["line"]) == head(*row["line"])
                if variant == variants[0]:
                    budget = sum(len(t.encode("utf-8")) + 1 for _, _, t in
                                 [(l, i, mem.tree.text(l, i, count) or "") for l, i, _, _ in mem.views.current().view.rows()])
                    per["window"] = [{"coverage": c, "coverage*": c2, "zoom": None}
                                     for c, c2 in window_coverage(inst, inst["records"], budget)]
                mem.close()
            for key, rows in per.items():
                for part_key in ("all", part):
                    results.setdefault(key, {}).setdefault(part_key, []).extend(rows)
    return {"results": results, "seconds": build_seconds, "nodes": nodes}


def mean(values: list) -> float:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")


def report(label: str, found: dict, variants: list[str]) -> None:
    res = found["results"]
    print(f"\n{label}: {len(res[variants[0]]['all'])} questions (tuned part {len(res[variants[0]].get('tuned', []))})")
    print(f"{'':10} {'coverage all':>13} {'tuned':>7} {'untuned':>8}   {'zoom all':>9} {'tuned':>7} {'untuned':>8}"
          f"   {'coverage* all':>14} {'untuned':>8}")
    table = {}
    for key in [*variants, "head", *(f"head@{v}" for v in variants[1:]), "window"]:
        if key not in res:
            continue
        cells = []
        for measure_key in ("coverage", "zoom", "coverage*"):
            for part in ("all", "tuned", "untuned"):
                rows = res[key].get(part, [])
                vals = [r[measure_key] for r in rows]
                table[(key, measure_key, part)] = mean([float(v) if v is not None else None for v in vals])
                cells.append(table[(key, measure_key, part)])
        print(f"{key:10} {cells[0]:13.3f} {cells[1]:7.3f} {cells[2]:8.3f}   {cells[3]:9.3f} {cells[4]:7.3f} {cells[5]:8.3f}"
              f"   {cells[6]:14.3f} {cells[8]:8.3f}")
    for base in ("head", "old"):
        if "new" in res and base in res:
            ratios = []
            for measure_key in ("coverage", "zoom", "coverage*"):
                for part in ("all", "untuned"):
                    b = table[(base, measure_key, part)]
                    ratios.append(f"{measure_key} {part} {table[('new', measure_key, part)] / b:.2f}×" if b else f"{measure_key} {part} –")
            print(f"new / {base}: " + ", ".join(ratios))
    for v in variants[1:]:
        base = f"head@{v}"
        print(f"{v} / {base}: " + ", ".join(f"{m} all {table[(v, m, 'all')] / table[(base, m, 'all')]:.2f}×"
                                           for m in ("coverage", "zoom") if table[(base, m, "all")]))
    if "new" in res and "head" in res:  # zoom on the questions under lines new and head show alike, and the rest
        rows, heads = res["new"]["all"], res["head"]["all"]
        for alike, what in ((True, "lines shown verbatim by both (the same text)"), (False, "the other lines")):
            pairs = [(r["zoom"], h["zoom"]) for r, h in zip(rows, heads) if r["alike"] == alike]
            a, b = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
            print(f"zoom under {what}: {len(pairs)} questions, new {a}, head {b}" + (f" ({a / b:.2f}×)" if b else ""))
        # zoom's two steps, and what the best lines could reach on this view (``zoom_steps``)
        steps = {key: {m: mean([float(r[m]) for r in res[key]["all"]]) for m in ("top3", "descent", "bound")}
                 for key in ("new", "head")}
        for m, what in (("top3", "a top-3 line holds the evidence"), ("descent", "the descent from its line passes"),
                        ("bound", "zoom with every step between summarised halves passed")):
            a, b = steps["new"][m], steps["head"][m]
            print(f"zoom step, {what}: new {a:.3f}, head {b:.3f}" + (f" ({a / b:.2f}×)" if b else ""))
        print(f"zoom bound of new over head's zoom: {steps['new']['bound'] / table[('head', 'zoom', 'all')]:.2f}×")
    for key in variants:
        secs = found["seconds"][key]
        print(f"build-tree {key}: {found['nodes'][key]:,} nodes in {secs:.1f} s ({found['nodes'][key] / secs:,.0f} nodes/s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent.parent / "shared" / "data"))
    ap.add_argument("--only", choices=("locomo", "longmemeval"))
    ap.add_argument("--limit", type=int, default=None, help="instances per set")
    ap.add_argument("--part", choices=("tuned", "untuned"), help="only the tuning part, or only the untuned part")
    ap.add_argument("--variants", default="new,old")
    ap.add_argument("--lo", type=int, default=16_000, help="the view's lo (hi is 32,000); 32000: the view always full")
    ap.add_argument("--cuts", default="1", help="shares of each instance's turns to log, one memory each (questions "
                    "on the logged turns): 0.55,0.7,0.85,1 measures over the view's phase, not at one point of it")
    args = ap.parse_args()
    data = Path(args.data)
    if not data.is_dir():
        data = Path("/work/shared/data")
    if not data.is_dir():
        print(f"no data at {args.data}: skipped")
        return
    variants = args.variants.split(",")
    VIEW["lo"] = args.lo
    for label, loader in (("LoCoMo", locomo), ("LongMemEval_S", longmemeval)):
        if args.only and args.only != label.lower().split("_")[0]:
            continue
        instances = [inst for inst in loader(data) if args.part is None or inst["tuned"] == (args.part == "tuned")]
        instances = [cut(inst, float(share)) for inst in instances[: args.limit] for share in args.cuts.split(",")]
        found = run_set(label, instances, variants)
        report(label, found, variants)


if __name__ == "__main__":
    main()
