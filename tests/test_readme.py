"""The README's own shell examples, run in order against a temporary home with a `pimem` that runs this
checkout. The home starts with the history a user would have: memory `main` holding 50 messages over three
days. A line is skipped only when it is listed below, with the reason."""

import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timedelta

import orjson
import pytest

from conftest import ROOT, subprocess_env
from pimem import Memory

# lines that cannot run here, each with its reason (matched as substrings of the line)
SKIP = {
    "pip install": "installs packages (network)",
    "--follow": "never ends: it follows the log like tail -f",
    "pimem mcp": "serves MCP over stdio until its client hangs up (tests/test_mcp.py drives it)",
    "~/.claude/": "needs a real Claude Code history (tests/test_import.py imports its own fixtures)",
}
# lines whose exit code is not 0 on purpose
EXIT = {}
# files the examples read, as a user would have them at hand
FILES = {
    "reply.txt": "The staging db is on port 5433; I will keep it that way.\n",
    "session.jsonl": "\n".join(orjson.dumps(entry).decode() for entry in [
        {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-10-06T09:00:00.000Z", "cwd": "/home/dev/shop"},
        {"type": "message", "id": "e1", "parentId": None, "timestamp": "2026-10-06T09:00:05.000Z", "message": {"role": "user", "content": "why does checkout time out?"}},
        {"type": "message", "id": "e2", "parentId": "e1", "timestamp": "2026-10-06T09:00:09.000Z", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "Checking the pool size."}, {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "grep POOL .env"}}]}},
        {"type": "message", "id": "e3", "parentId": "e2", "timestamp": "2026-10-06T09:00:10.000Z", "message": {"role": "toolResult", "toolCallId": "c1", "toolName": "bash", "content": [{"type": "text", "text": "POOL=2"}]}},
    ]) + "\n",
}


def examples(text: str) -> list[str]:
    """Every command line of every ```sh block, continuation lines joined."""
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                out.append(line)
    return out


def test_examples_are_found():
    lines = examples((ROOT / "README.md").read_text())
    assert any(l.startswith("pimem append main") for l in lines)
    assert len(lines) > 15


def test_readme_examples_run(home, tmp_path):
    work = tmp_path / "work"
    bin_dir = tmp_path / "bin"
    work.mkdir()
    bin_dir.mkdir()
    shim = bin_dir / "pimem"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pimem "$@"\n')
    shim.chmod(0o755)
    for name, content in FILES.items():
        (work / name).write_text(content)
    start = datetime.fromisoformat("2026-10-07T00:00:00+08:00")
    history = [
        {"kind": ("user", "pi")[k % 2], "text": f"turn {k}: the staging db listens on 5433", "date": (start + timedelta(minutes=80 * k)).isoformat()}
        for k in range(50)
    ]
    Memory.at("main").append(history)
    env = subprocess_env(PIMEM_HOME=home, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", NO_COLOR="1", COLUMNS="100")
    ran, failures = [], []
    for line in examples((ROOT / "README.md").read_text()):
        if any(key in line for key in SKIP) or (" jq " in f" {line} " and not shutil.which("jq")):
            continue
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        expected = next((code for key, code in EXIT.items() if key in line), 0)
        ran.append(line)
        if proc.returncode != expected:
            failures.append(f"{line}\n  exit {proc.returncode} (expected {expected}): {proc.stderr.strip()[-500:]}")
    assert not failures, "README examples failed (a line that cannot run here goes into SKIP above, with its reason):\n" + "\n".join(failures)
    assert len(ran) > 15
