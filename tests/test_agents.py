"""The README's live-capture section, run as written: a fresh account (its own HOME, pimem's default home)
with Claude Code, Codex and pi sessions of its own; each line of the section runs in order (the followers
in the background), then the agents write more and every memory gets it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

from conftest import ROOT, subprocess_env
from pimem import Memory
from test_follow import claude_turn, codex_rollout, wait_for
from test_hook import payload


def section_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Live capture"):]
    section = section[: section.index("\n## ", 1)]
    lines = []
    for block in re.findall(r"^```sh\n(.*?)^```", section, re.S | re.M):
        lines += [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    return lines


def pi_session(cwd: str, n: int) -> list[dict]:
    t = "2026-03-02T09:00:0{}.000Z".format
    head = [{"type": "session", "version": 3, "id": "pi-1", "timestamp": t(0), "cwd": cwd}] if n == 0 else []
    return head + [{"type": "message", "id": f"e{n}", "parentId": None, "timestamp": t(n % 10),
                    "message": {"role": "user", "content": f"pi question {n}", "timestamp": 1}}]


def write(path, lines) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)


def test_the_live_capture_section_sets_every_agent_up(tmp_path, monkeypatch):
    user = tmp_path / "user"
    work = tmp_path / "work"
    work.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "pimem"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pimem "$@"\n')
    shim.chmod(0o755)
    monkeypatch.delenv("PIMEM_HOME", raising=False)
    monkeypatch.delenv("PI_MEM_HOME", raising=False)
    monkeypatch.setenv("HOME", str(user))  # pimem's default home: ~/.pi/memory of this account
    env = subprocess_env(HOME=user, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env.pop("PIMEM_HOME", None)
    codex = user / ".codex" / "sessions" / "2026" / "05" / "11" / "rollout-2026-05-11T08-27-00-cx1.jsonl"
    pi = user / ".pi" / "agent" / "sessions" / "--home-dev-shop--" / "2026-03-02T09-00-00-000Z_pi-1.jsonl"
    write(codex, codex_rollout("cx-1"))
    write(pi, pi_session("/home/dev/shop", 0))

    lines = section_lines()
    assert any("hook install claude-code" in line for line in lines) and sum("--follow" in line for line in lines) == 3
    background = []
    try:
        for line in lines:
            if re.search(r"&\s*(#.*)?$", line):  # a follower, in the background
                background.append(subprocess.Popen(["bash", "-c", line], cwd=work, env=env, start_new_session=True))
                continue
            proc = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, f"{line}\n{proc.stderr}"
        home = user / ".pi" / "memory"
        wait_for(lambda: (home / "tool").exists() and (home / "shop").exists() and (home / "mine").exists())

        # the agents write more: each follower logs it
        write(codex.with_name("rollout-2026-05-11T09-00-00-cx2.jsonl"), codex_rollout("cx-2"))
        write(pi, pi_session("/home/dev/shop", 1))
        with open(work / "agent.ndjson", "a") as f:
            f.write(json.dumps({"kind": "pi", "text": "and a reply"}) + "\n")
        texts = lambda name: [m["text"] for m in Memory.open(name).messages()]  # noqa: E731
        wait_for(lambda: texts("tool") == ["run the tests", "they pass"] * 2)
        wait_for(lambda: texts("shop") == ["pi question 0", "pi question 1"])
        wait_for(lambda: texts("mine") == ["hello from my own agent", "and a reply"])

        # Claude Code runs the installed hook: a session's transcript goes into its project's memory
        settings = json.loads((user / ".claude" / "settings.json").read_text())
        command = settings["hooks"]["Stop"][0]["hooks"][0]["command"]
        transcript = user / ".claude" / "projects" / "-home-dev-api" / "cc-1.jsonl"
        write(transcript, claude_turn("cc-1", 0))
        ran = subprocess.run(["sh", "-c", command], input=payload("Stop", "cc-1", transcript), capture_output=True, env=env, timeout=60)
        assert ran.returncode == 0 and ran.stdout == b"", ran.stderr
        assert texts("api") == ["question 0 of cc-1", "answer 0"]
    finally:
        for proc in background:
            os.killpg(proc.pid, signal.SIGTERM)  # the followers, each in the session started for its line
            proc.wait(timeout=30)
    for log in ("pimem-codex.log", "pimem-pi.log", "pimem-mine.log"):
        assert "imported from" in (user / log).read_text()
