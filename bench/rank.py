"""Ranking quality on the development data (../shared/data, see its README): pimem's ranker against
BM25Okapi over the same turns and questions, in one run.

    python bench/rank.py                 # the figures table: tuning split, reported split, all
    python bench/rank.py --ablation      # each part of the ranker taken out in turn
    python bench/rank.py --index         # pimem's ranker read through a real memory's index.sqlite

Each LoCoMo conversation and each LongMemEval instance is one memory: its turns are logged as the data
README says (kind, text, the date with +00:00, the speaker in ``meta``), each question is asked as typed.
By default the turns are scored in-process by pimem's ranker code (``pimem.ranker.Corpus`` over
``pimem.ranker.document`` of each message: the same terms and scores the index gives, which ``--index``
checks by logging each memory and asking ``pimem.api.search(..., rank=True)``).

Measures: LoCoMo evidence recall@5/10/25/50 (share of a question's evidence turns in the top k, mean over
questions with evidence), overall and per category; LongMemEval turn recall@5/10/25/50 (the ``has_answer``
turns) and session recall@5/10 (the top k distinct sessions, in the order of their first hit, against
``answer_session_ids``).

Split: the ranker's constants were tuned on ``tune`` (conv-26, conv-30 and the even-numbered LongMemEval
instances); ``held`` (conv-41, conv-42, conv-43, the odd-numbered instances) was only reported on.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False  # (the variable was read at start-up: this process writes its bytecode too)

from pimem import ranker, terms  # noqa: E402

# ../shared/data beside the checkout (or beside a parent of it, for a worktree), or $PIMEM_BENCH_DATA
DATA = Path(os.environ.get("PIMEM_BENCH_DATA") or next(
    (p / "shared" / "data" for p in Path(__file__).resolve().parents if (p / "shared" / "data").is_dir()),
    Path("../shared/data")))
KS = (5, 10, 25, 50)
TUNE_CONVS = ("conv-26", "conv-30")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_WORD = re.compile(r"\w+")


# ---- data ---------------------------------------------------------------------------------------------------


def locomo() -> list[dict]:
    """Each conversation: {name, split, messages (as logged), questions [(text, evidence, category)]}."""
    out = []
    for path in sorted((DATA / "locomo_dev").glob("*.messages.ndjson")):
        name = path.name.split(".")[0]
        turns = [orjson.loads(line) for line in path.read_bytes().splitlines()]
        messages = [{"kind": t["kind"], "text": t["text"], "date": t["date"] + "+00:00",
                     "meta": {"speaker": t["speaker"]}} for t in sorted(turns, key=lambda t: t["i"])]
        qa = [orjson.loads(line) for line in (DATA / "locomo_dev" / f"{name}.qa.ndjson").read_bytes().splitlines()]
        questions = [(q["question"], set(q["evidence_i"]), q["category"]) for q in qa if q.get("evidence_i")]
        out.append({"name": name, "split": "tune" if name in TUNE_CONVS else "held", "messages": messages,
                    "questions": questions})
    return out


def longmemeval() -> list[dict]:
    """Each instance: {name, split, messages, sessions (per message), question, evidence, answer sessions}."""
    out = []
    for n, inst in enumerate(orjson.loads((DATA / "longmemeval_s_dev.json").read_bytes())):
        messages, sessions, evidence = [], [], set()
        for sid, date, session in zip(inst["haystack_session_ids"], inst["haystack_dates"], inst["haystack_sessions"]):
            stamp = f"{date[0:4]}-{date[5:7]}-{date[8:10]}T{date[-5:]}:00+00:00"
            for turn in session:
                if not turn["content"].strip():
                    continue  # (a few turns are empty: pimem logs no empty message, so no system sees them)
                if turn.get("has_answer"):
                    evidence.add(len(messages))
                messages.append({"kind": "user" if turn["role"] == "user" else "pi", "text": turn["content"], "date": stamp})
                sessions.append(sid)
        if not evidence:
            continue
        out.append({"name": inst["question_id"], "split": "tune" if n % 2 == 0 else "held", "messages": messages,
                    "sessions": sessions, "question": inst["question"], "evidence": evidence,
                    "answer_sessions": set(inst["answer_session_ids"]), "type": inst["question_type"]})
    return out


# ---- systems: each builds a searcher over one memory's messages: question -> positions, best first --------


def pimem_system(documents=ranker.document, **params):
    def build(messages):
        corpus = ranker.Corpus.of(messages, documents)
        return lambda question: [i for i, _ in ranker.rank(corpus, question, max(KS), **params)]
    return build


def okapi_system(messages):
    """BM25Okapi as rank_bm25 computes it (k1 1.5, b 0.75, idf floored at a quarter of the mean idf) over
    lowercase ``\\w+`` tokens; every turn is scored, ties in turn order."""
    docs = [_WORD.findall(m["text"].lower()) for m in messages]
    counts = [Counter(d) for d in docs]
    average = sum(map(len, docs)) / len(docs)
    df = Counter(t for c in counts for t in c)
    idf = {t: math.log(len(docs) - f + 0.5) - math.log(f + 0.5) for t, f in df.items()}
    floor = 0.25 * sum(idf.values()) / len(idf)
    idf = {t: (v if v >= 0 else floor) for t, v in idf.items()}
    k1, b = 1.5, 0.75
    norms = [k1 * (1 - b + b * len(d) / average) for d in docs]

    def search(question):
        wanted = _WORD.findall(question.lower())
        scores = [sum(idf.get(t, 0) * c[t] * (k1 + 1) / (c[t] + norm) for t in wanted if t in c)
                  for c, norm in zip(counts, norms)]
        return sorted(range(len(docs)), key=lambda i: -scores[i])[: max(KS)]

    return search


def index_system(messages, semantic: bool = False):
    """pimem's ranker through a real memory: log the messages, ask ``api.search(rank=True)``; with
    ``semantic``, the extra's vectors are built first (``pimem.semantic.catch_up``) and fused in, otherwise the
    extra is switched off for the search."""
    import tempfile

    from pimem import Memory, api

    home = tempfile.mkdtemp(prefix="pimem-rank-")
    mem = Memory.at("bench", home)
    mem.append(messages)
    if semantic:
        from pimem import semantic as extra

        extra.catch_up(mem)
    mem.close()

    def search(question):
        saved = os.environ.get("PIMEM_EMBEDDER")
        if not semantic:
            os.environ["PIMEM_EMBEDDER"] = "off"
        try:
            hits = api.search(question, ["bench"], rank=True, limit=max(KS), home=home)
        except Exception as exc:  # nothing found
            if getattr(exc, "code", None) == 1:
                return []
            raise
        finally:
            if saved is None:
                os.environ.pop("PIMEM_EMBEDDER", None)
            else:
                os.environ["PIMEM_EMBEDDER"] = saved
        return [h["i"] for h in hits["hits"]]

    return search


def semantic_available() -> bool:
    """Whether the semantic extra's module has landed and its model (or a named embedder) is there."""
    try:
        from pimem import semantic
    except ImportError:
        return False
    return semantic.available()


# ---- ablations ----------------------------------------------------------------------------------------------


def text_only(msg):
    return terms.bag(msg.get("text") or "")


def without(part):
    def documents(msg):
        found, length = terms.bag(msg.get("text") or "")
        extra = ""
        if part == "+kind":
            extra += msg["kind"]
        if part != "speaker" and ranker.speaker(msg):
            extra += " " + ranker.speaker(msg)
        if part != "date":
            extra += " " + ranker.date_words(msg["date"])
        return found | terms.bag(extra)[0], length
    return documents


@contextmanager
def constants(**values):
    """The ranker with other module constants (``TAIL``, ``REACH``, ``TAIL_WORDS``: the deeper tier's)."""
    saved = {name: getattr(ranker, name) for name in values}
    for name, value in values.items():
        setattr(ranker, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(ranker, name, value)


@contextmanager
def unstemmed():
    saved = terms.stem
    terms.stem = lambda word: word
    terms._runs.clear()  # (the terms of words already seen are cached)
    try:
        yield
    finally:
        terms.stem = saved
        terms._runs.clear()


@contextmanager
def stop_words(listed: frozenset = frozenset(), first_person: frozenset = terms.FIRST_PERSON):
    """The ranker with another stop list and other first-person words (for the ablation)."""
    saved = terms.STOPWORDS, terms.FIRST_PERSON
    terms.STOPWORDS, terms.FIRST_PERSON = listed, first_person
    terms._runs.clear()  # (the terms of words already seen are cached)
    try:
        yield
    finally:
        terms.STOPWORDS, terms.FIRST_PERSON = saved
        terms._runs.clear()


# ---- measuring ----------------------------------------------------------------------------------------------


def measure(build, conversations, instances) -> dict:
    """Per split (tune, held, all): LoCoMo recall@k overall and per category, LongMemEval turn and
    session recall@k."""
    rows = []  # (split, set, category, {metric: value})
    for conv in conversations:
        search = build(conv["messages"])
        for question, evidence, category in conv["questions"]:
            top = search(question)
            rows.append((conv["split"], "locomo", CATEGORIES[category],
                         {f"@{k}": len(evidence & set(top[:k])) / len(evidence) for k in KS}))
    for inst in instances:
        top = build(inst["messages"])(inst["question"])
        values = {f"@{k}": len(inst["evidence"] & set(top[:k])) / len(inst["evidence"]) for k in KS}
        seen = list(dict.fromkeys(inst["sessions"][i] for i in top))
        for k in (5, 10):
            values[f"s@{k}"] = len(inst["answer_sessions"] & set(seen[:k])) / len(inst["answer_sessions"])
        rows.append((inst["split"], "lme", inst["type"], values))
    out = {}
    for split in ("tune", "held", "all"):
        chosen = [r for r in rows if split == "all" or r[0] == split]
        for dataset in ("locomo", "lme"):
            part = [r for r in chosen if r[1] == dataset]
            out[(split, dataset, "all")] = _mean(part)
            for category in sorted({r[2] for r in part}):
                out[(split, dataset, category)] = _mean([r for r in part if r[2] == category])
    return out


def _mean(rows) -> dict:
    if not rows:
        return {}
    keys = rows[0][3].keys()
    return {"n": len(rows), **{k: 100 * sum(r[3][k] for r in rows) / len(rows) for k in keys}}


def table(results: dict[str, dict], splits=("tune", "held", "all"), categories=True) -> str:
    lines = []
    for dataset, metrics in (("locomo", [f"@{k}" for k in KS]), ("lme", [f"@{k}" for k in KS] + ["s@5", "s@10"])):
        title = "LoCoMo evidence recall" if dataset == "locomo" else "LongMemEval turn recall (s@k: session recall)"
        lines.append(f"\n{title}")
        lines.append(f"| split | part | n | system | {' | '.join(metrics)} |")
        lines.append("|---|---|---|---|" + "---|" * len(metrics))
        first = next(iter(results.values()))
        for split in splits:
            parts = sorted({c for s, d, c in first if s == split and d == dataset}, key=lambda c: (c != "all", c))
            for part in parts if categories else ["all"]:
                for system, res in results.items():
                    row = res.get((split, dataset, part))
                    if not row:
                        continue
                    lines.append(f"| {split} | {part} | {row['n']} | {system} | "
                                 + " | ".join(f"{row[m]:.1f}" for m in metrics) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ablation", action="store_true", help="each part of the ranker taken out in turn")
    parser.add_argument("--index", action="store_true", help="also read pimem's ranker through a real index")
    parser.add_argument("--sweep", action="store_true", help="b and the neighbour share on the tuning split")
    args = parser.parse_args()
    if not DATA.exists():
        print(f"skipped: {DATA} is absent")
        return
    conversations, instances = locomo(), longmemeval()
    if args.sweep:
        tune_c = [c for c in conversations if c["split"] == "tune"]
        tune_i = [i for i in instances if i["split"] == "tune"]
        for b in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75):
            for before, after in ((0, 0), (0.3, 0.3), (0.5, 0.5), (0.5, 0.2), (0.7, 0.3), (0.2, 0.5)):
                for k1 in (0.9, 1.2, 1.5):
                    res = measure(pimem_system(b=b, before=before, after=after, k1=k1), tune_c, tune_i)
                    lo, lm = res[("tune", "locomo", "all")], res[("tune", "lme", "all")]
                    print(f"b={b} before={before} after={after} k1={k1}  locomo " + " ".join(f"{lo[f'@{k}']:.1f}" for k in KS)
                          + "  lme " + " ".join(f"{lm[f'@{k}']:.1f}" for k in KS) + f"  s {lm['s@5']:.1f} {lm['s@10']:.1f}",
                          flush=True)
        return
    results = {"pimem": measure(pimem_system(), conversations, instances)}
    semantic = semantic_available()
    if semantic:
        results["pimem+semantic"] = measure(lambda m: index_system(m, semantic=True), conversations, instances)
    if args.index:
        results["pimem (index)"] = measure(index_system, conversations, instances)
    results["BM25Okapi"] = measure(okapi_system, conversations, instances)
    if args.ablation:
        variants = {
            "- neighbours": pimem_system(before=0.0, after=0.0, reply=0.0),
            "- question turns lend their replies more": pimem_system(reply=ranker.BEFORE),
            "symmetric neighbours 0.3": pimem_system(before=0.3, after=0.3),
            "- speaker": pimem_system(without("speaker")),
            "- date words": pimem_system(without("date")),
            "+ kind": pimem_system(without("+kind")),
            "text only": pimem_system(text_only),
            "b 0.3": pimem_system(b=0.3),
        }
        for name, build in variants.items():
            results[name] = measure(build, conversations, instances)
        for name, values in (("- deeper tier", {"TAIL": 10**9}), ("- its turns around the best", {"REACH": 0}),
                             ("- its word overlap", {"TAIL_WORDS": 0.0})):
            with constants(**values):
                results[name] = measure(pimem_system(), conversations, instances)
        with unstemmed():
            results["- stemming"] = measure(pimem_system(), conversations, instances)
        with stop_words():
            results["- stop words"] = measure(pimem_system(), conversations, instances)
        with stop_words(terms.STOPWORDS | terms.FIRST_PERSON, frozenset()):
            results["- first person (stop words)"] = measure(pimem_system(), conversations, instances)
        print(table(results, categories=False))
        return
    print(table(results))
    if not semantic:
        print("\npimem+semantic: not measured (the semantic extra is not installed, or pimem.semantic has not landed)")


if __name__ == "__main__":
    main()
