"""The generated completions in a real bash, zsh and fish, with a `pimem` on PATH that runs this checkout:
node ids for `zoom` from the memory's view, option values and WHEN words, and file names only where a file
is meant (memory names are tested in test_docs.py)."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env
from pimem import message, when
from pimem.options import WHEN_WORDS
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
    assert bash_complete(["pimem", "zoom", ""], shell_env) == sorted(["main", "other", *labels])  # NAME, or main's ids
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


KINDS = sorted([*message.KINDS, *message.ALIASES])
PROVIDERS = ["anthropic/", "command", "deepseek/", "extractive", "ollama/", "openai/", "openrouter/"]


def test_every_when_word_offered_parses(home):
    for word in WHEN_WORDS:
        when.parse_when(word)


def test_bash_completes_option_values_and_files_only_where_a_file_is_meant(shell_env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.jsonl").write_text("")  # a file to be offered only where a file makes sense
    assert bash_complete(["pimem", "since", "--kind", ""], shell_env) == KINDS
    assert bash_complete(["pimem", "append", "-k", "to"], shell_env) == ["tool", "tool_call", "tool_result"]
    assert bash_complete(["pimem", "import", "--format", ""], shell_env) == ["auto", "claude", "codex", "ndjson", "pi"]
    assert bash_complete(["pimem", "memories", "--status", "p"], shell_env) == ["pinned", "provisional"]
    assert bash_complete(["pimem", "model", "main", ""], shell_env) == PROVIDERS
    assert bash_complete(["pimem", "model", "o"], shell_env) == ["ollama/", "openai/", "openrouter/", "other"]
    assert bash_complete(["pimem", "search", "db", "--since", ""], shell_env) == sorted(WHEN_WORDS)
    assert bash_complete(["pimem", "since", "main", "y"], shell_env) == ["yesterday"]
    for words in (["view", "--wait", ""], ["since", "main", "--until", "n"], ["append", "main", ""], ["search", ""],
                  ["recall", "main", "--file", ""], ["status", "main", "n"]):
        assert "notes.jsonl" not in bash_complete(["pimem", *words], shell_env), words
    assert bash_complete(["pimem", "import", "no"], shell_env) == ["notes.jsonl"]
    assert bash_complete(["pimem", "map", "--svg", "no"], shell_env) == ["notes.jsonl"]
    assert bash_complete(["pimem", "--v"], shell_env) == ["--version"]
    assert bash_complete(["pimem", "hook", ""], shell_env) == ["claude-code", "install", "uninstall"]


@pytest.mark.skipif(not shutil.which("fish"), reason="fish is not installed")
def test_fish_completes_option_values_and_when_words(shell_env, tmp_path):
    (tmp_path / "notes.jsonl").write_text("")

    def complete(line):
        script = f"source {ROOT / 'completions' / 'pimem.fish'}; complete -C '{line}'"
        out = subprocess.run(["fish", "--no-config", "-c", script], capture_output=True, text=True, env=shell_env, cwd=tmp_path, check=True)
        return sorted(l.split("\t")[0] for l in out.stdout.splitlines())

    assert complete("pimem since --kind ") == KINDS
    assert complete("pimem since main ") == sorted(WHEN_WORDS)
    assert complete("pimem since ") == sorted(["main", "other", *WHEN_WORDS])
    assert complete("pimem model main ") == PROVIDERS
    assert complete("pimem view --wait ") == [] and complete("pimem append main ") == []
    assert complete("pimem import no") == ["notes.jsonl"]
    assert complete("pimem hook ") == ["claude-code", "install"]


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed")
def test_zsh_offers_the_same_words(shell_env):
    spec = (ROOT / "completions" / "_pimem").read_text()
    since = spec[spec.index("        since)"):spec.index(";;", spec.index("        since)"))]
    assert f"_pimem_words {' '.join([*message.KINDS, *message.ALIASES])}" in since
    assert f"'1::name:_pimem_words @names {' '.join(WHEN_WORDS)}'" in since
    # completion widgets need a terminal, so the helper runs with a compadd stand-in that prints what it is given
    script = (
        f"source {ROOT / 'completions' / '_pimem'} 2>/dev/null; "
        'compadd() { [[ $1 == -a ]] && print -l -- ${(P)2} }; words=(since ""); CURRENT=2; _pimem_words @names today 2h'
    )
    out = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, text=True, env=shell_env)
    assert sorted(out.stdout.split()) == ["2h", "main", "other", "today"]


# zsh's real completion system (compinit, the _pimem widget, _arguments) in an interactive zsh on a
# pseudo-terminal (zsh/zpty): a line is typed with a TAB, and compadd, wrapped, prints what it offers
ZSH_CAPTURE = r"""
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "fpath=($COMPLETIONS \$fpath); autoload -U compinit; compinit -u -D"
zpty -w z 'compadd () { builtin compadd "$@"; local -a hits; builtin compadd -O hits "$@"; print -rl -- "" "HITS_""BEGIN" $hits "HITS_""END" }'
zpty -w -n z "$LINE"$'\t'
zpty -r z out '*HITS_END*'
integer quiet=0
while (( quiet < 10 )); do
  if zpty -r -t z more; then out+=$more; quiet=0; else sleep 0.1; (( quiet++ )); fi
done
zpty -d z
print -r -- "$out"
"""


def zsh_complete(line: str, env: dict, cwd) -> list[str]:
    out = subprocess.run(["zsh", "-f", "-c", ZSH_CAPTURE], capture_output=True, text=True, timeout=60, cwd=cwd,
                         env={**env, "COMPLETIONS": str(ROOT / "completions"), "LINE": line})
    offered, inside = set(), False
    for word in out.stdout.replace("\r", "").splitlines():
        if word in ("HITS_BEGIN", "HITS_END"):
            inside = word == "HITS_BEGIN"
        elif inside and word and not word.startswith("-"):  # (compsys' own group options, -J -default-)
            offered.add(word)
    return sorted(offered)


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed")
def test_zsh_completion_widget_on_a_terminal(run, shell_env, tmp_path):
    (tmp_path / "notes.jsonl").write_text("")
    (tmp_path / "y.jsonl").write_text("")  # a file to be offered only where a file makes sense
    assert zsh_complete("pimem zoom main ", shell_env, tmp_path) == view_labels(run)
    assert zsh_complete("pimem since ", shell_env, tmp_path) == sorted(["main", "other", *WHEN_WORDS])
    assert zsh_complete("pimem since --kind ", shell_env, tmp_path) == KINDS
    assert zsh_complete("pimem model main ", shell_env, tmp_path) == PROVIDERS
    assert zsh_complete("pimem since main --until y", shell_env, tmp_path) == ["yesterday"]  # a WHEN, never a file
    assert zsh_complete("pimem import no", shell_env, tmp_path) == ["notes.jsonl"]
    assert zsh_complete("pimem hook ", shell_env, tmp_path) == ["claude-code", "install"]
