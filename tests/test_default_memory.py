"""Every command's NAME is optional: $PIMEM_MEMORY, else main; a lone positional is taken as what it reads as
(a WHEN, a number, a node id, text, a query) unless a memory has that name."""

import os
import subprocess

import orjson
import pytest

from conftest import pimem_cmd, subprocess_env
from pimem import Memory


@pytest.fixture
def main(run, home):
    for text in ("the staging db listens on 5433", "noted", "deploys on fridays"):
        assert run("append", text).exit_code == 0
    return Memory.open("main")


def texts(out):
    assert out.exit_code == 0, out.output
    return [orjson.loads(line)["text"] for line in out.stdout.splitlines()]


def test_append_without_a_name_logs_into_main(run, home):
    assert run("append", "the staging db listens on 5433").stdout == "0\n"
    assert run("append", "-k", "pi", input="a reply\n").stdout == "1\n"  # pimem append -k pi < reply.txt
    assert run("append", "main", input="piped into main by name\n").stdout == "2\n"  # before main exists too
    assert [m["text"] for m in Memory.open("main").messages(0)] == [
        "the staging db listens on 5433", "a reply\n", "piped into main by name\n"]
    assert [p.name for p in home.iterdir()] == ["main"]


def test_append_one_word_is_a_name_only_when_a_memory_has_it(run, home, tmp_path):
    run("append", "notes", "first note")  # two words: the first is the NAME, and a new one creates it
    assert run("append", "notes", input="from stdin\n").exit_code == 0  # notes exists: the NAME
    assert run("append", "scratch", input="").stderr == ""  # no memory 'scratch': the text (a pipe: no note)
    (tmp_path / "scratch.txt").write_text("meant for scratch\n")
    with open(tmp_path / "scratch.txt", "rb") as stdin:  # pimem append scratch < scratch.txt: the text, said so
        out = subprocess.run(pimem_cmd("append", "scratch"), stdin=stdin, capture_output=True, text=True, env=subprocess_env())
    assert out.returncode == 0 and out.stderr == (
        "pimem: no memory is named 'scratch': taking it as the text for 'main' "
        "(to fill a new memory from stdin: pimem append scratch -)\n")
    read, write = os.pipe()  # echo … | pimem append scratch: bytes waiting in a pipe, said so too
    os.write(write, b"piped for scratch\n")
    os.close(write)
    with open(read, "rb") as stdin:
        out = subprocess.run(pimem_cmd("append", "scratch"), stdin=stdin, capture_output=True, text=True, env=subprocess_env())
    assert out.returncode == 0 and out.stderr.startswith("pimem: no memory is named 'scratch': taking it as the text")
    assert run("append", "scratch", "-", input="now in scratch\n").exit_code == 0  # `-` reads stdin
    assert [m["text"] for m in Memory.open("notes").messages(0)] == ["first note", "from stdin\n"]
    assert [m["text"] for m in Memory.open("main").messages(0)] == ["scratch", "scratch", "scratch"]
    assert [m["text"] for m in Memory.open("scratch").messages(0)] == ["now in scratch\n"]


def test_append_ndjson_takes_its_one_word_as_the_name(run, home):
    line = b'{"kind":"user","text":"hi"}\n'
    assert run("append", "--ndjson", input=line).stdout == "0\n"
    assert run("append", "fresh", "--ndjson", input=line).stdout == "0\n"
    assert Memory.open("main").count() == 1 and Memory.open("fresh").count() == 1


def test_pimem_memory_names_the_default(run, home, monkeypatch, main):
    monkeypatch.setenv("PIMEM_MEMORY", "work")
    assert run("append", "in work").stdout == "0\n"
    assert texts(run("since", "#0")) == ["in work"]
    assert run("view").stdout == "0+1|user: in work\n"
    assert Memory.open("main").count() == 3


def test_an_invalid_pimem_memory_is_named_as_the_variable_s(run, home, monkeypatch, main):
    """A ``$PIMEM_MEMORY`` that is no memory's name was refused as if the command had been given it (invalid
    memory name 'bad name'), a name the user never typed there; the error says where it came from. A command
    naming its memory is not concerned, and the store is left as it was."""
    monkeypatch.setenv("PIMEM_MEMORY", "bad name")
    said = ("pimem: error: $PIMEM_MEMORY: invalid memory name 'bad name': use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit\n")
    for argv in (["view"], ["append", "hi there"], ["since", "#0"], ["recall", "5433"], ["zoom", "0+1"]):
        out = run(*argv)
        assert (out.exit_code, out.stderr) == (2, said), (argv, out.stderr)
    assert texts(run("since", "main", "#0")) == ["the staging db listens on 5433", "noted", "deploys on fridays"]


def test_since_takes_a_lone_when(run, main):
    assert texts(run("since", "2026-10-08")) == texts(run("since", "main", "2026-10-08"))
    assert texts(run("since", "#1")) == ["noted", "deploys on fridays"]
    assert texts(run("since", "2h")) == texts(run("since", "main", "2h"))
    out = run("since", "main")  # a name, no WHEN
    assert out.exit_code == 2 and "give WHEN" in out.stderr
    out = run("since", "nosuch")  # neither a memory nor a WHEN: the name, unknown
    assert out.exit_code == 3 and "no memory named 'nosuch'" in out.stderr
    for mistyped, why in (("2026-13-01", "bad date '2026-13-01'"), ("25:99", "bad date '25:99'"), ("#x", "bad message number"),
                          ("13pm", "bad date '13pm'"), ("999999d", "date '999999d' is out of range"),
                          ("1000000w", "date '1000000w' is out of range"), ("yesterday 25:00", "bad date 'yesterday 25:00'"),
                          ("10000 years ago", "bad date '10000 years ago'")):
        out = run("since", mistyped)  # a WHEN gone wrong: said as one, not as a memory no one named
        assert out.exit_code == 2 and why in out.stderr and len(out.stderr.splitlines()) == 1, (mistyped, out.stderr)
    out = run("since", "3things")  # (a number and a word that is no unit: a name)
    assert out.exit_code == 3 and "no memory named '3things'" in out.stderr


def test_a_bad_when_is_reported_before_a_missing_default_memory(run, home):
    out = run("since", "2026-13-01")
    assert out.exit_code == 2 and "bad date" in out.stderr
    out = run("since", "main", "#0", "--until", "2026-99-01")
    assert out.exit_code == 2 and "bad date '2026-99-01'" in out.stderr


def test_a_memory_named_like_a_when_is_the_memory(run, main):
    run("append", "yesterday", "in the memory named yesterday")
    assert texts(run("since", "yesterday", "#0")) == ["in the memory named yesterday"]
    out = run("since", "yesterday")  # the memory, and then no WHEN
    assert out.exit_code == 2


def test_view_status_map_compact_context_default_to_main(run, main):
    assert run("view").stdout == run("view", "main").stdout != ""
    assert run("status").stdout == run("status", "main").stdout
    assert run("map", "--width", "80").stdout == run("map", "main", "--width", "80").stdout
    assert run("compact", "--keep", "10", "--dry-run").stdout == run("compact", "main", "--keep", "10", "--dry-run").stdout
    assert run("context", "--cwd", "/x").stdout == run("context", "main", "--cwd", "/x").stdout
    assert run("context", "main", "--system").stdout == run("context", "--system").stdout


def test_zoom_message_date_take_a_lone_id(run, main):
    assert run("zoom", "1+1").stdout == run("zoom", "main", "1+1").stdout == "1+1|user: noted\n"
    assert run("message", "2").stdout == "deploys on fridays\n"
    assert run("date", "1").stdout == run("date", "main", "1").stdout
    assert run("date", "0+2").stdout == run("date", "main", "0+2").stdout
    assert run("date", "--at", "2026-10-08").stdout == "0\n"
    for args in (["zoom", "main"], ["message", "main"]):  # the memory, and then nothing to read
        out = run(*args)
        assert out.exit_code == 2 and out.stderr.startswith("pimem: error: give "), args


def test_words_after_an_optional_name(run, main):
    assert "5433" in run("recall", "staging").stdout
    assert run("recall", "staging").stdout == run("recall", "main", "staging").stdout
    out = run("recall", "mian", "staging")  # two words: the first is the NAME, so a typo is reported
    assert out.exit_code == 3
    mid = run("remember", "use pnpm").stdout.strip()
    assert mid.startswith("mem_") and run("memories", "pnpm").stdout == run("memories", "main", "pnpm").stdout
    assert mid in run("memories").stdout
    assert run("forget", mid).stdout.strip() == mid
    assert run("memories").exit_code == 1


def test_several_words_naming_no_memory_say_how_to_search_them_in_the_default(run, main, home):
    """``recall staging db`` takes staging for the NAME (so a typo is reported, not searched for): the error
    says how to search the words in the default memory (it said only that no memory has that name)."""
    for cmd in ("recall", "memories"):
        out = run(cmd, "staging", "db")
        assert (out.exit_code, out.stdout) == (3, ""), out.stderr
        assert out.stderr == (f"pimem: error: no memory named 'staging' in {home} (see 'pimem list'); to search "
                              f"several words in 'main', quote them: pimem {cmd} 'staging db'\n")
    out = run("recall", "mian", "it's", "here")  # (quoted for the shell as typed)
    assert out.exit_code == 3 and out.stderr.endswith("""pimem recall 'mian it'"'"'s here'\n"""), out.stderr
    assert run("recall", "a b", "c").exit_code == 2  # (no memory's name at all: an invalid name, as before)
    assert run("recall", "mian", "staging", "--ids", "1").exit_code == 2  # (options apart: refused first, as before)


def test_model_takes_a_lone_provider(run, main):
    assert run("model").stdout == "main: extractive\n"
    assert run("model", "ollama/llama3.2").exit_code == 0
    assert run("model", "main").stdout.startswith("main: openai/llama3.2")


def test_commands_over_many_memories_default_to_all(run, main):
    for name in ("main", "work"):
        run("append", name, "a long message, summarised by the compactor " * 20)
        assert orjson.loads(run("status", name, "--json").stdout)["tree"]["pending"] > 0
    assert run("build-tree").exit_code == 0
    for name in ("main", "work"):
        assert orjson.loads(run("status", name, "--json").stdout)["tree"]["pending"] == 0
    out = run("reindex", "--json")
    assert [orjson.loads(l)["memory"] for l in out.stdout.splitlines()] == ["main", "work"]


def test_delete_and_rename_never_take_the_default(run, main):
    assert run("delete").exit_code == 2
    assert run("rename", "other").exit_code == 2
    assert Memory.open("main").count() == 3
