"""Lines of the offline compactor that misstate their input, found reading real and synthetic views (session 30).
Each is marked xfail(strict): the fix removes the mark. One clause is set among other sentences, as a long message
the compactor must cut down, and its units and its leaf line are read the way a model reads them."""

import re

import pytest

from pimem.compactor import extractive

FILL = "The supervisor restarted the process twice overnight and logged both restarts. "
_CONNECTIVES = re.compile(r", |; |: | → |，|；|(?<=[。！？])|(?<=[.!?]) ")
_WORDS = re.compile(r"[\w'’^~#-]+")


def _said(clause: str, kind: str = "pi") -> tuple[list[str], list[str]]:
    """The units of a message holding ``clause`` among other sentences, and the pieces of its leaf line."""
    text = f"{FILL}{clause} " * 3
    found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
    line = extractive.leaf(kind, text, 200).removeprefix(f"{kind}: ")
    return found, [p.strip("…") for p in _CONNECTIVES.split(line) if p]


def _words(piece: str) -> set[str]:
    return {w.lower() for w in _WORDS.findall(piece)}


def _only_with(pieces: list[str], said: set[str], marks: set[str]) -> list[str]:
    """The pieces holding a word of ``said`` and none of ``marks``: what reads as the opposite."""
    return [p for p in pieces if _words(p) & said and not _words(p) & marks]


def test_a_negation_inside_a_condition_keeps_the_condition():
    """``remove the chalk import from tui-renderer if it's not used anywhere else`` gave ``remove, chalk import,
    tui-renderer, not used anywhere else`` (pi-mono session, 80+16): the agent's condition became a finding."""
    found, line = _said("Now we can remove the chalk import from tui-renderer if it's not used anywhere else.")
    assert not _only_with(found + line, {"used"}, {"if"}), (found, line)
    # (a negation of more than one word, a tab after one: ``far from stable`` was said as found)
    for clause, said in [("We keep the old parser if the new one is far from stable.", {"stable"}),
                         ("Keep the cache if it's not\tused anywhere.", {"used"})]:
        found, line = _said(clause)
        assert not _only_with(found + line, said, {"if"}), (clause, found, line)


def test_without_is_said_with_what_it_negates():
    """``The deploy went out without any tests being run`` gave ``deploy went, without, tests, run``: read as tests
    run. ``clean without the setImmediate() workarounds`` gave ``clean without``, its object gone."""
    found, line = _said("The deploy went out without any tests being run.")
    assert "without" not in found + line, (found, line)
    assert not _only_with(found + line, {"tests", "run"}, {"without"}), (found, line)
    found, line = _said("The code is now clean without the `setImmediate()` workarounds.")
    assert not [p for p in found + line if p.endswith(" without")], (found, line)


def test_a_correction_keeps_the_right_value():
    """``no wait, it's 40 not 50`` (an agent's message) gave ``no wait, not 50``; ``Pin the dependency to ~2.3.1, not
    ^2.3.1`` gave ``Pin, dependency, not ^2.3.1``: the value meant is nowhere in the line."""
    for clause, wrong, right in [("no wait, it's 40 not 50.", "not 50", "40"),
                                 ("Pin the dependency to ~2.3.1, not ^2.3.1.", "not ^2.3.1", "~2.3.1")]:
        found, line = _said(clause)
        if any(wrong in p for p in line):
            assert any(right in p.split() for p in line), (clause, line)  # (a version's dots are no word's end)


def test_each_thing_keeps_its_own_number():
    """``The API returns 404 for /v2/orders but 200 for /v1/orders`` gave ``API, returns 404, /v2/orders,
    /v1/orders``: read as both returning 404."""
    found, line = _said("The API returns 404 for /v2/orders but 200 for /v1/orders.")
    if "/v1/orders" in " ".join(line):
        assert any("200" in p for p in line), line


def test_only_when_keeps_its_condition():
    """``The tests pass only when run with --no-cache`` gave ``tests pass, run, no-cache``."""
    found, line = _said("The tests pass only when run with --no-cache.")
    assert not _only_with(found + line, {"pass"}, {"only", "when"}), (found, line)


def test_only_before_a_verb_stays_with_what_it_limits():
    """``I only added tests`` gave ``added tests``; ``It only fails on CI`` gave ``fails, CI``: read as all that was done,
    as failing everywhere (``only`` a stop word, a bound's before a number alone). Not ``the only fix``: no verb."""
    for clause, verb, said in [("I only added tests.", "added", {"tests"}),
                               ("It only fails on CI.", "fails", {"ci"}),
                               ("The job only runs at night.", "runs", {"night"}),
                               ("We can only test it on staging.", "test", {"staging"})]:
        found, line = _said(clause)
        assert [p for p in line if verb in _words(p)], (clause, found, line)
        assert not _only_with(found, {verb}, {"only"}), (clause, found)  # (a name alone, ``CI``, as under a negation)
        assert not _only_with(line, said | {verb}, {"only"}), (clause, line)
    for clause in ("The only fix is a restart.", "Not only does it fail, it hangs."):
        found, line = _said(clause)
        assert not [p for p in found + line if re.match(r"(?i)only\b", p)], (clause, found, line)


def test_a_negative_object_stays_with_its_verb():
    """``The cleanup job deleted nothing from the archive bucket`` gave ``cleanup job deleted, nothing from the
    archive bucket``; ``We ship nothing this week`` gave ``ship, nothing this week``."""
    for clause, verb in [("The cleanup job deleted nothing from the archive bucket.", "deleted"),
                         ("We ship nothing this week.", "ship")]:
        found, line = _said(clause)
        assert not _only_with(found + line, {verb}, {"nothing"}), (clause, found, line)


def test_of_mine_keeps_who_did_it():
    """``Yeah, a buddy of mine adopted last year`` gave ``Melanie: mine adopted last year`` (LoCoMo conv-26,
    352+16: Melanie did not adopt); ``A colleague of mine quit the company in May`` gave ``colleague, mine quit``."""
    for clause in ("Yeah, a buddy of mine adopted last year. It was a long process.",
                   "A colleague of mine quit the company in May."):
        found, line = _said(clause)
        assert not [p for p in found + line if re.match(r"mine\b", p)], (clause, found, line)


def test_far_from_stays_whole():
    found, line = _said("The disk is far from full, only 20% used.")
    assert not _only_with(found + line, {"full"}, {"from"}), (found, line)


def test_a_change_says_which_value_is_new():
    """``Changed dimGray from #444444 (very dark gray) to #585858`` gave ``Changed, dimGray, #444444, #585858``
    (pi-mono 504+4 likewise)."""
    found, line = _said("Changed dimGray from #444444 (very dark gray) to #585858 (medium-dark gray).")
    if any("#444444" in p for p in line):
        assert any("from #444444" in p or "to #585858" in p for p in line), line


def test_a_piece_stays_in_its_sentence():
    """``… logged both restarts. It's 40 not 50.`` gave the piece ``restarts. It's 40``; ``Make it 40 instead of
    50`` gave ``restarts. Make it 40 instead of 50``: the last word of one sentence read with the next."""
    for clause in ("It's 40 not 50.", "Make it 40 instead of 50."):
        found, line = _said(clause)
        assert not [p for p in found if re.search(r"\w[.!?] \w", p)], (clause, found)


def test_a_negation_keeps_its_limit_in_time():
    """``He said he would not migrate the billing database before the audit ends`` gave ``said, not migrate the
    billing database``: never, where he said not yet."""
    found, line = _said("He said he would not migrate the billing database before the audit ends.")
    assert not _only_with(found + line, {"migrate"}, {"before", "audit", "until"}), (found, line)


def test_a_negated_value_keeps_the_value_said_for_it():
    """``It's not 40, it's 50`` gave ``not 40``: the value meant, a number with only stop words before it, was
    nowhere (``not 40 but 50`` likewise)."""
    for clause in ("It's not 40, it's 50.", "It's not 40 but 50.", "The timeout is not 30s, it's 45s."):
        found, line = _said(clause)
        wrong, right = ("30s", "45s") if "30s" in clause else ("40", "50")
        if any(f"not {wrong}" in p for p in line):
            assert any(right in _words(p) for p in line), (clause, line)


BOUNDS = [  # (a clause, its number, the bound's or approximation's word to be said with it)
    ("If the error rate stays under 0.1% for two hours we go to 50%, otherwise we roll back.", "0.1%", "under"),
    ("If the error rate stays under 0.1% for two hours we go to 50%, otherwise we roll back.", "50%", "to"),
    ("The file is 2.5 GB, which is over the 2 GB upload limit.", "2 GB", "over"),
    ("We roll out to 5% of traffic first.", "5%", "to"),
    ("Keep the queue at most 200 jobs deep.", "200 jobs", "most"),
    ("The cache holds up to 512 entries per shard.", "512 entries", "up"),
    ("Der Fehleranteil bleibt unter 5% der Anfragen.", "5%", "unter"),
    ("Le fichier pèse moins de 2 Go au total.", "2 Go", "moins"),
    ("The error rate is about 5% now.", "5%", "about"),
    ("Only 20% of requests fail.", "20%", "only"),
    ("It was only 3 GB after the cleanup.", "3 GB", "only"),
    ("Latency is around 300 ms at peak.", "300 ms", "around"),
    ("Disk use is almost 90% again.", "90%", "almost"),
    ("We saw nearly 2 GB of logs.", "2 GB", "nearly"),
    ("Es bleiben nur 5% frei.", "5%", "nur"),
    ("Il reste environ 20% du disque.", "20%", "environ"),
    ("Осталось около 20% диска.", "20%", "около")]


@pytest.mark.parametrize("clause,number,word", BOUNDS, ids=[f"{n} {w}" for _, n, w in BOUNDS])
def test_a_bound_or_an_approximation_stays_with_its_number(clause, number, word):
    """``If the error rate stays under 0.1% for two hours`` gave ``If the error rate stays, 0.1%``; ``over the 2 GB
    upload limit`` gave ``2 GB upload limit``; ``We roll out to 5% of traffic first`` gave ``5%, traffic first``: a
    bound read as the value. ``The error rate is about 5% now`` gave ``5%``, ``Only 20% of requests fail`` ``20%``: a
    rough or a small amount read as the exact one."""
    found, line = _said(clause)
    at = re.compile(r"(?<![\w.])" + re.escape(number))
    assert [p for p in found + line if at.search(p)], (clause, number, found, line)
    assert not [p for p in found + line if at.search(p) and word not in _words(p)], (clause, number, found, line)


COMPARED = [  # (a clause, the share it compares with, the word of the comparison to be said with it)
    ("Latency is 12%, compared to 5% last week.", "5%", "compared"),
    ("The error rate is 3% now, relative to 1% in March.", "1%", "relative"),
    ("Disk use is close to 90% again.", "90%", "close")]


@pytest.mark.parametrize("clause,number,word", COMPARED, ids=[w for _, _, w in COMPARED])
def test_a_share_compared_to_is_no_target(clause, number, word):
    """``Latency is 12%, compared to 5% last week`` gave ``Latency, 12%, compared, to 5% last week``: ``to`` before a
    share was read as a bound (``roll out to 5% of traffic``), the share compared with said as a target reached."""
    found, line = _said(clause)
    at = re.compile(r"(?<![\w.])" + re.escape(number))
    assert [p for p in found + line if at.search(p)], (clause, number, found, line)
    assert not [p for p in found + line if at.search(p) and word not in _words(p)], (clause, number, found, line)


def test_a_flag_or_a_version_range_keeps_its_sigil():
    """``Run the tests with --no-cache`` gave ``no-cache``; ``Pin it to ^1.3.0`` gave ``1.3.0``: a flag read as words,
    a version range as an exact pin."""
    for clause, bare, whole in [("Run the tests with --no-cache and -x.", "no-cache", "--no-cache"),
                                ("Pin the package to ^1.3.0 for now.", "1.3.0", "^1.3.0"),
                                ("Keep the parser at ~2.3.1 until the audit.", "2.3.1", "~2.3.1"),
                                ("It needs requests>=2.31 to work.", "2.31", ">=2.31")]:
        found, line = _said(clause)
        assert not [p for p in found + line if bare in p and whole not in p], (clause, found, line)


def test_except_is_said_with_what_it_leaves_out():
    """``Except for the billing service, every service was upgraded to Python 3.12`` gave ``Except, billing service,
    upgraded``: read as the billing service upgraded."""
    found, line = _said("Except for the billing service, every service was upgraded to Python 3.12.")
    assert "Except" not in found + line, (found, line)
    assert not _only_with(found + line, {"billing"}, {"except"}), (found, line)


def test_what_leaves_out_a_pronoun_alone_is_no_piece():
    """``Apart from that, the deploy went fine`` gave ``Apart from, deploy went fine`` (and the unit ``Apart``, a name):
    a negation that leaves out or stands for what follows it (``apart from``, ``except``, ``without``, ``instead of``),
    its object a stop word, said alone: words with no content, in the line. What the clause after it says stays."""
    empty = {"apart", "from", "except", "for", "instead", "of", "without", "rather", "than", "that", "this", "it"}
    for clause, said in [("Apart from that, the deploy went fine.", "deploy went fine"),
                         ("Except for that, everything works.", "everything works"),
                         ("Instead of that, we rolled back.", "rolled back"),
                         ("Without it, the build fails.", "build fails"),
                         ("Rather than that, we wait for the vendor.", "vendor")]:
        found, line = _said(clause)
        assert not [p for p in found + line if not _words(p) - empty], (clause, found, line)
        assert [p for p in line if said in p], (clause, found, line)


def test_a_verb_keeps_its_no():
    """``The linter found no errors in the module`` gave ``linter found, no errors in the module``: ``found`` read
    alone, as found something."""
    found, line = _said("The linter found no errors in the module.")
    assert not _only_with(line, {"found"}, {"no"}), line


def test_a_negated_verb_keeps_its_subject_of_few():
    """``Some close friends kept supporting me, but a few weren't able to handle it`` gave ``close friends kept
    supporting, weren't able`` at a merge (LoCoMo conv-26, 336+16): the negation read as the friends', ``few`` a piece
    of its own the merge dropped."""
    found, line = _said("Some close friends kept supporting me, but a few weren't able to handle it.")
    assert not _only_with(found, {"weren't"}, {"few"}), found
    found, line = _said("Most tests passed, but many didn't finish in time.")
    assert not _only_with(found, {"didn't"}, {"many"}), found


def test_a_french_negation_stays_whole_over_its_elision():
    """``Le déploiement n'a pas été effectué vendredi`` gave ``Le déploiement n'a, pas été effectué vendredi``, ``Il a
    dit qu'il ne migrerait pas la base`` gave ``dit qu'il, ne migrerait, pas la base``: ``ne … pas`` in two pieces
    (session 30, e27a03c; whole since: this keeps it so)."""
    for clause in ("Le déploiement n'a pas été effectué vendredi.", "Il a dit qu'il ne migrerait pas la base avant lundi."):
        found, line = _said(clause)
        assert not [p for p in line if re.search(r"(?:\bne|n['’]a)$", p)], (clause, line)
        assert not [p for p in line if p.startswith("pas ")], (clause, line)


def test_an_interjection_is_no_piece():
    """``Oops, sorry 'bout the accident! Whoa, that sign looks serious`` gave ``Oops, sorry, bout, accident, Whoa``
    (LoCoMo conv-26 368+16: ``Oops, bout, Must, guys, goodness``): words that say nothing of the span, in its line."""
    found, line = _said("Oops, sorry 'bout the accident! Whoa, that sign looks serious. Nope, nah, wow.")
    assert not {"Oops", "bout", "Whoa", "Nope", "nah", "wow"} & set(found + line), (found, line)


def test_a_word_in_mixed_case_is_a_name_not_an_interjection():
    """``I play WoW every weekend`` gave ``play, weekend``: ``WoW`` (World of Warcraft) read as the interjection
    ``wow``, a stop word. A word written with a capital after a small letter is a name (``WoW``, ``LoL``); ``Wow`` and
    ``WOW`` stay interjections."""
    for clause, name in [("I play WoW every weekend with my guild.", "WoW"),
                         ("WoW is my favourite game.", "WoW"),
                         ("We queued for LoL ranked after dinner.", "LoL")]:
        found, line = _said(clause)
        assert [p for p in line if name in p.split()], (clause, found, line)
    found, line = _said("Wow, that sign looks serious. WOW.")
    assert not [p for p in found + line if "wow" in _words(p)], (found, line)


def test_a_short_flag_stays_with_its_command():
    """``Then run git commit -a -m wip`` gave ``run git commit, -m wip``; ``Run sed -i on the file`` gave ``Run sed``;
    ``docker run -it ubuntu`` gave ``docker run``: a flag that is a stop word's letters (a, i, it) was dropped as one, and
    the command read as run without it."""
    for clause, command, flag in [("Then run git commit -a -m wip and push.", "git commit", "-a"),
                                  ("Try ls -a in the folder.", "ls", "-a"),
                                  ("Run sed -i on the file.", "sed", "-i"),
                                  ("Use git add -A then.", "git add", "-A"),
                                  ("Start it with docker run -it ubuntu bash today.", "docker run", "-it")]:
        found, line = _said(clause)
        assert [p for p in line if command in p], (clause, found, line)
        assert not [p for p in found + line if command in p and flag not in p.split()], (clause, found, line)


def test_a_short_flag_after_stop_words_stays_with_the_verb_before_them():
    """``Then run it with -v to see more`` gave ``run``: a short flag alone in its run (after ``it with``) weighs
    nothing (a word of one letter) and was dropped, the command read as run without it (``Pass -q`` was said)."""
    for clause, flags in [("Then run it with -v to see more.", ["-v"]),
                          ("Run it with -v.", ["-v"]),
                          ("Rerun the suite with -x and -s now.", ["-x", "-s"])]:
        found, line = _said(clause)
        for flag in flags:
            assert [p for p in line if flag in p.split() and p.split()[0] != flag], (clause, flag, found, line)


def test_a_number_after_a_negated_one_and_a_comma_alone_is_no_correction():
    """``The bug is not in 1.2, 1.3 has it`` gave ``not in 1.2, 1.3``; ``It doesn't work on Node 14, 16 is fine`` gave
    ``doesn't work on Node 14, 16``: the next clause's number, after a comma alone, said as negated too (read as the bug
    in neither, Node 16 failing). Only a word that says it is the value meant (``it's``, ``but``, ``sondern``) makes it
    one."""
    for clause, wrong in [("The bug is not in 1.2, 1.3 has it.", "1.3"),
                          ("It doesn't work on Node 14, 16 is fine.", "16"),
                          ("We don't support Python 2, 3.6 is the minimum.", "3.6")]:
        found, line = _said(clause)
        assert not [p for p in found + line if re.search(r"(?:\bnot|n['’]t)\b", p) and wrong in p.split(", ")[1:]], (
            clause, found, line)
    found, line = _said("The bug is not in 1.2, but 1.3 has it.")
    assert any("not in 1.2, but 1.3" in p for p in found), found


def test_a_verb_form_that_is_the_fact_stays():
    """In a memory that writes merge and merged, test and testing, a rule that left a verb's form alone out of the
    pieces (a7d7baf, since taken back: it cost LongMemEval's coverage) said ``The PR was merged`` as ``PR``, ``It
    failed`` as nothing, ``Is it used or new?`` as ``new?``, and lost the nouns of ``Clear the cache``, ``We need more
    tests``: the fact of the sentence, the outcome, is said."""
    others = ["We merge the PR after review.", "I merged it yesterday.", "Builds fail on Windows.", "It failed twice.",
              "Close the ticket.", "I closed the ticket.", "We use the old laptop.", "I used the new one.",
              "We are testing it.", "Building now.", "We cached it.", "Caching is on.", "Reject it.", "They rejected it.",
              "We check it.", "I checked it.", "It expected a string.", "It ensured that.", "It happened.",
              "We needed it.", "Approve it.", "Bob approved it."] * 2
    stats = extractive.Stats.of({"text": t} for t in others)
    for clause, word in [("The PR was merged.", "merged"), ("It failed.", "failed"), ("The ticket is closed.", "closed"),
                         ("The change was rejected, sadly.", "rejected"), ("Is it used or new?", "used"),
                         ("Clear the cache.", "cache"), ("We need more tests.", "tests"), ("Check the build.", "build"),
                         ("The PR got approved by Bob.", "approved"), ("The PR was merged by Alice today.", "merged"),
                         ("The ticket was closed as a duplicate.", "closed")]:
        text = f"{FILL}{clause} " * 3
        found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text}, stats)]
        assert [p for p in found if word in _words(p)], (clause, found)
