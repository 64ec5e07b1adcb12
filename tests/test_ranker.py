"""The ranker: terms (stems, stop words, unspaced scripts, identifiers), what a message is indexed as
(speaker, date in words), BM25 with neighbour context, the fuse hook, its tables in the index (catch-up,
rebuild, the same scores as in-process) and the privacy default of every ranked read."""

from __future__ import annotations

import os

import orjson
import pytest

from pimem import Memory, api, memories, ranker, recall, terms
from pimem.chain import memory_chain

SECRET = "sk-live-7f3a9c1e55d2"


def ranked(run, query, *args) -> list[int]:
    out = run("search", query, "--rank", "--json", *args)
    return [orjson.loads(line)["i"] for line in out.stdout.splitlines()]


# ---- terms ----------------------------------------------------------------------------------------------------


def test_english_words_are_stemmed_and_stop_words_dropped_from_queries():
    assert terms.query_terms("What did Alice say about the deploys?") == ["alic", "say", "deploy"]
    assert terms.terms("deploying deployed") == ["deploy", "deploy"]
    assert terms.query_terms("the and with what") == []
    assert "the" not in terms.terms("the staging db")  # nor indexed


def test_identifiers_paths_and_numbers_are_kept_whole_and_split():
    found = terms.terms("src/auth/session.ts max_pool_size 3.14 2023-05-08 v2")
    for term in ("src/auth/session.ts", "auth", "session", "ts", "max_pool_size", "pool", "size", "3.14", "3", "14",
                 "2023-05-08", "2023", "05", "v2"):
        assert term in found, term
    assert terms.query_terms("session.ts") == ["session.ts", "session", "ts"]
    assert terms.terms("port 8 and 5433") == ["port", "8", "5433"]  # a lone digit counts (8 May)


def test_unspaced_scripts_by_characters_and_pairs():
    found = terms.terms("我们在蓝鲸副本上")
    assert "蓝鲸" in found and "鲸" in found and "我们" in found
    assert terms.query_terms("蓝鲸") == ["蓝鲸"]
    assert terms.query_terms("数据库") == ["数据", "据库"]
    assert terms.query_terms("鲸") == ["鲸"]
    assert "ภาษ" not in terms.terms("ภาษาไทย") and "ภา" in terms.terms("ภาษาไทย")  # Thai: pairs too
    assert terms.terms("Ünïcode CAFÉ") == ["ünïcode", "café"]  # (Snowball English leaves them be)


def test_a_message_is_indexed_as_its_text_speaker_and_date_in_words():
    found, length = ranker.document({"kind": "user", "text": "lunch at noon", "date": "2023-05-08T13:56:00+00:00",
                                     "meta": {"speaker": "Caroline"}})
    assert {"lunch", "noon", "carolin", "8", "may", "2023", "monday"} <= found
    assert length == 3  # the text's words: the speaker and date add terms, not length
    assert ranker.speaker({"meta": {"author": "Bob"}}) == "Bob"
    assert ranker.speaker({"meta": {"name": "ci-bot"}}) == "ci-bot"
    assert ranker.speaker({"meta": {}}) is None
    assert ranker.date_words("2026-10-08T09:30:00+08:00") == "8 october 2026 thursday"  # in its own offset


# ---- scoring ----------------------------------------------------------------------------------------------


def corpus(texts, conversations=None):
    return ranker.Corpus([terms.bag(t) for t in texts], conversations, [ranker.asks({"text": t}) for t in texts])


def test_bm25_rare_terms_and_short_messages_first():
    source = corpus(["refund rounding off by one cent", "refund " + "and many other words " * 10, "refund policy",
                     "nothing here"])
    best = ranker.rank(source, "refund rounding", 10, before=0, after=0)
    assert [i for i, _ in best][:1] == [0] and 3 not in dict(best)
    assert dict(best)[2] > dict(best)[1]  # the same term in a shorter message counts more


def test_neighbour_context_lifts_the_answer_after_the_question():
    texts = ["where should we host the staging database?", "on the box in Frankfurt", "lunch was good",
             "the weather is fine", "staging database backups run nightly"]
    without = dict(ranker.rank(corpus(texts), "where is the staging database hosted", 10, before=0, after=0, reply=0))
    assert 1 not in without
    scores = dict(ranker.rank(corpus(texts), "where is the staging database hosted", 10))
    assert scores[1] == pytest.approx(ranker.REPLY * without[0])  # it holds no term: the share of the question
    assert scores[0] == pytest.approx(without[0] + ranker.AFTER * 0)  # (1 has no score of its own to lend)
    assert 3 in scores and scores[3] == pytest.approx(ranker.AFTER * without[4])
    plain = dict(ranker.rank(corpus([t.rstrip("?") for t in texts]), "where is the staging database hosted", 10))
    assert plain[1] == pytest.approx(ranker.BEFORE * without[0])  # a turn that asks nothing lends less
    # a question in the first person is about its asker's turns: a question turn lends as any turn does
    mine = dict(ranker.rank(corpus(texts), "where did I host the staging database", 10))
    assert mine[1] == pytest.approx(ranker.BEFORE * mine[0])
    assert ranker.asks({"text": "lunch?  \n"}) and ranker.asks({"text": "午饭？"}) and not ranker.asks({"text": "? no"})
    # a neighbour in another conversation lends nothing
    apart = dict(ranker.rank(corpus(texts, [1, 2, 2, 2, 2]), "where is the staging database hosted", 10))
    assert 1 not in apart
    narrow = dict(ranker.rank(corpus(texts), "where is the staging database hosted", 10, widen=False))
    assert set(narrow) == {0, 4}


def test_first_person_words_find_the_askers_own_turns_and_are_not_lent():
    assert terms.terms("I fixed my bike myself") == ["i", "fix", "my", "bike", "myself"]  # indexed
    assert terms.query_terms("what did I cook for my friend?") == ["cook", "friend"]
    assert terms.first_person("What did I cook for my friend? I") == ["i", "my"]
    texts = ["I baked banana bread for the dinner party", "banana bread is easy to bake", "dinner for a friend",
             "sounds lovely", "the friend left"]
    scores = dict(ranker.rank(corpus(texts), "what did I cook for my friend?", 10))
    assert 0 in scores  # no content word of the question, but its asker's "I"
    plain = dict(ranker.rank(corpus(texts), "what did they cook for a friend?", 10))
    assert 0 not in plain
    # the first person adds to the turns holding it and is lent to no neighbour
    assert scores[3] == pytest.approx(plain[3]) and scores[1] == pytest.approx(plain.get(1, 0.0))
    assert ranker.rank(corpus(texts), "what did I do?", 10) == []  # first person only: nothing to rank by
    narrow = dict(ranker.rank(corpus(texts), "what did I cook for my friend?", 10, widen=False))
    assert set(narrow) == {2, 4}


def test_a_fuse_hook_reorders_the_candidates():
    seen = []

    def fuse(candidates):
        seen.append(candidates)
        return [(i, 1.0 / (1 + n)) for n, (i, _) in enumerate(reversed(candidates))]

    source = corpus(["alpha beta", "alpha", "gamma"])
    plain = ranker.rank(source, "alpha beta", 10, before=0, after=0)
    fused = ranker.rank(source, "alpha beta", 10, before=0, after=0, fuse=fuse)
    assert seen == [plain] and [i for i, _ in fused] == [i for i, _ in reversed(plain)]


def test_past_the_first_places_a_deeper_tier_takes_the_turns_around_the_best(monkeypatch):
    texts = ["the weather was lovely", "let us talk about gadgets", "can you recommend a wallet case for my phone?",
             "sure, here are three brands", "also a screen protector please", "a long way off", "phone numbers",
             "case closed"]
    source = corpus(texts, [2, 1, 1, 1, 1, 1, 3, 3])  # 0 is another conversation
    question = "suggest a case for my phone"
    before = ranker.rank(source, question, 50)
    assert [i for i, _ in before] == [2, 7, 6, 3, 1]  # (the tier starts past ranker.TAIL: not reached here)
    monkeypatch.setattr(ranker, "TAIL", 2)
    monkeypatch.setattr(ranker, "ANCHORS", 1)
    deep = ranker.rank(source, question, 50)
    assert deep[:2] == before[:2] == ranker.rank(source, question, 2)  # the first places as they were
    # then the turns up to two places around the best, in its conversation, before the weaker matches
    assert [i for i, _ in deep] == [2, 7, 1, 3, 4, 6]
    scores = [score for _, score in deep]
    assert scores == sorted(scores, reverse=True)  # scores stay in order across the tiers
    assert [i for i, _ in ranker.rank(source, question, 50, widen=False)] == [2, 7, 6]  # only turns holding a term


def test_the_deeper_tier_orders_weak_matches_by_the_question_s_words_stop_words_too(monkeypatch):
    texts = ["phone case holster", "the case was closed last week", "can you find some case for it"]
    messages = [{"kind": "user", "text": t, "meta": {"session": n}} for n, t in enumerate(texts)]  # (no neighbours)
    question = "can you suggest some case for my phone?"
    with_texts = ranker.Corpus.of(messages)
    plain = ranker.Corpus([ranker.document(m) for m in messages], map(ranker.conversation, messages))  # no texts
    assert [i for i, _ in ranker.rank(with_texts, question, 3)] == [0, 1, 2]  # "case" in a shorter turn
    monkeypatch.setattr(ranker, "TAIL", 1)
    assert [i for i, _ in ranker.rank(with_texts, question, 3)] == [0, 2, 1]  # "can you … some … for"
    assert [i for i, _ in ranker.rank(plain, question, 3)] == [0, 1, 2]  # (a source without texts: by score)
    assert ranker.rank(with_texts, question, 1) == ranker.rank(plain, question, 1)


# ---- through the index --------------------------------------------------------------------------------------

CHAT = [
    {"kind": "user", "text": "Should we move the staging db to the new host?", "date": "2026-10-05T09:00:00+08:00",
     "meta": {"speaker": "Alice"}},
    {"kind": "pi", "text": "Yes, moved it this morning; it listens on 5433.", "date": "2026-10-05T09:01:00+08:00",
     "meta": {"speaker": "Bob"}},
    {"kind": "user", "text": "Great. Lunch at noon.", "date": "2026-10-06T12:00:00+08:00", "meta": {"speaker": "Bob"}},
    {"kind": "pi", "text": "The deploys are green again", "date": "2026-10-07T09:00:00+08:00", "meta": {"speaker": "Alice"}},
    {"kind": "tool", "text": "bash('cat .env')", "date": "2026-10-07T09:01:00+08:00"},
    {"kind": "echo", "text": f"DATABASE_URL=postgres://staging:5433\nAPI_KEY={SECRET}", "date": "2026-10-07T09:01:01+08:00"},
]


@pytest.fixture
def chat(home):
    mem = Memory.at("main")
    mem.append(CHAT)
    mem.close()
    return home


def test_rank_matches_any_term_of_a_question(run, chat):
    question = "when did we move the staging db?"
    assert run("search", question).exit_code == 1  # plain search: every word must occur
    hits = ranked(run, question)
    assert hits[:2] == [1, 0]  # the answer (the reply to a turn that asks: neighbour context), then the question
    assert ranked(run, "deploying")[:1] == [3]  # stems: deploying finds deploys
    assert run("search", "the and what", "--rank").exit_code == 1  # stop words only: nothing to rank by


def test_speaker_and_date_terms_find_their_turns(run, chat):
    assert set(ranked(run, "what did Alice say")[:2]) == {0, 3}
    assert set(ranked(run, "Bob")[:2]) == {1, 2}
    assert ranked(run, "what happened on Wednesday", "--limit", "1") == [3]  # 7 October 2026
    assert ranked(run, "lunch on 6 October")[:1] == [2]


def test_rank_filters_kind_dates_and_before(run, chat):
    assert ranked(run, "5433", "--kind", "pi") == [1]
    assert ranked(run, "staging", "--kind", "pi") == []  # (a neighbour of another kind lends nothing then)
    assert ranked(run, "staging db", "--before", "1") == [0]
    assert 0 not in ranked(run, "staging", "--since", "2026-10-05T09:00:30+08:00")


def test_every_ranked_read_keeps_tool_traffic_private_by_default(run, chat):
    assert SECRET not in run("search", "API_KEY staging", "--rank").stdout
    assert ranked(run, "API_KEY") == []
    assert 5 in ranked(run, "API_KEY", "--include-tools")
    assert SECRET not in run("recall", "main", "API_KEY staging").stdout
    assert SECRET in run("recall", "main", "API_KEY", "--include-tools").stdout
    found = api.search("API_KEY staging", ["main"], rank=True)["hits"]  # the MCP search tool's call
    assert all(SECRET not in hit["snippet"] for hit in found) and 5 not in [h["i"] for h in found]
    assert 5 in [h["i"] for h in api.search("API_KEY", ["main"], rank=True, include_tools=True)["hits"]]
    assert SECRET not in orjson.dumps(api.recall("main", "API_KEY staging")).decode()  # the MCP recall tool's
    # memories: rule-derived records quote tool traffic, so they too need include_tools
    mem = Memory.open("main")
    memory_chain(mem.path).append(lambda events: [{"type": "create", "recordId": "r1", "author": "rule", "ts": "2026-10-07T09:02:00+08:00",
                                    "payload": {"kind": "derived", "content": f"edited .env ({SECRET})", "scope": "project",
                                                "status": "provisional", "priority": "normal"}}])
    assert memories.rank(memories.records(mem), SECRET) == []
    assert [r["id"] for r in memories.rank(memories.records(mem, include_tools=True), SECRET)] == ["r1"]


def test_recall_searches_through_the_ranker(run, chat):
    doc = orjson.loads(run("recall", "main", "moving the staging database", "--json").stdout)
    assert [r["id"] for r in doc["results"]][:2] == [1, 0] and 2 not in [r["id"] for r in doc["results"]]  # the answer first
    assert recall.find(Memory.open("main"), recall.Request(query="deploying")).records[0]["id"] == 3


def test_the_index_gives_the_in_process_scores(run, chat):
    messages = list(Memory.open("main").messages())
    talk = [m for m in messages if m["kind"] not in ("tool", "echo")]
    source = ranker.Corpus.of(talk)
    for query in ("when did we move the staging db", "Alice deploys", "5433 lunch", "did I move the db?"):
        expected = [(talk[n]["i"], round(score, 4)) for n, score in ranker.rank(source, query, 10)]
        hits = api.search(query, ["main"], rank=True, limit=10)["hits"]
        assert [(h["i"], h["score"]) for h in hits] == expected, query


def test_the_index_gives_the_deeper_tier_and_keeps_tool_traffic_out_of_it(run, chat, monkeypatch):
    monkeypatch.setattr(ranker, "TAIL", 1)
    messages = list(Memory.open("main").messages())
    talk = [m for m in messages if m["kind"] not in ("tool", "echo")]
    source = ranker.Corpus.of(talk)
    for query in ("are the deploys green again?", "did the db move to the new host", "lunch staging"):
        expected = [(talk[n]["i"], round(score, 4)) for n, score in ranker.rank(source, query, 10)]
        hits = api.search(query, ["main"], rank=True, limit=10)["hits"]
        assert [(h["i"], h["score"]) for h in hits] == expected, query  # the texts read from the log
    around = ranked(run, "are the deploys green again?")
    assert around[0] == 3 and 4 not in around and 5 not in around  # its neighbours are tool traffic
    assert {4, 5} <= set(ranked(run, "are the deploys green again?", "--include-tools"))


def test_the_ranker_tables_catch_up_and_are_rebuilt(run, chat, home):
    assert ranked(run, "frankfurt") == []
    assert run("append", "main", "the new host is in Frankfurt").exit_code == 0
    assert ranked(run, "frankfurt")[:1] == [6]  # caught up from the log by the next search
    before = run("search", "staging db host", "--rank", "--json").stdout
    path = home / "main" / "index.sqlite"
    for name in ("index.sqlite", "index-1.sqlite"):
        os.unlink(home / "main" / name)
    assert run("search", "staging db host", "--rank", "--json").stdout == before
    path.write_bytes(b"this is not a database" * 100)
    damaged = run("search", "staging db host", "--rank", "--json")
    assert damaged.stdout == before and "rebuilding" in damaged.stderr


def test_search_rank_fuses_the_semantic_extra_when_present(home, run, monkeypatch):
    pytest.importorskip("numpy")
    from pimem import semantic

    monkeypatch.setenv(semantic.ENV, "tests.embedder_stub:load")  # a tiny embedder: automobile ~ car
    monkeypatch.setattr(semantic, "_model", None)
    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "I bought a new car yesterday"}, {"kind": "pi", "text": "the weather is nice"},
                {"kind": "echo", "text": "car car car automobile"}, {"kind": "user", "text": "an automobile show"}])
    assert ranked(run, "automobile") == [3]  # nothing embedded yet: the lexical ranker alone
    semantic.catch_up(mem)
    assert ranked(run, "automobile")[:2] == [3, 0]  # the paraphrase, fused in
    assert 0 not in ranked(run, "automobile", "--kind", "pi")  # the semantic candidates keep the filters
    assert 2 not in ranked(run, "automobile")  # and never bring tool traffic
    monkeypatch.setenv(semantic.ENV, "off")
    assert ranked(run, "automobile") == [3]
    semantic._model = None


def test_a_bounded_ranked_read_reads_each_term_in_its_newest_messages(home):
    """``search.ranked(..., pool=N)`` (the Claude Code hook's, which runs every turn) reads a term's newest N
    messages only, commoner terms included; ``max_terms`` the query's first terms; unbounded it reads all."""
    from pimem import search

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": f"deploy number {k}" + (" to staging" if k % 2 else "")} for k in range(12)])
    talk = ["user", "pi"]
    every = sorted(m["i"] for m, _ in search.ranked(mem, "staging deploy", talk, 50, widen=False))
    assert every == list(range(12))
    bounded = [m["i"] for m, _ in search.ranked(mem, "staging deploy", talk, 50, widen=False, pool=3)]
    assert sorted(bounded) == [7, 9, 11]  # staging (the rarer): its newest 3; deploy: only beside staging
    assert sorted(m["i"] for m, _ in search.ranked(mem, "staging number", talk, 50, widen=False, max_terms=1)) == [1, 3, 5, 7, 9, 11]


def test_commoner_terms_only_add_to_the_messages_the_rarer_ones_named(home, monkeypatch):
    """Past ``FULL_POSTINGS`` named messages a commoner term scores only those (read from the oldest of them
    on), so a question of common words costs what its rarest terms name, not every message."""
    from pimem import rankindex, search

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": f"deploy {k}" + (" staging" if k % 10 == 0 else "")} for k in range(40)])
    monkeypatch.setattr(rankindex, "FULL_POSTINGS", 3)
    found = search.ranked(mem, "staging deploy", ["user", "pi"], 50, widen=False)
    assert sorted(m["i"] for m, _ in found) == [10, 20, 30]  # staging's newest 3; deploy adds no candidate
    scores = {m["i"]: score for m, score in found}
    assert len(set(scores.values())) == 1  # each holds both words
