"""The generated completions complete node ids for `zoom` from the memory's view, in a real bash and fish,
with a `pimem` on PATH that runs this checkout (memory names are tested in test_docs.py)."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env
from test_docs import _bash_complete as bash_complete


@pytest.fixture
def shell_env(run, home, tmp_path):
    home.mkdir()
    (home / "config.json").write_text('{"view": {"hi": 2000, "lo": 1000}}')  # small budgets: old lines fold
    for k in range(16):  # short ones fold into joined lines; long ones wait for a summary as their own lines
        run("append", "main", f"message number {k}" if k < 8 else f"long message {k} " + "words " * 50)
    run("append", "other", "x")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pimem").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pimem "$@"\n')
    (bin_dir / "pimem").chmod(0o755)
    return subprocess_env(PIMEM_HOME=home, PATH=f"{bin_dir}{os.pathsep}/usr/bin:/bin")


def view_labels(run):
    return sorted(line.split("|")[0] for line in run("view", "main").stdout.splitlines())


def test_bash_completes_memory_names_and_node_ids(run, home, shell_env, tmp_path):
    labels = view_labels(run)
    assert "15+1" in labels and any(not l.endswith("+1") for l in labels)  # the view folded: coarse and fine lines
    assert bash_complete(["pimem", "zoom", "m"], shell_env) == ["main"]
    assert bash_complete(["pimem", "zoom", ""], shell_env) == ["main", "other"]
    assert bash_complete(["pimem", "zoom", "main", ""], shell_env) == labels
    assert bash_complete(["pimem", "zoom", "--include-tools", "main", "0"], shell_env) == [l for l in labels if l.startswith("0")]
    moved = tmp_path / "moved"
    shutil.copytree(home, moved)
    env = {**shell_env, "PIMEM_HOME": str(tmp_path / "empty")}
    assert bash_complete(["pimem", "zoom", "--home", str(moved), "main", ""], env) == labels
    assert bash_complete(["pimem", "zoom", "nope", ""], shell_env) == []


@pytest.mark.skipif(not shutil.which("fish"), reason="fish is not installed")
def test_fish_completes_node_ids(run, shell_env):
    script = f"source {ROOT / 'completions' / 'pimem.fish'}; complete -C 'pimem zoom main '"
    out = subprocess.run(["fish", "--no-config", "-c", script], capture_output=True, text=True, env=shell_env, check=True)
    assert sorted(line.split("\t")[0] for line in out.stdout.splitlines()) == view_labels(run)


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed")
def test_zsh_node_function_lists_the_view(run, shell_env):
    # completion widgets need a terminal, so the helper runs with a compadd stand-in that prints what it is given
    script = (
        f"source {ROOT / 'completions' / '_pimem'} 2>/dev/null; "
        'compadd() { [[ $1 == -a ]] && print -l -- ${(P)2} }; words=(zoom main ""); CURRENT=3; _pimem_nodes'
    )
    out = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, text=True, env=shell_env)
    assert sorted(out.stdout.split()) == view_labels(run)
