"""Shared fixtures: a temporary home for every test, an in-process runner, and real subprocesses."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pimem import cli

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty store home; every command and Memory call in the test uses it."""
    path = tmp_path / "home"
    monkeypatch.setenv("PIMEM_HOME", str(path))
    monkeypatch.delenv("PI_MEM_HOME", raising=False)
    monkeypatch.delenv("PIMEM_MEMORY", raising=False)
    monkeypatch.setenv("PIMEM_NOW", "2026-10-08T09:30:00+08:00")
    monkeypatch.setenv("PIMEM_LOCK_TIMEOUT", "60")
    return path


@pytest.fixture
def run(home):
    """Run a pimem command in-process: ``run("append", "main", "hi", input=…)`` → click Result."""
    runner = CliRunner()

    def invoke(*args, input=None):
        args = [str(a) for a in args]
        return runner.invoke(cli.build(cli.command_of(args)), args, input=input)

    return invoke


def pimem_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "pimem", *map(str, args)]


def subprocess_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture
def sh(home):
    """Run pimem as a real process: ``sh("since", "main", "#0", input=b"…")`` → CompletedProcess (bytes)."""

    def call(*args, input: bytes | None = None, timeout: float = 60, **env):
        return subprocess.run(pimem_cmd(*args), input=input, capture_output=True, timeout=timeout, env=subprocess_env(**env))

    return call


def snapshot(path: Path) -> dict[str, str]:
    """Every file under ``path`` with a hash of its bytes and its mode, to prove nothing changed."""
    out = {}
    if not path.exists():
        return out
    for p in sorted(path.rglob("*")):
        if p.name.endswith("-shm"):
            continue  # SQLite's shared-memory lock file: its bytes change whenever a reader opens the index
        if p.is_file():
            out[str(p.relative_to(path))] = hashlib.sha256(p.read_bytes()).hexdigest() + oct(p.stat().st_mode)
        else:
            out[str(p.relative_to(path)) + "/"] = oct(p.stat().st_mode)
    return out


# pimem as its installed script runs it (``from pimem.__main__ import main``), sending itself ``signum`` as an
# ``import`` statement first loads ``module`` (its audit event): the signal comes at that point of its start
SIGNAL_AT = """import os, sys
module, signum = sys.argv.pop(1), int(sys.argv.pop(1))
def hook(event, args):
    if event == "import" and args[0] == module:
        os.kill(os.getpid(), signum)
sys.addaudithook(hook)
from pimem.__main__ import main
sys.exit(main())
"""
# the same through ``pimem.cli.main``, as a Python program calling pimem does
CLI_SIGNAL_AT = SIGNAL_AT.replace("from pimem.__main__ import main", "from pimem.cli import main")
