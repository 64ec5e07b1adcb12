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

from conftest import ROOT, subprocess_env
from pimem import Memory

# lines that cannot run here, each with its reason (matched as substrings of the line)
SKIP = {
    "pip install": "installs packages (network)",
    "pipx install": "installs packages (network)",
    "bin/pip install": "installs packages (network)",
    "--follow": "never ends: it follows the log like tail -f",
    "pimem mcp": "serves MCP over stdio until its client hangs up (tests/test_mcp.py drives it)",
    "pimem watch": "a daemon: it runs until stopped (tests/test_watch.py runs it)",
    "~/.claude/": "needs a real Claude Code history (tests/test_import.py imports its own fixtures)",
    "~/.codex/sessions": "needs Codex's sessions (tests/test_agents.py runs the live-capture lines with its own)",
    "~/.pi/agent/sessions": "needs pi's sessions (tests/test_agents.py runs the live-capture lines with its own)",
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


CRON = re.compile(r"^(?:\S+\s+){5}(pimem .*)$")  # a crontab line: five time fields, then the command
SCRIPT_INPUT = "hello\nwhich port does the staging db use?\n-\n--help\n-k\n"  # what a user types into a README script (odd lines too)


def examples(text: str) -> list[tuple[str, str]]:
    """In README order: ``("line", command)`` for each line of a ```sh block (continuations joined) and the
    command of each crontab line in a ```text block; ``("script", text)`` for each ```bash block that is a
    whole script (it starts with #!)."""
    out = []
    for lang, block in re.findall(r"^```(sh|bash|text)\n(.*?)^```", text, re.S | re.M):
        if lang == "bash":
            if block.startswith("#!"):
                out.append(("script", block))
            continue
        for line in block.replace("\\\n", " ").splitlines():
            if lang == "text":
                cron = CRON.match(line.strip())
                if cron:
                    out.append(("line", cron[1]))
            elif line.strip() and not line.lstrip().startswith("#"):
                out.append(("line", line))
    return out


def test_examples_are_found():
    found = examples((ROOT / "README.md").read_text())
    lines = [text for what, text in found if what == "line"]
    assert any(l.startswith("pimem append main") for l in lines)
    assert any(l.startswith("pimem build-tree") for l in lines)  # the crontab itself: tests/test_cron.py
    assert any("| jq " in l for l in lines)
    assert any(what == "script" and "while " in text for what, text in found)  # the agent loop
    assert len(lines) > 15


def test_every_command_has_an_example():
    from pimem import cli

    lines = [text for _, text in examples((ROOT / "README.md").read_text())]
    missing = [c for c in cli.COMMANDS if not any(re.search(rf"(^|[;&|(]\s*|\$\()pimem {re.escape(c)}\b", l) for l in lines)]
    assert not missing, f"commands without a shell example in README.md: {missing}"


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
    for generated in ("man", "completions"):  # the examples run from a checkout
        shutil.copytree(ROOT / generated, work / generated)
    start = datetime.fromisoformat("2026-10-07T00:00:00+08:00")
    history = [
        {"kind": ("user", "pi")[k % 2], "text": f"turn {k}: the staging db listens on 5433", "date": (start + timedelta(minutes=80 * k)).isoformat()}
        for k in range(50)
    ]
    Memory.at("main").append(history)
    user_home = tmp_path / "user"  # the examples never see the real $HOME
    (user_home / ".pi" / "memory").mkdir(parents=True)
    env = subprocess_env(HOME=user_home, PIMEM_HOME=home, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", NO_COLOR="1", COLUMNS="100")
    ran, failures = [], []
    for n, (what, text) in enumerate(examples((ROOT / "README.md").read_text())):
        if what == "line" and (any(key in text for key in SKIP) or (" jq " in f" {text} " and not shutil.which("jq"))):
            continue
        if what == "script":
            script = work / f"script{n}.sh"
            script.write_text(text)
            args, stdin, shown = ["bash", str(script), "main"], SCRIPT_INPUT, text.splitlines()[1]
        else:
            args, stdin, shown = ["bash", "-o", "pipefail", "-c", text], "", text
        proc = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=120, input=stdin)
        expected = next((code for key, code in EXIT.items() if key in text), 0)
        ran.append(shown)
        if proc.returncode != expected:
            failures.append(f"{shown}\n  exit {proc.returncode} (expected {expected}): {proc.stderr.strip()[-500:]}")
        elif what == "script":
            assert len(proc.stdout.splitlines()) == SCRIPT_INPUT.count("\n"), f"{shown}: one reply per input line"
    assert not failures, "README examples failed (a line that cannot run here goes into SKIP above, with its reason):\n" + "\n".join(failures)
    assert len(ran) > 15
