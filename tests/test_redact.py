"""Redaction: every secret shape of the corpus, and every one detect-secrets knows, is replaced before a request
leaves the machine (checked at the provider's side: a real HTTP server on 127.0.0.1 and the command provider,
with the secrets in every message kind), while ordinary text that looks random is sent as it is."""

from __future__ import annotations

import sys

import orjson
import pytest

from bench.llm_server import FakeLLM
from pimem import Memory
from pimem.compactor.redact import redact
from pimem.message import KINDS
from secret_shapes import LIBRARY_SHAPES, ORDINARY, SHAPES


def test_the_corpus_has_26_shapes():
    assert len(SHAPES) == 26 and len({name for name, _, _ in SHAPES}) == 26


@pytest.mark.parametrize("name,text,secrets", SHAPES + LIBRARY_SHAPES, ids=[s[0] for s in SHAPES + LIBRARY_SHAPES])
def test_every_shape_is_redacted(name, text, secrets):
    out = redact(text)
    for secret in secrets:
        assert secret not in out, out
    assert "redacted]" in out


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_left_alone(text):
    assert redact(text) == text


def test_only_the_secret_goes_not_its_line():
    out = redact("curl -u deploy:Pa55w0rdXyZ9 https://ci.example.com/api/build")
    assert out == "curl -u deploy:[password redacted] https://ci.example.com/api/build"
    out = redact("mysql -h db.internal -u root -pMyS3cretRootPw shop < dump.sql")
    assert out == "mysql -h db.internal -u root -p[password redacted] shop < dump.sql"


def everything() -> list[tuple[str, list[str]]]:
    """Texts holding every shape, in long messages (sent as leaf tasks) and short ones (sent as <chat> lines)."""
    out = []
    for n, (name, text, secrets) in enumerate(SHAPES + LIBRARY_SHAPES):
        filler = " ".join(f"w{n}x{k}" for k in range(90))
        out.append((f"step {n} ({name}): {filler}\n{text}\nand then we went on.", secrets))
        if len(text) < 300:
            out.append((text, secrets))
    return out


def fill(mem: Memory) -> list[str]:
    records, secrets = [], []
    for n, (text, found) in enumerate(everything()):
        records.append({"kind": KINDS[n % len(KINDS)], "text": text})
        secrets += found
    mem.append(records)
    return secrets


def configure(home, compactor: dict) -> None:
    home.mkdir(parents=True, exist_ok=True)
    cfg = {"view": {"hi": 3000, "lo": 1500}, "cview": {"hi": 4000, "lo": 2000}, "compactor": compactor}
    (home / "config.json").write_bytes(orjson.dumps(cfg))


def assert_nothing_leaked(sent: str, secrets: list[str], mem: Memory) -> None:
    assert "redacted]" in sent
    leaked = [s for s in secrets if s in sent]
    assert leaked == []
    log = "".join(m["text"] for m in mem.messages(0))
    assert all(s in log for s in secrets)  # the log keeps every byte


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_no_secret_reaches_an_http_provider(api, run, home, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM(api) as server:
        configure(home, {"provider": api, "model": "m1", "base_url": server.url, "key_env": "TEST_LLM_KEY",
                         "timeout": 20, "retry_seconds": 0.05})
        mem = Memory.at("m")
        secrets = fill(mem)
        out = run("build-tree", "m")
        assert out.exit_code == 0, out.stderr
    sent = "".join(repr(orjson.loads(raw)) for raw in server.raw)  # the strings as the server decoded them
    assert {k for k in KINDS if f"{k}: " in sent} == set(KINDS)
    assert_nothing_leaked(sent, secrets, mem)


def test_no_secret_reaches_the_command_provider(run, home, tmp_path):
    seen = tmp_path / "prompts.txt"
    script = tmp_path / "model.py"
    script.write_text(
        "import sys\n"
        f"open({str(seen)!r}, 'a').write(sys.stdin.read() + '\\n----\\n')\n"
        "print('user: a summary of this part; pi: done with it.')\n")
    configure(home, {"provider": "command", "command": f"{sys.executable} {script}", "timeout": 20})
    mem = Memory.at("m")
    secrets = fill(mem)
    out = run("build-tree", "m")
    assert out.exit_code == 0, out.stderr
    sent = seen.read_text()
    assert {k for k in KINDS if f"{k}: " in sent} == set(KINDS)
    assert_nothing_leaked(sent, secrets, mem)
