"""The compactor harness: size cut, redaction, the offline summariser, and both HTTP APIs against a real
local server with injected faults."""

from __future__ import annotations

import os
import sys

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from bench.llm_server import FakeLLM
from pimem.compactor import CallFailed, Compactor, Task, extractive, parse_spec
from pimem.compactor.cut import cut_line
from pimem.compactor.redact import redact
from pimem.compactor.state import BuildState
from pimem.errors import BadInput


# ---- the cut ---------------------------------------------------------------------------------------------


def test_cut_keeps_short_lines_and_strips_fences_and_labels():
    assert cut_line("```\nSummary: user: fix port 5433\n```") == "user: fix port 5433"
    assert cut_line("12+4| user: asked; pi: answered;") == "user: asked; pi: answered"
    assert cut_line("line one\nline two") == "line one line two"


def test_cut_at_last_clause_end_in_bytes():
    text = "; ".join(f"item {n} is here" for n in range(60))
    line = cut_line(text)
    assert len(line.encode()) <= 512
    assert line.endswith("is here") and text.startswith(line)


def test_pure_chinese_is_cut_at_punctuation_not_hard():
    sentence = "我们把数据库端口改成了五四三三并且重启了服务。"  # 23 characters, 69 bytes
    line = cut_line(sentence * 20)
    assert len(line.encode()) <= 512
    assert line.endswith("。")
    assert line == sentence * (512 // len(sentence.encode()))


def test_cut_never_splits_a_character():
    line = cut_line("汉" * 400)
    assert len(line.encode()) <= 512
    assert line == "汉" * 170


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(list("ab;.,。，！汉字é\n\t`") + ["🙂", "; ", ". ", " "]), max_size=700).map("".join))
def test_cut_is_always_one_line_within_512_bytes(text):
    line = cut_line(text)
    assert len(line.encode("utf-8")) <= 512
    assert "\n" not in line


# ---- redaction -------------------------------------------------------------------------------------------

SECRETS = [
    "sk-proj-Abcdefghijklmnopqrstuvwx0123456789",
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "xoxb-1234567890-abcdefghij",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
    "hunter2-Pa55word",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_redaction_removes_every_kind_of_secret(secret):
    texts = [f"use {secret} now", f"password={secret}", f"postgres://bob:{secret}@db:5432/app",
             f"Authorization: Bearer {secret}", f'{{"api_key": "{secret}"}}']
    for text in texts:
        if secret.startswith("hunter2") and text.startswith("use "):
            continue  # a plain password is only recognisable by the name it is given
        assert secret not in redact(text), text


def test_redaction_keeps_ordinary_text():
    text = "port 5433, max_tokens: 170000, the password is in the vault, see /etc/app.conf"
    assert redact(text) == text
    block = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"
    assert redact(f"key:\n{block}\nend") == "key:\n[private key redacted]\nend"


# ---- the offline compactor -------------------------------------------------------------------------------


def test_extractive_keeps_numbers_paths_and_errors():
    text = ("We looked around the repository for a while. " * 20
            + "pytest failed: ConnectionError: could not connect to port 5433 (see /srv/app/db.py). "
            + "Nothing else happened. " * 20)
    line = extractive.leaf("echo", text)
    assert len(line.encode()) <= 512
    assert line.startswith("echo: ")  # a tool result: how it ended, then its facts
    assert "port 5433" in line and "/srv/app/db.py" in line and "ConnectionError" in line
    assert extractive.leaf("echo", text) == line  # deterministic


def test_extractive_handles_chinese():
    text = "今天我们讨论了部署的事情。" * 30 + "报错信息：连接端口5433超时。" + "最后决定明天再试。" * 30
    line = extractive.leaf("user", text)
    assert len(line.encode()) <= 512
    assert "5433" in line and line.startswith("user: 今天")
    assert line.encode("utf-8").decode("utf-8") == line


def test_extractive_merge_keeps_both_halves():
    left = "user: deploy app v2.3.1 to staging; " + "pi: checked the config files one by one. " * 8
    right = "echo: Error: permission denied on /var/run/app.sock; " + "pi: retried with sudo and it worked. " * 8
    line = extractive.merge(left, right)
    assert len(line.encode()) <= 512
    assert "v2.3.1" in line and "/var/run/app.sock" in line


# ---- model specs -----------------------------------------------------------------------------------------


def test_parse_spec_presets_and_refusals():
    assert parse_spec("deepseek/deepseek-chat")["base_url"] == "https://api.deepseek.com"
    assert parse_spec("openrouter/qwen/qwen3-8b")["model"] == "qwen/qwen3-8b"
    assert parse_spec("ollama/llama3.2")["key_env"] is None
    assert parse_spec("command", command="llm -m gpt-4o-mini")["command"] == "llm -m gpt-4o-mini"
    for bad in (lambda: parse_spec("nope/x"), lambda: parse_spec("openai"), lambda: parse_spec("command"),
                lambda: parse_spec("openai/x", key_env="sk-123 secret"), lambda: parse_spec("openai/x", base_url="ftp://x")):
        with pytest.raises(BadInput):
            bad()


# ---- providers against a real local server -----------------------------------------------------------------

LEAF = Task(0, 7, kind="echo", text="x" * 3000 + " token=sk-abcdefghijklmnopqrstuv123 at /tmp/a.log")


def compactor_for(server, tmp_path, api="openai", **extra):
    cfg = {"provider": api, "model": "m1", "base_url": server.url, "key_env": "TEST_LLM_KEY", "timeout": 1,
           "price_in": 1.0, "price_out": 2.0, **extra}
    return Compactor(cfg, BuildState(tmp_path))


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_every_fault_fails_one_call_then_the_node_builds(api, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "sk-testkey-abcdefghijklmnop")
    faults = ["500", "429", "hang", "malformed", "empty"]
    with FakeLLM(api, faults=faults, hang=2.5) as server:
        comp = compactor_for(server, tmp_path, api)
        errors = []
        for _ in faults:
            with pytest.raises(CallFailed) as exc:
                comp.build(LEAF, "0+1|user: hello")
            errors.append(exc.value)
        assert errors[1].retry_after == 1.0
        assert "500" in str(errors[0]) and "1 s" in str(errors[2]) and "not JSON" in str(errors[3]) and "no text" in str(errors[4])
        text, meta = comp.build(LEAF, "0+1|user: hello")
        comp.close()
    assert text == "user: summary of 7; pi: done. Extra words to pad the line a little."
    assert meta["model"] == f"{api}/m1" and meta["tokens_in"] == 1000 and meta["tokens_out"] == 100
    assert meta["cost"] == pytest.approx((1000 * 1.0 + 100 * 2.0) / 1e6)
    body = server.raw[-1].decode()
    assert "sk-abcdefghijklmnopqrstuv123" not in body and "sk-testkey" not in body
    assert "[api key redacted]" in body or "[secret redacted]" in body
    key_header = "authorization" if api == "openai" else "x-api-key"
    sent = {k.lower(): v for k, v in server.headers[-1].items()}[key_header]
    assert "sk-testkey-abcdefghijklmnop" in sent


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_long_output_is_cut_to_512_bytes(api, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM(api, faults=["long"]) as server:
        text, _ = compactor_for(server, tmp_path, api).build(LEAF)
    assert 256 <= len(text.encode()) <= 512


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_reasoning_model_gets_more_tokens_once_and_it_is_remembered(api, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM(api, reasoning=True) as server:
        text, meta = compactor_for(server, tmp_path, api).build(LEAF)
        assert [r["max_tokens"] for r in server.requests] == [170, 1194]
        assert meta["tokens_out"] == 200
        # a new process (a new Compactor on the same state file) asks with room straight away
        compactor_for(server, tmp_path, api).build(LEAF)
        assert [r["max_tokens"] for r in server.requests] == [170, 1194, 1194]
    assert text.startswith("user: summary of 7")
    assert BuildState(tmp_path).extra_tokens == {f"{api}/m1": 1024}


def test_missing_key_variable_is_a_call_failure(tmp_path, monkeypatch):
    monkeypatch.delenv("TEST_LLM_KEY", raising=False)
    with FakeLLM("openai") as server:
        with pytest.raises(CallFailed, match="TEST_LLM_KEY"):
            compactor_for(server, tmp_path).build(LEAF)
        assert server.requests == []


def test_command_provider_reads_the_prompt_on_stdin(tmp_path):
    script = tmp_path / "fake.sh"
    script.write_text("#!/bin/sh\ncat > \"$(dirname \"$0\")/prompt.txt\"\necho 'user: from the command'\n")
    script.chmod(0o755)
    comp = Compactor({"provider": "command", "command": str(script)}, BuildState(tmp_path))
    text, meta = comp.build(LEAF, "0+1|user: hi")
    assert text == "user: from the command"
    prompt = (tmp_path / "prompt.txt").read_text()
    assert "<chat>\n0+1|user: hi\n</chat>" in prompt and "Compaction: compress message 7" in prompt
    assert "sk-abcdefghijklmnopqrstuv123" not in prompt
    bad = Compactor({"provider": "command", "command": "exit 3"}, BuildState(tmp_path))
    with pytest.raises(CallFailed, match="exited 3"):
        bad.build(LEAF)


# ---- pimem model -----------------------------------------------------------------------------------------


def test_model_sets_shows_and_defaults_without_storing_keys(run, home, monkeypatch):
    from conftest import snapshot

    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-real-secret-key-1234567890")
    run("append", "main", "hello")
    assert run("model", "main").stdout == "main: extractive\n"
    out = run("model", "main", "deepseek/deepseek-chat", "--price-in", "0.27", "--price-out", "1.1")
    assert out.exit_code == 0
    assert out.stdout == ("main: openai/deepseek-chat\n  base_url  https://api.deepseek.com\n  key_env   DEEPSEEK_API_KEY\n"
                          "  price_in  0.27\n  price_out 1.1\n")
    stored = (home / "main" / "config.json").read_text()
    assert "DEEPSEEK_API_KEY" in stored and "sk-real-secret" not in stored
    # a new model replaces every provider setting (no stale base_url or price)
    row = orjson.loads(run("model", "main", "anthropic/claude-haiku-4-5", "--json").stdout)
    assert row == {"memory": "main", "model": "anthropic/claude-haiku-4-5", "base_url": "https://api.anthropic.com",
                   "key_env": "ANTHROPIC_API_KEY"}
    assert run("model", "--default", "ollama/llama3.2").stdout == "default: openai/llama3.2\n  base_url  http://localhost:11434/v1\n"
    run("append", "other", "hi")
    assert run("model", "other").stdout.startswith("other: openai/llama3.2")  # the default applies
    assert run("model", "main").stdout.startswith("main: anthropic/")  # its own setting wins
    before = snapshot(home)
    for args in (["main", "nope/x"], ["main", "openai"], ["main", "command"], ["main", "--base-url", "http://x"],
                 ["main", "openai/x", "--key-env", "sk-abc def"], ["main", "extractive", "--command", "cat"],
                 ["main", "extractive", "--price-in", "1"], ["main", "openai/x", "--price-in", "1"],
                 ["main", "openai/x", "--price-out", "1"], ["main", "openai/x", "--price-cached-in", "1"]):
        bad = run("model", *args)
        assert bad.exit_code == 2 and bad.stderr.startswith("pimem: error: "), args
    assert "e.g. ollama/llama3.2" in run("model", "main", "ollama").stderr  # a model of that service
    assert run("model", "ghost", "extractive").exit_code == 3
    assert snapshot(home) == before
    cached = run("model", "other", "openai/gpt-4o-mini", "--price-in", "0.15", "--price-out", "0.6", "--price-cached-in", "0.075")
    assert cached.stdout.endswith("  price_in  0.15\n  price_out 0.6\n  price_cached_in 0.075\n")  # as --json shows it


def test_model_status_and_errors_show_a_base_url_without_its_password(run, home, monkeypatch):
    """``pimem model`` and ``status --json`` showed a ``--base-url`` as given, password and all, and so did the
    error for one that is no URL; config.json keeps it, for the calls to send it. An OpenAI-compatible
    compactor's key takes the header the user and password would: ``pimem model`` says they are not sent."""
    url = "http://bob:UrlPw0rdSecret@127.0.0.1:9/v1"
    monkeypatch.setenv("TEST_LLM_KEY", "sk-testkey-abcdefghijklmnop")
    run("append", "main", "hello")
    out = run("model", "main", "openai/x", "--base-url", url, "--key-env", "TEST_LLM_KEY")
    assert out.stdout == ("main: openai/x\n  base_url  http://127.0.0.1:9/v1 (and a user and password, kept in "
                          "config.json)\n  key_env   TEST_LLM_KEY\n")
    assert out.stderr == ("pimem: warning: the user and password in the base URL are not sent: the API key from "
                          "$TEST_LLM_KEY goes in the Authorization header they would take\n")
    assert orjson.loads((home / "main" / "config.json").read_bytes())["compactor"]["base_url"] == url
    assert orjson.loads(run("model", "main", "--json").stdout)["base_url"] == "http://127.0.0.1:9/v1"
    assert orjson.loads(run("status", "main", "--json").stdout)["compactor"]["base_url"] == "http://127.0.0.1:9/v1"
    assert run("model", "--default", "ollama/x", "--base-url", url).stdout.startswith(
        "default: openai/x\n  base_url  http://127.0.0.1:9/v1 (and")  # (no key: they are sent, and no warning)
    bad = run("model", "main", "openai/x", "--base-url", "http://bob:UrlPw0rdSecret@ho st/v1")
    assert bad.exit_code == 2 and bad.stderr.endswith("not 'http://ho st/v1'\n")
    config = orjson.loads((home / "main" / "config.json").read_bytes())
    config["compactor"]["base_url"] = "http://bob:UrlPw0rdSecret@[::1/v1"  # (no URL a call can go to)
    (home / "main" / "config.json").write_bytes(orjson.dumps(config))
    for args in (["status", "main"], ["fsck", "main"], ["model", "main"]):
        bad = run(*args)
        said = bad.stdout if args[0] == "fsck" else bad.stderr  # (fsck: a finding, exit 5)
        assert bad.exit_code == (5 if args[0] == "fsck" else 2) and 'compactor.base_url cannot be "http://[::1/v1"' in said, args
        assert "UrlPw0rdSecret" not in bad.stdout + bad.stderr
    run("append", "other", "hello")
    for url in ("http://bob:UrlPw0rdSecret@[::1/v1", "http://host:port/v1"):  # (each call failed on a traceback)
        bad = run("model", "other", "openai/x", "--base-url", url)
        assert bad.exit_code == 2 and bad.stderr.startswith("pimem: error: --base-url must be"), url
        assert "UrlPw0rdSecret" not in bad.stderr


def test_a_base_urls_query_values_and_a_commands_key_are_never_shown(run, home, monkeypatch):
    """A key passed in the base URL's query (``?key=…&code=…``) was shown by ``pimem model`` (and its ``--json``),
    ``status --json`` and compactor.json's ``compactor``, and so was one in a command provider's command line:
    each is shown hidden or redacted, as a URL's password is; config.json keeps them, to use them."""
    url = "http://127.0.0.1:9/v1?key=QkEyAbCdEfGh12&code=AzFnXyZ98765&api-version=2024-02-01"
    monkeypatch.setenv("MYKEY", "sk-testkey-abcdefghijklmnop")
    run("append", "main", "hello")
    out = run("model", "main", "openai/x", "--base-url", url, "--key-env", "MYKEY")
    shown = "http://127.0.0.1:9/v1?key=[hidden]&code=[hidden]&api-version=[hidden]"
    assert out.stdout == (f"main: openai/x\n  base_url  {shown} (and the query's values, kept in config.json)\n"
                          "  key_env   MYKEY\n")
    assert out.stderr == ""  # (no user and password: nothing unsent to warn of)
    assert orjson.loads((home / "main" / "config.json").read_bytes())["compactor"]["base_url"] == url
    assert orjson.loads(run("model", "main", "--json").stdout)["base_url"] == shown
    assert orjson.loads(run("status", "main", "--json").stdout)["compactor"]["base_url"] == shown
    for args in (["main", "openai/x", "--base-url", "http://ho st/v1?key=QkEyAbCdEfGh12"],):
        bad = run("model", *args)
        assert bad.exit_code == 2 and "QkEyAbCdEfGh12" not in bad.stderr and "key=[hidden]" in bad.stderr
    key = "sk-proj-Abcdefghijklmnopqrstuvwx0123456789"
    command = f"OPENAI_API_KEY={key} sh -c 'cat >/dev/null; echo failing >&2; exit 1'"
    out = run("model", "main", "command", "--command", command)
    assert key not in out.stdout and "OPENAI_API_KEY=[api key redacted] sh -c" in out.stdout
    assert "(its secrets redacted, kept in config.json)" in out.stdout
    assert key not in run("model", "main", "--json").stdout + run("status", "main", "--json").stdout
    run("append", "main", "word " * 400)  # (long: a node the command is called for)
    assert run("build-tree", "main").exit_code != 0
    recorded = (home / "main" / "compactor.json").read_text()
    assert "OPENAI_API_KEY=[api key redacted] sh -c" in recorded and key not in recorded
    assert key in (home / "main" / "config.json").read_text()


@pytest.mark.parametrize("key", ["sk-proj-Abcdefghijklmnopqrstuvwx0123456789", "ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6",
                                 "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "AKIAQX4Z7JH2LMN5PQRS"])
def test_a_key_given_as_key_env_is_refused_and_never_said(key, run, home):
    """``--key-env sk-proj-…`` was refused with the key echoed; the same in config.json was taken, then printed by
    ``status``, ``model`` and a warning. Both are refused, the value never said; a variable's name passes."""
    run("append", "main", "hello")
    bad = run("model", "main", "openai/x", "--key-env", key)
    assert bad.exit_code == 2 and bad.stderr.startswith("pimem: error: --key-env wants the NAME") and key not in bad.stderr
    path = home / "main" / "config.json"
    path.write_bytes(orjson.dumps({"compactor": {"provider": "openai", "model": "x", "key_env": key}}))
    for args in (["status", "main"], ["status", "main", "--json"], ["model", "main"], ["build-tree", "main"]):
        out = run(*args)
        assert out.exit_code == 2 and "compactor.key_env must name an environment variable" in out.stderr, args
        assert key not in out.stdout + out.stderr, args
    path.unlink()
    for name in ("OPENAI_API_KEY", "AZURE_OPENAI_KEY_2", "my_key", "Key2"):
        assert run("model", "main", "openai/x", "--key-env", name).exit_code == 0, name


KEYS = ["sk-proj-Abcdefghijklmnopqrstuvwx0123456789", "ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6",
        "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "AKIAQX4Z7JH2LMN5PQRS", "AKIAIOSFODNN7EXAMPLE", "hf_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3",
        "npm_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF",
        "Xk9fPq2LmW_vR7tYb3NcJ", "f7a9c2e8b1d4f6a9e2c7b5d8a1f3e6c4"]
NAMES = ["OPENAI_API_KEY", "AZURE_OPENAI_KEY_2", "my_key", "Key2", "MyCompany_OpenAI_Key2", "AZURE_OPENAI_API_KEY_2025",
         "GPT4o_Mini_Api_Key", "OpenRouter_Api_Key_V2", "AWS_S3_BUCKET_SECRET_1", "Team42_Prod_OpenAI_Key"]


@pytest.mark.parametrize("text", NAMES)
def test_a_variables_name_is_one_whatever_its_case_and_digits(text):
    """``MyCompany_OpenAI_Key2`` was refused as a pasted key (16 characters or more with a digit were taken for one
    unless in one case): a name is words and numbers joined by ``_``, whatever their case."""
    from pimem.config import is_var_name

    assert is_var_name(text)


@pytest.mark.parametrize("text", KEYS)
def test_a_key_is_no_variables_name(text):
    """A key pasted for a name: a long run with no ``_`` in it, or digits inside words more than once."""
    from pimem.config import is_var_name

    assert not is_var_name(text)


@pytest.mark.parametrize("damage", [b"null", b"[]", b'{"extra_tokens": {"openai/m1": "big"}, "failures": {"0+1": "x"}, '
                                                  b'"unbuilt_cost": {"2026-10-08": -1}, "capped": 5}'])
def test_a_compactor_json_of_another_shape_is_state_lost_not_a_crash(damage, run, home, monkeypatch):
    """``compactor.json`` is state (deleting it costs a relearning call): one that holds JSON of another shape
    (a hand edit, another tool's file) is read as far as it makes sense, as an unreadable one is, and the
    money it would miscount (a negative cost paid) is left out (before, status, context's wait and build-tree
    stopped on a traceback)."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai") as server:
        home.mkdir()
        (home / "config.json").write_bytes(orjson.dumps({"compactor": {
            "provider": "openai", "model": "m1", "base_url": server.url, "key_env": "TEST_LLM_KEY", "price_in": 1.0,
            "price_out": 2.0}}))
        assert run("append", "m", "long words here " * 100).exit_code == 0
        (home / "m" / "compactor.json").write_bytes(damage)
        status = run("status", "m", "--json")
        assert status.exit_code == 0, status.output
        row = orjson.loads(status.stdout)
        assert (row["failures"], row["spent"]["cost_unbuilt"], row["capped"]) == ([], 0, None)
        built = run("build-tree", "m")
        assert built.exit_code == 0, built.output
    assert orjson.loads(run("status", "m", "--json").stdout)["tree"]["pending"] == 0


def test_build_metadata_of_another_shape_on_a_node_is_not_counted_and_stops_nothing(run, home):
    """A node written through the library with build metadata that is no count or cost (``"cost": "0.5"``, a
    ``suspect`` that is no list) is counted as none, in ``status``, the dry run and a watcher's day, and said by
    ``fsck`` (before, each stopped on a traceback while ``fsck`` found nothing wrong, or fsck stopped too)."""
    from pimem import Memory, builder

    mem = Memory.at("m")
    mem.append([{"kind": "user", "text": f"message {k} " + "words " * 200} for k in range(2)])
    mem.write_nodes([(0, 0, "user: one", {"model": "openai/m1", "cost": "0.5", "tokens_in": "many", "tokens_out": None}),
                     (0, 1, "user: two", {"model": "openai/m1", "cost": True, "tokens_cached": 1.5, "suspect": 7})])
    status = run("status", "m", "--json")
    assert status.exit_code == 0, status.output
    spent = orjson.loads(status.stdout)["spent"]
    assert (spent["calls"], spent["tokens_in"], spent["tokens_cached"], spent["cost"], spent["suspect"]) == (2, 0, 0, 0, [])
    assert builder.spent(Memory.open("m"), day="2026-10-08")["cost"] == 0
    mem.save_config({"compactor": {"provider": "openai", "model": "m1", "price_in": 1.0, "price_out": 2.0}})
    assert run("build-tree", "m", "--dry-run").exit_code == 0
    checked = run("fsck", "m")
    said = "node 1+1: its tokens_cached 1.5 is no whole number from 0; cost true is no number from 0; suspect 7 is no list"
    assert checked.exit_code == 0 and said + " (counted as none)" in checked.stdout, checked.output


def test_a_run_the_cap_stops_before_its_one_node_says_it_remains(run, home, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    assert run("append", "m", "long words here " * 100).exit_code == 0
    assert run("model", "m", "openai/m1", "--base-url", "http://127.0.0.1:9/v1", "--key-env", "TEST_LLM_KEY",
               "--price-in", "1", "--price-out", "2").exit_code == 0
    out = run("build-tree", "m", "--max-cost", "0")
    assert out.exit_code == 6 and out.stderr.endswith("; 1 node remains unbuilt\n"), out.stderr


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_replys_control_characters_and_escape_sequences_never_reach_the_tree(api, run, home, monkeypatch):
    """A model echoing a transcript's colours and bells: the view showed them as spaces, but ``view --json`` kept
    them, and the faithfulness guard read ``\\x1b[31m`` as the number 31 and asked again. They are cleaned with
    the fences and labels, before the guard reads the line: one call a node, nothing marked. (The transcript
    holds them: a control character its input does not hold makes the answer no summary, ``compactor.junk``.)"""
    from pimem import Memory
    from test_scheduler import configure, long_text, stored_lines

    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM(api) as server:
        server.reply = lambda body: "Summary: \x1b[31mdeploy failed\x1b[0m\x07 again; \x1b]0;title\x07see\x7flogs\x9b1m"
        configure(home, server, api)
        mem = Memory.at("m")  # three long messages: three calls
        mem.append([{"kind": "user", "text": "short"}]
                   + [{"kind": "pi", "text": long_text(k) + " \x1b[31mred\x1b[0m\x07 \x7f \x9b1m"} for k in (1, 2, 3)])
        out = run("build-tree", "m")
        asked = len(server.requests)
    assert out.exit_code == 0, out.stderr
    lines = stored_lines(Memory.open("m"))
    assert asked == 3 and {n["text"] for n in lines if n["l"] == 0} == {"deploy failed again; see logs"}
    assert not any("suspect" in n for n in lines)
    assert "\\u001b" not in run("view", "m", "--json").stdout and mem.count() == 4


@pytest.mark.parametrize("summary, message", [
    ("user: edited readme.md", "I changed README.md"),
    ("user: edited README.md", "cat readme.md"),
    ("user: fixed src/App.py", "the bug is in src/app.py"),
    ("user: see /etc/Nginx/sites/default", "cat /etc/nginx/sites/default"),
    ("user: read ~/Docs/x.txt", "ls /home/ann/docs/x.txt"),
    ("user: set maxPool", "MAXPOOL=4"),  # (as an identifier always was)
])
def test_a_file_name_or_path_in_another_case_is_founded_as_an_identifier_is(summary, message):
    """The guard looks for invented facts: ``readme.md`` for ``README.md`` names the file the span does (Linux
    tells them apart, a reader does not), as ``maxPool`` for ``MAXPOOL`` names its identifier. A path or file
    name was compared with its case (marked suspect, asked again), an identifier without."""
    from pimem.compactor import faith

    assert faith.unfounded(summary, [message]) == []


def test_another_file_or_path_is_still_unfounded_whatever_its_case():
    from pimem.compactor import faith

    assert faith.unfounded("user: edited NOTES.md and src/B.py", ["I changed README.md and src/a.py"]) == ["NOTES.md", "src/B.py"]


# ---- an answer that is no summary ----------------------------------------------------------------------------

SEEDED = "import random, sys; r = random.Random(7); sys.stdout.buffer.write(bytes(r.randrange({}) for _ in range(3000)))"


@pytest.mark.parametrize("command, said", [
    (f"{sys.executable} -c '{SEEDED.format('1, 256')}'", "its answer is not UTF-8 text ("),  # random bytes
    (f"{sys.executable} -c '{SEEDED.format('1, 128')}'", "its answer holds control character U+0001"),  # random ASCII
    ("yes 'summary line' | head -c 5000000", "its line is mostly one phrase repeated ('summary line' 39 times)"),
    ("printf 'user: deploy \\356\\200\\200 done'", "its line holds a private-use character U+E000"),
    ("printf 'user: deploy \\315\\270 done'", "its line holds an unassigned code point U+0378"),
])
def test_an_answer_that_is_no_summary_fails_its_call_and_is_never_a_node(command, said, run, home):
    """A command printing random bytes, or ``yes`` of a phrase: the line was kept for good (nodes are written
    once; random bytes marked ``suspect``, the phrase not even that) with 1,811 U+FFFD in one context. Now the
    call fails as any failed call does: exit 6 with the reason in one line, in ``compactor.json`` and ``status``,
    nothing written; the node is built once the command answers a summary."""
    from pimem import Memory
    from pimem.compactor.state import BuildState

    assert run("append", "m", "long words here about the deploy " * 40).exit_code == 0
    assert run("model", "m", "command", "--command", command).exit_code == 0
    out = run("build-tree", "m")
    reason = f"command returned no summary: {said}"
    assert out.exit_code == 6 and out.stderr.splitlines()[-1].startswith("pimem: error: 1 node could not be built")
    assert reason in out.stderr.splitlines()[-1], out.stderr
    mem = Memory.open("m")
    assert not list((mem.path / "tree").glob("*.jsonl")) or not any(p.read_bytes() for p in (mem.path / "tree").glob("*.jsonl"))
    assert BuildState(mem.path).failures["0+1"]["error"].startswith(reason)
    assert reason in run("status", "m").stdout
    assert run("model", "m", "command", "--command", "echo 'user: asked about the deploy'").exit_code == 0
    assert run("build-tree", "m").exit_code == 0
    assert run("view", "m").stdout == "0+1|user: asked about the deploy\n"


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_server_answering_no_summary_is_retried_and_backed_off_like_any_failure(api, run, home, monkeypatch):
    """Over HTTP: U+FFFD, a lone surrogate (``\\ud800`` in the JSON), a private-use character, a noncharacter, a
    phrase over and over. Each answer fails its call, is retried (``--retries``) and the node written once, from
    the summary that follows; a character cut by the token limit at the end of an answer is dropped, not refused."""
    from pimem import Memory
    from test_scheduler import configure, fill, stored_lines

    junk = ["user: \ufffd\ufffd deploy", "user: deploy \ud800 done", "user: \ue000 deploy", "user: deploy \ufdd0",
            "done. " * 30]
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM(api) as server:
        server.reply = lambda body: junk[len(server.requests) - 1] if len(server.requests) <= len(junk) else "user: 部署完成\ufffd"
        configure(home, server, api)
        fill("m", 2, short_every=1000)  # one long message: one node
        out = run("build-tree", "m", "--retries", "9", "--json")
        asked = len(server.requests)
    assert out.exit_code == 0, out.stderr
    events = [orjson.loads(line) for line in out.stdout.splitlines()]
    errors = [e["error"] for e in events if e["event"] == "failed"]
    assert asked == 6 and len(errors) == 5 and all(f"{api}/m1 returned no summary: " in e for e in errors)
    assert [e.split(": ", 1)[1] for e in errors] == [
        "its answer is not UTF-8 text (2 U+FFFD in its line)", "its answer is not UTF-8 text (1 U+FFFD in its line)",
        "its line holds a private-use character U+E000", "its line holds a noncharacter U+FDD0",
        "its line is mostly one phrase repeated ('done.' 29 times)"]
    assert [n["text"] for n in stored_lines(Memory.open("m"))] == ["user: 部署完成"]


@pytest.mark.parametrize("brk", ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x85", "\u2028", "\u2029"])
def test_every_line_break_in_an_answer_is_a_space_not_a_refusal(brk):
    """A model writing its summary over two lines: each break Unicode makes one (NEL, U+0085, as LF, VT, FF, CR
    and the line and paragraph separators) is made a space, as any white space is; NEL was refused as a control
    character, so a model that wrote it failed its call and was asked again. A control character that breaks
    no line (U+001E, U+0090) is still refused."""
    from pimem.compactor import junk
    from pimem.compactor.cut import strip_controls

    reply = f"user: deploy failed on port 8080{brk}pi: restarted nginx"
    line = cut_line(strip_controls(junk.text_of(reply)))
    assert line == "user: deploy failed on port 8080 pi: restarted nginx"
    assert junk.why(line, reply, []) is None
    for odd in ("\x1e", "\x90"):
        assert junk.why(line, reply.replace(brk, odd), []) == f"its answer holds control character U+{ord(odd):04X}"


REAL = [
    "user: 为什么部署在端口8080上失败了？pi: 检查了nginx配置，发现上游超时；已修复。",
    "user: デプロイが失敗した理由を教えて；pi: タイムアウトを30秒に変更し、再起動しました。",
    "user: لماذا فشل النشر على المنفذ 8080؟ pi: تم إصلاح إعدادات الخادم وإعادة التشغيل.",
    "user: למה הפריסה נכשלה? pi: תיקנתי את קובץ התצורה.",
    "user: परिनियोजन क्यों विफल हुआ? pi: समय सीमा बढ़ाई गई।",
    "user: ทำไมการติดตั้งล้มเหลว pi: แก้ไขการตั้งค่าแล้ว",
    "user: 배포가 왜 실패했나요? pi: 설정을 고쳤습니다.",
    "user: почему упал деплой? pi: поправил конфиг nginx, перезапустил.",
    "user: great work 🎉👍🏽 👨‍👩‍👧‍👦 🇯🇵 1️⃣ 🫨 🩷 🪼 🏴󠁧󠁢󠁳󠁣󠁴󠁿; pi: thanks 😀",
    "tool: `for (int i = 0; i < n; i++) { a[i] = b[i] * 2; }` in src/main.c; echo: ok",
    "pi: table | a | b | c |; sep ----------; pi: ... ok; user: 哈哈哈哈 好的",
    "user: ok ok ok; pi: 1000000 rows, ids 0x0000ffff and deadbeef; user: 12:00–13:00",
    "tool: grep -rn 'TODO' . | wc -l; echo: 42; pi: λx.x ∘ f ≠ g, ∀x ∈ ℝ, ½ ≈ 0.5 ± 0.1 °C ©",
]


@pytest.mark.parametrize("line", REAL)
def test_a_real_summary_in_any_language_is_never_junk(line):
    from pimem.compactor import junk

    assert junk.why(cut_line(line), line, []) is None


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(whitelist_categories=("L", "M", "N", "P", "S", "Zs")), max_size=600))
def test_text_of_any_script_is_refused_for_no_character_and_a_copy_of_its_input_for_nothing(text):
    from pimem.compactor import junk

    line = cut_line(text)
    said = junk.why(line, text, [])
    assert said is None or said.startswith("its line is mostly one phrase repeated")
    assert junk.why(line, text, ["`" not in text and text or line]) is None


@pytest.mark.skipif(not os.path.exists("/usr/share/zoneinfo/America/New_York"), reason="no time zone database")
def test_a_days_spend_counts_the_nodes_built_that_local_day_across_a_change_of_the_clocks(home, monkeypatch):
    """The daily cap's ledger (``spent(day=…)``, what a watcher or build-tree started that day counts) takes the
    nodes built on the local day: at 10:00 EST on 1 November, a node built at 00:30 EDT that day was read at -05:00
    as 23:30 on 31 October and left out (the cap passed by the first hour's spend); at 10:00 EDT on 8 March, one
    built at 23:30 EST on the 7th was read as 00:30 on the 8th and counted."""
    import time

    from pimem import Memory, builder

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        mem = Memory.at("m")
        mem.append([{"kind": "user", "text": f"message {k} " + "words " * 200} for k in range(4)])
        for k, built in enumerate(("2026-03-07T23:30:00-05:00", "2026-11-01T00:30:00-04:00")):
            monkeypatch.setenv("PIMEM_NOW", built)
            mem.write_nodes([(0, k, f"user: {k}", {"model": "openai/m1", "cost": 0.25})])
        monkeypatch.setenv("PIMEM_NOW", "2026-03-08T10:00:00-04:00")
        assert builder.spent(Memory.open("m"), day="2026-03-08")["cost"] == 0
        monkeypatch.setenv("PIMEM_NOW", "2026-11-01T10:00:00-05:00")
        assert builder.spent(Memory.open("m"), day="2026-11-01")["cost"] == 0.25
    finally:
        monkeypatch.undo()
        time.tzset()
