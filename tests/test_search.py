"""Search and the index: semantics, filters, privacy, the index's catch-up after deletion, damage and crashes,
and concurrent appends and searches in real processes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import orjson
import pytest

from conftest import pimem_cmd, snapshot, subprocess_env
from pimem import Memory
from pimem import index as indexing, search as searching

SECRET = "sk-live-7f3a9c1e55d2"

MESSAGES = [
    {"kind": "user", "text": "the staging db listens on 5433", "date": "2026-10-01T09:00:00+08:00"},
    {"kind": "pi", "text": "我们在蓝鲸副本上看到了 Go 程序的报错", "date": "2026-10-02T09:00:00+08:00"},
    {"kind": "tool", "text": "bash('cat .env')", "date": "2026-10-03T09:00:00+08:00"},
    {"kind": "echo", "text": f"DATABASE_URL=postgres://app@staging:5433\nAPI_KEY={SECRET}\n", "date": "2026-10-03T09:00:01+08:00"},
    {"kind": "pi", "text": "Staging is fine now. Go ahead and merge.", "date": "2026-10-04T09:00:00+08:00"},
    {"kind": "user", "text": "fine, the merge is staging-only", "date": "2026-10-05T09:00:00+08:00"},
    {"kind": "note", "text": "鲸 is a whale; 蓝 is blue", "date": "2026-10-06T09:00:00+08:00"},
]


@pytest.fixture
def mem(home):
    memory = Memory.at("main")
    memory.append(MESSAGES)
    return memory


def ids(result) -> list[int]:
    """The ``i`` of each hit; no hits must come with exit 1."""
    assert result.exit_code == (0 if result.stdout else 1), result.stderr
    return [orjson.loads(line)["i"] for line in result.stdout.splitlines()]


def test_hits_are_ndjson_newest_first_with_a_snippet(run, mem):
    out = run("search", "staging", "--json")
    assert [orjson.loads(line) for line in out.stdout.splitlines()] == [
        {"memory": "main", "i": 5, "date": "2026-10-05T09:00:00+08:00", "kind": "user", "size": 37, "snippet": "fine, the merge is staging-only", "held": "verbatim", "label": "5+1"},
        {"memory": "main", "i": 4, "date": "2026-10-04T09:00:00+08:00", "kind": "pi", "size": 44, "snippet": "Staging is fine now. Go ahead and merge.", "held": "verbatim", "label": "4+1"},
        {"memory": "main", "i": 0, "date": "2026-10-01T09:00:00+08:00", "kind": "user", "size": 36, "snippet": "the staging db listens on 5433", "held": "verbatim", "label": "0+1"},
    ]


def test_human_lines_name_memory_number_date_and_kind(run, mem):
    out = run("search", "listens", "main")
    assert out.exit_code == 0
    assert out.stdout == "main #0 2026-10-01T09:00:00+08:00 user: the staging db listens on 5433\n"


def test_a_second_word_naming_no_memory_says_how_to_search_both(run, mem, home):
    """``search staging db`` takes db for a memory to search (so a typo is reported): the error says how to
    search both words (it said only that no memory has that name)."""
    out = run("search", "staging", "db")
    assert (out.exit_code, out.stdout) == (3, "")
    assert out.stderr == (f"pimem: error: no memory named 'db' in {home} (see 'pimem list'); to search for "
                          "several words, quote them: pimem search 'staging db'\n")
    out = run("search", "staging", "db", "main")  # (the memories after it stay memories)
    assert out.exit_code == 3 and out.stderr.endswith("quote them: pimem search 'staging db' main\n"), out.stderr
    assert run("search", "staging", "main", "--json").exit_code == 0


def test_hits_say_how_the_view_holds_them(run, home):
    mem = Memory.at("m")
    mem.append([{"kind": "user", "text": "line 0 about the lighthouse"}])
    mem.save_config({"view": {"hi": 200, "lo": 100}})
    Memory.at("m").append([{"kind": "user", "text": f"line {n} about the lighthouse"} for n in range(1, 12)])
    hits = [orjson.loads(line) for line in run("search", "lighthouse", "--json", "--limit", "100").stdout.splitlines()]
    assert len(hits) == 12
    inside = [h for h in hits if h["held"] == "inside"]
    assert inside and all(int(h["label"].split("+")[1]) > 1 for h in inside)
    assert f"[inside {inside[0]['label']}]" in run("search", f"line {inside[0]['i']} ", "m").stdout


def test_snippets_center_on_the_match_and_terminals_highlight_it(run, home):
    long = "x" * 500 + " the needle is here " + "y" * 500
    Memory.at("m").append([{"kind": "user", "text": long}])
    snippet = orjson.loads(run("search", "needle", "--json").stdout)["snippet"]
    assert snippet.startswith("…") and snippet.endswith("…") and "the needle is here" in snippet
    assert len(snippet) <= searching.SNIPPET_CHARS + 2
    assert searching.highlight("Go to 蓝鲸, go", ["go", "蓝鲸"], lambda s: f"[{s}]") == "[Go] to [蓝鲸], [go]"


def test_a_snippet_holds_its_match_after_letters_that_lowercase_longer(run, home):
    """``İ`` (a Turkish capital: ``İSTANBUL``) lowercases to two characters, so the match's place in the
    lowercased text is past its place in the text; the snippet was cut around that later place and showed
    no match at all once enough of them came before it."""
    text = "İSTANBUL İZMİR İĞDIR " * 40 + "the staging server moved " + "x " * 200
    Memory.at("m").append([{"kind": "user", "text": text}])
    snippet = orjson.loads(run("search", "staging", "--json").stdout)["snippet"]
    assert "the staging server moved" in snippet and snippet.startswith("…") and snippet.endswith("…")
    assert len(snippet) <= searching.SNIPPET_CHARS + 2
    assert searching.snippet("İİİ needle", "İİİ needle".lower(), ["needle"], width=6) == "…İ need…"


def test_chinese_and_mixed_queries(run, mem):
    assert ids(run("search", "蓝鲸副本", "--json")) == [1]
    assert ids(run("search", "go 程序", "--json")) == [1]  # two terms: both must occur
    assert ids(run("search", '"Go 程序"', "--json")) == [1]  # one phrase, mixed scripts


def test_case_folds_beyond_ascii(run, home):
    Memory.at("m").append([{"kind": "user", "text": "Привет, МИР: l'ÉCOLE est fermée"}])
    assert ids(run("search", "мир", "--json")) == [0]
    assert ids(run("search", "école", "--json")) == [0]
    assert ids(run("search", "É", "--json")) == [0]


def test_one_and_two_character_queries(run, mem):
    assert ids(run("search", "蓝鲸", "--json")) == [1]
    assert ids(run("search", "鲸", "--json")) == [6, 1]
    assert ids(run("search", "Go", "--json")) == [4, 1]  # case-insensitive: "Go" in both
    assert ids(run("search", "蓝", "--json")) == [6, 1]
    assert ids(run("search", "鲸 蓝", "--json")) == [6, 1]
    assert run("search", "zq").exit_code == 1


def test_short_query_falls_back_to_a_scan_when_it_expands_to_too_many_trigrams(run, mem, monkeypatch):
    monkeypatch.setattr(indexing, "PREFIX_TERMS", 1)
    assert ids(run("search", "e", "--json")) == [6, 5, 4, 0]
    assert ids(run("search", "e", "--kind", "user", "--json")) == [5, 0]


def test_a_query_at_the_very_end_of_a_text_is_found(run, home):
    Memory.at("m").append([{"kind": "user", "text": "ab"}, {"kind": "user", "text": "xyz"}])
    assert ids(run("search", "ab", "--json")) == [0]
    assert ids(run("search", "b", "--json")) == [0]
    assert ids(run("search", "z", "--json")) == [1]
    assert ids(run("search", "xyz", "--json")) == [1]


def test_phrases_must_occur_exactly_words_in_any_order(run, mem):
    assert ids(run("search", "fine staging", "--json")) == [5, 4]
    assert ids(run("search", '"staging is fine"', "--json")) == [4]
    assert run("search", '"fine staging"').exit_code == 1
    assert ids(run("search", '"the merge" staging', "--json")) == [5]


def test_any_matches_either_word(run, mem):
    assert run("search", "5433 鲸").exit_code == 1
    assert ids(run("search", "5433 鲸", "--any", "--json")) == [6, 1, 0]


def test_rank_puts_the_best_match_first(run, home):
    Memory.at("m").append([
        {"kind": "user", "text": "refund refund refund: the refund rounding is off"},
        {"kind": "user", "text": "one refund, and a long message about many other things " * 5},
        {"kind": "user", "text": "nothing here"},
    ])
    assert ids(run("search", "refund", "--json")) == [1, 0]
    ranked = [orjson.loads(line) for line in run("search", "refund", "--rank", "--json").stdout.splitlines()]
    assert [h["i"] for h in ranked][:2] == [0, 1]  # (then #2, on its neighbour's credit: see test_ranker)
    assert ranked[0]["score"] > ranked[1]["score"] > ranked[2]["score"] > 0


def test_filters_kind_since_until(run, mem):
    assert ids(run("search", "staging", "--kind", "pi", "--json")) == [4]
    assert ids(run("search", "staging", "--since", "2026-10-04", "--json")) == [5, 4]
    assert ids(run("search", "staging", "--until", "2026-10-04", "--json")) == [0]
    assert ids(run("search", "staging", "--since", "2026-10-02", "--until", "2026-10-05", "--json")) == [4]


def test_since_and_until_take_a_message_number_as_since_does(run, mem):
    """``--since '#I'`` keeps the messages from #I on, ``--until '#I'`` those before it (each memory's own
    numbering, as --before), with --rank too; either with a date; '#I' after '#J' is refused (exit 2)."""
    assert ids(run("search", "staging", "--since", "#4", "--json")) == [5, 4]
    assert ids(run("search", "staging", "--until", "#4", "--json")) == [0]
    assert ids(run("search", "staging", "--since", "#1", "--until", "#5", "--json")) == [4]
    assert ids(run("search", "staging", "--since", "#1", "--until", "2026-10-05", "--json")) == [4]
    assert ids(run("search", "staging", "--until", "#5", "--before", "1", "--json")) == [0]
    ranked = ids(run("search", "staging", "--rank", "--since", "#4", "--json"))  # (6 too: a neighbour's context)
    assert ranked == ids(run("search", "staging", "--rank", "--since", "2026-10-04", "--json")) and 0 not in ranked
    out = run("search", "staging", "--since", "#5", "--until", "#2")
    assert (out.exit_code, out.stderr) == (2, "pimem: error: --until #2 is before --since #5\n")
    out = run("search", "staging", "--since", "#x")
    assert out.exit_code == 2 and "bad message number" in out.stderr


def test_since_after_until_is_refused_as_since_refuses_it(run, mem, home):
    """``--since`` after ``--until`` exited 1, as if nothing matched, where ``since`` refuses its start after
    ``--until``: one line says so now, exit 2, before any memory is read (a missing one too), the store untouched."""
    before = snapshot(home)
    for argv in (["--since", "2026-10-05", "--until", "2026-10-02"], ["--since", "1h", "--until", "3h"],
                 ["main", "--since", "2026-10-05", "--until", "2026-10-02"],
                 ["nosuch", "--since", "2026-10-05", "--until", "2026-10-02"]):
        out = run("search", "staging", *argv)
        assert out.exit_code == 2 and out.stdout == "", (argv, out.stdout)
        assert out.stderr == f"pimem: error: --until {argv[-1]} is before --since {argv[-3]}\n", argv
    assert snapshot(home) == before
    out = run("search", "staging", "--since", "2026-10-04", "--until", "2026-10-04")  # (empty, not reversed)
    assert out.exit_code == 1 and "no message matches" in out.stderr


def test_nothing_found_says_what_narrowed_the_search_and_a_ranked_query_of_no_word_says_why(run, mem, home):
    """``--before 0`` and a ranked query of stop words or symbols said only "no message matches", where messages
    hold them: the line says the bound, or that --rank ranks words and how to search for these."""
    from pimem import api

    rankless = ": it holds no word --rank ranks (stop words and symbols are not); search for it without --rank"
    for argv, why in ((["staging", "--before", "0"], " before #0"), (["the", "--rank"], rankless),
                      (["!!!", "--rank"], rankless), (["zzzq", "--rank"], "")):
        out = run("search", *argv)
        assert (out.exit_code, out.stderr) == (1, f"pimem: error: no message matches {argv[0]!r}{why}\n"), argv
    assert run("search", "the").exit_code == 0  # (found without --rank)
    assert api.search("the", rank=True)["notes"] == ["the query holds no word rank ranks (stop words and symbols are "
                                                     "not): search for it without rank"]
    assert "notes" not in api.search("zzzq", rank=True)


def test_a_query_of_a_pasted_document_is_refused_in_one_line_before_anything_is_read(run, mem, home):
    """A 100,000-word query (a model pasting a document into the search tool) kept an MCP server busy for 30 s,
    answering nothing else. Over 1,000 terms (a quoted phrase is one) is refused, exit 2, for search, --rank and
    recall alike; 1,000 are searched."""
    from pimem import api
    from pimem.errors import BadInput
    from pimem.search import MAX_TERMS

    many = " ".join(f"w{n}" for n in range(MAX_TERMS + 1))
    for argv in (["search", many, "--any"], ["search", many, "--rank"], ["recall", "main", many]):
        out = run(*argv)
        assert out.exit_code == 2 and out.stderr.startswith(f"pimem: error: a query of {MAX_TERMS + 1:,} "), argv
    with pytest.raises(BadInput, match=r"^a query of 1,001 terms: give at most 1,000"):
        api.search(many)
    assert run("search", " ".join(["staging", *(f"w{n}" for n in range(MAX_TERMS - 1))]), "--any").exit_code == 0
    assert run("search", f'"{many}"').exit_code == 1  # (one phrase: searched, found nowhere)


def test_paging_with_before_and_limit(run, home):
    Memory.at("m").append([{"kind": "user", "text": f"page {n}"} for n in range(7)])
    first = run("search", "page", "--limit", "3", "--json")
    assert ids(first) == [6, 5, 4]
    assert "--before 4" in first.stderr
    assert ids(run("search", "page", "--limit", "3", "--before", "4", "--json")) == [3, 2, 1]
    assert ids(run("search", "page", "--limit", "3", "--before", "1", "--json")) == [0]


def test_a_full_page_over_several_memories_names_each_memorys_next_page(run, home):
    Memory.at("a").append([{"kind": "user", "text": f"zebra a{n}", "date": f"2026-05-0{n + 1}T09:00:00Z"} for n in range(4)])
    Memory.at("b").append([{"kind": "user", "text": f"zebra b{n}", "date": f"2026-06-0{n + 1}T09:00:00Z"} for n in range(4)])
    first = run("search", "zebra", "--limit", "3", "--json")
    assert [(h["memory"], h["i"]) for h in map(orjson.loads, first.stdout.splitlines())] == [("b", 3), ("b", 2), ("b", 1)]
    assert "one memory at a time: b --before 1 (and the other memories alone)" in first.stderr
    # following the hint shows every hit once: b's last, then a's four
    assert ids(run("search", "zebra", "b", "--limit", "3", "--before", "1", "--json")) == [0]
    assert ids(run("search", "zebra", "a", "--limit", "4", "--json")) == [3, 2, 1, 0]
    both = run("search", "zebra", "--limit", "5", "--json")
    assert both.stderr.endswith("one memory at a time: a --before 3\n") and "other memories" not in both.stderr  # (b has none below #0)


def test_paging_shows_every_hit_once_when_dates_are_not_in_log_order(run, home):
    """A backdated import, or two appenders stamping before the lock: dates out of ``i`` order. A memory's hits
    come newest logged first, which is what ``--before`` pages by, so pages neither repeat nor skip."""
    days = ["05", "01", "04", "02", "03", "06"]
    Memory.at("m").append([{"kind": "user", "text": f"deploy note day {d}", "date": f"2026-10-{d}T10:00:00Z"} for d in days])
    seen, before = [], []
    while True:
        out = run("search", "deploy", "--limit", "2", "--json", *before)
        seen += ids(out)
        if "--before" not in out.stderr:
            break
        before = ["--before", out.stderr.split("--before ")[1].split()[0]]
    assert seen == [5, 4, 3, 2, 1, 0] and ids(run("search", "deploy", "--json")) == seen
    Memory.at("n").append([{"kind": "user", "text": "deploy note elsewhere", "date": "2026-10-03T12:00:00Z"}])
    merged = [(h["memory"], h["i"]) for h in map(orjson.loads, run("search", "deploy", "--json").stdout.splitlines())]
    assert [h for h in merged if h[0] == "m"] == [("m", i) for i in seen] and ("n", 0) in merged  # each memory in its order


def test_rank_returns_every_match_up_to_the_limit(run, home):
    Memory.at("m").append([{"kind": "user", "text": f"deploy number {n}"} for n in range(300)])
    ranked = [orjson.loads(line) for line in run("search", "--rank", "deploy", "--limit", "1000", "--json").stdout.splitlines()]
    assert sorted(h["i"] for h in ranked) == list(range(300))  # past the deeper tier's pool too
    assert all(a["score"] >= b["score"] for a, b in zip(ranked, ranked[1:]))


def test_a_full_page_of_ranked_hits_names_the_next_page_and_the_pages_show_each_hit_once(run, home):
    """--before pages by message number, not by rank: a full ranked page names --offset, which skips the hits
    shown (over several memories too: they are ranked as one)."""
    Memory.at("m").append([{"kind": "user", "text": f"deploy the {'port ' * (n % 7)}number {n}"} for n in range(60)])
    Memory.at("n").append([{"kind": "user", "text": f"the port of deploy {n}"} for n in range(5)])

    def hits(*argv):
        out = run("search", "--rank", "deploy port", *argv, "--json")
        return [(h["memory"], h["i"]) for h in map(orjson.loads, out.stdout.splitlines())], out.stderr

    for names in ([], ["m"]):
        seen, offset = [], []
        while True:
            page, said = hits(*names, "--limit", "7", *offset)
            seen += page
            if "for more" not in said:
                break
            assert said == f"pimem: 7 hits shown; for more: --offset {len(seen)}\n"
            offset = ["--offset", str(len(seen))]
        assert seen == hits(*names, "--limit", "1000")[0] and len(seen) == 60 + 5 * (not names)
    assert ids(run("search", "port", "m", "--limit", "3", "--offset", "2", "--json")) == ids(run("search", "port", "m", "--limit", "5", "--json"))[2:]


def test_a_page_names_the_next_one_only_when_hits_are_left_for_it(run, mem):
    """A page holding the last hits named a next page all the same when it was full (``for more: --before 0``),
    which finds nothing (exit 1)."""
    for argv in (["staging", "main"], ["staging"], ["--rank", "staging", "main"], ["--rank", "staging"]):
        every = run("search", *argv, "--limit", "1000").stdout.splitlines()
        out = run("search", *argv, "--limit", str(len(every)))
        assert (out.exit_code, out.stdout.splitlines(), out.stderr) == (0, every, ""), argv
        out = run("search", *argv, "--limit", str(len(every) - 1))
        assert out.stdout.splitlines() == every[:-1] and "shown; for more: " in out.stderr, (argv, out.stderr)
    assert run("search", "staging", "main", "--limit", "2").stderr == "pimem: 2 hits shown; for more: --before 4\n"
    out = run("search", "staging", "main", "--limit", "2", "--before", "4")
    assert (out.stdout, out.stderr) == ("main #0 2026-10-01T09:00:00+08:00 user: the staging db listens on 5433\n", "")
    Memory.at("older").append([{"kind": "user", "text": f"staging {n}", "date": f"2026-09-0{n + 1}T00:00:00Z"} for n in range(4)])
    out = run("search", "staging", "--limit", "5")  # main's three (its #0 the last), then two of older's four
    assert out.stderr == "pimem: 5 hits shown; for more, one memory at a time: older --before 2\n"
    Memory.at("newer").append([{"kind": "user", "text": "staging", "date": "2026-11-01T00:00:00Z"}])
    assert run("search", "staging", "main", "newer", "older", "--limit", "4").stderr == (
        "pimem: 4 hits shown; for more, one memory at a time: the other memories alone\n")


def test_a_page_of_an_offset_names_the_next_offset_not_a_before_that_would_skip_hits(run, mem):
    """A search (not ranked) paged with --offset named --before as its next page: given with the --offset still
    there, that skipped the offset's hits below it. Its next page is --offset on, over several memories too."""
    Memory.at("older").append([{"kind": "user", "text": f"staging {n}", "date": f"2026-09-0{n + 1}T00:00:00Z"} for n in range(4)])
    for names in (["main"], []):
        every = run("search", "staging", *names, "--limit", "1000").stdout.splitlines()
        assert len(every) >= 3, every
        out = run("search", "staging", *names, "--limit", "1", "--offset", "1")
        assert (out.stdout.splitlines(), out.stderr) == (every[1:2], "pimem: 1 hit shown; for more: --offset 2\n")
        assert run("search", "staging", *names, "--limit", "1", "--offset", "2").stdout.splitlines() == every[2:3]
        past = run("search", "staging", *names, "--offset", str(len(every)))  # (not "no message matches": some did)
        assert (past.exit_code, past.stdout, past.stderr) == (1, "", f"pimem: error: no message matches 'staging' past --offset {len(every)}\n")


def test_privacy_no_read_path_shows_tool_traffic_unless_asked(run, mem):
    assert run("search", SECRET).exit_code == 1
    assert run("search", "API_KEY", "main").exit_code == 1
    assert SECRET not in run("search", "5433").stdout
    assert SECRET not in run("search", "staging", "--rank").stdout
    assert SECRET not in run("since", "main", "#0").stdout
    assert SECRET not in run("since", "main", "#0", "--text").stdout
    shown = run("message", "main", "3")
    assert shown.exit_code == 2 and SECRET not in shown.stdout + shown.stderr
    # asked for: every path shows it
    assert ids(run("search", SECRET, "--include-tools", "--json")) == [3]
    assert ids(run("search", "api_key", "--kind", "echo", "--json")) == [3]
    assert SECRET in run("since", "main", "#0", "--include-tools").stdout
    assert SECRET in run("message", "main", "3", "--include-tools").stdout


def test_all_memories_or_the_named_ones(run, mem):
    Memory.at("other").append([{"kind": "user", "text": "staging in the other memory", "date": "2026-10-09T00:00:00+08:00"}])
    hits = [orjson.loads(line) for line in run("search", "staging", "--json").stdout.splitlines()]
    assert [(h["memory"], h["i"]) for h in hits] == [("other", 0), ("main", 5), ("main", 4), ("main", 0)]
    assert ids(run("search", "staging", "other", "--json")) == [0]


def test_nothing_found_exits_1_and_bad_input_exits_2(run, mem, home):
    run("search", "staging")  # builds the index (derived state)
    before = snapshot(home)
    out = run("search", "no such words")
    assert (out.exit_code, out.stdout) == (1, "")
    assert run("search", "  ").exit_code == 2
    missing = run("search", "x", "nope")
    assert missing.exit_code == 3 and not (home / "nope").exists()
    assert run("search", "x", "--limit", "0").exit_code == 2
    assert run("search", "x", "--kind", "bogus").exit_code == 2
    assert snapshot(home) == before


# ---- the index --------------------------------------------------------------------------------------------


def test_search_builds_the_index_and_catches_up_new_messages(run, mem):
    assert ids(run("search", "lighthouse", "--json")) == []
    assert (mem.path / "index.sqlite").stat().st_mode & 0o777 == 0o600
    mem.append([{"kind": "user", "text": "the lighthouse keeper"}])
    assert ids(run("search", "lighthouse", "--json")) == [7]


def test_a_message_landing_in_an_older_days_file_is_found(run, mem):
    run("search", "staging")
    mem.append([{"kind": "user", "text": "backdated lighthouse", "date": "2026-10-01T10:00:00+08:00"}])
    assert ids(run("search", "lighthouse", "--json")) == [7]


def test_deleting_one_index_file_rebuilds_only_that_one(run, mem, monkeypatch):
    """Each file keeps its own progress: with index.sqlite deleted, the second file's texts are not indexed
    again (FTS5 would merge the repeats, but it would be a second full build of that file)."""
    from pimem import indexer as ixm

    first = run("search", "staging", "--json").stdout
    mem.close()
    os.unlink(mem.path / "index.sqlite")
    handed = []
    real_put = ixm.Writer.put
    monkeypatch.setattr(ixm.Writer, "put", lambda self, rows, texts, *rest: handed.append(
        (self.main, sum(map(len, texts.values())))) or real_put(self, rows, texts, *rest))
    assert run("search", "staging", "--json").stdout == first
    assert {main: n for main, n in handed if n} == {True: 4}  # messages 0, 2, 4, 6 again; none of 1, 3, 5


def test_deleting_the_index_loses_nothing(run, mem):
    first = run("search", "staging", "--json").stdout
    os.unlink(mem.path / "index.sqlite")
    assert run("search", "staging", "--json").stdout == first


def test_a_damaged_index_is_rebuilt(sh, mem):
    first = sh("search", "staging", "--json").stdout
    path = mem.path / "index.sqlite"
    assert not (mem.path / "index.sqlite-wal").exists()  # the process checkpointed it on exit
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)
    out = sh("search", "staging", "--json")
    assert out.stdout == first
    assert b"rebuilding it from the log" in out.stderr


def test_odd_numbered_texts_are_indexed_in_the_second_file(run, mem):
    """The trigrams of odd-numbered messages are built in index-1.sqlite (by a second thread), the others in
    index.sqlite; a search looks in both."""
    assert ids(run("search", "staging", "--json")) == [5, 4, 0]
    mem.close()
    for name, expected in (("index.sqlite", [0, 4]), ("index-1.sqlite", [5])):
        db = sqlite3.connect(mem.path / name)
        assert [r[0] for r in db.execute("SELECT rowid FROM talk WHERE talk MATCH '\"sta\" AND \"ing\"' ORDER BY rowid")] == expected
        db.close()


@pytest.mark.parametrize("damage", ["delete", "truncate", "garbage"])
def test_losing_the_second_file_rebuilds_what_it_held(sh, mem, damage):
    first = sh("search", "staging", "--json").stdout
    mem.append([{"kind": "user", "text": "staging again, after the first search"}])
    path = mem.path / "index-1.sqlite"
    if damage == "delete":
        path.unlink()
    elif damage == "truncate":
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size // 2)
    else:
        path.write_bytes(b"not a database" * 1000)
    out = sh("search", "staging", "--json")
    assert out.returncode == 0, out.stderr
    assert [orjson.loads(line)["i"] for line in out.stdout.splitlines()] == [7] + [orjson.loads(line)["i"] for line in first.splitlines()]
    db = sqlite3.connect(mem.path / "index.sqlite")
    assert db.execute("SELECT count(*), count(DISTINCT i) FROM msgs").fetchone() == (8, 8)


def test_an_index_from_an_older_schema_is_rebuilt(run, mem):
    run("search", "staging")
    mem.close()
    db = sqlite3.connect(mem.path / "index.sqlite")
    db.execute("DELETE FROM msgs")  # what an older pimem's index would not have in the same form
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    assert ids(run("search", "staging", "--json")) == [5, 4, 0]


def test_garbage_in_place_of_the_index_is_rebuilt(run, mem):
    (mem.path / "index.sqlite").write_bytes(b"not a database" * 1000)
    assert ids(run("search", "staging", "--json")) == [5, 4, 0]


def test_torn_last_line_is_skipped_then_indexed_once_sealed(run, mem):
    path = mem.path / "main" / "2026-10-06.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"i":7,"kind":"user","text":"half a light')
    assert ids(run("search", "light", "--json")) == []
    mem.append([{"kind": "user", "text": "lighthouse again", "date": "2026-10-06T10:00:00+08:00"}])
    assert ids(run("search", "light", "--json")) == [7]
    assert ids(run("search", "half a", "--json")) == []


def test_reindex_rebuilds_and_reports(run, mem):
    run("search", "staging")
    out = run("reindex", "main", "--json")
    assert out.exit_code == 0
    row = orjson.loads(out.stdout)
    assert (row["memory"], row["messages"]) == ("main", 7)
    assert run("reindex", "nope").exit_code == 3


def test_message_reads_through_the_index_without_scanning_the_log(run, mem, monkeypatch):
    run("search", "staging")
    monkeypatch.setattr(type(mem.log), "read", lambda *a, **k: (_ for _ in ()).throw(AssertionError("scanned")))
    assert Memory.open("main").message(4)["text"] == MESSAGES[4]["text"]
    assert run("message", "main", "1").stdout == MESSAGES[1]["text"] + "\n"


def test_message_falls_back_to_the_log_without_an_index(run, mem):
    assert not (mem.path / "index.sqlite").exists()
    assert run("message", "main", "4").stdout == MESSAGES[4]["text"] + "\n"
    assert not (mem.path / "index.sqlite").exists()  # a lookup does not create the index
    run("search", "staging")
    mem.append([{"kind": "user", "text": "not indexed yet"}])
    assert run("message", "main", "7").stdout == "not indexed yet\n"
    assert run("message", "main", "8").exit_code == 3


def test_the_index_holds_exactly_the_logs_messages(run, mem):
    run("search", "staging")
    db = sqlite3.connect(mem.path / "index.sqlite")
    assert [row[0] for row in db.execute("SELECT i FROM msgs ORDER BY i")] == list(range(7))


# ---- real processes ---------------------------------------------------------------------------------------


def test_a_reindex_killed_midway_is_caught_up(sh, home):
    mem = Memory.at("big")
    mem.append([{"kind": "user", "text": f"message {n} about the lighthouse {n % 7}"} for n in range(30_000)])
    for delay in (0.15, 0.3, 0.6):
        proc = subprocess.Popen(pimem_cmd("reindex", "big"), env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        out = sh("search", '"lighthouse 3"', "big", "--limit", "100000", "--json")
        assert out.returncode == 0, out.stderr
        assert [orjson.loads(line)["i"] for line in out.stdout.splitlines()] == [n for n in range(29_999, -1, -1) if n % 7 == 3]
        db = sqlite3.connect(mem.path / "index.sqlite")
        assert db.execute("SELECT count(*), min(i), max(i) FROM msgs").fetchone() == (30_000, 0, 29_999)
        db.close()


def test_concurrent_appends_and_searches(home):
    writers, searchers, per_writer = 3, 3, 60
    script = "import sys\nfrom pimem import Memory\nm = Memory.at('c')\nfor n in range({n}):\n    m.append([{{'kind': 'user', 'text': f'needle w{w} n{{n}}'}}])\n"
    search_loop = (
        "import sys\nfrom pimem import Memory\nfrom pimem.search import search\n"
        "for _ in range(25):\n    hits = search([Memory.open('c')], 'needle', limit=100000)\n"
        "    assert len({(h['i']) for h in hits}) == len(hits)\n"
    )
    Memory.at("c").append([{"kind": "user", "text": "needle start"}])
    env = subprocess_env()
    procs = [subprocess.Popen([sys.executable, "-c", script.format(n=per_writer, w=w)], env=env) for w in range(writers)]
    procs += [subprocess.Popen([sys.executable, "-c", search_loop], env=env, stderr=subprocess.PIPE) for _ in range(searchers)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    hits = searching.search([Memory.open("c")], "needle", limit=100_000)
    assert sorted(h["i"] for h in hits) == list(range(1 + writers * per_writer))
    db = sqlite3.connect(Memory.at("c").path / "index.sqlite")
    assert db.execute("SELECT count(*), count(DISTINCT i) FROM msgs").fetchone() == (181, 181)


def test_a_rebuild_beside_appends_and_searches_leaves_an_index_that_answers(home):
    """``reindex`` deletes the index while readers catch it up: it does so holding their lock, and a reader
    that opened the old files catches up into the new ones, never half into each (rows without their
    offsets: every later search refused as "a message number twice")."""
    writers, per_writer = 2, 40
    script = "from pimem import Memory\nm = Memory.at('c')\nfor n in range({n}):\n    m.append([{{'kind': 'user', 'text': f'needle w{w} n{{n}}'}}])\n"
    search_loop = ("from pimem import Memory, PimemError\nfrom pimem.search import search\nfor _ in range(30):\n"
                   "    try:\n        search([Memory.open('c')], 'needle', limit=1)\n    except PimemError:\n        pass\n")
    rebuild_loop = ("from pimem import Memory, PimemError\nfrom pimem.index import rebuild\nfor _ in range(12):\n"
                    "    m = Memory.open('c')\n    try:\n        rebuild(m.path, m.log)\n    except PimemError:\n        pass\n")
    Memory.at("c").append([{"kind": "user", "text": "needle start"}])
    env = subprocess_env()
    codes = [script.format(n=per_writer, w=w) for w in range(writers)] + [search_loop, search_loop, rebuild_loop]
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE) for code in codes]
    for proc in procs:
        assert proc.wait(timeout=180) == 0, proc.stderr.read().decode()
    hits = searching.search([Memory.open("c")], "needle", limit=100_000)  # (what the runs left answers, whole)
    assert sorted(h["i"] for h in hits) == list(range(1 + writers * per_writer))


def test_append_does_not_import_sqlite(home):
    probe = (
        "import sys\nfrom pimem import cli\ntry:\n    cli.main(['append', 'x', 'hello'])\nexcept SystemExit:\n    pass\n"
        "print('sqlite3' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=subprocess_env(), capture_output=True, text=True)
    assert out.stdout == "0\nFalse\n"


def test_an_index_of_one_file_from_the_previous_version_is_rebuilt_not_doubled(run, mem):
    """Version 2 kept every text in index.sqlite; kept as is, the second file would index the odd-numbered
    ones again and they would be found twice."""
    run("search", "staging")
    mem.close()
    os.unlink(mem.path / "index-1.sqlite")
    db = sqlite3.connect(mem.path / "index.sqlite")
    for i in range(1, 7, 2):  # as version 2 held them: odd-numbered texts in index.sqlite too
        db.execute("INSERT INTO talk (rowid, text) VALUES (?, ?)", (i, MESSAGES[i]["text"].lower() + "\n\n"))
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    assert ids(run("search", "staging", "--json")) == [5, 4, 0]


def test_a_catch_up_reads_the_index_s_progress_twice_once_to_see_it_is_behind_once_holding_the_lock(mem, monkeypatch):
    """Efficiency (no behaviour to see): ``behind`` under the lock is handed the progress the catch-up read,
    and says which files were changed since; neither is read or compared again. An edited file (the same size,
    other bytes) is still rebuilt."""
    index, reads = mem.index(), []
    index.catch_up()
    read_progress = indexing.Index._indexed
    monkeypatch.setattr(indexing.Index, "_indexed", lambda self: reads.append(1) or read_progress(self))
    mem.append([{"kind": "user", "text": "another staging note", "date": "2026-10-08T09:00:00+08:00"}])
    assert index.catch_up() == 1 and len(reads) == 2
    day = mem.log.dir / "2026-10-08.jsonl"
    day.write_bytes(day.read_bytes().replace(b"another", b"ANOTHER"))
    reads.clear()
    assert index.catch_up() == len(MESSAGES) + 1 and len(reads) == 3  # (and once more after it started over)
    assert [h["i"] for h in searching.search([mem], "ANOTHER")] == [len(MESSAGES)]


def test_indexing_a_logged_batch_catches_up_instead_when_the_index_lags(home, mem):
    """``Index.add_logged`` indexes a batch from its messages only when the index holds exactly what
    precedes it; here an earlier message was never indexed, so it catches up from the log instead."""
    index = mem.index()
    index.catch_up()
    mem.append([{"kind": "user", "text": "lagging lighthouse", "date": "2026-10-06T11:00:00+08:00"}])  # not indexed
    mem.log.keep_written = True
    batch = mem.prepare([{"kind": "user", "text": "logged lighthouse", "date": "2026-10-06T12:00:00+08:00"}])
    (start,) = mem.append(batch)
    assert index.add_logged(start, batch, mem.log.written) == 2  # both, read from the log
    assert not index.behind()
    hits = [h["i"] for h in searching.search([Memory.open("main")], "lighthouse")]
    assert hits == [start, start - 1]


def test_a_memory_named_twice_or_by_its_old_name_too_is_searched_and_checked_once(run, home):
    Memory.at("c").append([{"kind": "user", "text": "one test"}])
    assert run("rename", "c", "d").exit_code == 0
    for argv in (["search", "one test", "c", "d", "c"], ["search", "--rank", "one test", "d", "d"]):
        assert run(*argv).stdout.count("d #0 ") == 1, argv
    assert run("fsck", "c", "d").stdout == "d: ok (1 message)\n"
    assert run("reindex", "d", "d").stdout.count("d: 1 message indexed") == 1


def test_rank_over_several_memories_scores_them_as_one_collection(run, home):
    # a rare word in a big memory scores high there and a small memory's best match is bounded by its
    # size: scored each against its own memory, the big memory's weak hits came first
    Memory.at("big").append([{"kind": "user", "text": f"the build log line {n}"} for n in range(3000)]
                            + [{"kind": "user", "text": f"it works now {n}"} for n in range(10)])
    Memory.at("small").append([{"kind": "user", "text": f"xterm note {n}"} for n in range(18)]
                              + [{"kind": "user", "text": "scrolling back in xterm still does not work"}])
    query = "why does scrolling not work in xterm?"
    hits = [orjson.loads(line) for line in run("search", "--rank", query, "--json").stdout.splitlines()]
    assert (hits[0]["memory"], hits[0]["i"]) == ("small", 18)
    alone = [orjson.loads(line) for line in run("search", "--rank", query, "big", "--json").stdout.splitlines()]
    big = [h["i"] for h in hits if h["memory"] == "big"]
    assert big and [h["i"] for h in alone][:len(big)] == big  # (each memory's own order kept)


def test_a_home_whose_path_is_not_utf8_is_searched_recalled_reindexed_and_reported(sh, tmp_path):
    """A home under a directory named in another encoding (the byte ff): search, recall, reindex and status
    --json stopped with exit 2 and 'not valid UTF-8' about arguments that were UTF-8, since the index's second
    file was attached by a name SQLite could not be given, and JSON refused the path. The index files are at
    the real bytes' path; the path is written with a \\xff escape in JSON and in messages."""
    home = os.fsdecode(bytes(tmp_path) + b"/h o\xffme/sub dir %41?#")  # (what a URI would read otherwise)
    assert sh("append", "m", "hello there", PIMEM_HOME=home).returncode == 0
    found = sh("search", "hello", "m", "--json", PIMEM_HOME=home)
    assert found.returncode == 0, found.stderr
    assert [orjson.loads(l)["i"] for l in found.stdout.splitlines()] == [0]
    assert sh("search", "hello", PIMEM_HOME=home).returncode == 0
    recalled = sh("recall", "m", "hello", PIMEM_HOME=home)
    assert recalled.returncode == 0 and b"hello there" in recalled.stdout, recalled.stderr
    assert sh("reindex", "m", PIMEM_HOME=home).returncode == 0
    assert sorted(p.name for p in (tmp_path / os.fsdecode(b"h o\xffme") / "sub dir %41?#" / "m").glob("index*.sqlite")) == ["index-1.sqlite", "index.sqlite"]
    status = sh("status", "m", "--json", PIMEM_HOME=home)
    assert status.returncode == 0, status.stderr
    assert orjson.loads(status.stdout)["path"] == f"{tmp_path}/h o\\xffme/sub dir %41?#/m"
    missing = sh("search", "hello", "nosuch", PIMEM_HOME=home)
    assert missing.returncode == 3
    assert f"no memory named 'nosuch' in {tmp_path}/h o\\xffme/sub dir %41?#".encode() in missing.stderr
    renamed = sh("rename", "m", "m2", PIMEM_HOME=home)  # (a message on stderr writes the path as errors do)
    assert renamed.returncode == 0 and f"({tmp_path}/h o\\xffme/sub dir %41?#/m2)".encode() in renamed.stderr, renamed.stderr


def test_a_memory_whose_config_cannot_be_read_is_named_and_the_others_searched(sh, home):
    """One memory's broken config.json failed a search over all of them (exit 2, nothing of the others), and only
    when a hit landed in it: ``held`` reads the view, folded by its budgets. It is named in one line, whether or
    not it has hits, and left out; the others are searched (exit 2 at the end, as fsck and build-tree say it)."""
    from pimem import api

    assert sh("append", "good", "fine apples").returncode == 0 and sh("append", "other", "fine pears").returncode == 0
    (home / "good" / "config.json").write_text('{"view":{"hi":"x"}}')
    before = snapshot(home / "good")
    for argv in (["search", "fine"], ["search", "pears"], ["search", "--rank", "fine"], ["search", "fine", "--json"]):
        out = sh(*argv)
        err = out.stderr.decode()
        assert out.returncode == 2 and err.count("\n") == 1 and err.startswith("pimem: error: good: ") \
            and 'view.hi cannot be "x"' in err, (argv, err)
        assert out.stdout.count(b"\n") == 1 and b"fine pears" in out.stdout, (argv, out.stdout)
    assert sh("search", "nowhere").returncode == 2  # nothing found, yet a memory went unread: the worse says
    for rank in (False, True):
        found = api.search("fine", rank=rank, home=home)
        assert [h["memory"] for h in found["hits"]] == ["other"] and [u["memory"] for u in found["unread"]] == ["good"]
        assert 'view.hi cannot be "x"' in found["unread"][0]["error"]
    assert snapshot(home / "good") == before


def lost_index_memory(home) -> Memory:
    """4,000 messages (10 MiB of log, over ``index.LAG_BYTES``), one of them the staging port, with no index."""
    pad = "We went through the deployment notes again and compared them with what the runbook says. " * 28
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    mem.append([{"kind": "user" if k % 2 else "pi", "text": "the staging db listens on port 5433" if k == 500 else f"turn {k}: {pad}"}
                for k in range(4000)])
    for path in mem.path.glob("index*.sqlite*"):
        path.unlink()
    return mem


def test_a_search_of_a_lost_index_says_it_catches_it_up_first(home):
    """A search after the index of a big memory was lost waits for the catch-up (the user asked), in silence but
    for a terminal's percentage (none when stderr is a pipe, an agent's shell): it says once what it waits for."""
    lost_index_memory(home)
    env = subprocess_env(PIMEM_HOME=home)
    found = subprocess.run(pimem_cmd("search", "port 5433", "main", "--json"), capture_output=True, env=env, timeout=300)
    assert found.returncode == 0, found.stderr
    assert [orjson.loads(row)["i"] for row in found.stdout.splitlines()] == [500]
    assert found.stderr == b"pimem: the search index of memory 'main' lacks 10 MiB of its log; catching it up first\n"
    found = subprocess.run(pimem_cmd("search", "port 5433", "main"), capture_output=True, env=env, timeout=60)
    assert (found.returncode, found.stderr) == (0, b"")


def test_a_recall_of_a_lost_index_says_it_catches_it_up_first(home):
    """recall, typed by a user, waits for the catch-up of a lost index as search does, and said nothing when
    stderr was a pipe (an agent's shell): it says the line search says, once."""
    lost_index_memory(home)
    env = subprocess_env(PIMEM_HOME=home)
    found = subprocess.run(pimem_cmd("recall", "main", "port 5433", "--limit", "1"), capture_output=True, env=env, timeout=300)
    assert found.returncode == 0, found.stderr
    assert b"5433" in found.stdout
    assert found.stderr == b"pimem: the search index of memory 'main' lacks 10 MiB of its log; catching it up first\n"
    found = subprocess.run(pimem_cmd("recall", "main", "port 5433", "--limit", "1"), capture_output=True, env=env, timeout=60)
    assert (found.returncode, found.stderr) == (0, b"")
