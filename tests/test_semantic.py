"""The optional semantic ranker (pimem.semantic): vectors as derived state, built in the background, fused
with the lexical ranker's scores; off and invisible without the extra. A small numpy embedder stands in for
the model (tests/embedder_stub.py); the real model is tested where the extra is installed."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, pimem_cmd, subprocess_env
from pimem import Memory, semantic

np = pytest.importorskip("numpy")

STUB = "tests.embedder_stub:load"
EXTRA = all(importlib.util.find_spec(name) is not None for name in semantic.PACKAGES)


@pytest.fixture
def stub(home, monkeypatch):
    monkeypatch.setenv(semantic.ENV, STUB)
    monkeypatch.setattr(semantic, "_model", None)
    yield
    semantic._model = None


def memory(messages) -> Memory:
    mem = Memory.at("main")
    mem.append([{"kind": k, "text": t} for k, t in messages])
    return mem


def meta(mem) -> dict:
    return json.loads((mem.path / "vectors" / "meta.json").read_text())


CHAT = [("user", "I bought a new car yesterday"), ("pi", "the weather is nice today"),
        ("tool", "car car car"), ("echo", "my car output"), ("user", "the doctor said rest"),
        ("note", "a kitten sleeps"), ("work", "deploy finished")]


# ---- on or off -----------------------------------------------------------------------------------------


def test_available_follows_the_installed_extra_and_the_environment(monkeypatch):
    monkeypatch.delenv(semantic.ENV, raising=False)
    assert semantic.available() is EXTRA
    monkeypatch.setenv(semantic.ENV, "off")
    assert semantic.available() is False
    monkeypatch.setenv(semantic.ENV, STUB)
    assert semantic.available() is True


def test_start_up_and_an_unembedded_memory_import_nothing_heavy(home):
    """Asking whether the extra is there, and building a scheduler or fuse hook for a memory without
    vectors, import neither numpy nor onnxruntime (with or without the extra installed)."""
    memory(CHAT).close()
    code = ("import sys; from pimem import Memory, cli, scheduler, semantic; semantic.available(); "
            "assert semantic.fuser(Memory.open('main'), 'car') is None; "
            "print(sorted(m for m in ('numpy', 'onnxruntime', 'tokenizers') if m in sys.modules))")
    env = subprocess_env()
    env.pop(semantic.ENV, None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_fuser_is_none_when_off_or_nothing_is_embedded(stub, monkeypatch):
    mem = memory(CHAT)
    assert semantic.fuser(mem, "automobile") is None  # nothing embedded yet
    semantic.catch_up(mem)
    assert semantic.fuser(mem, "automobile") is not None
    monkeypatch.setenv(semantic.ENV, "off")
    assert semantic.fuser(mem, "automobile") is None


# ---- building the vectors ------------------------------------------------------------------------------


def test_catch_up_embeds_conversation_only_and_resumes(stub):
    mem = memory(CHAT)
    assert semantic.catch_up(mem) == 5
    vectors = semantic.Vectors(mem.path)
    assert vectors.ids.tolist() == [0, 1, 4, 5, 6]  # never tool (2) or echo (3)
    assert meta(mem) == {"model": "stub-64", "dim": 64, "rows": 5, "next": 7}
    assert semantic.catch_up(mem) == 0
    mem.append([{"kind": "user", "text": "one more"}, {"kind": "echo", "text": "out"}])
    assert semantic.catch_up(mem) == 1
    assert semantic.Vectors(mem.path).ids.tolist() == [0, 1, 4, 5, 6, 7]
    stored = semantic.Vectors(mem.path)
    exact = semantic.model().embed(["I bought a new car yesterday"])[0]
    assert stored.cosines(exact, [0])[0] == pytest.approx(1.0, abs=0.01)  # int8 rows keep the direction


def test_a_crashed_writers_rows_are_cut_and_lost_files_rebuilt(stub):
    mem = memory(CHAT)
    semantic.catch_up(mem)
    folder = mem.path / "vectors"
    for name in ("ids.i4", "q8.i1", "scale.f4", "bits.u1"):  # rows written, meta.json never replaced
        with open(folder / name, "ab") as f:
            f.write(b"\x07" * 200)
    assert semantic.Vectors(mem.path).ids.tolist() == [0, 1, 4, 5, 6]  # readers use the committed rows
    mem.append([{"kind": "user", "text": "after the crash"}])
    assert semantic.catch_up(mem) == 1
    assert semantic.Vectors(mem.path).ids.tolist() == [0, 1, 4, 5, 6, 7]
    assert (folder / "q8.i1").stat().st_size == 6 * 64
    (folder / "q8.i1").write_bytes(b"")  # a file lost: start over
    assert semantic.catch_up(mem) == 6
    shutil.rmtree(folder)  # deleted freely
    assert semantic.fuser(mem, "car") is None
    assert semantic.catch_up(mem) == 6


def test_another_model_starts_over(stub):
    mem = memory(CHAT)
    semantic.catch_up(mem)
    data = meta(mem)
    (mem.path / "vectors" / "meta.json").write_text(json.dumps({**data, "model": "older-model"}))
    assert semantic.fuser(mem, "car") is None  # vectors of another model are never mixed with the query's
    assert semantic.catch_up(mem) == 5
    assert meta(mem)["model"] == "stub-64"


def test_catch_up_leaves_a_memory_another_process_is_embedding(stub):
    mem = memory(CHAT)
    (mem.path / "vectors").mkdir()
    fd = os.open(mem.path / "vectors" / "lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert semantic.catch_up(mem) is None
    finally:
        os.close(fd)
    assert semantic.catch_up(mem) == 5


def test_background_embeds_while_the_caller_goes_on(stub):
    mem = memory(CHAT)
    embedding = semantic.Background()
    embedding.add(mem)
    embedding.finish()
    assert meta(mem)["rows"] == 5


def test_reindex_and_build_tree_embed(stub, run):
    mem = memory(CHAT)
    result = run("reindex", "main", "--json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)
    assert (row["messages"], row["embedded"]) == (7, 5)
    shutil.rmtree(mem.path / "vectors")
    result = run("build-tree", "main")
    assert result.exit_code == 0, result.output
    assert meta(mem)["rows"] == 5


def test_reindex_without_the_extra_says_nothing_of_vectors(home, run, monkeypatch):
    monkeypatch.setenv(semantic.ENV, "off")
    mem = memory(CHAT)
    row = json.loads(run("reindex", "main", "--json").output)
    assert "embedded" not in row and not (mem.path / "vectors").exists()


def test_watch_embeds_new_messages(home, tmp_path):
    mem = memory(CHAT)
    env = subprocess_env(**{semantic.ENV: STUB})
    watcher = subprocess.Popen(pimem_cmd("watch", "main"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        mem.append([{"kind": "user", "text": "a sedan parked outside"}])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            path = mem.path / "vectors" / "meta.json"
            if path.exists() and meta(mem)["next"] == 8:
                break
            time.sleep(0.1)
        assert meta(mem) == {"model": "stub-64", "dim": 64, "rows": 6, "next": 8}
    finally:
        watcher.send_signal(signal.SIGTERM)
        assert watcher.wait(timeout=60) == 0, watcher.stderr.read()


def test_a_slow_embedder_never_blocks_a_reader(home):
    """``reindex`` embedding with a slow model: while it runs, a reader fuses what is committed so far."""
    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": f"message {n} about a car"} for n in range(3 * semantic.BATCH)])
    env = subprocess_env(**{semantic.ENV: STUB, "PIMEM_STUB_DELAY": "3"})
    indexer = subprocess.Popen(pimem_cmd("reindex", "main"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        path = mem.path / "vectors" / "meta.json"
        deadline = time.monotonic() + 60
        while not (path.exists() and meta(mem)["rows"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.environ[semantic.ENV] = STUB
        semantic._model = None
        fused = semantic.fuser(mem, "automobile")([(5, 1.0)])
        committed = meta(mem)["rows"]
        assert indexer.poll() is None and committed < 3 * semantic.BATCH  # still embedding the rest
        assert len(fused) > 1 and max(i for i, _ in fused) < committed  # what was embedded so far
    finally:
        os.environ.pop(semantic.ENV, None)
        semantic._model = None
        indexer.wait(timeout=120)
    assert meta(mem)["rows"] == 3 * semantic.BATCH


# ---- fusion ---------------------------------------------------------------------------------------------


def test_combine_is_a_weighted_sum_of_normalised_scores():
    fused = semantic.combine({1: 10.0, 2: 5.0, 4: 2.0}, {1: 0.1, 2: 0.9, 3: 0.5}, weight=0.5)
    assert fused == pytest.approx({1: 0.5, 2: 0.75, 3: 0.25, 4: 0.2})  # 4 has no vector: its lexical share twice


def test_reciprocal_rank():
    fused = semantic.reciprocal_rank({1: 10.0, 2: 5.0}, {2: 0.9, 3: 0.5}, k=60)
    assert fused == pytest.approx({1: 1 / 61, 2: 1 / 62 + 1 / 61, 3: 1 / 62})


def test_the_fuse_hook_finds_a_paraphrase_and_keeps_the_callers_filter(stub):
    mem = memory(CHAT)
    semantic.catch_up(mem)
    fused = semantic.fuser(mem, "automobile")([(1, 3.0)])
    assert [i for i, _ in fused][:2] == [1, 0]  # the lexical best, then "I bought a new car": no word in common
    assert {2, 3}.isdisjoint(i for i, _ in fused)  # tool traffic is never embedded
    kept = semantic.fuser(mem, "automobile", keep=lambda i: i != 0)([(1, 3.0)])
    assert 0 not in (i for i, _ in kept)
    assert [i for i, _ in kept][0] == 1  # the lexical candidate stays


def test_the_sign_bit_pass_finds_the_nearest_on_a_big_memory(stub, monkeypatch):
    mem = memory([("user", f"filler words number {n}") for n in range(60)] + [("pi", "the physician came")])
    semantic.catch_up(mem)
    monkeypatch.setattr(semantic, "FIRST_PASS", 5)
    monkeypatch.setattr(semantic, "HAMMING_CHUNK", 7)  # several chunks, the last one short
    vectors = semantic.Vectors(mem.path)
    near = vectors.nearest(semantic.model().embed(["doctor came"])[0], 1)
    assert list(near) == [60]


# ---- the real model, where the extra is installed ---------------------------------------------------------


@pytest.mark.skipif(not EXTRA, reason="the semantic extra (pimem[semantic]) is not installed")
def test_the_packaged_model_loads_and_embeds(monkeypatch):
    monkeypatch.delenv(semantic.ENV, raising=False)
    model = semantic.MiniLM(threads=1)
    vectors = model.embed(["The cat sat on the mat.", "A kitten was sitting on a rug.", "Stock prices fell sharply.",
                           "x" * 10_000])
    assert vectors.shape == (4, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-4)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    alone = model.embed(["The cat sat on the mat."])[0]
    assert alone @ vectors[0] == pytest.approx(1, abs=1e-4)  # padding in a batch changes nothing


def test_a_message_naming_its_speaker_is_embedded_with_the_name():
    assert semantic.embedded_text({"text": "I went hiking", "meta": {"speaker": "Caroline"}}) == "Caroline: I went hiking"
    assert semantic.embedded_text({"text": "I went hiking", "meta": {"author": " Bob "}}) == "Bob: I went hiking"
    assert semantic.embedded_text({"text": "I went hiking", "meta": {"speaker": 3}}) == "I went hiking"
    assert semantic.embedded_text({"text": "I went hiking"}) == "I went hiking"


# ---- through search --rank (the ranker's fuse hook) ------------------------------------------------------

needs_ranker = pytest.mark.skipif(importlib.util.find_spec("pimem.ranker") is None,
                                  reason="the ranker (issue 14) has not landed in this checkout")

TRAFFIC = [("user", "I bought a new car yesterday"), ("pi", "the weather is nice today"),
           ("tool", "automobile automobile"), ("echo", "automobile output")]


def hits(run, *args) -> list[dict]:
    result = run("search", *args, "--rank", "--json")
    assert result.exit_code in (0, 1), result.output
    return [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]


@needs_ranker
def test_search_rank_fuses_what_is_embedded_and_keeps_tool_traffic_private(stub, run):
    memory(TRAFFIC)
    assert [h["i"] for h in hits(run, "automobile", "main")] == []  # no vectors yet: lexical only
    run("reindex", "main")
    found = [h["i"] for h in hits(run, "automobile", "main")]
    assert found[0] == 0  # "car": no word in common with the query
    assert {2, 3}.isdisjoint(found)  # the tool traffic that says it stays out
    assert {h["i"] for h in hits(run, "automobile", "main", "--include-tools")} >= {0, 2, 3}
    assert 0 not in [h["i"] for h in hits(run, "automobile", "main", "--kind", "pi")]  # the caller's filter holds


@needs_ranker
def test_ranked_results_are_identical_without_the_extra(stub, run, monkeypatch):
    memory(CHAT + TRAFFIC)
    before = run("search", "car weather doctor", "main", "--rank", "--json").output
    run("reindex", "main")
    monkeypatch.setenv(semantic.ENV, "off")
    assert run("search", "car weather doctor", "main", "--rank", "--json").output == before
