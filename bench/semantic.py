"""The semantic extra (``pimem[semantic]``): what it gains and what it costs, measured in one run.

    python bench/semantic.py --fusion          # weighted sum against reciprocal-rank fusion, tuning split
    python bench/semantic.py --speed           # model load, messages embedded a second, --rank overhead
    python bench/rank.py                       # the recall table, with the pimem+semantic column

Quality (``system``): each LoCoMo conversation and LongMemEval instance is logged as a real memory, its
vectors built by ``semantic.catch_up`` (the code ``reindex``, ``watch`` and ``build-tree`` run) into the
memory's ``vectors/``, and each question ranked by ``pimem.ranker.rank`` with ``semantic.fuser`` as its fuse
hook. Vectors of texts already embedded once are kept in ``~/.cache/pimem-bench/`` (the model is
deterministic), so only the first run pays for embedding the 28,000 turns.

Speed: the model's load (import and session) in a fresh process; embedding throughput over LoCoMo turns
through ``catch_up`` (no cache); the fuse hook's own time (query embedding, the sign-bit pass, exact cosines,
fusion of the ranker's 1,000 candidates) over N vectors, the model already loaded, against the lexical
ranker alone being the baseline (it is measured by bench/rank.py and bench/search.py).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).absolute().parent.parent))
sys.path.insert(0, str(Path(__file__).absolute().parent))
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False  # (the variable was read at start-up: this process writes its bytecode too)

from pimem import semantic  # noqa: E402

CACHE = Path(os.environ.get("PIMEM_BENCH_CACHE") or Path.home() / ".cache" / "pimem-bench")


class Cached:
    """The model, with the vectors of texts it embedded before read back from ``CACHE``."""

    def __init__(self, inner, part: str = "all"):
        import numpy as np

        self.np, self.inner, self.name, self.dim = np, inner, inner.name, inner.dim
        self.path = CACHE / f"{inner.name}.{part}.npz"
        self.known: dict[str, object] = {}
        for path in sorted(CACHE.glob(f"{inner.name}*.npz")):
            data = np.load(path)
            self.known.update(zip(data["keys"].tolist(), data["vectors"]))
        self.new = 0

    def embed(self, texts):
        np = self.np
        keys = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
        missing = [t for t, k in zip(texts, keys) if k not in self.known]
        if missing:
            for k, v in zip((hashlib.sha1(t.encode()).hexdigest() for t in missing), self.inner.embed(missing)):
                self.known[k] = v
            self.new += len(missing)
        return np.stack([self.known[k] for k in keys])

    def save(self):
        if self.new:
            CACHE.mkdir(parents=True, exist_ok=True)
            keys = list(self.known)
            self.np.savez(self.path, keys=self.np.array(keys), vectors=self.np.stack([self.known[k] for k in keys]))


def use_cache(part: str = "all") -> Cached:
    cached = Cached(semantic.model(), part)
    semantic._model = cached
    return cached


def warm(split: str) -> None:
    """Embed every turn of one split into the cache (saved as it goes)."""
    import rank

    cached = use_cache(split)
    texts = [semantic.embedded_text(m) for c in rank.locomo() if c["split"] == split for m in c["messages"]]
    texts += [m["text"] for i in rank.longmemeval() if i["split"] == split for m in i["messages"]]
    started = time.perf_counter()
    for start in range(0, len(texts), 2048):
        cached.embed(texts[start:start + 2048])
        cached.save()
        print(f"{split}: {start + 2048} of {len(texts)} turns, {time.perf_counter() - started:.0f} s", flush=True)


def system(fusion=None, pool: int = semantic.SEMANTIC_POOL):
    """bench/rank.py's ``build(messages) -> search(question)``: the ranker with the semantic hook."""
    from pimem import Memory, ranker

    def build(messages):
        home = tempfile.mkdtemp(prefix="pimem-semantic-")
        mem = Memory.at("bench", home)
        mem.append(messages)
        semantic.catch_up(mem)
        corpus = ranker.Corpus.of(messages)

        def search(question):
            fuse = semantic.fuser(mem, question, pool=pool, fusion=fusion)
            return [i for i, _ in ranker.rank(corpus, question, 50, fuse=fuse)]

        return search

    return build


def recall_table(with_lme: bool) -> None:
    """bench/rank.py's table for the ranker, the ranker with the extra and BM25Okapi, in one run (LoCoMo;
    LongMemEval too with ``with_lme``)."""
    import rank

    cached = use_cache("recall")
    convs, insts = rank.locomo(), rank.longmemeval() if with_lme else []
    results = {"pimem": rank.measure(rank.pimem_system(), convs, insts),
               "pimem+semantic": rank.measure(system(), convs, insts),
               "BM25Okapi": rank.measure(rank.okapi_system, convs, insts)}
    cached.save()
    print(rank.table(results))


def fusion_sweep(locomo_only: bool) -> None:
    """Weighted sums and reciprocal-rank fusion on the tuning split (the held split is not looked at)."""
    import rank

    cached = use_cache("sweep")
    convs = [c for c in rank.locomo() if c["split"] == "tune"]
    insts = [] if locomo_only else [i for i in rank.longmemeval() if i["split"] == "tune"]
    variants = {"lexical": None}
    for w in (0.3, 0.4, 0.5, 0.6, 0.7):
        variants[f"sum w={w}"] = lambda lex, cos, w=w: semantic.combine(lex, cos, w)
    for k in (10, 60):
        variants[f"rrf k={k}"] = lambda lex, cos, k=k: semantic.reciprocal_rank(lex, cos, k)
    variants["semantic only"] = lambda lex, cos: semantic.combine(lex, cos, 0.0)
    print("tuning split: LoCoMo conv-26, conv-30; LongMemEval even-numbered instances")
    print("| fusion | LoCoMo @5 | @10 | @25 | @50 | LME @5 | @10 | @25 | @50 | s@5 | s@10 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, fusion in variants.items():
        build = rank.pimem_system() if fusion is None else system(fusion)
        res = rank.measure(build, convs, insts)
        lo, lm = res[("tune", "locomo", "all")], res.get(("tune", "lme", "all"))
        cells = [f"{lo[f'@{k}']:.1f}" for k in rank.KS]
        cells += [f"{lm[k]:.1f}" if lm else "-" for k in ("@5", "@10", "@25", "@50", "s@5", "s@10")]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
        cached.save()


def speed(sizes: list[int]) -> None:
    import numpy as np

    import rank

    load = subprocess.run([sys.executable, "-c", (
        "import time; t=time.perf_counter(); from pimem import semantic; m=semantic.MiniLM(); "
        "a=time.perf_counter(); m.embed(['warm up']); print(a-t, time.perf_counter()-a)")],
        capture_output=True, text=True, check=True, cwd=Path(__file__).absolute().parent.parent)
    loaded, first = map(float, load.stdout.split())
    print(f"model load (import onnxruntime, tokenizers, numpy; session): {loaded * 1000:.0f} ms; first query {first * 1000:.0f} ms")

    from pimem import Memory

    messages = [m for c in rank.locomo() for m in c["messages"]][:500]
    home = tempfile.mkdtemp(prefix="pimem-semantic-")
    mem = Memory.at("speed", home)
    mem.append(messages)
    semantic.model()
    started = time.perf_counter()
    done = semantic.catch_up(mem)
    seconds = time.perf_counter() - started
    print(f"embedding: {done} LoCoMo turns in {seconds:.1f} s = {done / seconds:.0f} messages/s "
          f"({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f})")

    model = semantic.model()
    query = "when did Caroline go to the LGBTQ support group and what did she say about it afterwards"
    for n in sizes:
        path = Path(tempfile.mkdtemp(prefix="pimem-vectors-"))
        _synthetic_vectors(path, n, model)
        holder = type("M", (), {"path": path})
        candidates = [(int(i), float(s)) for i, s in zip(
            np.random.default_rng(1).choice(n, 1000, replace=False), np.linspace(10, 1, 1000))]
        times = []
        for _ in range(7):
            t = time.perf_counter()
            fuse = semantic.fuser(holder, query)
            fuse(candidates)
            times.append(time.perf_counter() - t)
        times.sort()
        t = time.perf_counter()
        for _ in range(7):
            model.embed([query])
        embed = (time.perf_counter() - t) / 7
        print(f"fuse over {n:,} vectors and 1,000 candidates: median {times[3] * 1000:.1f} ms, best {times[0] * 1000:.1f} ms "
              f"(of which the query's embedding {embed * 1000:.1f} ms); vectors {_size(path) / 1e6:.0f} MB")


def _synthetic_vectors(path: Path, n: int, model) -> None:
    """``n`` random unit vectors stored as the model's (a search's cost does not depend on their values)."""
    import numpy as np

    vectors = path / semantic.DIRECTORY
    vectors.mkdir()
    writer = semantic._Writer(vectors, model)
    rng = np.random.default_rng(0)
    for start in range(0, n, 100_000):
        chunk = rng.standard_normal((min(100_000, n - start), model.dim), np.float32)
        writer._append(list(range(start, start + len(chunk))), chunk / np.linalg.norm(chunk, axis=1, keepdims=True))
    writer.next = n
    writer._commit()
    for f, _ in writer.files.values():
        f.close()


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fusion", action="store_true", help="fusion methods on the tuning split")
    parser.add_argument("--locomo-only", action="store_true", help="the sweep on LoCoMo alone")
    parser.add_argument("--speed", action="store_true", help="model load, embedding throughput, fuse cost")
    parser.add_argument("--sizes", default="10000,100000,1000000", help="vector counts for the fuse cost")
    parser.add_argument("--recall", action="store_true", help="the recall table (LoCoMo; --lme: LongMemEval too)")
    parser.add_argument("--lme", action="store_true", help="with --recall: LongMemEval too")
    parser.add_argument("--warm", metavar="SPLIT", help="embed a split's turns into the cache, nothing else")
    args = parser.parse_args()
    if not semantic.available():
        print("skipped: the semantic extra is not installed (pip install '.[semantic]')")
        return
    if args.warm:
        warm(args.warm)
    if args.fusion:
        fusion_sweep(args.locomo_only)
    if args.recall:
        recall_table(args.lme)
    if args.speed:
        speed([int(n) for n in args.sizes.split(",")])


if __name__ == "__main__":
    main()
