"""The offline compactor's lines (issue 15): who said what, exact facts, only the inputs' own text, tool work
as what ran and how it ended; the faithfulness guard's marks; tool text masked on every read path."""

import itertools
import re
import subprocess
import unicodedata

import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from bench.llm_server import FakeLLM
from pimem import Memory, memory, privacy, scheduler, toolwork
from pimem.compactor import cut, extractive, faith
from pimem.privacy import TOOL_TEXT, flat, hide_tools, readings, runs_where, tool_runs
from pimem.tree import plain

from conftest import pimem_cmd, subprocess_env

LONG = "We went through the deployment notes again and compared them with what the runbook says. " * 5
_CONNECTIVES = re.compile(r", |; |: | → |，|；|(?<=[。！？])|(?<=[.!?]) ")


def pieces(line: str) -> list[str]:
    """The line cut at the compactor's fixed connectives, with the fixed words of tool work dropped."""
    out = []
    for piece in _CONNECTIVES.split(line):
        for word in ("ran ", "edited ", "read ", "exit "):
            piece = piece.removeprefix(word)
        piece = re.sub(r" ×\d+$", "", piece).strip("…")  # (how many calls said it; a file's name cut)
        if piece:
            out.append(piece)
    return out


def build(home, msgs, name="m"):
    mem = Memory.at(name, home)
    mem.append(msgs)
    scheduler.build_tree([Memory.open(name, home)])
    mem = Memory.open(name, home)
    return mem, _stored(mem)


def _stored(mem):
    import orjson

    nodes = []
    for path in sorted((mem.path / "tree").glob("*.jsonl")):
        for raw in path.read_bytes().splitlines():
            node = orjson.loads(raw)
            nodes.append((node["l"], node["i"], node["text"], node))
    return nodes


texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=700)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0 (tab and line breaks too: a line is one line), DEL, C1


def _read(text: str) -> str:
    """The text of a message as a line quotes it: its escape sequences dropped, any other control character and
    each run of white space a space (a line said as written when it has nothing to pick; a piece ends at one)."""
    return re.sub(r"\s+", " ", cut.strip_controls(text))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["user", "pi", "echo", "tool", "work"]), text=texts)
def test_a_leaf_is_short_deterministic_and_made_of_its_input(kind, text):
    line = extractive.leaf(kind, text)
    assert len(line.encode()) <= 512
    assert extractive.leaf(kind, text) == line
    for piece in pieces(line.removeprefix(f"{kind}: ")):
        assert piece.strip() in _read(text) or piece.strip() in kind


LINE_WORDS = st.sampled_from(["user", "pi", "user:", "ok", "the", "yes", "👍", "...", "!!!", ";", "-", "—", "，", "。",
                               "```", "Summary:", "1+2|", "\n", "  ", "deploy", "src/app.py", "v1.2"])
lines = st.one_of(texts, st.lists(LINE_WORDS, min_size=1, max_size=200).map(" ".join),
                  st.lists(LINE_WORDS, min_size=1, max_size=300).map("".join))


def _visible(text: str) -> bool:
    return any(ch.isprintable() and not ch.isspace() for ch in text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(left=lines, right=lines)
def test_a_merge_is_never_empty_and_fits_its_bytes(left, right):
    """Two lines of stop words alone (``user``, ``pi``), emoji or punctuation gave nothing to pick, and the merge
    was an empty line: it says the two lines as they are then, cut to the limit."""
    line = extractive.merge(left, right)
    assert len(line.encode()) <= 512 and "\n" not in line, line
    assert line or not (_visible(left) or _visible(right)), (left, right)


def test_a_merge_of_lines_with_nothing_to_pick_says_them():
    assert extractive.merge("user", "pi") == "user; pi"
    assert extractive.merge("user: ok", "user: ok") == "user: ok"
    assert extractive.merge("👍", "   ") == "👍"
    assert extractive.merge("```", "```") == "```"  # (a fence alone is no code to drop)
    line = extractive.merge(";" * 600, "-" * 600)  # (a cut strips the separators it ends in: all of them here)
    assert line == ";" * 512, line


_memories = itertools.count()


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(msgs=st.lists(st.tuples(st.sampled_from(["user", "pi", "note", "tool", "echo"]), lines.filter(_visible)),
                     min_size=1, max_size=70))
def test_a_memorys_lines_are_never_empty_and_fit_their_bytes(home, msgs):
    mem = Memory.at(f"m{next(_memories)}")
    mem.append([{"kind": kind, "text": text.replace("\0", " ")} for kind, text in msgs])
    digest = extractive.Digest(Memory.open(mem.name))
    said = [digest.leaf(i, kind, text.replace("\0", " ")) for i, (kind, text) in enumerate(msgs)]
    said += [digest.merge(l, i) for l in range(1, len(msgs).bit_length()) for i in range(len(msgs) >> l)]
    assert all(line and len(line.encode()) <= 512 for line in said), said


def test_facts_are_copied_exactly_and_code_is_never_re_punctuated():
    text = ("I changed it: try { run(); } catch (e) { log(e) } and import { Spacer, Text } from 'ink'. "
            + LONG + "The db on port 5433 failed with ECONNREFUSED at /srv/app/db.py in v2.3.1 on 2026-10-08.")
    line = extractive.leaf("pi", text)
    for fact in ("5433", "ECONNREFUSED", "/srv/app/db.py", "v2.3.1", "2026-10-08"):
        assert fact in line
    assert "try;" not in line and "Spacer;" not in line
    for piece in pieces(line.removeprefix("pi: ")):
        assert piece in text
    signed = ("Overnight the freezer hit -42 degrees and −5 °C outside; the balance is -$1,200.50 and uptime "
              "99.95%. " + LONG + "Release v2.3.1-rc.1 fixes PR #3307 in pkg/net/http_client.go. and src/app.py.")
    found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": signed})]
    for fact in ("-42", "−5 °C", "-$1,200.50", "99.95%", "v2.3.1-rc.1", "#3307", "pkg/net/http_client.go", "src/app.py"):
        assert fact in found, (fact, found)
    assert not any(piece.startswith("/net") or piece.endswith(".") for piece in found if "/" in piece), found
    chinese = "日志显示昨晚共有18342次超时，集中在22:00到22:40之间。修改config/pool.yaml中的max_pool_size参数。"
    found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": chinese})]
    assert {"22:00", "22:40", "config/pool.yaml", "max_pool_size", "集中在22:00到22:40之间"} <= set(found), found
    assert not any(piece.startswith(("yaml", "00", "40")) for piece in found), found
    code = "Rewrite the billing service in C#\n" + LONG + "\n  int maxRetries = 3;\n  while (retries--)"
    line = extractive.leaf("user", code)
    assert "in C#" in line and "retries--" in line, line  # the marks code ends in stay
    assert extractive.compose([extractive.Unit(1.0, 0, 0, "int maxRetries = 3;", "pi", 1, ("maxretries",))]) == \
        "pi: int maxRetries = 3;"  # (a line that fits is not trimmed as a model's reply is)



def test_runs_without_spaces_take_linear_time_and_no_slice_of_a_blob_is_a_fact():
    """The fact patterns never scan a run without spaces again from each of its words (``"a." * 4000`` took 1.2 s),
    and no fact starts inside a run of 120 such characters or more (a base64 blob, a token, a hash)."""
    import random
    import time

    for blob in ("a." * 4000, "ab.cd" * 1600, "a-" * 4000, "A." * 4000, "aB." * 2700, "中a" * 4000, "-".join(["0a"] * 2700)):
        start = time.process_time()
        extractive.units({"i": 0, "kind": "pi", "text": blob})
        assert time.process_time() - start < 0.25, blob[:12]
    rand = random.Random(5)
    token = "".join(rand.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") for _ in range(400))
    text = f"The session token {token} expired, and the build of src/app.py failed on port 5433 (ECONNREFUSED)."
    found = extractive.units({"i": 0, "kind": "pi", "text": text})
    assert {"src/app.py", "port 5433", "ECONNREFUSED"} <= {u.text for u in found}
    at = text.index(token)
    assert not [u.text for u in found if at <= u.pos < at + len(token)]



def test_a_url_is_whole_or_cut_at_a_path_boundary_and_base64_is_no_piece():
    """A URL is one fact (up to a path boundary when it is longer than a piece), never a phrase running into it
    or a name inside it; a base64 run gives nothing."""
    import base64
    import random

    url = ("https://github.com/example-org/very-long-repository-name/blob/4f2a9c1d7e8b6a5f4e3d2c1b0a9f8e7d6c5b4a39/"
           "packages/frontend/src/components/dashboard/widgets/charts/TimeSeriesChart.tsx#L120-L188")
    blob = base64.b64encode(random.Random(3).randbytes(600)).decode()
    text = (f"Why does the Chart crash? See {url} and the trace below. Here is the screenshot: "
            f"data:image/png;base64,{blob} can you tell me what the red banner says? Docs: https://example.com/a/b?x=1 now.")
    found = extractive.units({"i": 0, "kind": "user", "text": text})
    at, blob_at = text.index(url), text.index(blob)
    on_url = [u.text for u in found if u.pos < at + len(url) and at < u.pos + len(u.text)]
    assert on_url and all(url.startswith(piece) and url[len(piece)] in "/?#&" for piece in on_url), on_url
    assert not [u.text for u in found if u.pos < blob_at + len(blob) and blob_at < u.pos + len(u.text)]
    assert {"https://example.com/a/b?x=1", "red banner says?"} <= {u.text for u in found}

def _word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_" or unicodedata.category(ch)[0] == "M"


def test_a_word_keeps_its_combining_marks():
    """Python's ``\\w`` leaves out combining marks: accents written apart (NFD, as macOS and Vietnamese input
    write them), Devanagari's vowel signs. A word keeps them, and no piece starts or ends inside a word."""
    nfd = lambda text: unicodedata.normalize("NFD", text)
    cases = [(nfd("Nous avons déployé le nouveau café résumé près de la fenêtre. Le problème est réglé à Genève, "
                  "RÉSUMÉ FINAL."), [nfd("Nous avons déployé"), nfd("fenêtre")]),
             (nfd("Cơ sở dữ liệu không kết nối được vì cổng 5433 sai. Vui lòng kiểm tra cấu hình trong tệp config.yaml."),
              [nfd("Cơ sở dữ liệu"), "5433", "config.yaml"]),
             ("डेटाबेस कनेक्शन विफल हो गया क्योंकि पोर्ट 5433 गलत है। कृपया config.yaml फ़ाइल में सेटिंग्स जांचें।",
              ["डेटाबेस कनेक्शन विफल हो", "5433", "config.yaml"])]
    for text, said in cases:
        for kind in ("user", "pi"):
            found = extractive.units({"i": 0, "kind": kind, "text": text})
            for u in found:
                at, end = u.pos, u.pos + len(u.text)
                assert text[at:end] == u.text
                assert not (at and _word_char(text[at - 1])) and not (end < len(text) and _word_char(text[end])), u.text
            assert all(any(piece in u.text for u in found) for piece in said), [u.text for u in found]



def test_a_line_is_never_cut_inside_what_reads_as_one_character():
    """A message with no words to pick (emoji) shows its opening, and a line too long is cut, between whole
    characters as a reader sees them: no dangling joiner or skin tone, no half of a family or a flag, no letter
    without its accent."""
    family = "🧑🏿\u200d🤝\u200d🧑🏻"  # seven code points
    for text, unit in ((family * 60, family), ("🇯🇵" * 200, "🇯🇵"), ("👍🏾" * 150, "👍🏾")):
        body = extractive.leaf("pi", text).removeprefix("pi: ")
        assert body and text.startswith(body) and len(body) % len(unit) == 0, body[-8:]
    for text, unit, limit in ((family * 60, family, 100), ("🇯🇵" * 100, "🇯🇵", 100), ("e\u0301" * 400, "e\u0301", 101)):
        line = cut.cut_line(text, limit)
        assert line and len(line.encode()) <= limit and len(line) % len(unit) == 0, line[-8:]

def test_a_span_says_its_days_in_words_and_a_chinese_span_in_digits():
    days = extractive._days
    span = days(days(("2023-05-08",), ("2023-05-08",)), days(("2023-05-25",), ("2023-06-09", "2023-06-27")))
    assert span == ("2023-05-08", "2023-05-25", "2023-06-09", "2023-06-27")
    assert extractive._dates(span) == "8, 25 May, 9, 27 June 2023"
    longer = days(span, ("2023-07-02",))  # past DAYS days: the first and the last
    assert longer == ("2023-05-08", "", "2023-07-02") and days(longer, ("2023-07-03",))[1] == ""
    assert extractive._dates(longer) == "8 May..2 July 2023"
    assert extractive._dates(("2023-05-08", "", "2023-05-28")) == "8..28 May 2023"
    assert extractive._dates(("2023-12-30", "2024-01-02")) == "30 December 2023, 2 January 2024"
    assert extractive._dates(("2023-12-08", "", "2024-01-02")) == "8 December 2023..2 January 2024"
    assert extractive._dates(("2023-05-08",)) == "8 May 2023" and extractive._dates(()) == ""
    assert extractive._dates(("2023-05-08", "2023-05-25"), iso=True) == "2023-05-08..2023-05-25"
    assert extractive._dates(("2023-05-08", "not a day")) == "2023-05-08..not a day"  # (shown as logged)
    # messages logged out of date order (a backfill): the span's earliest and latest days, never a reversed range
    odd = days(days(("2026-10-30",), ("2026-10-02",)), days(("2026-10-01",), ("2026-11-15",)))
    assert extractive._dates(odd) == "1, 2, 30 October, 15 November 2026"
    assert extractive._dates(days(odd, days(("2025-01-05",), ("2026-10-04",)))) == "5 January 2025..15 November 2026"
    assert days(("2026-10-30", "", "2026-11-02"), ("2026-10-04",)) == ("2026-10-04", "", "2026-11-02")
    chinese = [extractive.Unit(1.0, 0, 0, "连接端口5433超时", "user", 0, ("端口",))]
    assert extractive._chinese(chinese) and not extractive._chinese([extractive.Unit(1.0, 0, 0, "port 5433", "user", 0, ("port",))])



def test_only_chinese_takes_chinese_commas_and_iso_days():
    """Japanese and Korean are written with kana and Hangul beside their Chinese characters: their pieces are
    joined by ", " and their spans' days said in words, as for every language but Chinese."""
    unit = lambda text, i: extractive.Unit(1.0, i, 0, text, "user", 0, (text,))
    ko = [unit("데이터베이스 연결이 시간 초과되었습니다.", 0), unit("포트는 5433입니다.", 1)]
    ja = [unit("データベース接続", 0), unit("タイムアウトしました", 1)]
    zh = [unit("数据库连接超时", 0), unit("端口是5433", 1)]
    assert extractive.compose(ko) == "user: 데이터베이스 연결이 시간 초과되었습니다. 포트는 5433입니다."
    assert extractive.compose(ja) == "user: データベース接続, タイムアウトしました"
    assert extractive.compose(zh) == "user: 数据库连接超时，端口是5433"
    assert not extractive._chinese(ko) and not extractive._chinese(ja) and extractive._chinese(zh)

def test_a_chinese_number_keeps_what_it_counts_and_a_date_is_one_piece():
    """A number in Chinese lost its counter or unit when a space stood between them (``超时时间是 1500``, its 毫秒
    gone; ``地点在 12``, its 楼 gone), took a word's half when none did (``6次之``), and a date was cut into its
    numbers (``日期写 2026年``, ``年3月``, ``月4日``): a number keeps its counter, whole and alone, and a date is one."""
    found = lambda text: {u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})}
    said = found("还有一个问题：为什么重试 6 次之后还是超时？超时时间是 1500 毫秒吗？测试挂了 4 个。重试6次之后也一样。")
    assert {"为什么重试 6 次之后还是超时？", "超时时间是 1500 毫秒吗？", "测试挂了 4 个", "重试6次"} <= said, said  # (questions)
    assert not {"为什么重试 6", "超时时间是 1500", "超时时间是 1500 毫秒", "测试挂了 4", "重试6次之"} & said, said
    said = found("请把修改写进 CHANGELOG.md，日期写 2026年3月4日。会议在 3月5日，地点在 12 楼的会议室，价格 3.5 元。")
    assert {"2026年3月4日", "3月5日", "地点在 12 楼", "3.5 元"} <= said, said
    assert not {"日期写 2026年", "年3月", "月4日", "地点在 12", "3.5"} & said, said
    assert {"2回目"} <= found("（2回目）テストを実行しました。")  # (Japanese too)


def test_an_ordinal_keeps_its_di():
    """``第 42 行`` is line 42: after a path (a word apart from it) the number kept its counter and lost its 第
    (``42 行``, 42 lines)."""
    found = lambda text: {u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})}
    said = found("在 src/db/pool.py 第 42 行找到 PG_POOL_SIZE，默认值是 10，端口 5433。")
    assert "第 42 行" in said and "42 行" not in said, said
    assert "第42行" in found("在 src/db/pool.py 第42行找到 PG_POOL_SIZE。")


def test_a_line_in_chinese_takes_chinese_connectives_and_sets_each_speaker_apart():
    """A line in Chinese joined two pieces ending and starting in ASCII by ``, `` (``端口是 5433, PG_POOL_SIZE
    现在是多少``), and a speaker's part ending in ``。`` ran into the next speaker's (``回归。pi:``): its ``。`` is the
    ``；`` that sets them apart."""
    unit = lambda text, i, who="user", rank=0: extractive.Unit(1.0, i, 0, text, who, rank, (text,))
    line = extractive.compose([unit("端口是 5433", 0), unit("PG_POOL_SIZE 现在是多少", 1), unit("看看有没有回归。", 2),
                               unit("src/db/pool.py", 3, "pi", 1), unit("在生产环境是 10", 4, "pi", 1),
                               unit("v2.0.5", 5, "pi", 1)])
    assert line == "user: 端口是 5433，PG_POOL_SIZE 现在是多少，看看有没有回归；pi: src/db/pool.py，在生产环境是 10，v2.0.5", line
    line = extractive.compose([unit("数据库连接超时", 0), unit("port 5433", 1), unit("check src/db/pool.py", 2)])
    assert line == "user: 数据库连接超时, port 5433, check src/db/pool.py", line  # (a line in English: its own)


def test_a_chinese_memory_says_every_span_s_days_in_digits(home):
    """A memory in Chinese said a span's days in digits only when most of the span's best pieces were Chinese:
    a span of names and paths said ``1 March 2026`` beside ``2026-03-01`` (one form a memory)."""
    msgs = []
    for k in range(24):
        day = f"2026-03-{1 + k // 8:02d}T09:{k:02d}:00+08:00"
        text = "src/db/pool.py PG_POOL_SIZE v2.0.5" if k % 4 == 3 else f"今天我们来看第{k}个数据库连接池的问题，端口是 5433。"
        msgs.append({"kind": "user" if k % 2 == 0 else "pi", "text": text, "date": day})
    mem = Memory.at("zh", home)
    mem.append(msgs)
    digest = extractive.Digest(Memory.open("zh", home))
    assert digest.merge(0, 3).startswith("2026-03-01: "), digest.merge(0, 3)  # (its one message: names)
    assert digest.merge(2, 0).startswith("2026-03-01: ") and digest.merge(3, 1).startswith("2026-03-02: ")
    english = Memory.at("en", home)
    english.append([{**m, "text": "the pool size is 32, port 5433"} if "今天" in m["text"] else m for m in msgs])
    assert extractive.Digest(Memory.open("en", home)).merge(0, 3).startswith("1 March 2026: ")


def test_a_version_or_number_is_taken_whole_or_not_at_all():
    """A dotted number ends where its run ends: with the small letters a version may carry, and before a
    Chinese character; never one part of it (``1.1`` of ``1.1.1w`` states another version)."""
    def pieces(text: str) -> set[str]:
        return {u.text for u in extractive.units({"i": 0, "kind": "user", "text": text})}

    found = pieces("upgrade OpenSSL 1.1.1w and Python 3.11.4rc1 now; numpy 1.26.4post1 pinned, Chrome 120.0.6099.109beta")
    assert {"1.1.1w", "3.11.4rc1", "1.26.4post1", "120.0.6099.109beta"} <= found, found
    assert not {"1.1", "3.11", "1.26", "120.0.6099"} & found, found
    found = pieces("请升级到v2.3.1版本")
    assert "v2.3.1" in found and "v2.3" not in found and "1" not in found, found
    assert "3.5kg" in pieces("the box weighs 3.5kg today")


def test_a_path_is_one_piece_its_leading_dot_kept():
    """A phrase never ends inside a path (``web/src, components/…`` re-punctuated it), and a path under a dot
    directory keeps its dot (``github/workflows/ci.yml`` names another file)."""
    found = {u.text for u in extractive.units({"i": 0, "kind": "pi", "text":
             "Please patch web/src/components/TimeSeriesChart.tsx today; the job in .github/workflows/ci.yml fails"})}
    assert {"web/src/components/TimeSeriesChart.tsx", ".github/workflows/ci.yml"} <= found, found
    paths = [p for p in found if "/" in p]
    assert all("web/src/components/TimeSeriesChart.tsx" in p or p == ".github/workflows/ci.yml" for p in paths), found


def test_a_home_or_variable_path_is_copied_exactly_and_no_phrase_holds_part_of_one():
    """A path from the home directory or a variable is one fact, its ``~`` or ``$HOME`` kept, one name after it
    enough (``~/.bashrc``); no phrase holds part of a path (``config/x`` of ``~/.config/x`` names another file), and
    none runs on into the Chinese after it (``~/.config/x文件``)."""
    paths = ["~/.config/x", "~/.config/pimem/config.json", "~/.bashrc", "~/notes.md", "$HOME/.config/x",
             "${XDG_CONFIG_HOME}/pimem/config.json", "~alice/.ssh/config"]
    text = (f"Settings live in {paths[0]} now. I put it in {paths[1]}, also {paths[2]} and {paths[3]}; "
            f"on the server it is {paths[4]} or {paths[5]} and {paths[6]}. The file `{paths[0]}` is read.")
    for kind in ("user", "pi"):
        found = {u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})}
        assert set(paths) <= found and "file `~/.config/x`" in found, found
        assert not [piece for piece in found for path in paths if piece in path and piece not in paths], found
    # a path in Chinese ends where Chinese is written on after its name (a name in Chinese stays whole)
    text = "修改~/.config/x文件，把配置写到/etc/app/config.yaml里，报告在/home/张三/文档/报告.md"
    found = {u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})}
    assert {"~/.config/x", "/etc/app/config.yaml", "/home/张三/文档/报告.md"} <= found, found


def _part_of(unit, text: str, whole: str) -> bool:
    """True when ``unit`` holds part of ``whole`` (where ``text`` has it), not all of it."""
    at = text.index(whole)
    end = at + len(whole)
    start, stop = unit.pos, unit.pos + len(unit.text)
    return start < end and at < stop and not (start <= at and end <= stop)


def test_a_file_or_bucket_url_is_one_fact_not_a_path_beside_it():
    """``file:///home/alice/q3.pdf`` gave its path, ``/home/alice/q3.pdf``, as a fact of its own (with the URL
    whole as a phrase): a URL of a file or a bucket is one fact, as a web address is."""
    urls = ["file:///home/alice/reports/q3.pdf", "s3://logs-bucket/2026/10/app.log",
            "ftp://mirror.example.org/pub/a.tar"]
    text = f"Open {urls[0]} in the browser; the logs are in {urls[1]} and the tarball at {urls[2]} today."
    for kind in ("user", "pi"):
        found = extractive.units({"i": 0, "kind": kind, "text": text})
        assert set(urls) <= {u.text for u in found}, found
        assert not [u for u in found for url in urls if _part_of(u, text, url)], found
    line = extractive.leaf("pi", text)
    assert all(url in line for url in urls) and " /home/alice/reports/q3.pdf" not in line, line


def test_a_path_with_spaces_is_whole_when_quoted_or_unambiguous():
    """A path with a space in a name was cut at it (``~/My``, ``Documents/report 2024.pdf``): quoted, it is whole
    (longer than a short quote too); unquoted, a name's words after a space that open with a capital or a digit are
    its own when a slash follows them or the last has an extension; a shell's escaped space is one. Words that may
    be two arguments (``~/src lib/x.py``, ``a.txt B.txt``) and a sentence after a path stay apart."""
    quoted = ["/tmp/a b/c.txt", "/Users/alice/Library/Application Support/Code/User/settings.json",
              "~/My Documents/x y.md"]
    bare = ["~/My Documents/report 2024.pdf", "/home/bob/Google Drive/Q3 Plan.docx",
            "~/My\\ Documents/report\\ 2024.pdf"]
    text = (f'Copy "{quoted[0]}" over \'{quoted[1]}\' and `{quoted[2]}`. The report is at {bare[0]} and the plan at '
            f"{bare[1]}; then ls {bare[2]} now.")
    for kind in ("user", "pi"):
        found = extractive.units({"i": 0, "kind": kind, "text": text})
        assert set(quoted[:2] + bare) <= {u.text for u in found} and f"`{quoted[2]}`" in {u.text for u in found}, found
        assert not [u for u in found for path in quoted + bare if _part_of(u, text, path)], found
    for text, apart in (("cp ~/src lib/x.py", {"~/src", "lib/x.py"}),
                        ("mv ~/Downloads/a.txt B.txt", {"~/Downloads/a.txt"}),
                        ("It went to /tmp/out Then I left", {"/tmp/out"}),
                        ("see ~/notes/todo and Ideas.md", {"~/notes/todo"})):
        found = {u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})}
        assert apart <= found, found


def test_a_quoted_path_longer_than_a_piece_is_one_piece_by_its_end():
    """A quoted path too long for a piece (a macOS screenshot's, from its temporary folder) fell apart into its
    pieces (``/var/…/Screenshot``, ``2025-11-21``, ``01.27.21.png``): it is one, its end from a name on."""
    path = ("/var/folders/49/l4171l3n219_xwq30fmyzr8w0000gn/T/TemporaryItems/NSIRD_screencaptureui_tby1cQ/"
            "Screenshot 2025-11-21 at 01.27.21.png")
    for quote in "'\"`":
        text = f"{quote}{path}{quote} any idea why the colors differ in the vs code terminal and ghostty?"
        for kind in ("user", "pi"):
            found = extractive.units({"i": 0, "kind": kind, "text": text})
            inside = [u.text for u in found if _part_of(u, text, path)]
            assert len(inside) == 1 and path.endswith("/" + inside[0]) and len(inside[0]) <= extractive.SENTENCE, found
            assert inside[0] == "Screenshot 2025-11-21 at 01.27.21.png", inside
            assert inside[0] in extractive.leaf(kind, text)
    # after a word and a space too (only the quote opening a message was read so), not a quote inside a word
    text = f'Look at "{path}" which shows the crash.'
    for kind in ("user", "pi"):
        assert "Screenshot 2025-11-21 at 01.27.21.png" in extractive.leaf(kind, text), extractive.leaf(kind, text)
    text = f"it's{path}' which shows the crash."
    assert not [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text}) if " at " in u.text]


def test_other_scripts_sentence_marks_end_a_phrase_and_a_url_keeps_its_brackets():
    def pieces(text: str) -> set[str]:
        return {u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})}

    assert {"सर्वर बंद हो गया", "कृपया लॉग देखें"} <= pieces("सर्वर बंद हो गया। कृपया लॉग देखें")
    assert {"الخادم متوقف", "يرجى التحقق"} <= pieces("الخادم متوقف، يرجى التحقق. شكرا")
    assert {"الخادم متوقف، يرجى التحقق؟", "يرجى التحقق؟"} <= pieces("الخادم متوقف، يرجى التحقق؟ شكرا")  # (a question)
    url = "https://en.wikipedia.org/wiki/Python_(programming_language)"
    assert url in pieces(f"read {url} first") and "https://a.b/c" in pieces("a [link](https://a.b/c) here")


def test_chat_typed_without_punctuation_gives_clauses_and_phrases_in_chinese_japanese_and_korean():
    """Chinese chat often sets its sentences apart by spaces, Korean ends them with ". " and spaces its words:
    those end a clause too (a space between two Chinese characters, not one around a Latin word), and Korean
    words run in phrases as English ones do. Before, each such message was one clause over the size limit and
    gave no piece: the merges above said only who spoke."""
    def pieces(text: str) -> set[str]:
        return {u.text for u in extractive.units({"i": 0, "kind": "user", "text": text})}

    zh = pieces("服务器又挂了 你能帮我看一下日志吗 我把数据库端口改成5433了 我把 Redis 重启了")
    assert {"服务器又挂了", "你能帮我看一下日志吗", "我把数据库端口改成5433了", "我把 Redis 重启了"} <= zh, zh
    ja = pieces("新しいバージョンは金曜日の夜にリリースします 明日の午前十時に会議があります")
    assert {"新しいバージョンは金曜日の夜にリリースします", "明日の午前十時に会議があります"} <= ja, ja
    ko = pieces("데이터베이스 연결이 시간 초과되었습니다. 설정 파일을 확인하세요. 포트는 5433입니다.")
    assert {"데이터베이스 연결이 시간 초과되었습니다", "설정 파일을 확인하세요"} <= ko, ko
    assert "새 버전은 금요일 저녁에" in pieces("새 버전은 금요일 저녁에 배포할 예정입니다 내일 오전 열 시에 회의가 있습니다")
    url = "https://例え.テスト/パス/ファイル?q=日本語&lang=ja#見出し"
    found = pieces(f"请打开{url} 看看页面能不能加载")  # a URL is no clause's part: whole, or not in the piece
    assert {url, "请打开", "看看页面能不能加载"} <= found and all(url in p for p in found if "http" in p or "テスト" in p), found


def test_a_long_message_in_a_tiny_memory_gets_its_pieces_not_its_first_characters(home):
    mem = Memory.at("tiny", home)
    text = "Please rotate the staging credentials before Friday. " + LONG + "The vault path is /srv/vault/staging.hcl."
    mem.append([{"kind": "user", "text": text}, {"kind": "pi", "text": "will do"}])
    scheduler.build_tree([Memory.open("tiny", home)])
    line = Memory.open("tiny", home).tree.text(0, 0, 2)
    assert "/srv/vault/staging.hcl" in line and not text.startswith(line.removeprefix("user: ")), line


def test_a_long_message_is_read_in_two_parts_without_half_a_word():
    """Its first 6,000 and last 2,000 characters: no piece runs from one into the other, and where no space or
    punctuation is near a cut, the word it falls in is left out (no half word or number is a fact)."""
    head = "word " * 1160 + "-" * 195 + "Alphanumeric"  # no break in the 200 characters before the cut
    tail = "Omega" + "-" * 1966 + " and the Delta team finished."  # the last 2,000 start at "Omega"
    text = head + " filler" * 500 + tail
    assert text[5995:6000] == "Alpha" and text[-2000:].startswith("Omega")
    line = extractive.leaf("user", text)
    assert "Delta team finished" in line and "Alpha" not in line and "Omega" not in line, line
    number = "word " * 1199 + "3.14159" + " tail" * 600  # the cut falls in "3.14159", just after "3.141"
    assert number[5995:6000] == "3.141" and "3." not in toolwork.scan(number)
    assert not {"3", "3.", "14159"} & {u.text for u in extractive.units({"i": 0, "kind": "pi", "text": number})}


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(list("ab1Z_.,-/ ") + ["\u0301", "，"]), min_size=95, max_size=160))
def test_the_two_parts_are_the_text_s_own_and_cut_between_words(text):
    read = toolwork.scan(text, 60, 30)
    first, seam, last = read.partition(toolwork.SEAM)
    assert seam and text.startswith(first) and text.endswith(last)
    assert toolwork._between_words(text, len(first)) and toolwork._between_words(text, len(text) - len(last))
    for u in extractive.units({"i": 0, "kind": "user", "text": text}, head=60, tail=30):
        assert u.text in first or u.text in last, (u.text, read)

def test_chinese_is_cut_at_its_punctuation():
    text = "今天我们讨论了部署的事情。" * 30 + "报错信息：连接端口5433超时。" + "最后决定明天再试。" * 30
    line = extractive.leaf("user", text)
    assert len(line.encode()) <= 512 and "5433" in line
    for piece in pieces(line.removeprefix("user: ")):
        at = text.find(piece)
        assert at >= 0
        assert at == 0 or text[at - 1] in "。：，"
        assert piece[-1] in "。" or at + len(piece) == len(text) or text[at + len(piece)] in "。：，"


def test_a_chinese_clause_keeps_its_brackets_whole():
    """A clause does not end inside the bracket it opened, so no piece holds half a pair."""
    text = "好的：数据库端口是 5433，不再改回 5432；退款测试（test_refund_rounding、test_refund_currency）暂不处理。" * 3
    line = extractive.leaf("pi", text + "另外（这个括号没有关上。那个）多出来了。")
    assert "退款测试（test_refund_rounding、test_refund_currency）暂不处理" in line
    body = line.removeprefix("pi: ")
    for piece in pieces(body):
        assert piece.count("（") == piece.count("）") and piece.count("(") == piece.count(")"), piece


def test_list_numbers_are_not_facts_and_code_spans_stay_whole():
    """A list item's number says where in a list, not what: no piece is one (a number in prose stays). A
    phrase running into a code span takes the span whole, never half of it; nor half of a bold span."""
    text = ("Changes:\n1. Removed the local `DynamicBorder` class\n2. Updated the header of `tui-renderer.ts`\n"
            " 3) Ported the selector in 4 steps\n\nI properly ported `user-message-selector.ts` and `theme.ts` today."
            " Added **five new explicit tokens** for the border.")
    for kind in ("user", "pi"):
        found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
        assert not {"1", "2", "3", "1.", "2.", "3)"} & set(found), found
        assert "4 steps" in found and "properly ported `user-message-selector.ts`" in found
        assert all(piece.count("`") % 2 == 0 and piece.count("**") % 2 == 0 for piece in found), found
        assert "five new explicit" in found
        line = extractive.leaf(kind, text)
        assert line.count("`") % 2 == 0 and line.count("**") % 2 == 0, line
        assert not {"1", "2", "3"} & set(pieces(line.split(": ", 1)[1])), line


_DANGLING = re.compile(r"^(?:[-+*/%&|^!<>:?~]*=[=>]*|&&|\|\|)\s|\s(?:[-+*/%&|^!<>:?~]*=[=>]*|&&|\|\|)$")


def test_code_gives_no_half_a_statement_no_code_between_two_strings_and_no_half_a_quote():
    """A line of code ending in ``=`` (or ``&&``) goes on on the next one: no piece starts or ends at such an
    operator (``const DEFAULT_CONFIG =``, ``= createHandler(…);`` were user sentences). A quoted string is the one
    its quotes open and close, never the code between two strings (``, 1, 1, (text: string) => theme.bg(`` was a
    fact). No piece holds half a pair of quotes (``NO_COLOR' env`` was a phrase, ``prod" : "dev"`` a sentence
    without its first quote)."""
    text = ('In the new version we changed the defaults:\nconst DEFAULT_CONFIG =\n  Object.freeze({ retries: 3 });\n'
            "let handler\n  = createHandler(DEFAULT_CONFIG);\ncd build &&\n  make check\n"
            'this.contentText = new Text("", 1, 1, (text: string) => theme.bg("toolPendingBg", text));\n'
            '"prod" : "dev" are the modes; the \'NO_COLOR\' env is ignored due to \'FORCE_COLOR\' being set.')
    for kind in ("user", "pi"):
        found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
        assert {"const DEFAULT_CONFIG", "toolPendingBg", "NO_COLOR"} <= set(found), found
        assert kind == "pi" or {"createHandler(DEFAULT_CONFIG);", '"prod" : "dev" are the modes; the \'NO_COLOR\' '
                                "env is ignored due to 'FORCE_COLOR' being set."} <= set(found), found
        for piece in found:
            assert not _DANGLING.search(piece) and piece.count('"') % 2 == 0, piece
            assert len(re.findall(r"(?<!\w)'|'(?!\w)", piece)) % 2 == 0, piece
        line = extractive.leaf(kind, text)
        assert not _DANGLING.search(line) and line.count('"') % 2 == 0, line
    found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": '他说"数据库连接超时"然后重启了服务'})]
    assert "数据库连接超时" in found, found  # (a quote beside a Chinese character is one)


def test_an_ellipsis_or_a_dash_ends_a_phrase_spaced_or_not():
    """``logs…nothing``, ``deploy—which`` and ``loop...never`` are two words each, not one phrase; a range's en
    dash stays (``10–12``)."""
    text = ("I checked the logs…nothing. The deploy—which had been green all week—failed on the migration step; the "
            "retry loop...never ran. Pages 10–12 cover the rollback–hotfix plan.")
    found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})]
    assert {"logs", "nothing", "deploy", "week", "failed", "retry loop", "rollback", "hotfix plan"} <= set(found), found
    assert "Pages 10–12 cover" in found and not [p for p in found if re.search(r"[—…]|\.\.\.|[a-z]–", p)], found


def test_a_chinese_or_japanese_ellipsis_or_dash_ends_a_clause():
    """Chinese and Japanese write an ellipsis as ``……`` and a dash as ``——`` (or ``―``): each ends a clause as
    ``...`` and ``—`` end an English phrase (``我检查了日志……什么也没有`` was one clause); a version's dots stay."""
    for text, said in (("我检查了日志……什么也没有。部署——本周一直是绿色的——在迁移步骤失败了。重试循环...从未运行，版本1.2.3",
                        {"我检查了日志", "什么也没有", "本周一直是绿色的", "在迁移步骤失败了", "重试循环", "从未运行", "版本1.2.3"}),
                       ("ログを確認しました……何もありませんでした。デプロイ――今週ずっと緑だった――は失敗しました",
                        {"ログを確認しました", "何もありませんでした", "今週ずっと緑だった"})):
        found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})]
        assert said <= set(found) and not [p for p in found if re.search(r"[—―…]|\.\.", p)], found


LISTING = ["import os", "", "def load_config(path):", "    with open(path) as fh:", "        return json.load(fh)",
           "", "class ConfigError(Exception):", "    pass", "PORT = 5433"]


def test_a_listings_line_numbers_are_no_pieces_and_its_code_is_read_as_code():
    """``cat -n`` (a tab after each number) and an editor tool's listing (an arrow) number its lines: the numbers
    were facts (``1``, ``2``…) and ``1\timport os`` a phrase. The code after them is read as code, as a JSON string
    holding the listing too; a table whose first column does not count up a line at a time keeps its numbers."""
    for gutter in ("{:6d}\t", "{:6d}→", "{}\t"):
        listing = "\n".join(gutter.format(n) + line for n, line in enumerate(LISTING, 12))
        for kind, text in (("user", "Look at this:\n" + listing), ("pi", "The file now reads\n" + listing + "\nDone."),
                           ("pi", "The call was read(" + orjson.dumps({"out": listing}).decode() + ")")):
            found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
            assert not [p for p in found if re.match(r"\s*\d+(?:\t|→|\\t|\s)|(?:1\d|20)$", p)], found
            assert {"def load_config", "class ConfigError", "PORT = 5433"} <= set(found) and "PORT" not in found, found
            assert kind == "pi" or {"import os", "def load_config(path):", "PORT = 5433"} <= set(found), found
            line = extractive.leaf(kind, text)
            assert not re.search(r"(?:^|, )1[0-9]\b", line.split(": ", 1)[1]), line
    table = "id\tname\n42\tAlice Smith\n7\tBob Jones"
    assert {"42", "7"} <= {w for u in extractive.units({"i": 0, "kind": "pi", "text": table}) for w in u.text.split()}


NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "niaj",
         "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter", "yolanda"]


def test_a_tables_row_numbers_are_no_facts_and_its_rows_are_kept():
    """A table whose first column counts up one a line numbers its rows (``1 alice 34``, ``| 2 | bob | 17 |``, a
    data frame's index from 0): the numbers were facts (``1``, ``2``…, short, so they outweighed the rows) and ``1
    alice 34`` a phrase. They are no pieces; the names and values of the rows are, as a listing's code is. Numbers
    that count up over two lines of a space (``1 apple``, ``2 pears``) may say how many: they stay."""
    rows = [(name, 17 + 7 * k % 60) for k, name in enumerate(NAMES)]
    for first, shape in ((1, "{n} {name} {v}"), (1, "| {n} | {name} | {v} |"), (0, "{n:>3}  {name:>8}  {v}"),
                         (1, "{n},{name},{v}"), (1, "{n}\t{name}\t{v}")):
        table = "\n".join(shape.format(n=n, name=name, v=v) for n, (name, v) in enumerate(rows, first))
        text = "Here are the scores:\n" + table + "\nThat is all."
        for kind in ("user", "pi"):
            found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
            counters = {str(n) for n in range(first, first + len(rows))} - {str(v) for _, v in rows}
            assert not counters & set(found) and not [p for p in found if re.match(r"\|? *\d+[ ,|\t]", p)], found
            assert {"alice", "bob", "34"} <= {w for p in found for w in re.split(r"[\s,|]+", p)}, found
        line = extractive.leaf("pi", text)
        assert not counters & set(pieces(line.split(": ", 1)[1])) and all(n in line for n in NAMES[:8]), line
    found = {u.text for u in extractive.units({"i": 0, "kind": "pi", "text": "I need:\n1 apple\n2 pears\nthanks"})}
    assert {"1 apple", "2 pears"} <= found, found  # (each number with what it counts)


GREP = """src/app.py:42:    def run(self):
src/app.py-43-        self.loop.run_forever()
--
./README.md:17:Run the app with make serve
packages/tui/src/renderer.ts:310:\tthis.ui.addChild(new Border(chalk.yellow));
"""


def test_grep_lines_give_a_file_with_its_line_and_the_line_read_as_code():
    """``grep -n`` over files (``src/app.py:42:    def run(self):``) gave the file and its line number as two facts
    (``src/app.py``, ``42``) and its code joined to the number (``README.md:17:Run``, ``42:    def run``); a context
    line's ``src/app.py-43-`` ran into its code. The file with its line is one fact (``src/app.py:42``, as a reader
    opens it); the line after it is read as code, as a listing's is."""
    for kind, text in (("user", "grep gave me:\n" + GREP), ("pi", "Found it:\n" + GREP + "That is the loop."),
                       ("note", "Process exited with code 0\nOutput:\n" + GREP)):
        found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
        assert {"src/app.py:42", "./README.md:17", "packages/tui/src/renderer.ts:310", "def run", "run_forever",
                "this.ui.addChild"} <= set(found), found
        loose = re.compile(r"\d:\w|-\d+-|^(?:42|43|17|310)$|^(?:src/app.py|./README.md)$")
        assert not [p for p in found if loose.search(p)], found
        assert kind != "user" or {"def run(self):", "Run the app with make serve"} <= set(found), found
    line = extractive.leaf("tool", "Output:\n" + GREP)
    assert "src/app.py:42" in line and "./README.md:17" in line, line
    text = "The my-file-2-3-x name and 12:30:00 stay"
    found = {u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})}
    assert "12:30:00" in found, found


def test_a_sentence_joined_to_the_next_piece_keeps_its_own_stop_alone():
    """A piece ending a sentence was joined by a connective after its own stop (``sources., what is``,
    ``today?, Also``; ``good.; pi:``): after a full stop, a question or an exclamation mark a space joins it,
    as Chinese joins after ``。`` with nothing."""
    text = ("Please check the logs from both sources. what is the status of the deploy on staging today? "
            "Also look at the retries!")
    line = extractive.leaf("user", text)
    assert "sources. what is" in line and "today? Also" in line and not re.search(r"[.!?][,;] ", line), line
    assert extractive.render([extractive.Unit(1.0, 0, 0, "Please check the logs.", "user", 0, ("logs",)),
                              extractive.Unit(1.0, 1, 0, "done", "pi", 1, ("done",))]) == "user: Please check the logs. pi: done"
    assert pieces(line) == ["user", "Please check the logs from both sources.", "what is the status of the deploy on staging today?",
                            "Also look at the retries!"], pieces(line)


def test_a_compilers_diagnostic_is_an_error_at_its_file_line_and_column():
    """``file.py:12:5: error: …`` (a compiler's, a linter's, a type checker's) was read as a ``grep -n`` line: its
    file with its line a fact, its column glued to the message after it (``5: error: Argument 1 …``). The file
    with its line and column is one fact, and the error after it is read as text."""
    text = ('src/app.py:12:5: error: Argument 1 to "run" has incompatible type "str"  [arg-type]\n'
            "src/db.py:40:1: E302 expected 2 blank lines, found 1\n"
            "main.c:3:10: fatal error: stdio.hh: No such file or directory\n")
    for kind in ("user", "pi", "note"):
        found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
        assert {"src/app.py:12:5", "src/db.py:40:1", "main.c:3:10"} <= set(found), found
        assert not [p for p in found if re.match(r"\d+: |(?:src/app.py:12|src/db.py:40|main.c:3)$", p)], found
        assert kind != "user" or 'src/app.py:12:5: error: Argument 1 to "run" has incompatible type "str"  [arg-type]' \
            in found, found
        line = extractive.leaf(kind, text)
        assert "src/app.py:12:5" in line and not re.search(r"(?:^|, )\d+: ", line), line
    # the error after its file, line and column is read as the text it is: one piece when it fits in one
    text = "tests/test_x.py:45:1: E302 expected 2 blank lines, found 1"
    for kind in ("pi", "note", "tool"):
        line = extractive.leaf(kind, text)
        assert line.endswith("tests/test_x.py:45:1, E302 expected 2 blank lines, found 1"), line


DIFF = """diff --git a/src/app.py b/src/app.py
index 83db48f..bf269f4 100644
--- a/src/app.py
+++ b/src/app.py
@@ -12,7 +12,9 @@ def load_config(path):
     with open(path) as fh:
-        return json.load(fh)
+        data = json.load(fh)
+        validate_schema(data)
+        return data
@@ -40,3 +42,4 @@ class Server:
     def start(self):
-        self.port = 5432
+        self.port = 5433
\\ No newline at end of file
- and a list item after it
"""


def test_a_unified_diff_is_read_as_a_diff():
    """A diff's hunk headers gave ``-12,7``, ``12,7 +12,9`` and ``@@ -12,7 +12,9 @@ def load_config(path):``, its
    file lines ``a/src/app.py``, its added lines ``+        data = json.load(fh)``. Its marks are not its text: the
    pieces are its file, the function each hunk is in, and its code, in a JSON string too; a list item after the
    last hunk is one still."""
    for kind, text in (("user", "apply this patch\n" + DIFF), ("pi", "I changed it:\n" + DIFF),
                       ("pi", "edit(" + orjson.dumps({"patch": DIFF}).decode() + ")")):
        found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
        assert not [p for p in found if re.search(r"@@|^[-+]|\d+,\d+|[ab]/src|No newline|83db48f", p)], found
        assert {"src/app.py", "def load_config", "validate_schema", "class Server", "self.port = 5433"} <= set(found), found
        assert kind == "pi" or {"def load_config(path):", "data = json.load(fh)", "self.port = 5433"} <= set(found), found
        assert "list item" in {w for p in found for w in p.split()} or "list item" in " ".join(found), found


COMBINED = """diff --cc src/app.py
index 1a2b3c4,5d6e7f8..9a0b1c2
--- a/src/app.py
+++ b/src/app.py
@@@ -1,4 -1,4 +1,5 @@@ import os
  import os
- import sys
 +import json
++import yaml
  PORT = 5433
  def serve_forever():
"""


def test_a_combined_diff_is_read_as_a_diff():
    """A merge's combined diff (``git diff`` of a merge) gave ``-1,4``, ``1,4 -1,4``, ``a/src/app.py``, ``+import
    json`` and the blobs' ``index 1a2b3c4,5d6e7f8..9a0b1c2``: its header (an ``@`` a parent more), its marks (a column
    a parent) and git's lines are not its text, as a unified diff's are not."""
    for kind, text in (("user", "the merge did this\n" + COMBINED),
                       ("pi", "edit(" + orjson.dumps({"patch": COMBINED}).decode() + ")")):
        found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
        assert not [p for p in found if re.search(r"@@|^[-+ ]|\d+,\d+|[ab]/src|1a2b3c4|--cc", p)], found
        assert {"src/app.py", "PORT = 5433", "serve_forever"} <= set(found) and "PORT" not in found, found
        assert kind == "pi" or {"import json", "import yaml", "PORT = 5433"} <= set(found), found


def _minified(seed: int, size: int = 5000) -> str:
    import random

    rand = random.Random(seed)
    name = lambda: rand.choice("abcdefghijklmnopqrstuvwxyz")
    shapes = ["{a}.{b}=function({c}){{return {c}&&{a}({b})}};", "var {a}={b}.{c}||{{}};", "if({a}){{{b}.push({c})}}",
              "{a}.prototype.render=function(){{return this.{b}}};", '{a}.exports={{render:{b},mount:"{c}"}};']
    out = ""
    while len(out) < size:
        out += rand.choice(shapes).format(a=name(), b=name(), c=name())
    return out


def test_minified_code_gives_no_pieces():
    """A line of minified code (a bundle pasted whole) gave a salad of its one-letter names (``return z&&e``,
    ``render:x,mount``, ``var p=u.m``): it gives nothing, the words around it their pieces; a message of minified
    code alone is shown as its label (its opening was a line of it)."""
    code = _minified(1)
    text = f"The bundle below fails in Safari with a TypeError:\n{code}\nIt worked in v2.3.1 last week."
    for kind in ("user", "pi"):
        found = extractive.units({"i": 0, "kind": kind, "text": text})
        at = text.index(code)
        assert not [u.text for u in found if u.pos < at + len(code) and at < u.pos + len(u.text)]
        assert {"Safari", "TypeError", "v2.3.1"} <= {u.text for u in found}
        assert extractive.leaf(kind, code) == kind
    escaped = code.replace("(", '(\\"\\x1f\\"+')  # (a string's escapes in it do not cut its line in pieces)
    assert not extractive.units({"i": 0, "kind": "pi", "text": escaped})
    readable = "\n".join(f"    const value{n} = compute(input, {n}); // step {n}" for n in range(40))
    assert extractive.units({"i": 0, "kind": "pi", "text": readable})  # (code written for people is read)


def test_code_indented_with_tabs_in_a_json_string_is_no_minified_line():
    """An edit's code indented with tabs, written as a JSON string (one line, its breaks ``\\n``, its tabs ``\\t``,
    hardly a space in it) was read as minified code: a tool call's line with tools was its label alone
    (``tool: ran edit``), no file, no code. Its escaped line breaks end its lines; a bundle's line is still one."""
    code = "".join(f"\t\tif (this.item{n}) {{\n\t\t\tthis.ui.addChild(new Border(chalk.yellow));\n\t\t}}\n"
                   for n in range(6))
    text = "edit(" + orjson.dumps({"path": "packages/tui/src/renderer.ts", "oldText": code, "newText": code}).decode() + ")"
    found = {u.text for u in extractive.units({"i": 0, "kind": "note", "text": text})}  # (a tool leaf's facts)
    assert {"packages/tui/src/renderer.ts", "this.ui.addChild"} <= found, found
    assert "packages/tui/src/renderer.ts" in extractive.leaf("tool", text).split("; ", 1)[-1]
    bundle = _minified(2, 2000)
    bundle = bundle[:900] + '.join("\\n")+' + bundle[900:]  # (a bundle's own "\n" does not cut its line)
    assert not extractive.units({"i": 0, "kind": "pi", "text": bundle})


_CODE_LINES = st.sampled_from(["     1\timport os", "     2\t", "     3→x = 1", "@@ -1,2 +1,3 @@ def f():", "@@ -7 +7 @@",
                               "+    y = 2", "-    y = 3", " context", "--- a/f.py", "+++ b/f.py", "\\ No newline",
                               "- a bullet", "Then I ran it", "12\tAlice", "13\tBob", "", "a.b=function(c){return c&&d(e)};" * 9,
                               "@@@ -1,2 -1,2 +1,3 @@@", " +x = 1", "++y", "- z", "diff --cc f.py", "index 1a2b3c4,5d6e7f8..9a0b1c2",
                               "src/f.py:3:  def g(self):", "src/f.py-4-  pass", "1 alice 34", "2 bob 17", "| 3 | carol |",
                               "4,dave,8"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_CODE_LINES, min_size=1, max_size=14), st.sampled_from(["user", "pi"]))
def test_pieces_of_listings_and_diffs_are_the_texts_own(lines, kind):
    text = "\n".join(lines)
    for u in extractive.units({"i": 0, "kind": kind, "text": text}):
        assert text[u.pos : u.pos + len(u.text)] == u.text, u
    line = extractive.leaf(kind, text)
    flat = re.sub(r"\s+", " ", text)
    for piece in pieces(line.removeprefix(f"{kind}: ")):
        assert piece.strip() in flat or piece == kind, piece


def test_base64_or_hex_cut_by_code_marks_is_no_piece():
    """A token cut by ``=;(`` into parts each shorter than 64 characters is one blob (its parts went into the
    line whole); so is base64 filling a run in brackets, and a hex run longer than a commit's 40 digits. A
    commit's hash, and the words around a blob, stay."""
    import base64
    import hashlib
    import random

    rand = random.Random(7)
    b64 = lambda n: base64.b64encode(rand.randbytes(n)).decode()
    token, sig, digest = f"{b64(36)}=;({b64(30)})", f"sig=({b64(45)})", hashlib.sha256(b"x").hexdigest()
    commit = hashlib.sha1(b"x").hexdigest()
    text = (f"The session token {token} leaked. The signature {sig} did not verify. The image digest {digest} "
            f"is cached. Commit {commit} fixed it.")
    for kind in ("user", "pi"):
        found = extractive.units({"i": 0, "kind": kind, "text": text})
        for blob in (token, sig.removeprefix("sig="), digest):
            at = text.index(blob)
            assert not [u.text for u in found if u.pos < at + len(blob) and at < u.pos + len(u.text)], blob
        assert any(commit in u.text for u in found) and {"leaked", "verify"} <= {w for u in found for w in u.words}


def test_no_line_holds_a_bidirectional_control():
    """The bidirectional marks, embeddings, overrides and isolates reorder how a terminal shows the rest of a
    line (``invoice\\u202eexe.pdf`` shows as ``invoicefdp.exe``): none reaches a line, from a message's text, a
    speaker's name or a tool's path. Each ends the piece it falls in."""
    controls = "\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    for c in controls:
        text = (f"Open invoice{c}exe.pdf from the mail. The {c}Billing Service{c} at /srv/{c}app/db.py failed on "
                f"port 54{c}33 with ECONN{c}REFUSED; the variable {c}access_level{c} is \"ad{c}min\". " + LONG)
        lines = [extractive.leaf(kind, text) for kind in ("user", "pi")]
        lines.append(extractive.leaf_line({"kind": "pi", "text": text, "meta": {"speaker": f"{c}Dana"}},
                                          extractive.units({"kind": "pi", "text": text, "meta": {"speaker": f"{c}Dana"}})))
        lines.append(extractive.leaf("tool", f'edit({{"path": "docs/invoice{c}fdp.exe"}})'))
        lines.append(extractive.leaf("pi", f"🎉{c}🎉"))
        lines.append(extractive.merge(lines[0], lines[1]))
        for line in lines:
            assert not re.search(f"[{controls}]", line), (hex(ord(c)), line)
        assert "invoice" in lines[0] and "exe.pdf" in lines[0] and "edited fdp.exe" in lines[3], lines


CONTROL_WORDS = st.sampled_from(["\x05", "\x00", "\x07", "\x08", "\x1b", "\x1b[31m", "\x1b[0m", "\x1b]0;title\x07",
                                 "\x9b1m", "\x85", "\x7f", "\r", "\x0b", "\x0c", "\t", "\n", " ", "deploy", "Error", "5433",
                                 "src/app.py", "ECONNREFUSED", "the", "user", "pi", "👍", ";", "."])
with_controls = st.one_of(texts, st.lists(CONTROL_WORDS, min_size=1, max_size=120).map("".join),
                          st.lists(CONTROL_WORDS, min_size=1, max_size=120).map(" ".join))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["user", "pi", "echo", "tool", "work"]), text=with_controls, other=with_controls,
       speaker=st.sampled_from([None, "Dana", "\x1b[31mDana\x1b[0m", "Da\x05na"]))
def test_no_line_holds_a_control_character(kind, text, other, speaker):
    """A control character from a message (``\\x05``, an escape sequence a tool printed) reached a line, and so
    the view and ``view --json``: each ends the piece it falls in, as a colour does, and a line said as written
    (nothing to pick) has each escape sequence dropped and any other control character made a space, as a
    model's reply has. What a line quotes is still the input's: its text as the compactor reads it."""
    msg = {"i": 0, "kind": kind, "text": text, "meta": {"speaker": speaker} if speaker else {}}
    lines = [extractive.leaf(kind, text), extractive.leaf_line(msg, extractive.units(msg)),
             extractive.leaf("tool", f'bash({{"command": "{text[:40]}"}})')]
    lines.append(extractive.merge(lines[0], extractive.leaf("user", other)))
    lines.append(extractive.merge(text, other))
    for line in lines:
        assert not _CONTROL.search(line), (text, other, line)
    for piece in pieces(lines[0].removeprefix(f"{kind}: ")):
        assert piece.strip() in _read(text) or piece.strip() in kind, (piece, text)


def test_a_memorys_lines_hold_no_control_character(home):
    """A built memory's lines, leaves and merges, and so its view: no control character from its messages (a
    piece ends at one), its speakers' names or a message said as written."""
    mem, nodes = build(home, [
        {"kind": "user", "text": "why did deploy\x05fail on ECONN\x07REFUSED at port 54\x0533? " + LONG},
        {"kind": "pi", "text": "the port 5433\x05x is closed " + LONG, "meta": {"speaker": "Da\x05na"}},
        {"kind": "echo", "text": "\x1b[31mError\x07 \x1b]0;x\x07 5433\x05" + LONG, "meta": {"exit_code": 1}},
        {"kind": "pi", "text": "\x05\x06\x07" * 200}])
    lines = {(l, i): line for l, i, line, _ in nodes}
    assert lines and not [line for line in lines.values() if _CONTROL.search(line)], lines
    assert "deploy" in lines[2, 0] and "port 5433" in lines[2, 0] and lines[0, 3] == "pi", lines


def test_a_windows_path_is_one_piece_and_no_phrase_ends_inside_one():
    r"""A Windows path is a fact, from its drive (a folder's name with spaces in it too) or relative to a file, its
    backslashes doubled as a JSON string writes them too; no phrase starts or ends inside one (``reads
    C:\Users\nathan``, ``AppData``, ``bin\pimem.exe`` were pieces), and a path ends before a sentence's stop."""
    paths = [r"C:\Program Files\Pimem\bin\pimem.exe", r"C:\Users\nathan\AppData\Roaming\pimem\config.json",
             r"D:\work\new_project\tests\test_app.py", r"src\app\main.py", r"C:\\Users\\nathan\\out.log", "/srv/app/db.log"]
    text = (f"The installer writes to {paths[0]} and reads {paths[1]}; the test {paths[2]} fails, and so does "
            f'{paths[3]}. The call was edit({{"path": "{paths[4]}"}}) and the log is at {paths[5]}.')
    for kind in ("user", "pi"):
        found = extractive.units({"i": 0, "kind": kind, "text": text})
        assert set(paths) <= {u.text for u in found}, [u.text for u in found]
        for u in found:
            assert text[u.pos - 1 : u.pos] != "\\" != text[u.pos + len(u.text) : u.pos + len(u.text) + 1], u.text
            assert not (u.text.endswith(".") and ("\\" in u.text or "/" in u.text) and " " not in u.text), u.text


def test_a_json_strings_escapes_are_no_letters_of_its_words():
    r"""A tool call's arguments (or any text written as a JSON string) escape its line breaks and quotes: ``\n``
    and ``\t`` are no letters of the word after them (``nclass``, ``tthis.onSelectCallback``), nor ``\"`` the end
    of a phrase (``from \``); an escaped backslash is one (``C:\\Users\\nathan`` keeps its ``nathan``)."""
    call = ('edit({"path":"src/ui/list.ts","oldText":"import { Text } from \\"@scope/tui\\";\\n\\nclass DynamicBorder {'
            '\\n\\tprivate colorFn;\\n\\tthis.onSelectCallback = cb;\\n}","cwd":"C:\\\\Users\\\\nathan"})')
    lines = [extractive.leaf("tool", call), extractive.leaf("pi", "The edit was " + call)]
    for line in lines:
        assert {"DynamicBorder", "colorFn", "this.onSelectCallback", "nathan"} <= set(re.findall(r"[\w.]+", line)), line
        assert not re.search(r"\b(?:nclass|nimport|n\\t|tprivate|tthis)|\\(?:$|,)", line), line


def agent_session():
    return [
        {"kind": "user", "text": "Please fix the login bug in src/app.py, the tests fail since Monday. " + LONG},
        {"kind": "tool", "text": "bash('python -m pytest -q tests/test_login.py')", "meta": {"tool": "bash", "command": "python -m pytest -q tests/test_login.py"}},
        {"kind": "echo", "text": "....F\nFAILED tests/test_login.py::test_token - AssertionError\n1 failed, 12 passed in 0.31s", "meta": {"tool": "bash", "exit_code": 1}},
        {"kind": "tool", "text": "edit(src/app.py)", "meta": {"tool": "edit", "file": "src/app.py"}},
        {"kind": "tool", "text": "bash('curl localhost:5433/health')", "meta": {"tool": "bash", "command": "curl localhost:5433/health"}},
        {"kind": "echo", "text": "curl: (7) Failed to connect to localhost port 5433: ECONNREFUSED", "meta": {"tool": "bash", "exit_code": 7}},
        {"kind": "pi", "text": "The token check compared naive and aware datetimes; fixed in src/app.py. " + LONG},
        {"kind": "user", "text": "Thanks, and is the staging db on 5433 back? " + LONG},
    ]


def test_a_merge_says_who_asked_what_and_what_ran_how_it_ended(home):
    mem, nodes = build(home, agent_session())
    top = extractive.Digest(mem).merge(3, 0)  # the compactor's line for the whole span (the tree may join it free)
    msgs = list(mem.messages(0, 8))
    day = extractive._dates(tuple(dict.fromkeys(m["date"][:10] for m in msgs)))  # as a reader says them
    assert re.fullmatch(r"\d{1,2}(, \d{1,2})? [A-Z][a-z]+ \d{4}", day), day
    assert top.startswith(f"{day}: user: Please fix the login bug in src/app.py"), top
    assert "ran pytest → exit 1, 1 failed" in top
    assert "edited src/app.py" in top and "ran curl → exit 7: ECONNREFUSED" in top
    texts = [m["text"] for m in msgs]
    for piece in pieces(top.removeprefix(f"{day}: ")):
        assert any(piece in t for t in texts) or piece in ("user", "pi") or piece.isdigit()


def test_a_result_is_joined_to_its_own_call_even_beside_another(home):
    """Parallel calls (two calls, then their two results) and a call whose result is not shown: a result
    joins its own call (by call id, else the call just before it), never the call shown before it."""
    mem, _ = build(home, [
        {"kind": "tool", "text": "bash('pytest -q')", "meta": {"tool": "bash", "command": "pytest -q", "call_id": "a"}},
        {"kind": "tool", "text": "bash('ls -la')", "meta": {"tool": "bash", "command": "ls -la", "call_id": "b"}},
        {"kind": "echo", "text": "FFF\n3 failed in 0.2s", "meta": {"tool": "bash", "exit_code": 1, "call_id": "a"}},
        {"kind": "echo", "text": "total 0", "meta": {"tool": "bash", "exit_code": 0, "call_id": "b"}},
        {"kind": "tool", "text": "bash('cat notes.txt')", "meta": {"tool": "bash", "command": "cat notes.txt"}},
        {"kind": "echo", "text": "some notes", "meta": {"tool": "bash"}},
        {"kind": "tool", "text": "{}"},  # a call that says nothing of what it ran
        {"kind": "echo", "text": "make: *** [all] Error 2", "meta": {"tool": "bash", "exit_code": 2}},
    ])
    line = extractive.Digest(mem).merge(3, 0)
    assert "ran pytest → exit 1, 3 failed" in line and "ran ls → exit 0" in line, line
    assert "read notes.txt, bash → exit 2" in line, line  # (its call said nothing: its tool says whose it is)


def test_a_call_id_used_again_pairs_each_result_with_the_latest_call_of_it(home):
    """Some logs number their calls afresh (``call_0`` each time): a result answers the latest call of its id
    before it, not every call of that id."""
    mem, _ = build(home, [
        {"kind": "user", "text": "run the billing tests"},
        {"kind": "tool", "text": "bash('pytest -q tests/billing')", "meta": {"tool": "bash", "command": "pytest -q tests/billing", "call_id": "call_0"}},
        {"kind": "echo", "text": "2 failed, 5 passed in 0.4s", "meta": {"tool": "bash", "exit_code": 1, "call_id": "call_0"}},
        {"kind": "pi", "text": "Two billing tests fail on rounding."},
        {"kind": "user", "text": "lint the billing package"},
        {"kind": "tool", "text": "bash('ruff check billing')", "meta": {"tool": "bash", "command": "ruff check billing", "call_id": "call_0"}},
        {"kind": "echo", "text": "All checks passed!", "meta": {"tool": "bash", "exit_code": 0, "call_id": "call_0"}},
        {"kind": "pi", "text": "Lint is clean."},
    ])
    line = extractive.Digest(mem).merge(3, 0)
    assert "ran pytest → exit 1, 2 failed, ran ruff → exit 0" in line, line


def test_a_result_without_an_id_after_parallel_calls_joins_neither(home):
    """Two calls without ids, then their results: which result is whose is not known, so none joins a call (the
    first followed the second call, not its own)."""
    mem, _ = build(home, [
        {"kind": "user", "text": "run the tests and the linter"},
        {"kind": "tool", "text": "bash('pytest -q')", "meta": {"tool": "bash", "command": "pytest -q"}},
        {"kind": "tool", "text": "bash('ruff check .')", "meta": {"tool": "bash", "command": "ruff check ."}},
        {"kind": "echo", "text": "2 failed, 5 passed in 0.4s", "meta": {"tool": "bash", "exit_code": 1}},
        {"kind": "echo", "text": "All checks passed!", "meta": {"tool": "bash", "exit_code": 0}},
        {"kind": "tool", "text": "bash('cat notes.txt')", "meta": {"tool": "bash", "command": "cat notes.txt"}},
        {"kind": "echo", "text": "make: *** [all] Error 2", "meta": {"tool": "bash", "exit_code": 2}},
        {"kind": "pi", "text": "Two tests fail."},
    ])
    line = extractive.Digest(mem).merge(3, 0)
    assert "ran ruff →" not in line and "ran pytest →" not in line, line
    assert "bash → exit 1, 2 failed" in line, line
    assert "read notes.txt → exit 2" in line, line  # (a result right after its only call joins it)


@pytest.mark.parametrize("meta, text, said", [
    ({"exit_code": 0}, "grep hits: TimeoutError in src/net.py, ECONNREFUSED in docs", ["exit 0"]),  # what it printed
    ({"exit_code": 0}, "12 passed in 0.3s", ["12 passed"]),
    ({"is_error": False}, "export type T = NodeJS.Timeout; // 400 errors in the changelog", []),
    ({"is_error": True}, "ENOENT: no such file or directory", ["error: ENOENT"]),
    ({"is_error": True}, "Command aborted", ["error"]),
    ({"exit_code": 1, "is_error": True}, "npm error\nCommand exited with code 1", ["exit 1"]),
    ({}, "==== 12 passed, 1 error in 0.2s ====", ["1 error"]),  # nothing says how it ended: its output does
    ({}, "curl: (7) ECONNREFUSED", ["ECONNREFUSED"]),
    # in colour (a test runner or npm forcing it): its count and error name all the same, not the next count
    ({"exit_code": 1}, "\x1b[31m3 failed\x1b[0m, 2 passed in 0.4s", ["exit 1", "3 failed"]),
    ({"exit_code": 1}, "\x1b[1;31mTypeError\x1b[0m: x is not a function", ["exit 1: TypeError"]),
])
def test_how_a_result_ended_comes_from_its_exit_code_and_flag_before_its_output(meta, text, said):
    assert [piece for piece, _, _ in toolwork.pieces({"kind": "echo", "text": text, "meta": meta})] == said


PYTEST_CODE = ('tests/test_pool.py:7: in make_pool\n    return ConnectionPool(dsn, timeout=cfg.get("timeout", 3))\n'
               "E   ValueError: max_size must be >= min_size\n1 failed, 11 passed in 0.84s")


@pytest.mark.parametrize("text, said", [
    # Python: the exception pytest or a traceback reports, not the code it quotes (a setting's timeout, an except
    # clause, a string in a raise) or a warning
    (PYTEST_CODE, ["exit 1: ValueError", "1 failed"]),
    ("        try:\n            make_pool()\n        except TimeoutError:\n            pass\n>       assert pool.ok\n"
     "E       AssertionError: assert False\n1 failed in 0.1s", ["exit 1", "1 failed"]),
    ('>       raise KeyError(f"user {uid} not found")\nE       KeyError: \'user 7 not found\'\n1 failed in 0.1s',
     ["exit 1: KeyError", "1 failed"]),
    ('  File "app.py", line 3, in <module>\n    connect(timeout=5)\n    raise TimeoutError("db")\nTimeoutError: db',
     ["exit 1: TimeoutError"]),
    ("  /srv/pool.py:3: DeprecationWarning: timeout of 5s exceeded is deprecated\n    warnings.warn(TypeError)\n"
     "E   assert 1 == 2\n1 failed in 0.1s", ["exit 1", "1 failed"]),
    ("E   AssertionError: assert 'ECONNREFUSED' == 'ETIMEDOUT'\nE   Failed: DID NOT RAISE <class 'ValueError'>",
     ["exit 1"]),  # (values it compared, quoted)
    ("FAILED tests/test_api.py::test_get - requests.exceptions.SSLError: bad handshake", ["exit 1: SSLError"]),
    ("E   Failed: Timeout >5.0s\n1 failed in 5.2s", ["exit 1: Timeout", "1 failed"]),  # pytest-timeout
    # Node: a warning's 'timeout' option, a throw's source line, an expectation's values are no error
    ("  console.warn\n    Deprecation: the 'timeout' option is deprecated\nFAIL src/cart.test.ts\n"
     "    TypeError: Cannot read properties of undefined (reading 'price')\nTests: 1 failed, 50 passed, 51 total",
     ["exit 1: TypeError", "1 failed"]),
    ("/app/server.js:12\n    throw new RangeError('bad');\n    ^\n\nTypeError: bad\n    at Object.<anonymous> (/app/server.js:12:11)",
     ["exit 1: TypeError"]),
    ("      if (err.code === 'EPIPE') retry();\n\nError: connect ECONNREFUSED 127.0.0.1:5432\n  code: 'ECONNREFUSED',",
     ["exit 1: ECONNREFUSED"]),
    ("Error: listen EADDRINUSE: address already in use :::3000", ["exit 1: EADDRINUSE"]),
    ("Error: connect ETIMEDOUT 10.0.0.1:443", ["exit 1: ETIMEDOUT"]),
    ("  1) api fetches:\n     Error: timeout of 2000ms exceeded. Ensure done() is called", ["exit 1: timeout"]),  # mocha
    ('  ● cart › total\n\n    thrown: "Exceeded timeout of 5000 ms for a test.', ["exit 1: timeout"]),  # jest
    ('    Expected: "ECONNREFUSED"\n    Received: "ETIMEDOUT"\nTests: 1 failed', ["exit 1", "1 failed"]),
    # Go: a timeout as the library says it; a compiler's words about a variable named timeout are none
    ("--- FAIL: TestPool (0.00s)\n    pool_test.go:12: dial tcp 10.0.0.5:5432: i/o timeout\nFAIL", ["exit 1: timeout"]),
    ('    client_test.go:9: Get "http://x": context deadline exceeded (Client.Timeout exceeded while awaiting headers)',
     ["exit 1: Timeout"]),
    ("# app\n./main.go:5:2: undefined: timeout\n./main.go:9:14: cfg.Timeout undefined", ["exit 1"]),
    ("panic: runtime error: index out of range [5] with length 3\n\ngoroutine 1 [running]:\nmain.main()", ["exit 1"]),
    # Rust: an unwrapped error's name; a compiler's source lines are none
    ("thread 'main' panicked at src/main.rs:4:37:\ncalled `Result::unwrap()` on an `Err` value: ParseIntError { kind: "
     "InvalidDigit }", ["exit 1: ParseIntError"]),
    ("error[E0425]: cannot find value `timeout` in this scope\n --> src/main.rs:3:13\n  |\n3 |     let t = timeout;\n"
     "  |             ^^^^^^^ not found in this scope", ["exit 1"]),
    # shell: the system's words; a command named timeout, a printed file's code, a setting are none
    ("bash: line 1: pytst: command not found", ["exit 1: not found"]),
    ("curl: (7) Failed to connect to localhost port 5433: ECONNREFUSED", ["exit 1: ECONNREFUSED"]),
    ("+ timeout 5 ./run.sh\ntimeout: 30\n", ["exit 1"]),
    ("try:\n    s.connect(a)\nexcept TimeoutError:  # ECONNREFUSED too\n    pass\ncat: b.py: No such file or directory",
     ["exit 1"]),
])
def test_an_error_name_is_taken_where_the_output_reports_it(text, said):
    """An error's name came from anywhere in a result, code and warnings too: pytest quoting ``timeout=cfg.get(
    "timeout", 3)`` before ``E   ValueError: …`` said ``exit 1: timeout``. A name is taken where the output reports
    an error: an exception's name opening a line or what follows ``: `` (past its module path), an errno name, a
    refusal or a timeout as a runner says it after words without code; never in a warning's line or in quotes."""
    assert [piece for piece, _, _ in toolwork.pieces({"kind": "echo", "text": text, "meta": {"exit_code": 1}})] == said


def test_a_line_says_the_error_a_test_run_reported(home):
    mem, _ = build(home, [
        {"kind": "user", "text": "run the pool tests " + LONG},
        {"kind": "tool", "text": "bash('pytest -q')", "meta": {"tool": "bash", "command": "pytest -q", "call_id": "a"}},
        {"kind": "echo", "text": PYTEST_CODE, "meta": {"tool": "bash", "exit_code": 1, "call_id": "a"}},
        {"kind": "pi", "text": "The pool sizes are swapped in the config. " + LONG},
    ])
    line = extractive.Digest(mem).merge(2, 0)
    assert "ran pytest → exit 1: ValueError, 1 failed" in line and "timeout" not in line, line
    marker = privacy.marker({"kind": "echo", "text": PYTEST_CODE, "meta": {"exit_code": 1}})  # (a read without tools)
    assert marker == "echo: exit 1: ValueError, 1 failed (details hidden; include tools to see it)", marker


def test_a_harness_tags_are_no_pieces_what_they_hold_is():
    """Claude Code wraps a slash command and its output in tags (``<command-name>/mcp</command-name>``): their
    names were the line's pieces (``command-name, command-args``). A tag named in hyphenated words that the text
    closes is markup; a prose tag (``<b>``) and one left open stay as written."""
    line = extractive.leaf("user", "<command-name>/mcp</command-name>\n  <command-message>mcp</command-message>\n"
                                   "  <command-args></command-args>")
    assert "command" not in line and "mcp" in line, line
    line = extractive.leaf("user", "<local-command-stdout>Connected to 3 MCP servers</local-command-stdout>")
    assert line == "user: Connected to 3 MCP servers", line
    text = "please make the <b>deploy</b> step idempotent and use <my-widget> in the page"
    assert extractive.leaf("user", text) == f"user: {text}"


def test_a_harness_notes_are_no_pieces_of_the_users():
    """Claude Code marks a turn the user stopped (``[Request interrupted by user]``) and repeats a slash command's
    name without its slash (``<command-message>mcp</command-message>``): both were the user's pieces
    (``start phoenix in background, [Request interrupted by user], mcp``). They go; the command as typed stays."""
    text = ("<command-name>/mcp</command-name>\n<command-message>mcp</command-message>\n<command-args></command-args>"
            "\nstart phoenix in background\n[Request interrupted by user]\n")
    assert extractive.leaf("user", text) == "user: /mcp, start phoenix in background"
    text = "fix the flaky login test [Request interrupted by user for tool use] and rerun it"
    assert "Request" not in extractive.leaf("user", text * 6)


def test_a_negation_is_said_with_what_it_negates():
    """Negations are stop words, so a phrase started after one and said the opposite (``the TUI changes were never
    committed`` gave ``committed``, ``themes no longer crash`` gave ``longer crash``, ``required (not optional)``
    gave ``required, optional``). A piece right after a negation takes it; a negation is no piece alone."""
    text = ("The TUI changes were never committed. Invalid themes no longer crash the app. Not everything updates "
            "correctly. The field is required (not optional). Put it in 4th position, not 5th. No new design tokens "
            "were needed. We chose Podman, not Docker. 配置里没有max_pool_size参数. ") * 4
    found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})]
    assert {"never committed", "no longer crash", "Not everything updates correctly", "not optional", "position, not 5th",
            "No new design tokens", "not Docker", "没有max_pool_size"} <= set(found), found
    assert not {"committed", "longer crash", "everything updates correctly", "optional", "5th", "new design tokens",
                "Docker", "max_pool_size", "no", "not", "never"} & set(found), found
    line = extractive.leaf("pi", text)
    assert "never committed" in pieces(line) and not {"committed", "longer crash"} & set(pieces(line)), line


# (a clause, the words that negate it, words it says that a piece may hold only with one of them)
NEGATED = [
    ("The flaky test is not a regression; it is a timing issue in the CI runner.", ["not"], ["regression"]),
    ("Don't ever force-push to main.", ["Don't"], ["force-push", "main"]),
    ("None of the replicas were promoted.", ["None"], ["replicas", "promoted"]),
    ("so I think this is expected churn, not a bug in the worker.", ["not"], ["bug", "worker"]),
    ("Neither the API nor the worker were affected.", ["Neither", "nor"], ["worker", "affected"]),
    ("No data was lost during the migration.", ["No"], ["lost", "migration"]),
    ("I said 2 weeks for the integration only, not for the whole rollout.", ["not"], ["rollout"]),
    ("nobody commits to the 2026-11-01 go-live date until legal signs off.", ["nobody"], ["commits", "go-live", "legal"]),
    ("Hebräisch und Arabisch gehen in Latin-1 gar nicht.", ["nicht"], ["gehen"]),
    ("Мы не платим за эти сервера 45 000 ₽ в месяц.", ["не"], ["платим", "сервера"]),
    ("Wir haben die Migration gestern Abend nicht ausgeführt.", ["nicht"], ["ausgeführt", "haben"]),
    ("Wir haben die alte Tabelle im Schema noch nicht gelöscht.", ["nicht"], ["gelöscht", "alte"]),
    ("We hebben de migratie gisteren niet uitgevoerd.", ["niet"], ["uitgevoerd", "migratie"]),
    ("Ze hebben de oude tabel nog niet verwijderd.", ["niet"], ["verwijderd", "oude"]),
    ("Wir haben gestern keine Tabelle in der Datenbank gelöscht.", ["keine"], ["gelöscht"]),
    ("Ни в коем случае не удаляйте ветку main до пятницы.", ["не", "Ни"], ["удаляйте", "пятницы"]),
    ("Сервер базы данных не отвечает на запросы после обновления.", ["не"], ["отвечает", "запросы"]),
    ("Нам не нужно 3 реплики для стейджинга.", ["не"], ["нужно", "реплики"]),
    ("השרת לא עולה אחרי העדכון של הלילה.", ["לא"], ["עולה", "העדכון"]),
    ("הערך max_connections=200 לא מספיק לעומס הנוכחי.", ["לא"], ["מספיק", "לעומס"]),
    ("الخادم لم يتوقف بعد التحديث الأخير للنظام.", ["لم"], ["يتوقف", "التحديث"]),
    ("Le serveur ne répond pas aux requêtes de la passerelle.", ["ne", "pas"], ["répond", "requêtes", "passerelle"]),
    ("El servidor no responde a las peticiones del balanceador.", ["no"], ["responde", "peticiones", "balanceador"]),
    ("The deploy went out without any tests being run.", ["without"], ["tests", "run"]),
    ("Der Job lief ohne jede weitere Prüfung durch.", ["ohne"], ["weitere", "durch"]),
    ("El despliegue salió sin ejecutar las pruebas.", ["sin"], ["ejecutar", "pruebas"]),
    ("Выкатили релиз без единого прогона тестов.", ["без"], ["прогона", "тестов"]),
    ("The disk is far from full, only 20% used.", ["far"], ["full"]),
    ("Le disque est loin d'être plein.", ["loin"], ["plein"]),
    ("We use Postgres instead of MySQL for the ledger.", ["instead"], ["MySQL"]),
    ("It is impossible to restore the backup from March.", ["impossible"], ["restore", "backup"]),
    ("We lack the permissions to restart the production database.", ["lack"], ["permissions", "restart"]),
    ("He said he would not migrate the billing database before the audit ends.", ["before"], ["migrate", "billing"]),
    ("Il ne faut pas migrer la base avant la fin de l'audit.", ["avant"], ["migrer"]),
    ("Он не будет мигрировать базу до конца аудита.", ["до"], ["мигрировать", "базу"]),
    ("If it's before noon, do not migrate the database until the audit ends.", ["until"], ["migrate", "database"]),
    ("We should not set max_retries=3 on the worker.", ["not"], ["max_retries"]),
    ("Don't flip new_pricing=false before the launch.", ["Don't"], ["new_pricing"]),
    ('Please never set "maxRetries": 0 in the config.', ["never"], ["maxRetries"]),
]


def said_only_with(clause: str, marks: list[str], said: list[str], whole=None) -> None:
    """Each piece of ``clause`` (among other sentences) holding a word of ``said`` holds one of ``marks``, in a
    message's units and in its leaf line; no mark is a piece alone; and ``said[0]`` is said (``whole``: as a
    word of a piece, not only inside one), not left out."""
    text = f"The supervisor restarted the process twice overnight and logged both restarts. {clause} " * 3
    words = re.compile(r"[\w'’-]+")
    for kind in ("pi", "user"):
        found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
        for piece in found:
            if any(word in words.findall(piece) for word in said):
                assert any(word in words.findall(piece) for word in marks), (piece, found)
        assert not set(marks) & set(found), found
        assert any(word in (words.findall(piece) if whole else piece) for piece in found for word in said[:1]), found
        line = extractive.leaf(kind, text, 200)
        for piece in pieces(line):  # (or of a unit holding one that the line says whole: ``If it is cold, restart``)
            if any(word in words.findall(piece) for word in said):
                assert any(word in words.findall(part) for part in [piece] + [unit for unit in found
                           if piece in unit and unit in line] for word in marks), line


@pytest.mark.parametrize("clause, negations, said", NEGATED)
def test_a_piece_holds_the_negation_of_its_clause(clause, negations, said):
    """A negation a few stop words before a piece (``is not a regression`` gave ``regression``; ``Don't ever
    force-push to main`` gave ``force-push, main``), a negative pronoun (``None of the replicas were promoted`` gave
    ``None, replicas, promoted``) and a negation after the words it negates (German's ``gehen in Latin-1 gar
    nicht`` gave ``gehen``) or in a run of its own (``Сервер базы данных не``, ``ветку release/2.4 не``,
    ``max_connections=200 לא``: the verb cut off) were dropped: the line said the opposite. Each piece of a clause
    holding a negation holds one (or the piece is left out); a negation is no piece alone. (A name alone, ``API``,
    ``Tabelle``, says nothing of it.)"""
    said_only_with(clause, negations, said)


@pytest.mark.parametrize("clause, said", [
    ("Moved the config from /etc/app.conf to ~/.config/app.toml yesterday.", ["from /etc/app.conf", "to ~/.config/app.toml"]),
    ("Changed theme.ts from dimGray to dimGrey.", ["from dimGray", "to dimGrey"]),
    ("Den Pfad von /srv/alt/data auf /srv/neu/data umgestellt.", ["von /srv/alt/data", "auf /srv/neu/data"]),
    ("Перенесли конфиг с /etc/app.conf на /etc/app2.conf вчера.", ["с /etc/app.conf", "на /etc/app2.conf"]),
])
def test_a_change_says_which_value_is_old_and_which_new(clause, said):
    """``Changed dimGray from #444444 (very dark gray) to #585858`` gave ``Changed, dimGray, #444444, #585858``: which
    is the colour now was lost. A fact after ``from`` (``von``, ``с``…) is said with it when its sentence has a ``to``
    after it, one after ``to`` when a ``from`` comes before it; neither alone (``Send it to /tmp/out.txt``)."""
    text = f"The supervisor restarted the process twice overnight and logged both restarts. {clause} " * 3
    found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})]
    assert set(said) <= set(found) and not {piece.split(" ", 1)[1] for piece in said} & set(found), found
    text = "Send the report to /tmp/out.txt please. Moved from /etc/app.conf. Then to /tmp/x.conf."
    found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})]
    assert {"/tmp/out.txt", "/etc/app.conf", "/tmp/x.conf"} <= set(found), found


def test_a_condition_is_carried_to_the_clauses_after_it_with_the_marks_in_reach(monkeypatch):
    """A proposal's or a condition's word reaches the clauses after it in its sentence, but every one of a sentence
    was carried to each clause after it (``Maybe, restart the worker, `` repeated: ~1 s a message, each clause read
    against them all). A clause is read with those in reach of its words (``NEGATION_REACH``), or the last."""
    read = []
    clause = extractive._clause

    def counted(text, runs, negations):
        read.append(len(negations))
        yield from clause(text, runs, negations)

    monkeypatch.setattr(extractive, "_clause", counted)
    for text in ("Maybe, restart the worker, " * 300 + "If the cache is cold, restart the worker.",
                 "如果失败，" * 1600 + "如果缓存是冷的，就重启工作进程。"):
        read.clear()
        found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})]
        assert max(read) <= 8, max(read)  # (those within NEGATION_REACH characters, and its own)
        assert not [piece for piece in found if "restart" in piece and "Maybe" not in piece and "If" not in piece]
        assert not [piece for piece in found if "重启" in piece and "如果" not in piece], found


def test_a_piece_far_past_its_negation_is_left_out():
    """A piece after a negation was widened back to it however far past it it came (``not fail on the staging
    cluster after the long weekend of upgrades to the database schema``): a long piece that cost the line its other
    words. One starting more than ``NEGATION_REACH`` characters past the negation's end is left out; one nearer is
    said with it."""
    clauses = [("The nightly job did not fail on the staging cluster after the long weekend of upgrades to the "
                "database schema.", "not", "staging cluster", "database schema"),
               ("El servidor no responde a las peticiones del balanceador tras la larga actualización de la base de "
                "datos.", "no", "peticiones del balanceador", "datos")]
    for clause, negation, near, far in clauses:
        end = clause.index(f" {negation} ") + 1 + len(negation)
        assert clause.index(near) - end <= extractive.NEGATION_REACH < clause.index(far) - end
        text = f"The supervisor restarted the process twice overnight and logged both restarts. {clause} " * 3
        found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})]
        assert any(piece.startswith(f"{negation} ") and piece.endswith(near) for piece in found), found
        assert not any(far in piece for piece in found), found
        line = extractive.leaf("pi", text, 200)
        assert f"{negation} " in line and far not in line, line


def test_a_piece_its_own_negation_opens_is_said_however_far_past_another():
    """A run opened by a negation is said as it is, even more than ``NEGATION_REACH`` characters past an earlier
    negation of its clause (``never rolled back`` was left out as too far past ``not``)."""
    text = "We did not deploy it on the cluster and the staging cluster and never rolled back."
    assert text.index("never") - text.index("not") - 3 > extractive.NEGATION_REACH
    found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": f"{text} " * 3})]
    assert "never rolled back" in found, found


def test_a_negation_reaches_to_its_clause_s_turn():
    """A negation reaches no further than its clause: a break, or a word that turns it (``but``, ``sondern``,
    ``because``); what follows is said as it is. A negation that is its clause is said (``the logs…nothing``)."""
    text = ("It is not an error in the parser but in the lexer. The deploy did not start because the port was taken. "
            "Das ist nicht der Parser, sondern der Lexer. I checked the logs…nothing. ") * 3
    found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})]
    assert {"not an error in the parser", "lexer", "not start", "port", "taken", "Das ist nicht der Parser",
            "der Lexer", "nothing"} <= set(found), found
    assert not any("lexer" in piece.lower() and {"not", "nicht"} & set(piece.split()) for piece in found), found


# (a clause, the words that make it a proposal, a question or a condition, words it says that a piece may hold only
# with one of them)
MODAL = [
    ("I suggest we bump the connection timeout to 50 seconds.", ["suggest"], ["bump", "timeout", "50"]),
    ("Maybe we should drop the legacy users table.", ["Maybe", "should"], ["drop", "legacy"]),
    ("Should we migrate the billing database on Friday?", ["Should"], ["migrate", "billing"]),
    ("If the canary passes we roll out everywhere.", ["If"], ["canary", "roll"]),
    ("Vielleicht sollten wir die Datenbank migrieren.", ["Vielleicht", "sollten"], ["migrieren"]),
    ("Misschien migreren we de database morgen.", ["Misschien"], ["migreren"]),
    ("Nous pourrions peut-être migrer la base demain.", ["pourrions", "peut-être"], ["migrer"]),
    ("Quizás deberíamos migrar la base de datos.", ["Quizás", "deberíamos"], ["migrar"]),
    ("Forse dovremmo migrare il database domani.", ["Forse", "dovremmo"], ["migrare"]),
    ("Talvez devêssemos migrar o banco amanhã.", ["Talvez", "devêssemos"], ["migrar"]),
    ("Предлагаю перенести миграцию базы на пятницу.", ["Предлагаю"], ["перенести", "миграцию"]),
    ("Może przeniesiemy migrację na piątek.", ["Może"], ["przeniesiemy", "migrację"]),
    ("Kanske borde vi migrera databasen i morgon.", ["Kanske", "borde"], ["migrera"]),
    ("אולי נעביר את ההגירה ליום שישי.", ["אולי"], ["נעביר", "ההגירה"]),
    ("ربما ننقل الترحيل إلى يوم الجمعة.", ["ربما"], ["ننقل", "الترحيل"]),
    ("Belki veritabanını cuma günü taşırız.", ["Belki"], ["veritabanını", "taşırız"]),
    ("Mungkin kita pindahkan database besok.", ["Mungkin"], ["pindahkan"]),
    ("Ίσως μεταφέρουμε τη βάση αύριο.", ["Ίσως"], ["μεταφέρουμε"]),
    ("아마 내일 데이터베이스를 옮길 것 같아요.", ["아마"], ["데이터베이스를", "옮길"]),
    ("Maybe set max_retries=3 on the worker.", ["Maybe"], ["max_retries"]),
    ('I suggest "request_timeout": 50 for the gateway.', ["suggest"], ["request_timeout"]),
    ("Maybe, we should restart the worker.", ["Maybe", "should"], ["restart", "worker"]),
    ("Perhaps, the worker needs a restart.", ["Perhaps"], ["needs", "restart", "worker"]),
    ("If the cache is cold, restart the worker.", ["If"], ["restart", "worker"]),
    ("If the cache is cold, set max_retries=5 on the worker.", ["If"], ["max_retries", "set"]),
    ("If the cache is cold, bump the pool to 6 workers.", ["If"], ["bump", "pool", "6"]),
    ("Wenn der Cache kalt ist, starte den Worker neu.", ["Wenn"], ["starte", "neu"]),
    ("Si le cache est froid, redémarre le worker.", ["Si"], ["redémarre", "worker"]),
    ("Если кэш холодный, перезапусти воркер.", ["Если"], ["перезапусти", "воркер"]),
]


@pytest.mark.parametrize("clause, marks, said", MODAL)
def test_a_piece_holds_the_proposal_question_or_condition_of_its_clause(clause, marks, said):
    """A proposal read as done: ``I suggest we bump the connection timeout to 50 seconds`` gave ``bump, timeout to
    50 seconds``. Each piece of a clause holding a word that makes it a proposal, a question or a condition holds
    one (or the piece is left out), as with a negation; such a word is no piece alone. Such a word reaches over a
    comma to its sentence's end (``If the cache is cold, restart the worker`` gave ``restart, worker``; ``Maybe, we
    should restart`` gave ``Maybe``), and a key with its value is said with it as a number's words are (``Maybe set
    max_retries=3`` gave ``max_retries=3``)."""
    said_only_with(clause, marks, said, whole=True)


@pytest.mark.parametrize("clause, negations, said", [
    ("I don't think we should bump the connection timeout to 50 seconds.", ["don't"], ["bump", "timeout", "50"]),
    ("We never said we could drop the legacy users table.", ["never"], ["drop", "legacy"]),
])
def test_a_piece_a_proposal_opens_holds_the_negation_before_it(clause, negations, said):
    """``I don't think we should bump the connection timeout to 50 seconds`` gave ``should bump the connection
    timeout`` and ``should bump the timeout to 50 seconds``: a run a proposal's word opens was said as it is, and a
    number's words from the nearest mark, so the negation before them was dropped and the line said the opposite."""
    said_only_with(clause, negations, said, whole=True)


# (Chinese: a clause, the marks of its proposal, question, condition or negation, what a piece holds only with one)
CJK_MODAL = [
    ("我建议我们在下一个版本发布之前先把数据库连接池的超时改成50秒然后再观察一下线上的情况", ["建议"], "改成"),
    ("我建议把超时改成 50 然后观察一下线上的情况再决定下一步要不要继续调整别的参数和配置项", ["建议"], "改成"),
    ("要不要把 pool_size 改成 6", ["要不要"], "改成"),
    ("是否需要把重试次数从3次改成5次", ["是否"], "改成"),
    ("如果明天的构建还是失败就把副本数改成3个", ["如果"], "改成"),
    ("不要把超时改成50秒", ["不要"], "改成"),
    ("你能把连接池的超时时间改成50秒吗", ["吗"], "改成"),
    ("如果明天的构建还是失败，就把副本数改成3个", ["如果"], "改成"),
    ("建议先观察一下，然后把超时改成50秒", ["建议"], "改成"),
    ("如果缓存是冷的，就重启工作进程", ["如果"], "工作进程"),
]


@pytest.mark.parametrize("clause, marks, said", CJK_MODAL)
def test_a_piece_of_a_chinese_clause_holds_its_proposal_question_condition_or_negation(clause, marks, said):
    """A Chinese clause is said whole, but a number is said with the few characters before it: ``我建议…超时改成50秒``
    and ``不要把超时改成50秒`` gave ``超时改成50秒``, a decision. A piece of a clause holding a proposal's, a question's,
    a condition's or a negation's mark holds it (before it: ``建议``, ``是否``, ``要不要``, ``如果``, ``不``; after it:
    ``吗``), or is left out; a proposal's or a condition's mark reaches over a comma to its sentence's end
    (``如果明天的构建还是失败，就把副本数改成3个`` gave ``就把副本数改成3个``)."""
    for end in ("？", "。"):
        text = f"服务昨晚重启了两次，日志里都有记录。{clause}{end}" * 3
        for kind in ("pi", "user"):
            found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
            assert all(any(mark in piece for mark in marks) for piece in found if said in piece), found
            line = extractive.leaf(kind, text)
            assert all(any(mark in part for mark in marks for part in [piece] + [unit for unit in found
                           if piece in unit and unit in line]) for piece in pieces(line) if said in piece), line


# (a question with no word that makes it one, and words it says that a piece may hold only running to its mark)
QUESTIONS = [
    ("Is the server down?", ["server", "down"]),
    ("Did the deploy pass?", ["deploy", "pass"]),
    ("Has the nightly backup of the billing database finished?", ["billing", "backup", "finished"]),
    ("Do we set max_retries=3 on the worker?", ["max_retries", "worker"]),
    ("Is the timeout 50 seconds now?", ["timeout", "50"]),
    ("Läuft der Server?", ["Läuft"]),  # (a name alone, ``Server``, says nothing of it)
    ("Est-ce que le serveur répond aux requêtes?", ["serveur", "répond", "requêtes"]),
    ("Le serveur est-il tombé?", ["serveur", "tombé"]),
    ("¿El servidor responde a las peticiones?", ["servidor", "responde", "peticiones"]),
    ("Работает ли сервер?", ["Работает", "сервер"]),
    ("服务器挂了？", ["服务器挂了"]),
    ("数据库迁移完成了？", ["迁移完成"]),
]


@pytest.mark.parametrize("clause, said", QUESTIONS)
def test_a_piece_of_a_question_runs_to_its_question_mark(clause, said):
    """A question with no word that makes it one was read as said: ``Is the server down?`` gave ``server down``,
    ``Работает ли сервер?`` gave ``Работает``, ``服务器挂了？`` gave ``服务器挂了``. A piece of a sentence ending in a
    question mark (``?``, ``？``, ``؟``: in any language) runs to it, or is said from the question's start, or is
    left out; the question is said."""
    text = f"The supervisor restarted the process twice overnight and logged both restarts. {clause} " * 3
    for kind in ("pi", "user"):
        found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
        line = extractive.leaf(kind, text, 200)
        for piece in found + pieces(line):
            if any(word in piece for word in said):  # (or said from the question's start: ``Has the nightly backup``)
                assert piece.endswith(("?", "？")) or piece.startswith(clause.split()[0]), (piece, found, line)
        assert any(said[0] in piece for piece in found), found
        assert any(said[0] in piece for piece in pieces(line)), line


def test_a_piece_before_a_question_in_its_text_is_said_as_it_is():
    """A question ends its sentence: the pieces of the sentences before it, and a URL's query, are no part of it."""
    text = ("Deployed the billing service to prod-db-2. The nightly backup finished at 04:10! "
            "Check /api/v1/orders?page=2 for the orders list; is the server down? ") * 2
    found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})]
    assert {"billing service", "nightly backup finished", "/api/v1/orders?page=2", "orders list",
            "server down?"} <= set(found), found


# (a statement in a clause before a question's: said as it is; a sentence asking from its start, or an alternative
# the question offers, is the question's)
BEFORE_A_QUESTION = [
    ("I restarted the primary database server in Frankfurt last night, is it up now?", ["primary database server"], []),
    ("My landlord raised the rent to 1450 euros this month, what can I do about it?", ["rent to 1450 euros"], []),
    ("预发数据库迁移到端口5433，这个问题怎么处理？", ["预发数据库迁移到端口5433"], []),
    ("Is the primary database server in Frankfurt down, or is it just slow tonight?", [], ["database server"]),
    ("Did you restart the primary database server in Frankfurt, as I asked this morning?", [], ["database server"]),
    ("The primary database server in Frankfurt is down, or is it just slow tonight?", [], ["database server"]),
]


@pytest.mark.parametrize("sentence, said, asked", BEFORE_A_QUESTION)
def test_a_statement_before_a_question_in_its_sentence_is_said_as_it_is(sentence, said, asked):
    """``I restarted the database server, is it up now?`` lost ``database server``: every piece of a sentence ending
    in a question mark ran to it, or was left out 24 characters before it. A clause before the question's, after a
    comma, is a statement; but in a sentence that asks from its start (``Is …, or …?``, ``Did you …, as …?``) or
    whose question offers an alternative (``…, or is it …?``), each piece is the question's still."""
    text = f"The supervisor restarted the process twice overnight and logged both restarts. {sentence} " * 3
    for kind in ("pi", "user"):
        found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
        for words in said:
            assert any(words in piece and not piece.endswith(("?", "？")) for piece in found), (words, found)
        for piece in found:
            if any(words in piece for words in asked):
                assert piece.endswith("?") or piece.startswith(sentence.split()[0]), (piece, found)


# (a question asked from its start, whose words far from its mark are said from that start)
ASKED_FROM_THE_START = [
    ("Can you recommend some good hiking trails near Lake Tahoe that are dog-friendly for a long weekend in May?",
     "hiking trails", "Can you"),
    ("Is the nightly backup of the billing database on the old cluster still running at this hour?", "billing", "Is the"),
    ("¿Sigue funcionando la copia de seguridad nocturna de la base de datos de facturación?", "copia de seguridad", "¿"),
]


@pytest.mark.parametrize("sentence, words, opener", ASKED_FROM_THE_START)
def test_a_piece_far_from_its_question_mark_is_said_from_the_question_s_start(sentence, words, opener):
    """A piece more than 24 characters before its question mark was left out: ``Can you recommend some good hiking
    trails near Lake Tahoe … in May?`` lost ``hiking trails``. In a sentence that asks from its start (an auxiliary
    or a question word first, or ``¿``), it is said from there: ``Can you recommend some good hiking trails``."""
    text = f"The supervisor restarted the process twice overnight and logged both restarts. {sentence} " * 3
    for kind in ("pi", "user"):
        found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
        assert any(words in piece for piece in found), found
        for piece in found:
            if words in piece:
                assert piece.startswith(opener) or piece.endswith("?"), (piece, found)


def test_a_number_with_its_currency_or_unit_ends_there():
    """``Бюджет 45 000 ₽ в месяц`` gave ``45 000 ₽ в``: a number's word after it was taken after its currency too,
    a preposition glued on. A number with its currency or unit after it ends at them."""
    text = ("Итого 45 000 ₽ в месяц на сервера. Der Preis ist 2.400 € zzgl. Versand. Il reste 18 340 € à payer. "
            "Температура 25 °C в стойке. ") * 2
    for kind in ("pi", "user"):
        found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
        assert {"Итого 45 000 ₽", "2.400 €", "reste 18 340 €", "Температура 25 °C"} <= set(found), found
        assert not any(piece.endswith(("₽ в", "€ zzgl", "€ à", "°C в")) for piece in found), found


def test_a_url_ends_where_the_url_ends_in_chinese_text():
    """A URL written against Chinese took it (``见https://example.com/a文档`` gave ``https://example.com/a文档``,
    ``https://x.y/z。然后部署`` ran over the full stop). A URL takes no Chinese punctuation, and no Chinese or Japanese
    written on after an ASCII character; a name of its own in those scripts (after a slash) is its own."""
    text = ("详见https://example.com/a文档，链接：https://x.y/z。然后部署到 https://zh.wikipedia.org/wiki/北京 上的"
            "配置（https://example.org/q?id=7）就好。") * 2
    for kind in ("pi", "user"):
        found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
        urls = {piece for piece in found if "://" in piece and piece.startswith("http")}
        assert urls == {"https://example.com/a", "https://x.y/z", "https://zh.wikipedia.org/wiki/北京",
                        "https://example.org/q?id=7"}, found
        assert not any(piece.startswith("https://x.y/z。") for piece in found), found  # (a clause ran on from it)


# (asks of the user asking a model, each with the verb that says what is asked)
ASKS = [("Can you fix the login timeout in the auth service?", "fix"),
        ("Please remove the deprecated payment gateway from checkout.", "remove"),
        ("Rename the config loader to settings loader in the importer.", "Rename"),
        ("Migrate the orders table to the new schema before Friday.", "Migrate"),
        ("Delete the stale feature flags from the admin panel.", "Delete"),
        ("Translate the onboarding emails into German for the Berlin launch.", "Translate"),
        ("Check the docker image size on the build server.", "Check"),
        ("Bump the lodash dependency to the latest minor version.", "Bump"),
        ("Split the invoice exporter into two background jobs.", "Split"),
        ("Cache the currency rates in the pricing service.", "Cache"),
        ("Drop the unused avatar column from the users table.", "Drop"),
        ("Move the retry logic out of the webhook handler.", "Move"),
        ("Could you document the release checklist in the wiki?", "document"),
        ("Throttle the password reset emails per account.", "Throttle")]


def test_an_ask_said_at_a_merge_keeps_its_verb():
    """At a merge with many asks, each was said by its nouns (``login timeout, refund rounding bug, Add, invoices
    endpoint``): a phrase ran between stop words, so a verb was parted from what it is done to by an article, and
    the line took the densest phrase of each ask. The ask's first phrase runs on over an article or a determiner
    (``fix the login timeout``) and is said before its other phrases."""
    pool = [u for k, (ask, _) in enumerate(ASKS) for u in extractive.units({"i": k, "kind": "user", "text": ask})]
    assert "fix the login timeout in the auth service?" in {u.text for u in pool}  # (a question: to its mark)
    line = extractive.compose(extractive.top(pool), limit=300)
    said = pieces(line.split(": ", 1)[1])
    assert len(said) >= 8, line
    for piece in said:
        ask, verb = next((ask, verb) for ask, verb in ASKS if piece in ask)
        assert verb in piece.split(), (piece, line)


def test_an_error_is_copied_whole():
    """An error was shredded into words (``psycopg2.OperationalError, connect, server, Connection refused``;
    ``No space left on device`` gave ``space left, device``; ``Error: Invalid hex color: #000cc`` gave ``000cc``).
    An exception with its message, ``Error:``, a line (or a quote) opening with ``error[E0382]:``, ``fatal:``,
    ``panic:``, and the system's error strings are one piece each, as written, up to its line's end (or its quote's, or its sentence's);
    a long one is cut between words."""
    errors = ["psycopg2.OperationalError: could not connect to server: Connection refused",
              "No space left on device", "Error: Invalid hex color: #000cc", "error[E0382]: borrow of moved value",
              "fatal: not a git repository (or any of the parent directories): .git"]
    text = (f"The migration failed with {errors[0]}\nthen the copy said: {errors[1]}\nand the theme loader printed "
            f"{errors[2]}. Also `{errors[3]}` in the build, and\n{errors[4]}\n")
    for kind in ("user", "pi"):
        found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
        assert set(errors) <= set(found), found
        assert not {"connect", "server", "space left", "device", "000cc", "borrow"} & set(found), found
        line = extractive.leaf(kind, text)
        assert all(error in line for error in errors), line
    # code naming an error is no error (a type's field, a flag)
    code = "interface Result {\n  error: any;\n  isError: boolean;\n}\nconst r = {isError: true, error: null}\n"
    assert not extractive._error_statements(code)
    long = "RuntimeError: " + " ".join(f"worker{k} stopped" for k in range(60))
    found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": long})]
    error = next(p for p in found if p.startswith("RuntimeError: "))
    assert long.startswith(error) and long[len(error)] == " " and len(error) <= extractive.ERROR, error


def test_an_error_ends_where_the_speakers_words_resume():
    """An error said inside a sentence took the speaker's words after it, up to ``ERROR`` bytes (``… src/index.ts
    and I think we should pin …``; in Chinese ``… Connection refused，你先帮我查一下 …``), and a cut one ended on a
    stop word (``… and show a``). It ends at a clause a conjunction opens with a pronoun or article, at Chinese
    punctuation or text, and a cut one on a word that says something."""
    found = lambda text: [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})]
    said = found("The build failed with Error: Cannot find module 'left-pad' imported from src/index.ts and I think we "
                 "should pin the version in package.json, then rerun the pipeline before Friday.")
    assert "Error: Cannot find module 'left-pad' imported from src/index.ts" in said, said
    said = found("I get ValueError: invalid literal for int() with base 10: 'abc' whenever the form posts an empty age "
                 "field; the validator in forms/profile.py should catch that.")
    assert "ValueError: invalid literal for int() with base 10: 'abc'" in said, said
    said = found("线上出现了报错：psycopg2.OperationalError: could not connect to server: Connection refused，你先帮我查一下 "
                 "src/db/pool.py 里的配置，端口是 5433。")
    assert "psycopg2.OperationalError: could not connect to server: Connection refused" in said, said
    assert "Error: 文件不存在" in found("报错 Error: 文件不存在，怎么办")  # (a message in Chinese is the error's)
    # a message's own conjunctions go on
    error = "TypeError: unsupported operand type(s) for +: 'int' and 'str'"
    assert error in found(f"It printed {error}\n")
    long = "RuntimeError: " + "w" * 179 + " show a friendly message to the user instead"
    error = next(p for p in found(long) if p.startswith("RuntimeError: "))
    assert error.endswith(" show"), error


def test_a_numbered_diffs_marks_and_line_numbers_are_no_pieces():
    """A diff pasted from an agent's view marks and numbers its lines (`` + 11 ### Fixed``): ``11 ### Fixed``,
    ``+ 12``, ``+ 17`` were pieces. Its marks and numbers go, its lines' text is read; a list counting things
    (``- 1 cup flour``) stays."""
    text = ("+ 9 - **Tool Title Colors**: Tool execution boxes now use separate colors\n"
            " + 10\n + 11 ### Fixed\n + 12\n"
            " + 13 - **Component Invalidation**: `Text` component now implements invalidate\n"
            " - 14 old renderer handling\n + 14 - **Width Compliance**: pads all lines to the width\n")
    line = extractive.leaf("user", text)
    assert not [p for p in pieces(line) if re.match(r"[+-]? ?\d+\b", p)], line
    assert "Component Invalidation" in line and "Fixed" in line, line
    assert extractive.leaf("user", "- 1 cup flour\n- 2 eggs\n") == "user: 1 cup flour, 2 eggs"


def test_a_terminals_colours_are_no_letters_of_a_lines_words():
    """An escape sequence (``\x1b[31m``) ends what it is in: its ``31m`` glued to the word after it was a piece,
    ``31mError``, and ``0m`` another."""
    line = extractive.leaf("echo", "\x1b[31mError\x1b[0m: connection refused on port 5433 while starting the server")
    assert "Error" in line and "5433" in line and "31m" not in line and "0m" not in line, line
    line = extractive.leaf("pi", "The build printed \x1b[1mwarning\x1b[0m about the \x1b[33mdeprecated\x1b[0m flag")
    assert "warning" in line and "deprecated" in line and not re.search(r"\d+m\b|\x1b", line), line


@pytest.mark.parametrize("command, said", [
    ("cd /repo && git add .", "ran git"),  # (pi's agent opens 72 of its 391 calls on the sample so)
    ("cd /repo && npm run check 2>&1 | tail -20", "ran npm"),
    ("cd /repo; FOO=1 make -j4", "ran make"),
    ("source .venv/bin/activate && python -m pytest -q", "ran pytest"),
    ("set -e; export X=1; cargo build", "ran cargo"),
    ("cd /repo", "ran cd"),  # nothing after it: the cd is what ran
    ("echo 'a && b'", "ran echo"),
])
def test_a_command_that_sets_up_another_names_the_other(command, said):
    msg = {"kind": "tool", "text": f"bash({orjson.dumps({'command': command}).decode()})", "meta": {"tool": "bash"}}
    assert toolwork.summary(msg) == said


def test_a_merge_with_nothing_to_say_names_who_spoke(home):
    mem, nodes = build(home, [
        {"kind": "tool", "text": "bash('ls')", "meta": {"tool": "bash", "command": "ls", "call_id": "a"}},
        {"kind": "tool", "text": "bash('ls')", "meta": {"tool": "bash", "command": "ls", "call_id": "b"}},
        {"kind": "echo", "text": LONG, "meta": {"tool": "bash", "is_error": False, "call_id": "a"}},
        {"kind": "echo", "text": LONG, "meta": {"tool": "bash", "is_error": False, "call_id": "b"}},
        {"kind": "user", "text": "Z" * 600 + " ok", "meta": {"speaker": "Q" * 600}},
        {"kind": "user", "text": "hello there", "meta": {"speaker": "Q" * 600}},
    ])
    lines = {(l, i): text for l, i, text, _ in nodes}
    assert re.fullmatch(r"\d{1,2} [A-Z][a-z]+ \d{4}: bash ×2", lines[(1, 1)]), lines[(1, 1)]  # (the tool its results name)
    assert lines[(0, 4)].startswith("user " + "Q" * 40 + ": Z"), lines[(0, 4)]
    assert all(not text.endswith(":") for text in lines.values()), lines


def test_a_bare_number_is_a_fact_with_what_it_counts_or_names():
    """A number alone said nothing (``99``, ``7``, ``225:19``, ``2``): a path's line and column are one fact with the
    path, and a bare number is read with its nearest words (a name before it, what it counts after it, the
    characters it is written against in Japanese); one with none is no fact (a sentence of the user's holds it)."""
    cases = [("see [a.ts](/x/a.ts:99) now", {"/x/a.ts:99"}, {"99"}),
             ("It broke at src/tui/view.ts:225:19 and src/tui/box.ts:377:25 today.",
              {"src/tui/view.ts:225:19", "src/tui/box.ts:377:25"}, {"225:19", "377:25", "19", "25 today"}),
             ("The build hosts run CentOS 7 again.", {"CentOS 7"}, {"7"}),
             ("I raised pool_size from 3 to 6 yesterday.", {"pool_size from 3 to 6 yesterday"}, {"3", "6"}),
             ("（2回目）テストを実行しました。（4回目）も失敗", {"2回目", "4回目"}, {"2", "4"}),
             ("We have 3 kids, and the api listens on port: 8080.", {"3 kids", "port: 8080"}, {"3", "8080"}),
             # a line opening with a word and a number names it by both, a stop word too (``note`` is one): a
             # heading's number was all that told one such message from the next
             ("note 8: " + "about the staging database " * 30, {"note 8"}, {"8"})]
    for text, kept, gone in cases:
        found = {u.text: u for u in extractive.units({"i": 0, "kind": "pi", "text": text})}
        assert kept <= set(found) and not gone & set(found), (text, list(found))
    found = extractive.units({"i": 0, "kind": "pi", "text": "It was 3, then new Spacer(1)."})
    assert found and not [u.text for u in found if re.search(r"\d", u.text)], found
    line = extractive.leaf("pi", "Changes:\n1. Removed it\n2. Moved it\n" + LONG)
    assert not re.search(r"Changes: \d|(?:^|, )\d\b", line.removeprefix("pi: ")), line  # (a list's numbers are none)


def test_a_memory_saying_the_same_again_and_again_still_says_what(home):
    """16 messages or more, each word in more than about a third of them: every word weighed 0 and the line said
    only who spoke (``6 December 2026: user, pi``); it says what the user asked."""
    ask, reply = "How do I restart the staging server?", "Run systemctl restart app on the staging box."
    for n in (15, 16, 80):
        mem = Memory.at(f"m{n}")
        mem.append([{"kind": "user" if k % 2 == 0 else "pi", "text": ask if k % 2 == 0 else reply} for k in range(n)])
        digest = extractive.Digest(Memory.open(f"m{n}"))
        for l, i in ((1, 0), (3, 0)) + (((6, 0),) if n == 80 else ()):
            assert f"user: {ask}" in digest.merge(l, i), (n, l, digest.merge(l, i))


def test_a_line_says_a_piece_once():
    """Two messages sharing a piece gave it twice (``restart, staging server, How do I restart the staging
    server?``): a piece already in a speaker's part of a line, or whole inside one there, is not said again, and
    a new piece holding one said before takes its place. A piece inside a word is not said by it (``40`` by
    ``topic40x0``)."""
    for first, second, line in (
            ("How do I restart the staging server?", "How do I restart the staging server? It hangs on boot.",
             "user: How do I restart the staging server? It hangs on boot."),
            ("预发数据库迁移到端口5433", "预发数据库迁移到端口5433，这个问题怎么处理？", "user: 预发数据库迁移到端口5433，这个问题怎么处理？")):
        pool = extractive.units({"i": 0, "kind": "user", "text": first}) + extractive.units(
            {"i": 1, "kind": "user", "text": second})
        assert extractive.compose(pool) == line
    unit = extractive.Unit
    pool = [unit(3.0, 0, 0, "40", "pi", 1, ("40",)), unit(9.0, 1, 0, "topic40x0 plan", "pi", 1, ("topic40x0", "plan"))]
    assert extractive.compose(pool) == "pi: 40, topic40x0 plan"


def test_a_users_sentence_two_pieces_come_from_is_said_whole():
    """A merge's line said the user's ask in fragments (``user: need, fix, tui test sources, what's lakcing,
    htemes, selectlist, editor``) where the leaf below held the sentences: its words' pieces weigh more per byte
    than the sentence, and once they were said the sentence added nothing. The second piece of one sentence of the
    user is said by the sentence itself when the line has room for it, in place of the first; a named speaker's
    (people talking to each other) are said in a few words each, as before."""
    ask = ("we need to fix the tui test sources. what's lacking is the themes for selectlist, editor, and markdown. "
           "create default themes shared across all the tests using chalk")
    assert extractive.leaf("user", ask, 120) == (
        "user: we need to fix the tui test sources. create default themes shared across all the tests using chalk")
    said = ("hm, i selected the theme while you were working and got a crash, that should never happen. "
            "my dude, this exploded when i restarted with -r. invalid themes must NEVER explode")
    assert extractive.leaf("user", said, 200) == (
        "user: hm, i selected the theme while you were working and got a crash, that should never happen. "
        "my dude, this exploded when i restarted with -r. invalid themes must NEVER explode")
    # (a piece after a negation takes it: not "happen", "explode", which said the opposite; the ask's verb, its object)
    line = extractive.leaf("user", said, 90)
    assert line == "user: hm, selected the theme, crash, dude, invalid themes must NEVER explode"
    named = extractive.units({"i": 0, "kind": "user", "text": ask, "meta": {"speaker": "Caroline"}})
    assert extractive.compose(named, limit=130) == (
        "Caroline: need, fix, tui test sources, editor, markdown, create default themes shared across all the tests "
        "using chalk")


def test_a_result_without_its_call_says_its_tool_or_goes(home):
    """A result whose call is not in the span said a bare ``exit 0`` (``ran sed; exit 0``: whose?): it names the
    tool its message names (``write_stdin → exit 0``); one that names none goes when it says only that it ended
    well, and says how it failed."""
    mem, _ = build(home, [
        {"kind": "echo", "text": "Process exited with code 0", "meta": {"tool": "write_stdin", "exit_code": 0, "call_id": "x"}},
        {"kind": "echo", "text": "Process exited with code 2", "meta": {"tool": "write_stdin", "exit_code": 2, "call_id": "y"}},
        {"kind": "user", "text": "is the deploy done?"},
        {"kind": "echo", "text": "done", "meta": {"exit_code": 0}},
        {"kind": "pi", "text": "The deploy to staging finished."},
        {"kind": "echo", "text": "ECONNREFUSED 127.0.0.1:5433", "meta": {"exit_code": 1}},
        {"kind": "tool", "text": "bash('ls')", "meta": {"tool": "bash", "command": "ls", "call_id": "a"}},
        {"kind": "pi", "text": "Listing the files next."},
    ])
    line = extractive.Digest(mem).merge(3, 0)
    assert "write_stdin → exit 0, exit 2" in line and "exit 1: ECONNREFUSED" in line, line
    assert line.count("exit 0") == 1 and "ran ls" in line, line


def test_runs_of_one_program_are_said_once_with_how_many_and_how_the_last_ended(home):
    """32 runs of pytest read ``ran pytest → exit 1, 0 failed, 2 failed, 3 failed``: one call and a list of counts,
    no run's own (``1 failed`` of the last was missing). Calls that say the same are one, with how many there
    were in the span and the last one's results."""
    mem = Memory.at("m")
    failed = [3, 2, 0, 1] * 8
    msgs = []
    for k, n in enumerate(failed):
        msgs.append({"kind": "tool", "text": 'bash({"command":"pytest -x tests"})', "meta": {"tool": "bash", "call_id": f"c{k}"}})
        msgs.append({"kind": "echo", "text": f"==== {n} failed, 12 passed in 1.2s ====",
                     "meta": {"tool": "bash", "exit_code": 1 if n else 0, "call_id": f"c{k}"}})
    mem.append(msgs + [{"kind": "tool", "text": 'edit({"path":"pkg/src/tui/tui-renderer.ts","oldText":"a"})',
                        "meta": {"tool": "edit"}}] * 2)
    digest = extractive.Digest(Memory.open("m"))
    assert digest.merge(6, 0).split(": ", 1)[1] == "ran pytest ×32 → exit 1, 1 failed"
    assert digest.merge(2, 0).split(": ", 1)[1] == "ran pytest ×2 → exit 1, 2 failed"  # (the first two runs)
    assert digest.merge(1, 2).split(": ", 1)[1] == "ran pytest → exit 0"
    assert digest.merge(1, 32).split(": ", 1)[1] == "edited …renderer.ts ×2"


@pytest.mark.parametrize("name, said", [
    ("pkg/src/tui/tui-renderer.ts", "…renderer.ts"),  # (its last 13 characters hold no /: it said "ran edit")
    ("src/tui-render.ts", "tui-render.ts"),  # (a name of 13)
    ("pkg/src/markdown.test.ts", "markdown.test…"),  # (not "…test.ts": any test)
    ("pkg/src/wrap-ansi.test.ts", "…ansi.test.ts"),
    ("src/app.py", "src/app.py"),
])
def test_an_edit_or_a_read_names_its_file_in_13_characters(name, said):
    for tool, verb in (("edit", "edited"), ("read", "read"), ("Read", "read")):
        msg = {"kind": "tool", "text": f'{tool}({orjson.dumps({"path": name}).decode()})', "meta": {"tool": tool}}
        assert toolwork.summary(msg) == f"{verb} {said}"
    assert len(said.strip("…")) <= toolwork.TOOL_PIECE


def test_lines_do_not_depend_on_the_hash_seed(tmp_path):
    """Two real processes with different ``PYTHONHASHSEED`` build the same lines from the same log (a third of
    it Chinese, whose clauses share many word pairs: a sum of word weights in a set's order differed)."""
    from bench.synth import messages

    log = b"".join(orjson.dumps(record) + b"\n" for record in messages(150, seed=11))
    trees = []
    for seed in ("1", "2"):
        env = subprocess_env(PIMEM_HOME=tmp_path / seed, PYTHONHASHSEED=seed, PIMEM_EMBEDDER="off")
        for args in (("append", "m", "--ndjson"), ("build-tree", "m")):
            done = subprocess.run(pimem_cmd(*args), input=log if args[0] == "append" else None, env=env,
                                  capture_output=True, timeout=120)
            assert done.returncode == 0, done.stderr
        nodes = [orjson.loads(raw) for path in sorted((tmp_path / seed / "m" / "tree").glob("*.jsonl"))
                 for raw in path.read_bytes().splitlines()]
        trees.append(sorted((node["l"], node["i"], node["text"]) for node in nodes))
    assert len(trees[0]) > 100 and any("，" in text for _, _, text in trees[0])
    assert trees[0] == trees[1]


def test_a_long_running_digest_takes_its_word_statistics_again_once_the_log_has_doubled(home):
    """A watcher started on a memory of four messages has no word statistics (too few to say anything); once
    the log has doubled since they were taken, the next leaf or merge takes them again, and writes the line a fresh
    build of the grown log writes (before, the watcher kept weighing every word alike for as long as it ran:
    "project meeting, project budget" before the message's own words)."""
    mem = Memory.at("m")
    mem.append([{"kind": "user", "text": f"hello {k}"} for k in range(4)])
    running = extractive.Digest(mem)
    running.leaf(3, "user", "hello 3")

    def text(k: int) -> str:
        return f"the project meeting about the project budget for project {k}: " + " ".join(f"topic{k}x{j} project" for j in range(60))

    mem.append([{"kind": "user", "text": text(k)} for k in range(4, 64)])
    line = running.leaf(40, "user", text(40))
    assert line == extractive.Digest(Memory.open("m")).leaf(40, "user", text(40))
    assert line.startswith("user: project 40, topic40x0 project"), line
    # a chat of short messages has no leaf to write: its merges take them again as well
    chat = Memory.at("chat")
    chat.append([{"kind": "user", "text": f"hello {k}"} for k in range(4)])
    running = extractive.Digest(chat)
    running.merge(1, 0)
    chat.append([{"kind": "user" if k % 2 else "pi", "text": f"the project plan {k} needs topic{k} project work"}
                 for k in range(4, 64)])
    line = running.merge(4, 1)
    assert line == extractive.Digest(Memory.open("chat")).merge(4, 1)
    assert "topic17 project" in line, line


words = st.text("abcdefghijklmnopqrstuvwxyz0123456789 ./_-", min_size=20, max_size=300)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(tool_texts=st.lists(words, min_size=4, max_size=8), seed=st.integers(0, 1000))
def test_offline_merges_quote_no_tool_only_run(home, tool_texts, seed):
    msgs = []
    for k, t in enumerate(tool_texts):
        msgs.append({"kind": "user", "text": f"step {seed}-{k}: " + LONG})
        msgs.append({"kind": "tool", "text": t, "meta": {"command": t}})
        msgs.append({"kind": "echo", "text": t[::-1] * 3})
    mem, nodes = build(home, msgs, name=f"h{seed}-{len(tool_texts)}")
    all_msgs = list(mem.messages(0, mem.count()))
    for l, i, text, _ in nodes:
        if l:
            span = all_msgs[i << l : (i + 1) << l]
            tools = [m["text"] for m in span if m["kind"] in ("tool", "echo")]
            others = [m["text"] for m in span if m["kind"] not in ("tool", "echo")]
            assert tool_runs(text, tools, others) == []


# ---- the faithfulness guard ------------------------------------------------------------------------------


def test_unfounded_facts_are_found():
    assert faith.unfounded("user: port 5433 in src/app.py, MAX_RETRIES", ["the port is 5433", "see src/app.py"]) == ["MAX_RETRIES"]
    assert faith.unfounded("user: port 9999", ["port 5433"], lambda: ["a 9999 here"]) == []


def test_a_model_summary_naming_what_its_span_lacks_is_rebuilt_once_then_marked(run, home, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai") as server:
        server.reply = lambda body: "user: deploy to port 98765 from /etc/nowhere.conf"
        (home / "m").mkdir(parents=True)
        mem = Memory.at("m")
        mem.save_config({"compactor": {"provider": "openai", "model": "fake", "base_url": server.url, "key_env": "TEST_LLM_KEY"}})
        mem.append([{"kind": "user", "text": "please deploy the app " + LONG * 2}])
        assert run("build-tree", "m").exit_code == 0
        assert len(server.requests) == 2  # asked again once
    node = _stored(Memory.open("m"))[0][3]
    assert node["suspect"] == ["98765", "/etc/nowhere.conf"] and node["tokens_in"] > 0
    assert "suspect   1 summary names a number" in run("status", "m").stdout
    assert "suspect   1 line names what" in run("view", "m", "--stats").stdout
    out = run("fsck", "m")
    assert out.exit_code == 0 and "node 0+1 is suspect" in out.stdout
    assert run("view", "m", "--stats", "--json").stdout.count('"0+1"') == 1


def test_a_fact_is_founded_only_by_itself_whole():
    """``9999`` is not in a message that says ``19999``, nor ``1.2`` in one that says ``1.23``; a fact at the
    end of a sentence, or a path with more after a dot, still is."""
    assert faith.unfounded("user: port 9999, version 1.2", ["ports 19999 and version 1.23"]) == ["9999", "1.2"]
    assert faith.unfounded("user: port 9999 in /etc/a.conf", ["set port 9999. See /etc/a.conf.bak"]) == []


@pytest.mark.parametrize("summary, message", [
    ("user: edit src/pimem/a.py", "please edit src/pimem/a.py"),  # a relative path as written
    ("user: edit ./src/a.py", "please edit src/a.py"),
    ("user: edit src/a.py", "please edit ./src/a.py"),
    ("user: clean /var/lib/app/", "clean /var/lib/app please"),
    ("user: edit C:\\Users\\me\\a.py", "edit C:/Users/me/a.py"),
    ("user: read ~/.config/pimem/x.toml", "read /home/ann/.config/pimem/x.toml"),
    ("user: 1,200 rows", "load 1200 rows"),
    ("user: 1200 rows", "load 1,200 rows"),
    ("user: about 1.2k rows", "load 1200 rows"),
    ("user: 1200 rows", "load 1.2k rows"),
    ("user: costs $1,500", "it costs $1500.00"),
    ("user: limits 100 and 200", "limits = [100,200]"),  # a list, not the grouped 100200
    ("user: sizes [100,200,300]", "sizes = [100, 200, 300]"),
    ("user: Python 3.0", "use Python 3"),
    ("user: at 05:30", "at 5:30"),
    ("user: the 23rd try", "try 23 failed"),
    ("user: on 2026-10-08", "due on Oct 8, 2026"),
    ("user: on 2026-10-08", "due 8 October 2026"),
    ("user: on 2026-10-08", "due 10/8/2026"),
    ("user: on 2026-10-08", "due 2026/10/08"),
    ("user: at 2026-10-08 12:00", "at 2026-10-08T12:00:00Z"),
    ("user: port 8080", "端口 ８０８０"),
    ("user: 端口8080", "端口是8080"),
    ("user: 50 ms", "took 50ms"),
    ("user: 512 MB", "raise it to 512MB"),
    ("user: version 1.2.3", "bump to v1.2.3"),
    ("user: v1.2.3", "bump to 1.2.3"),
    ("user: 15% slower", "15 percent slower"),
    ("user: set MAX_RETRIES", "set max_retries = 3"),
    ("user: call self.fooBar", "call self.fooBar()"),
    ("user: commit 3fa9c21", "merged 3fa9c21d0e5b7a"),
    # a tool call's arguments as logged (JSON: line breaks, quotes and slashes escaped), an output in colour
    ("tool: wrote PG_USER to /app/.env", 'Write({"file_path":"/app/.env","content":"PG_HOST=db\\nPG_USER=admin\\n"})'),
    ("tool: ran tests/test_a.py", 'Bash({"command": "pytest tests\\/test_a.py -q"})'),
    ("echo: DATABASE_URL is set", "\x1b[1mDATABASE_URL\x1b[0m=\x1b[32mpostgres://db:5432/prod\x1b[0m"),
])
def test_a_fact_written_another_way_is_founded(summary, message):
    """A number, path or identifier the messages hold, as the summary writes it (grouped, glued to a unit, as
    a date in words, a path spelt another way, in another case, in full-width digits, in a tool call's JSON or
    an output's colours) is no unfounded fact."""
    assert faith.unfounded(summary, [message]) == []


@pytest.mark.parametrize("summary, message, missing", [
    ("user: 12 items", "in 2012", ["12"]),
    ("user: 200 rows", "load 1,200 rows", ["200"]),
    ("user: 12 rows", "load 12,000 rows", ["12"]),
    ("user: 100200 rows", "sizes = [100,200]", ["100200"]),
    ("user: 2.3", "bump to 1.2.3", ["2.3"]),
    ("user: 10.0.0.1", "host 10.0.0.12", ["10.0.0.1"]),
    ("user: raise to 512MB", "raise to 256MB", ["512"]),
    ("user: 端口9999", "端口8080", ["9999"]),
    ("user: build abc123def", "build abc124def", ["abc123def"]),
    ("user: commit 3fa9c21", "commit 3fa9c22", ["3fa9c21"]),
    ("user: edit src/pimem/b.py", "edit src/pimem/a.py", ["src/pimem/b.py"]),
    ("user: edit src/core/a.py", "edit src/pimem/a.py", ["src/core/a.py"]),
    ("user: read /etc/x/y/z", "read /etc/x/q/z", ["/etc/x/y/z"]),
    ("user: read /etc/a.conf", "read /opt/etc/a.conf", ["/etc/a.conf"]),
    ("user: on 2026-10-09", "due on Oct 8, 2026", ["2026-10-09"]),
    ("user: on 2026-10-09", "due 10/8/2026 or 2026/10/8", ["2026-10-09"]),
    ("user: 1.5k rows", "load 1200 rows", ["1.5"]),
])
def test_an_invented_fact_is_unfounded(summary, message, missing):
    """A number inside a word or a longer number, a hex id, a path one segment off: not in the messages."""
    assert faith.unfounded(summary, [message]) == missing


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["1", "12", "1.2", "000", "2026-10-08", "/", "\\", "~", ".", ",", "-", ":", "_", "@",
                                 "+", "$", " ", "a", "A", "f3", "x", "k", "M", "T", "Oct", "home", "b.py", "０", "é", "端"]),
                max_size=40).map("".join))
def test_a_summary_copying_its_message_names_nothing_unfounded(text):
    """Every fact is found in the text it was read from, alone or among other words: the facts are read and
    looked up with the same boundaries."""
    assert faith.unfounded(text, [text]) == [] and faith.unfounded(text, [f"so {text} then"]) == []


def test_the_mark_that_counts_is_on_the_line_readers_use(run, home):
    """A node written twice (two builders, a hand edit): readers use its first line, and so do ``status``,
    ``view --stats`` and ``fsck`` for its mark (before, a later line's mark was reported for a first line
    without one, and a first line's mark was lost to a later one without: a merge repeating it went unmarked)."""
    mem = Memory.at("m")
    mem.append([{"kind": "user", "text": f"message {k} " + LONG} for k in range(4)])
    mem.write_nodes([(0, 0, "user: one", {"model": "openai/m1"}),
                     (0, 2, "user: three at 55555", {"model": "openai/m1", "suspect": ["55555"]})])
    with open(next((mem.path / "tree").glob("*.jsonl")), "ab") as tree:
        for node in ({"l": 0, "i": 0, "text": "user: one at 98765", "suspect": ["98765"]}, {"l": 0, "i": 2, "text": "user: three"}):
            tree.write(orjson.dumps({**node, "size": len(node["text"]), "model": "openai/m1"}) + b"\n")
    assert orjson.loads(run("status", "m", "--json").stdout)["spent"]["suspect"] == ["2+1"]
    assert orjson.loads(run("view", "m", "--stats", "--json").stdout)["suspect"] == ["2+1"]
    checked = run("fsck", "m").stdout
    assert "node 2+1 is suspect" in checked and "node 0+1 is suspect" not in checked


def test_status_lists_suspect_lines_in_the_order_of_the_messages_they_cover(run, home):
    """As ``view --stats`` lists them (it listed them in the tree files' order: ``6+1, 0+1, 2+2``)."""
    mem = Memory.at("m")
    mem.append([{"kind": "user", "text": f"message {k} " + LONG} for k in range(8)])
    mem.write_nodes([(l, i, f"user: at {90000 + i}", {"model": "openai/m1", "suspect": [str(90000 + i)]})
                     for l, i in ((0, 6), (0, 0), (1, 1))])
    assert orjson.loads(run("status", "m", "--json").stdout)["spent"]["suspect"] == ["0+1", "2+2", "6+1"]


def test_when_the_second_call_fails_the_first_line_is_kept_marked_and_both_paid(run, home, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=[None, "500"]) as server:
        server.reply = lambda body: "user: deploy to port 98765"
        (home / "m").mkdir(parents=True)
        mem = Memory.at("m")
        mem.save_config({"compactor": {"provider": "openai", "model": "fake", "base_url": server.url, "key_env": "TEST_LLM_KEY",
                                       "price_in": 1.0, "price_out": 5.0}})
        mem.append([{"kind": "user", "text": "please deploy the app " + LONG * 2}])
        assert run("build-tree", "m").exit_code == 0
        assert len(server.requests) == 2
    node = _stored(Memory.open("m"))[0][3]
    assert node["text"] == "user: deploy to port 98765" and node["suspect"] == ["98765"]
    assert node["cost"] == pytest.approx((1000 + 100 * 5.0) / 1e6)  # the first call's; the second had no answer


# ---- tool text masked on every read path -----------------------------------------------------------------

SECRET = "SECRETFILE32 contents: root password is swordfish32"


def leaky_memory(run, home):
    """A tool call and its result, and a model-like summary over them quoting the result."""
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    mem.save_config({"view": {"hi": 100, "lo": 50}})  # one line for the lot
    mem.append([{"kind": "user", "text": "what is in the secret file? " + LONG * 2},
                {"kind": "tool", "text": "cat /root/SECRETFILE32", "meta": {"command": "cat /root/SECRETFILE32"}},
                {"kind": "echo", "text": SECRET},
                {"kind": "pi", "text": "I read it for you. " + LONG * 2}])
    Memory.open("main", home).write_nodes([(0, 0, "user: what is in the secret file? " + "x" * 250, {}),
                                           (0, 3, "pi: I read it for you. " + "y" * 250, {}),
                                           (2, 0, f"user: secret file?; the file says {SECRET}; pi: read it", {"model": "x"})])
    assert run("view", "main", "--include-tools").stdout == f"0+4|user: secret file?; the file says {SECRET}; pi: read it\n"


def test_tool_text_is_masked_in_view_zoom_context_and_map(run, home):
    leaky_memory(run, home)
    for args in (("view", "main"), ("view", "main", "--json"), ("context", "main"), ("map", "main", "--width", "300")):
        out = run(*args)
        assert out.exit_code == 0, out.stderr
        assert "root password is swordfish32" not in out.stdout and "swordfish32" not in out.stdout
    assert TOOL_TEXT in run("view", "main").stdout
    # (and its help says so: it said summaries are shown as written)
    assert TOOL_TEXT in " ".join(run("view", "--help").stdout.split())
    assert SECRET in run("view", "main", "--include-tools").stdout
    assert SECRET in run("context", "main", "--include-tools").stdout
    zoomed = run("zoom", "main", "0+4")
    assert zoomed.exit_code == 0 and "swordfish32" not in zoomed.stdout


def test_tool_text_is_masked_through_mcp(run, home):
    pytest.importorskip("mcp")
    from test_mcp import call_all

    leaky_memory(run, home)
    _, results = call_all(home, [("view", {"name": "main"}), ("zoom", {"name": "main", "node": "0+4"}),
                                 ("search", {"query": "secret file"}), ("view", {"name": "main", "include_tools": True})])
    view, halves, hits, tooled = results
    for result in (view, halves, hits):
        assert "swordfish32" not in str(result)
    assert SECRET in str(tooled)


def test_the_mask_leaves_a_speakers_own_words_and_the_markers_whole(run, home):
    """A run the tool's output shares with what the model said (after a connective's space) is the model's,
    not a quote; and a marker's words stay when the output holds them too ("exit 7: ECONNREFUSED")."""
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    mem.save_config({"view": {"hi": 100, "lo": 50}})  # one line for the lot
    mem.append([{"kind": "user", "text": "run the colour test " + LONG * 2},
                {"kind": "tool", "text": "bash('node rgb.js')", "meta": {"command": "node rgb.js"}},
                {"kind": "echo", "text": "=== Direct RGB Test === failed with exit 7: ECONNREFUSED", "meta": {"exit_code": 7}},
                {"kind": "pi", "text": 'If the "Direct RGB Test" section shows three grays, it works. ' + LONG * 2}])
    Memory.open("main", home).write_nodes([(0, 0, "user: run the colour test " + "x" * 250, {}),
                                           (0, 3, "pi: If the section shows three grays " + "y" * 250, {}),
                                           (2, 0, "user: colour test; pi: Run, Direct RGB Test, section shows", {"model": "x"})])
    assert run("view", "main").stdout == "0+4|user: colour test; pi: Run, Direct RGB Test, section shows\n"
    pair = [{**msg, "i": k} for k, msg in enumerate(mem.messages(1, 3))]  # the call and its result, joined
    joined = "tool: bash('node rgb.js')\necho: === Direct RGB Test === failed with exit 7: ECONNREFUSED"
    assert hide_tools(lambda a, b: iter(pair[a:b]), [(1, 0, joined)]) == [
        "tool: ran node (hidden)\necho: exit 7: ECONNREFUSED (hidden)"]


def test_a_long_tool_results_own_line_is_hidden_inside_a_joined_line(run, home):
    """A tool result too long to be its own leaf gets a line of its own (what ran and its facts, each short),
    and its parent joins that line with its neighbours': shown without tools, the joined line holds the
    marker in its place, through the view, context, map, zoom and MCP alike."""
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    mem.save_config({"view": {"hi": 100, "lo": 50}})  # one line for the lot
    mem.append([{"kind": "user", "text": "what is in the secret file?"},
                {"kind": "tool", "text": "cat /root/SECRETFILE32", "meta": {"command": "cat /root/SECRETFILE32"}},
                {"kind": "echo", "text": SECRET + ". " + "The quick brown fox jumps over the lazy dog. " * 12},
                {"kind": "pi", "text": "I read it for you."}])
    assert run("build-tree").exit_code == 0
    tooled = run("view", "main", "--include-tools").stdout
    assert tooled.startswith("0+4|") and "swordfish32" in tooled  # the result's own line, joined into 0+4
    for args in (("view", "main"), ("view", "main", "--json"), ("context", "main"), ("map", "main", "--width", "300"),
                 ("zoom", "main", "0+4")):
        out = run(*args)
        assert out.exit_code == 0 and "swordfish32" not in out.stdout, (args, out.stdout)
    assert "tool: ran cat (hidden) echo: (hidden) pi: I read it for you." in run("view", "main").stdout
    pytest.importorskip("mcp")
    from test_mcp import call_all

    _, results = call_all(home, [("view", {"name": "main"}), ("zoom", {"name": "main", "node": "0+4"})])
    assert all("swordfish32" not in str(result) for result in results)


def test_a_line_over_a_long_span_is_masked_through_the_index_without_reading_the_span(run, home, monkeypatch):
    """A model line over 2,048 messages (the tree's first half of 4,096) quotes a tool result, and a phrase
    the user said too: the first is masked (the index answers for the span; its messages are not read), the
    second is kept."""
    said = "the staging database moved to port 5433 last night"
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    msgs = [{"kind": "user" if k % 2 else "pi", "text": f"turn {k}: {LONG}"} for k in range(4096)]
    msgs[700] = {"kind": "echo", "text": f"{SECRET} and {said}. {LONG}"}
    msgs[900] = {"kind": "user", "text": f"remember: {said}. {LONG}"}
    mem.append(msgs)
    line = f"user: ports; the file says {SECRET}; user: {said}"
    nodes = [(l, i, line if (l, i) == (11, 0) else f"summary {l}+{i}", {"model": "x"})
             for l in range(1, 13) for i in range(4096 >> l)]
    Memory.open("main", home).write_nodes(nodes)
    assert f"0+2048|{line}" in run("zoom", "main", "0+4096", "--include-tools").stdout

    def no_span_reads(self, start=0, stop=None):
        assert stop is not None and stop - start <= 1, f"read messages {start}…{stop}"
        return iter(())

    monkeypatch.setattr(Memory, "messages", no_span_reads)
    zoomed = run("zoom", "main", "0+4096")
    assert zoomed.exit_code == 0, zoomed.stderr
    row = next(r for r in zoomed.stdout.splitlines() if r.startswith("0+2048|"))
    assert "swordfish32" not in row and TOOL_TEXT in row and said in row
    mem = Memory.open("main", home)  # what the view's reader (ViewFile.shown) calls for a line it has not shown yet
    assert mem.views.holds == mem.span_holds
    assert hide_tools(mem.messages, [(11, 0, line)], holds=mem.span_holds) == [row.removeprefix("0+2048|")]
    # (in capitals the quote is the result's all the same, and the phrase the user's)
    shouted = f"user: ports; the file says {SECRET.upper()}; user: {said.upper()}"
    assert hide_tools(mem.messages, [(11, 0, shouted)], holds=mem.span_holds) == [
        row.removeprefix("0+2048|").replace(said, said.upper())]
    # (the texts folded for one question are kept for the next, up to FLAT_KEPT messages: the same answers)
    monkeypatch.setattr(memory, "FLAT_KEPT", 1)
    mem = Memory.open("main", home)
    assert hide_tools(mem.messages, [(11, 0, line)], holds=mem.span_holds) == [row.removeprefix("0+2048|")]
    assert len(mem._flat) == 1


def test_the_index_reads_a_calls_json_escapes_and_an_outputs_colours_as_the_mask_does(home):
    """Over a span of 2,048 messages (checked through the index), a model line quoting a file a call wrote
    (logged with its line breaks escaped) and an output in colour (its escape codes in the log) has both
    quotes masked, as the mask over a short span does; the user's own words stay."""
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    msgs = [{"kind": "user" if k % 2 else "pi", "text": f"turn {k}: {LONG}"} for k in range(4096)]
    msgs[300] = {"kind": "tool", "text": 'write {"path": "notes.txt", "content": "vault token\\nwinterhaven-7781\\n"}'}
    msgs[500] = {"kind": "echo", "text": "\x1b[1;31mdeploy\x1b[0m key \x1b[33mqv81-kk20-mmv7\x1b[0m rotated"}
    msgs[900] = {"kind": "user", "text": f"please keep the notes short. {LONG}"}
    mem.append(msgs)
    line = "the file: vault token winterhaven-7781; the output: deploy key qv81-kk20-mmv7; user: please keep the notes short"
    span = msgs[:2048]
    [shown] = hide_tools(mem.messages, [(11, 0, line)], holds=mem.span_holds)
    assert shown == f"the file: {TOOL_TEXT}; the output: {TOOL_TEXT}; user: please keep the notes short"
    assert shown == tool_runs_masked(line, span)


def test_the_index_finds_an_outputs_typographic_quotes_and_dashes_as_the_mask_does(home):
    """Over a span of 2,048 messages (checked through the index), a model line quoting an output that holds
    typographic quotes and dashes (gcc's ‘name’, a date range 2024–2025), as it was or written plain, in
    capitals, its white space runs made one, is masked as the mask over a short span masks it: the index was
    asked for the folded words (``it's``, ``2024-2025``), which the logged text (``it’s``, ``2024–2025``) does
    not hold, so only the runs between the quotes were hidden, and a run with a quote every few words not at
    all."""
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    msgs = [{"kind": "user" if k % 2 else "pi", "text": f"turn {k}: {LONG}"} for k in range(4096)]
    msgs[300] = {"kind": "echo", "text": "main.c:7: error: ‘vault_pw’ undeclared; did you mean ‘vault_id’?\n"
                                         "  window 2024–2025 — don’t   ‘ship’ it"}
    msgs[900] = {"kind": "user", "text": f"please keep the notes short. {LONG}"}
    mem.append(msgs)
    span = msgs[:2048]
    for quoted in ("error: ‘vault_pw’ undeclared; did you mean ‘vault_id’", "window 2024–2025 — don’t ‘ship’ it",
                   "error: 'vault_pw' undeclared; did you mean 'vault_id'", "window 2024-2025 - don't 'ship' it",
                   "ERROR: ‘VAULT_PW’ UNDECLARED; DID YOU MEAN ‘VAULT_ID’", "WINDOW 2024–2025 — DON’T ‘SHIP’ IT"):
        line = f"the build said {quoted}; user: please keep the notes short"
        [shown] = hide_tools(mem.messages, [(11, 0, line)], holds=mem.span_holds)
        assert shown == tool_runs_masked(line, span) == f"the build said {TOOL_TEXT}; user: please keep the notes short"


def test_the_index_finds_a_verbatim_quote_of_text_the_fold_changes(home):
    """Over a span of 2,048 messages (checked through the index), a model line copying an output with letters
    the fold writes otherwise (German ß as ss, full-width digits and letters as ASCII, the ligature ﬁ as fi) is
    masked as the mask over a short span masks it: the index was asked only for the folded words (``strasse``,
    ``2024``), which the log (``straße``, ``２０２４``) does not hold, so the quote showed whole."""
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    msgs = [{"kind": "user" if k % 2 else "pi", "text": f"turn {k}: {LONG}"} for k in range(4096)]
    german, japanese, ligature = ("Lieferadresse Große Straße 12, Maßnahme läuft", "２０２４年１２月の請求書ＩＤはＩＮＶ０４２です",
                                  "the ﬁnal ﬁle ﬁgures were ﬂagged oﬀ")
    msgs[300] = {"kind": "echo", "text": f"{german}\n{japanese}\n{ligature}"}
    msgs[900] = {"kind": "user", "text": f"please keep the notes short. {LONG}"}
    mem.append(msgs)
    span = msgs[:2048]
    for quoted in (german, japanese, ligature):
        line = f"the output said {quoted}; user: please keep the notes short"
        [shown] = hide_tools(mem.messages, [(11, 0, line)], holds=mem.span_holds)
        assert shown == tool_runs_masked(line, span) and shown.count(TOOL_TEXT) == 1, shown
        assert shown.endswith(f"{TOOL_TEXT}; user: please keep the notes short"), shown


def test_the_index_answers_for_words_in_any_script_over_a_long_span(run, home, monkeypatch):
    """Over a span of 2,048 messages (checked through the index), a Chinese or Russian line is masked as the
    mask over a short span masks it: what the user and the model said shows (full-width commas and all), and so
    do a model's own words no message holds; what only a tool result holds is hidden, in Chinese, in Russian,
    and in Korean logged decomposed (as macOS lists a file name) and quoted composed. Before, only ASCII words
    were asked of the index: a Chinese run was hidden wherever it came from."""
    said = "请保持公开接口不变，蓝鲸副本上周迁移过去了，这个版本的依赖需要锁定"
    told = "сервер северный ветер переехал на новый адрес вчера вечером"
    secret = "部署口令是青蛙跳过了七座山峰的桥梁"
    hidden = "пароль администратора белая сова девять"
    korean = "비밀번호목록정리본최종판입니다만"
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    chat = "我们又把部署说明和运行手册对了一遍。" * 8
    msgs = [{"kind": ("pi", "user", "echo")[k % 3], "text": f"第{k}轮：{chat}"} for k in range(4096)]
    msgs[700] = {"kind": "echo", "text": f"{secret}\n{hidden}\n{unicodedata.normalize('NFD', korean)}.txt"}
    msgs[900] = {"kind": "user", "text": f"{said}。{chat}"}
    msgs[901] = {"kind": "pi", "text": f"Понял: {told.upper()}."}
    mem.append(msgs)
    own = "模型自己写的总结句子没有任何消息包含它"
    line = f"user: {said}；{own}；tool: {secret}；pi: {told}；{hidden}；{korean}"
    span = msgs[:2048]
    [shown] = hide_tools(mem.messages, [(11, 0, line)], holds=mem.span_holds)
    assert shown == tool_runs_masked(line, span)
    assert said in shown and own in shown and told in shown
    assert all(text not in shown for text in (secret, hidden, korean)) and shown.count(TOOL_TEXT) == 3, shown
    nodes = [(l, i, line if (l, i) == (11, 0) else f"summary {l}+{i}", {"model": "x"})
             for l in range(1, 13) for i in range(4096 >> l)]
    Memory.open("main", home).write_nodes(nodes)
    row = next(r for r in run("zoom", "main", "0+4096").stdout.splitlines() if r.startswith("0+2048|"))
    assert row == f"0+2048|{shown}"


def test_a_long_span_of_common_words_is_masked_as_reading_it_masks(home):
    """Over a span of 2,048 messages (checked through the index), a line of the words every message uses is
    masked exactly as the mask over a short span masks it: once many questions were asked, the span's texts
    are read (at most ``SPAN_READ`` of a kind) rather than giving up past ``SPAN_CANDIDATES`` candidates (which
    hid what a message said, or what no message held); and with no tool message in the span, nothing is."""
    import random

    pick = random.Random(5)
    words = "the deploy notes again compared with runbook says staging database moved port night cache layer".split()
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    msgs = [{"kind": ("user", "pi", "tool", "echo")[k % 4], "text": " ".join(pick.choices(words, k=40))}
            for k in range(4096)]
    msgs[2048:] = [dict(msg, kind="pi") if msg["kind"] in ("tool", "echo") else msg for msg in msgs[2048:]]
    mem.append(msgs)
    line = "user: " + "; ".join(" ".join(pick.choices(words, k=5)) for _ in range(6))
    [shown, untooled] = hide_tools(mem.messages, [(11, 0, line), (11, 1, line)], holds=mem.span_holds)
    # (as the mask reads a short span, white space aside: the index is not asked for a token wrapped over lines)
    tools, others = ("\0".join(flat(form) for msg in msgs[:2048] if (msg["kind"] in ("tool", "echo")) == tool
                                for form in (readings(msg["text"]) if tool else [msg["text"]])) for tool in (True, False))
    assert shown == privacy._masked(line, privacy._key_runs(line, lambda keyed: runs_where(
        keyed, tools.__contains__, others.__contains__))) and shown.count(TOOL_TEXT) >= 1
    assert untooled == line


def tool_runs_masked(line: str, msgs: list[dict]) -> str:
    return privacy._masked(line, tool_runs(line, [m["text"] for m in msgs if m["kind"] in ("tool", "echo")],
                                           [m["text"] for m in msgs if m["kind"] not in ("tool", "echo")]))


def test_a_users_facts_reach_the_top_of_a_span_of_long_model_replies(home):
    """The span's pool weighs the user's pieces as the line does: a model's long replies, full of phrases of
    rare words, do not crowd the user's facts out of the merges above (before, the top line was all model)."""
    made = iter(range(1, 10**6))

    def rare() -> str:  # a word no other message holds
        return "".join("bcdfghjklmnprstvz"[int(c)] for c in str(next(made) * 7919)) + "o"

    msgs = []
    for k in range(32):
        msgs.append({"kind": "user", "text": f"Thanks! My locker code is now C{k:02d}X{k * 7 % 10}. What should I pack?"})
        msgs.append({"kind": "pi", "text": " ".join(f"Try {rare()} {rare()} {rare()} {rare()}, then the {rare()} {rare()} {rare()}."
                                                     for _ in range(12))})
    mem, _ = build(home, msgs)
    top = extractive.Digest(mem).merge(6, 0)
    assert ": user: " in top and sum(f"C{k:02d}X{k * 7 % 10}" in top for k in range(32)) >= 4, top


# ---- the phrase scan and a tool result's outcome, against their plain definitions ------------------------

_MARKS = "".join(re.escape(chr(c)) for c in range(0x110000) if unicodedata.category(chr(c))[0] == "M")
# (a word holds its marks, and dots but no three in a row: "logs...nothing" is two words)
_TOKEN = re.compile(rf"[^\W_](?:[\w'’+#\-{_MARKS}]|\.(?!\.\.))*(?:[^\W_]|[{_MARKS}])|[^\W_]")


def plain_phrases(text: str, cjk: bool) -> list[tuple[int, str, bool]]:
    """Runs of up to four content tokens, token by token: a run ends at a stop word, a Chinese or Japanese token, a
    token after a dot that opens a word (``.github/…``), its fourth word, or a break (``extractive._BREAK``) between
    two of its tokens (but ``of`` and a possessive pronoun after it, ``buddy of mine adopted``, go on with a run,
    the pronoun no word of its four). A negation (``extractive._NEGATORS``; the words of one of
    ``extractive._NEGATION_PHRASES``, ``far from``, together; ``only`` before a word that is no stop word, after one
    of ``extractive._ONLY_AFTER`` or, before a word ending in -ed or in -s not -ss, after a word that is no stop word,
    the word before it starting at most 16 characters before it) ends a run and opens one; a clause (between two breaks
    or turns, ``extractive._TURNS``) holding one says each of its runs with one: a run after one from the nearest
    before it (none when it starts more than ``extractive.NEGATION_REACH`` characters past its end), a run before
    them all up to the clause's last run's end when one of ``extractive._AFTER`` comes after it, a run right before
    one of ``extractive._OBJECTS`` (or a value right before any: ``40 not 50``; spaces between) to the end of the
    run that one opens (of the run after it, when it is alone in its run and that run is in reach), a run so said
    with one (or one opens) and ending before a limit in time after the first (``extractive._LIMIT``) up to the
    clause's last run's end, one said from the first when that opens the clause right after a comma (``A, not B``)
    from the word before the comma; a negation alone is no run, but when it is its clause's only run and none that
    leaves out what follows it (``extractive._LEAVING_OUT``: ``Apart from that,``). A word of one or
    two letters right after a dash that opens a word is a flag (``git commit -a``): a content token whatever its
    letters, none of its run's four words, and so is a word with a capital after a small letter (``WoW``); one opening a run, up to three stop words (no proposal's word) and at most
    ``extractive.NEGATION_REACH`` characters after the clause's last run, ends that run (``run it with -v``), which
    takes no word after it but flags."""
    breaks = [m.start() for m in extractive._BREAK.finditer(text)]
    clauses = [([], [])]  # each: its runs (the (start, end) of their tokens) and its negations
    run, last = [], 0
    phrased = [m.span() for m in re.finditer(r"(?<![\w'’-])(?:" + "|".join(extractive._NEGATION_PHRASES) + r")(?![\w'’-])",
                                             text, re.I)]
    owner, owned = -1, set()  # (where the pronoun of a run's ``of mine`` starts; those taken)
    flags = set()  # (a command's short flags: no stop word, negation or turn, none of a run's four words)
    ended = None  # (a run a flag after its stop words ended: it takes flags only)
    for m in _TOKEN.finditer(text):
        runs, negations = clauses[-1]
        phrase = next((span for span in phrased if span[0] <= m.start() < span[1]), None)
        if phrase and m.start() > phrase[0]:
            continue  # (a later word of a negation of words)
        if any(last <= b < m.start() for b in breaks):
            if run:
                runs.append(run)
                run = []
            clauses.append(([], []))
            runs, negations = clauses[-1]
        last = phrase[1] if phrase else m.end()
        word = m.group().lower()
        limits = word == "only" and (verb := re.match(r"[ \t]+([A-Za-z][a-z]+)(?![\w'’-])", text[m.end() :])) and (
            verb.group(1).lower() not in extractive.STOP) and (
            before := re.search(r"(?<![\w'’-])([A-Za-z][A-Za-z'’]*)[ \t]+\Z", text[: m.start()])) and (
            m.start() - before.start() <= 16) and (
            (said := before.group(1).lower().replace("’", "'")) in extractive._ONLY_AFTER or said not in extractive.STOP
            and re.search(r"(?:ed|[^s]s)\Z", verb.group(1)))  # (``I only added tests``, ``the job only runs``)
        flag = len(word) <= 2 and re.search(r"(?<![^\s(\[{`'\"=])--?\Z", text[: m.start()])  # (``git commit -a``)
        if flag:
            flags.add(m.span())
        if phrase or limits or not flag and (word in extractive._NEGATORS or word in extractive._TURNS):
            if run:
                runs.append(run)
            run = []
            if phrase or limits or word in extractive._NEGATORS:
                negations.append(phrase or m.span())
                run = [phrase or m.span()]
            else:
                clauses.append(([], []))
            continue
        if run and (m.start() == owner or not flag and m.group() == "of" and re.match(r" (?:mine|yours|his|hers|ours|theirs)\b",
                                                                       text[m.end() :])):
            if m.start() == owner:
                run.append(m.span())
                owned.add(m.span())
            owner = m.end() + 1 if m.start() != owner else -1
            continue
        dotted = re.search(r"(?:^|\s)\.\Z", text[: m.start()])
        mixed = re.search(r"[a-z][A-Z]", m.group())  # (a name, no stop word: ``WoW``)
        if dotted or not flag and not mixed and word in extractive.STOP or (
                cjk and extractive._HAN_KANA_RUN.search(m.group())):
            if run:
                runs.append(run)
            run = []
            continue
        if len([span for span in run if span not in owned and span not in flags]) == 4 or run and run is ended:
            runs.append(run)
            run = []
        if flag and not run and runs and flag.start() - runs[-1][-1][1] <= extractive.NEGATION_REACH and re.fullmatch(
                r"(?:[ \t]+[A-Za-z'’]+){0,3}[ \t]+", text[runs[-1][-1][1] : flag.start()]) and all(
                w.lower() in extractive.STOP and w.lower() not in extractive._MODALS
                for w in text[runs[-1][-1][1] : flag.start()].split()):
            run = ended = runs.pop()  # (``run it with -v``: the run before its stop words, ended by the flag)
        run.append(m.span())
    if run:
        clauses[-1][0].append(run)
    out = []
    for runs, negations in clauses:
        spans = [(r[0][0], r[-1][1]) for r in runs]
        for start, end in spans:
            run = start, end
            if negations:
                if (start, end) in negations and (len(spans) > 1 or text[start:end].lower() in extractive._LEAVING_OUT):
                    continue
                before = [] if start in [at for at, _ in negations] else [(at, to) for at, to in negations if at < start]
                if before:
                    if start - before[-1][1] > extractive.NEGATION_REACH:
                        continue
                    start = before[-1][0]
                elif start not in [at for at, _ in negations] and any(
                        at >= end and text[at:to].lower() in extractive._AFTER for at, to in negations):
                    end = spans[-1][1]
                elif start not in [at for at, _ in negations] and (
                        right := [(at, to) for at, to in negations if at > end][:1]) and not text[
                        end : right[0][0]].strip(" \t") and (
                        text[right[0][0] : right[0][1]].lower() in extractive._OBJECTS
                        and (text[right[0][0] : right[0][1]].lower() != "no" or right[0] not in spans)
                        or text[end - 1].isdigit()):
                    (at, to), = right
                    end = next((e for s, e in spans if s == at), to)
                    if end == to:
                        end = next((e for s, e in spans if s >= to and s - to <= extractive.NEGATION_REACH), to)
                limit = extractive._LIMIT.search(text[: spans[-1][1]], negations[0][1])
                if limit and end <= limit.start() and ((start, end) != run or start in [at for at, _ in negations]):
                    end = spans[-1][1]
                right = extractive._RIGHT_VALUE.match(text, end)
                if end == spans[-1][1] and right and re.search(r"\d", text[max(start, end - 48) : end]):
                    end = right.end()
                first = negations[0][0]
                right = re.search(r"""(?<!\S)[^\s()\[\]{}<>"“”«»,;]{1,40},[ \t]{1,4}\Z""", text[:first])
                if start == first == spans[0][0] and right and re.search(r"[^\W_]", right.group()):
                    start = right.start()
                whose = re.search(r"(?<![\w'’-])(?i:few|many|most|some|several|others|both|all|half)[ \t]{1,4}\Z",
                                  text[:start])
                if whose and whose.start() >= start - 12 and any(
                        at == start and text[at:to].lower()[-3:] in ("n't", "n’t") for at, to in negations):
                    start = whose.start()
            out.append((start, text[start:end], bool(negations)))
    return out


def plain_outcome(text: str) -> tuple[str | None, str | None]:
    # a number standing alone (not a version's 0.0.51), "N tests" only as a runner's summary says it
    counts = [m.group() for m in re.finditer(r"(?<![^ \t\n(|,;\[])\d+ (?:(?:passed|failed|errors?|skipped|warnings?)\b"
                                             r"|tests?(?= (?:passed|failed|in \d|\|)))", text)
              if len(m.group()) <= toolwork.TOOL_PIECE]  # (longer is no count: "4111222233334444 passed")
    failed = [c for c in counts if ("fail" in c or "error" in c) and not c.startswith("0 ")]
    errors = [name for line in text.split("\n") for name in reported_names(line)]
    return (failed or counts or [None])[0], (errors or [None])[0]


def reported_names(line: str) -> list[str]:
    """The error names ``line`` reports: not in a warning (a ``warn`` or ``deprecat`` before it) or a quote; in the
    part of the line after its last ``: `` or `` - `` (else past its indentation and pytest's ``E``), an exception's
    name opening it past a module path and followed by ``:``, white space or the line's end, any other with no code
    before it in its part (a call's ``(``, ``{}=;#|``)."""
    out = []
    for m in toolwork._ERROR_NAME.finditer(line):
        name, before = m.group(), line[: m.start()]
        if len(name) > toolwork.TOOL_PIECE or before[-1:] in ("'", '"', "`") and before:
            continue
        if re.search("warn|deprecat", before, re.I):
            continue
        head = re.match(r"(.*)(?:: | - )", before)  # (greedy: up to its last)
        part = before[head.end():] if head else re.sub(r"\A[ \t]*(?:E[ \t]+)?", "", before)
        if name.endswith(("Error", "Exception")):
            ok = re.fullmatch(r"(?:[A-Za-z_]\w*\.)*", part.lstrip(" \t")) and line[m.end():m.end() + 1] in ("", ":", " ", "\t", "\r")
        else:
            ok = not re.search(r"\w\(|[{}=;#|]", part)
        if ok:
            out.append(name)
    return out


PHRASE_CASES = [
    "", "   ", "the", "a b c d e f g h i", "Hello, world. This is: a test - of breaks (and) [more] {so} <on> \"q\" | end",
    "don't stop the staging database refuses connections since this morning; port 5433!",
    "预发环境的数据库从今天早上开始拒绝连接，帮我查一下原因。服务在 5433 端口监听",
    "x .y a—b c – d e.f.g h:i j: k, l,m", "logs…nothing, a...b..c....d e…. 1990–1995 x–y 'q' it's q' ‘r’ s’",
    "ΣΑΣ σας' ^x `y` ·z", "２３ ١٢٣ _a_ __ a_b",
    "FAILED tests/test_orders.py::test_refund_roundtrip - AssertionError: assert 1 == 2\n12 passed, 1 failed",
    "x12 passed a 3 failed _4 tests ٣ errors 2 warnings", "Timeout, permission denied, EADDRINUSE; KeyboardInterruptError",
    "de\u0301ploye\u0301 le cafe\u0301 ; कनेक्शन विफल, ก\u0e34น",
    "card 4111222233334444 passed validation, 1234 warnings, 12345 warnings", "==== 12 passed, 1 error in 0.2s ====",
    "The flaky test is not a regression; Don't ever force-push to main. None of the replicas were promoted but the "
    "worker was, nothing. Hebräisch gehen in Latin-1 gar nicht; Сервер не отвечает на запросы после обновления",
    "The cleanup job deleted nothing from the archive bucket; we ship nothing. The disk is Far from full, it's 40 not 50; "
    "instead of the 60 we set without any review. He will not migrate the database before the audit ends, не трогать "
    "базу до конца аудита. Deploy לא, Deploy None, 7 לא. A buddy of mine adopted last year; that idea of yours, of "
    "his. Pin it to ~2.3.1, not ^2.3.1; the bug is in the (lexer), not in the parser,  not here",
    "It's not 40, it's 50. not 3 but 4; not v2 rather ^2.3.1! Far from full, it's 40. nicht 40, sondern 50",
    "Except for the billing service, all passed; apart from db everything außer x. found no errors, said no, yeah no",
    "Some close friends kept supporting, but a few weren't able to handle it; many didn't, half  don’t. all can't",
    "-a run git commit -a -m wip; ls -a, (-i), sed -no x, tar -x -v -z -f backup.tar now, -of mine, not -it, e-it --it",
    "run it with -v; Rerun the suite with -x and -s -q now, it to -v x, a b c -v d; with -v, then -x,y. don't with -v",
    "Apart from that, the deploy went fine; without it. Far from it, instead of them, except. not that; nothing. Sans",
    "I only added tests; it only fails on CI, the job only runs at night. We can only test it, the only fix, not only "
    "does it, only 20%, Only tests, tests only passed, I only just, it’ll only work, x only class, a verylongwordhere only ran",
    "I play WoW every weekend, LoL ranked, Wow, WOW, wow; the getUser It's McDonald's, x OnLy y, NoT here, ThE end",
]


@given(st.lists(st.sampled_from(["the", "a", "Deploy", "db", "5433", " ", "  ", ", ", ". ", "; ", " - ", "\n", ":", "x.y",
                                 "don't", "预发", "数据库", "，", "。", "_", "-", "passed", "1 failed", "Error", "Σ", "２",
                                 "e\u0301", "\u0301", "कि", "...", "..", ".", "…", "—", "–", "'", "’", "‘", "7",
                                 "not", "None", "nicht", "не", "לא", "but", "because"]),
                max_size=40).map("".join))
@settings(max_examples=300, deadline=None)
def test_the_phrase_scan_and_the_outcome_equal_their_plain_definitions(text):
    for case in [text, *PHRASE_CASES]:
        for cjk in (True, False):
            assert list(extractive._phrases(case, cjk)) == plain_phrases(case, cjk)
        assert toolwork.outcome(case) == plain_outcome(case)


@given(st.lists(st.sampled_from(["ValueError", "x.KeyError", "ECONNREFUSED", "EPIPE", "timeout", "Timeout", " of 2",
                                 " exceeded", " >5", "i/o ", "not found", "E ", "E", "  ", " ", ": ", ":", " - ", "-",
                                 "\n", "(", "f(", ")", "=", "{", "#", "'", '"', "`", "warn", "Deprecation", "raise ",
                                 "1 failed", "\t", "\r", "x"]), max_size=30).map("".join))
@settings(max_examples=500, deadline=None)
def test_an_outcome_names_an_error_as_its_plain_definition_does(text):
    for case in [text, " - x.KeyError - ECONNREFUSED", "E  - EPIPE: f( ENOENT", "warn\nx: b(ENOENT\ny: EPIPE"]:
        assert toolwork.outcome(case) == plain_outcome(case)


def test_a_summary_quoting_tool_output_across_its_line_breaks_is_masked(run, home):
    """A model joins a quoted output's lines with spaces: the mask compares white space aside."""
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    mem.save_config({"view": {"hi": 300, "lo": 50}})
    output = "DB_USER=admin\nDB_PASS=Hunt3r2!\nDB_HOST=10.9.8.7\nPORT=5433\n" + "\n".join(f"K{k:02d}=v{k:02d}" for k in range(20))
    mem.append([{"kind": "user", "text": "please show me the staging config file " + LONG * 2},
                {"kind": "tool", "text": "cat config/staging.env", "meta": {"command": "cat config/staging.env"}},
                {"kind": "echo", "text": output},
                {"kind": "pi", "text": "Here is the config. " + LONG * 2}])
    quoted = " ".join(output.split())
    Memory.open("main", home).write_nodes([(0, 0, "user: show the staging config " + "x" * 250, {}),
                                           (0, 3, "pi: here it is " + "y" * 250, {}),
                                           (2, 0, f"user: staging config; echo: {quoted}; pi: done", {"model": "x"})])
    for args in (("view", "main"), ("zoom", "main", "0+4"), ("context", "main"), ("view", "main", "--json")):
        out = run(*args).stdout
        assert "admin" not in out and "K07=v07" not in out and "PORT=5433" not in out, (args, out)
    assert f"0+4|user: staging config; echo: {TOOL_TEXT}; pi: done" in run("view", "main").stdout
    assert quoted in run("view", "main", "--include-tools").stdout


_LISTING = [{"i": 0, "kind": "user", "text": "list the folder"}, {"i": 1, "kind": "tool", "text": "ls -la"},
            {"i": 2, "kind": "echo", "text": "total 1\ndrwxr-xr-x vault-secrets-2026\ntotal 1"},
            {"i": 3, "kind": "pi", "text": "done"}]


@pytest.mark.parametrize("before,after", [(" ", " "), ("  ", "\t"), ("\n", "\n")])
def test_the_mask_keeps_the_white_space_around_the_run_it_hides(before, after):
    """The mask hides the run quoted from the output, not the white space that separated it from the line's
    own words: ``ls printed [tool output hidden] ok``, the line breaks of a joined line kept. Before, a run
    found with the output's own spaces around it took them too (``ls printed[tool output hidden]ok``)."""
    line = f"user: list the folder; pi: ls printed{before}drwxr-xr-x vault-secrets-2026{after}ok"
    [shown] = hide_tools(lambda a, b: iter(_LISTING[a:b]), [(2, 0, line)])
    assert shown == f"user: list the folder; pi: ls printed{before}{TOOL_TEXT}{after}ok"


def test_a_masked_lines_bytes_are_the_bytes_shown_in_view_json_and_stats(run, home):
    """A line with a masked run (its spaces kept) counts the bytes it shows: ``view --json``'s ``bytes`` is
    its rendered line's (``id+n|text``), and ``view --stats`` sums what ``view`` prints."""
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    mem.save_config({"view": {"hi": 300, "lo": 50}})
    mem.append([{"kind": "user", "text": "list the folder " + LONG * 2}, _LISTING[1], _LISTING[2],
                {"kind": "pi", "text": "done " + LONG * 2}])
    Memory.open("main", home).write_nodes([(0, 0, "user: list the folder " + "x" * 250, {}),
                                           (0, 3, "pi: done " + "y" * 250, {}),
                                           (2, 0, "user: list the folder; pi: ls printed drwxr-xr-x vault-secrets-2026 ok",
                                            {"model": "x"})])
    assert run("view", "main").stdout == f"0+4|user: list the folder; pi: ls printed {TOOL_TEXT} ok\n"
    rows = [orjson.loads(row) for row in run("view", "main", "--json").stdout.splitlines()]
    assert [row["bytes"] for row in rows] == [len(f"{row['label']}|{row['text']}".encode()) for row in rows]
    [stats] = [orjson.loads(row) for row in run("view", "main", "--stats", "--json").stdout.splitlines()]
    assert stats["bytes"] == sum(row["bytes"] + 1 for row in rows) == len(run("view", "main").stdout.encode())
    # the texts an older pimem kept in lines.json (the white space taken) are worked out again
    saved = orjson.loads((home / "main" / "lines.json").read_bytes())
    line, masked = saved["lines"]["0+4"]
    assert masked == f"user: list the folder; pi: ls printed {TOOL_TEXT} ok"
    saved["lines"]["0+4"] = [line, masked.replace(f" {TOOL_TEXT} ", TOOL_TEXT)]
    (home / "main" / "lines.json").write_bytes(orjson.dumps({**saved, "version": 8}))
    assert run("view", "main").stdout == f"0+4|user: list the folder; pi: ls printed {TOOL_TEXT} ok\n"


def _full_width(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


OUTPUT = 'SECRETFILE32 contents: root-password is "swordfish32"'


@pytest.mark.parametrize("quoted", [
    OUTPUT.upper(),  # in capitals
    _full_width(OUTPUT),  # in full-width letters
    "\u200b".join(OUTPUT),  # a zero-width space between every two characters
    OUTPUT.replace(" ", "\u00ad "),  # soft hyphens
    OUTPUT.replace('"swordfish32"', "\u201cswordfish32\u201d").replace("-", "\u2011"),  # curly quotes, a hyphen
])
def test_a_summary_quoting_tool_output_in_another_case_width_or_with_invisible_characters_is_masked(run, home, quoted):
    """What a model writes of an output in capitals, full width or with invisible characters in it is the
    output all the same: the mask compares folded text (NFKC, case folded, invisible characters left out)."""
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    mem.save_config({"view": {"hi": 300, "lo": 50}})
    mem.append([{"kind": "user", "text": "what is in the SECRET FILE? " + LONG * 2},
                {"kind": "tool", "text": "cat /root/SECRETFILE32", "meta": {"command": "cat /root/SECRETFILE32"}},
                {"kind": "echo", "text": OUTPUT},
                {"kind": "pi", "text": "I read it for you. " + LONG * 2}])
    Memory.open("main", home).write_nodes([(0, 0, "user: what is in the secret file? " + "x" * 250, {}),
                                           (0, 3, "pi: I read it for you. " + "y" * 250, {}),
                                           (2, 0, f"user: what is in the secret file?; echo: {quoted}; pi: read it", {"model": "x"})])
    assert run("view", "main").stdout == f"0+4|user: what is in the secret file?; echo: {TOOL_TEXT}; pi: read it\n"
    assert plain(quoted) in run("view", "main", "--include-tools").stdout  # (a view line shows no invisible characters)


_WRITE = "Write(" + orjson.dumps({"file_path": "/app/.env", "content": 'PG_PASSWORD="Zx9-quartz"\nPG_USER=admin\n'}).decode() + ")"


@pytest.mark.parametrize("call,output,quote,kept", [
    # an output that printed a token over two short lines, quoted whole (no space where the line broke)
    ("vault read token", "token:\n  9f8e7d6c5b4a\n  3f2e1d0c9b8a\nexpires in 3600 s", "token 9f8e7d6c5b4a3f2e1d0c9b8a", "token "),
    # a call's arguments are logged as JSON, every line break and quote of the file it wrote escaped; a model
    # quotes the file as it reads, and that is the call's text all the same
    (_WRITE, "File created successfully", 'PG_PASSWORD="Zx9-quartz" PG_USER=admin', ""),
    # an output in colour holds escape sequences between its words; a model quotes what a terminal shows
    ("env | grep DATABASE", "\x1b[1mDATABASE_URL\x1b[0m=\x1b[32mpostgres://admin:Tr0ub4dor@db.internal:5432/prod\x1b[0m",
     "DATABASE_URL=postgres://admin:Tr0ub4dor@db.internal:5432/prod", ""),
])
def test_a_summary_quoting_tool_traffic_as_a_reader_sees_it_is_masked(call, output, quote, kept):
    msgs = [{"i": 0, "kind": "user", "text": "show me"}, {"i": 1, "kind": "tool", "text": call},
            {"i": 2, "kind": "echo", "text": output}, {"i": 3, "kind": "pi", "text": "there it is"}]
    line = f"user: show me; tool: {quote}; pi: done"
    assert hide_tools(lambda a, b: iter(msgs[a:b]), [(2, 0, line)]) == [f"user: show me; tool: {kept}{TOOL_TEXT}; pi: done"]


def test_the_mask_folds_decomposed_accents_and_spares_the_users_words_in_another_case():
    """An output's ``é`` written apart (``e`` and a combining accent, as macOS names files) is the model's ``é``;
    words the user said are the user's in any case, whatever the output printed."""
    name = "Résumé-Brûlée-Crème-2026.pdf"
    msgs = [{"i": 0, "kind": "user", "text": "Please RENAME THE QUARTERLY REPORT for me"},
            {"i": 1, "kind": "tool", "text": "ls ~/Documents"},
            {"i": 2, "kind": "echo", "text": unicodedata.normalize("NFD", name) + "\nrename the quarterly report.txt"},
            {"i": 3, "kind": "pi", "text": "found it"}]
    line = f"user: please rename the quarterly report for me; echo: {name}"
    assert hide_tools(lambda a, b: iter(msgs[a:b]), [(2, 0, line)]) == [
        f"user: please rename the quarterly report for me; echo: {TOOL_TEXT}"]


def test_a_model_is_never_shown_another_span_s_tool_output_to_quote(run, home, tmp_path):
    """The compactor's context is the view as a reader without tools sees it: a summary can quote only its
    own span's tool traffic (which the read paths mask), never a result from before it that no mask of its
    span would catch."""
    quoter = tmp_path / "quoter.sh"  # a model that quotes any secret it is shown
    quoter.write_text("#!/bin/sh\nk=$(grep -o 'SECRETFILE32 contents: root password is [a-z0-9]*' | head -1)\n"
                      'echo "summary of work; earlier output: $k"\n')
    quoter.chmod(0o755)
    mem = Memory.at("main", home)
    mem.path.mkdir(parents=True)
    mem.save_config({"view": {"hi": 3000, "lo": 1500}, "cview": {"hi": 4000, "lo": 2000},
                     "compactor": {"provider": "command", "command": str(quoter)}})
    mem.append([{"kind": "user", "text": "what is in the secret file?"},
                {"kind": "tool", "text": "cat /root/SECRETFILE32", "meta": {"command": "cat /root/SECRETFILE32"}},
                {"kind": "echo", "text": SECRET},
                {"kind": "pi", "text": "I read it for you."}]
               + [{"kind": "user", "text": f"long message {k} " + LONG * 2} for k in range(12)])
    assert run("build-tree").exit_code == 0
    leaves = [Memory.open("main", home).tree.stored(0, i) for i in range(4, 16)]
    assert all(leaf == "summary of work; earlier output" for leaf in leaves), leaves  # shown no secret to quote
    for args in (("view", "main"), ("context", "main")):
        assert "swordfish32" not in run(*args).stdout, args
    assert run("view", "main", "--include-tools").stdout.count("swordfish32") == 1  # (the result itself, asked for)


def test_a_contractions_head_is_no_name():
    """``Don`` of ``Don't`` (``Can't``, ``They're``) is no name a line should carry; a possessive's is."""
    found = [u.text for u in extractive.units({"i": 0, "kind": "user", "text":
                                               "Don't worry, Caroline's painting with Melanie. Can’t wait! They're off."})]
    assert {"Caroline", "Melanie"} <= set(found), found
    assert not {"Don", "Can", "They"} & set(found), found


def test_files_named_alike_are_told_apart_and_counted_apart(home):
    """Two files whose 13-character names were one (``edited codemie-code… ×2`` for two files) are named apart, by
    the words that tell them apart, and ``×N`` counts one file's calls."""
    plugins = "src/agents/plugins/"
    edits = [plugins + "__tests__/codemie-code-reasoning.test.ts", plugins + "codemie-code.plugin.ts",
             plugins + "codemie-code.plugin.ts"]
    reads = [f"src/store/{name}-selector.ts" for name in ("user-list", "order-list", "cart", "session-state")]
    msgs = [{"kind": "user", "text": "set the compaction threshold to 90%"}]
    msgs += [{"kind": "tool", "text": f'edit({orjson.dumps({"path": p}).decode()})', "meta": {"tool": "edit"}} for p in edits]
    msgs += [{"kind": "tool", "text": f'read({orjson.dumps({"path": p}).decode()})', "meta": {"tool": "read"}} for p in reads]
    mem, _ = build(home, msgs)
    line = extractive.Digest(mem).merge(3, 0)
    assert "edited …reasoning…" in line and "edited …code.plugin… ×2" in line, line
    shown = re.findall(r"read ([^\s,;]+)", line)
    assert len(shown) == 4 == len(set(shown)) and "×" not in line.split("read ", 1)[1], line
    assert all(len(name.strip("…")) <= toolwork.TOOL_PIECE for name in shown)
    for name in shown:  # each names one of the files it read, and fits no other
        assert sum(name.strip("…") in p for p in reads) == 1, name


def test_a_call_and_its_results_are_said_together_or_not_at_all(home):
    """A result taken without its call said ``exit 1`` of nothing, though the call and its counts were in the span."""
    talk = [{"kind": "pi" if k % 2 else "user", "text": f"the {w} migration for tenant {k} keeps the ledger {w}2 index"}
            for k, w in enumerate(["orbit", "quasar", "nebula", "pulsar", "comet", "zenith"])]
    msgs = [{"kind": "tool", "text": 'bash({"command":"pytest -x tests"})', "meta": {"tool": "bash", "call_id": "t1"}},
            *talk[:3],
            {"kind": "echo", "text": "E   ConnectionError\n==== 4 failed, 12 passed in 1.2s ====",
             "meta": {"tool": "bash", "exit_code": 1, "call_id": "t1"}},
            *talk[3:]]
    mem, _ = build(home, msgs)
    for limit in range(40, 300, 4):
        digest = extractive.Digest(mem)
        digest.limit = limit
        line = digest.merge(3, 0)
        if "exit 1" in line:
            assert "ran pytest → exit 1" in line, line
    assert "ran pytest → exit 1, 4 failed" in extractive.Digest(mem).merge(3, 0)


@pytest.mark.parametrize("command, said", [
    ("sed -i 's/pool_size = 3/pool_size = 6/' src/db/pool.py", "edited db/pool.py"),
    ("sed -i.bak -e 's/a/b/' conf/app.toml", "edited conf/app.toml"),
    ("perl -pi -e 's/foo/bar/' lib/Foo.pm", "edited lib/Foo.pm"),
    ("perl -Ilib t/basic.t", "ran perl"),  # (-I names a library directory: the i in lib edits nothing)
    ("echo 'PORT=5433' | tee -a config/.env.local", "edited .env.local"),
    ("cat > notes.md <<'EOF'\nhello; world\nEOF", "edited notes.md"),
    ("pytest -x > log.txt", "ran pytest"),  # (its output went to a file: what ran is pytest)
    # reads through the shell: the first command of the first pipeline past set-up decides, when it writes no file
    ("sed -n '1,80p' src/db/pool.py", "read db/pool.py"),
    ("cd /repo && cat package.json", "read package.json"),
    ("nl -ba src/agents/plugin.ts | sed -n '90,108p'", "read plugin.ts"),
    ("head -n 40 app.py && tail -5 log.txt", "read app.py"),
    ("sed 's/a.py/b.py/' conf/app.toml", "read conf/app.toml"),  # (its script names no file)
    ("git show HEAD:app.py | sed -n '1,20p'", "ran git"),
    ("sed -n '1,20p' app.py > part.txt", "ran sed"),
    ("cat Makefile", "ran cat"),
])
def test_a_shell_command_that_edits_a_file_says_the_file(command, said):
    msg = {"kind": "tool", "text": f'bash({orjson.dumps({"command": command}).decode()})',
           "meta": {"tool": "bash", "command": command}}
    assert toolwork.summary(msg) == said


@pytest.mark.parametrize("command, said", [
    # any output into a file is a write: ``&>``, ``>&``, ``1>``, ``>|`` send a printer's output to it
    ("cat a.py &> out.txt", "edited out.txt"),
    ("cat a.py >& out.txt", "edited out.txt"),
    ("cat a.py 1> out.txt", "edited out.txt"),
    ("cat a.py >| b.py", "edited b.py"),
    ("cat a.py 2> err.txt", "ran cat"),  # (it read a.py and wrote err.txt)
    ("head -5 a.py | grep 'x' > out.txt", "ran head"),
    ("cat <<'EOF' > a.py\nx = 'y'\nEOF", "edited a.py"),
    ("sed -n 's/a/b/w out.txt' a.py", "edited out.txt"),  # (sed's w writes: its quoted script is one word)
    ("sed -n '1p;w x.txt' a.py", "edited x.txt"),
    # no file written: a stream copied (``2>&1``, ``>&2``) or thrown away
    ("cat a.py 2>&1 | head", "read a.py"),
    ("cat a.py >&2", "read a.py"),
    ("cat a.py > /dev/null 2>&1", "read a.py"),
    ("sed -n '/w/p' a.py", "read a.py"),
    ("cat \"a.py\" | grep 'x;y'", "read a.py"),
])
def test_a_shell_command_that_writes_a_file_never_says_it_read_one(command, said):
    """A command whose output or errors go to a file (``&>``, ``1>``, ``2>``, ``>|``, sed's ``w``) said ``read
    a.py``; a call's text without its meta (up to its first quote) said ``read a.py`` or ``ran cat`` too."""
    text = f'bash({orjson.dumps({"command": command}).decode()})'
    assert toolwork.summary({"kind": "tool", "text": text, "meta": {"tool": "bash", "command": command}}) == said
    assert toolwork.summary({"kind": "tool", "text": text}) == said


def test_codex_polls_of_a_running_command_say_the_command_and_how_it_ended(run, home, tmp_path):
    """Codex starts a long command, then polls its session with ``write_stdin``: the line said ``ran write_stdin ×2``;
    it says what ran (``npm``) and how the polls saw it end."""
    t = "2026-05-11T08:27:{:02d}.000Z".format
    item = lambda s, payload: {"timestamp": t(s), "type": "response_item", "payload": payload}  # noqa: E731
    poll = lambda s, n: [  # noqa: E731
        item(s, {"type": "function_call", "name": "write_stdin", "call_id": f"p{n}",
                 "arguments": orjson.dumps({"session_id": 83395, "chars": "", "yield_time_ms": 1000}).decode()}),
        item(s, {"type": "function_call_output", "call_id": f"p{n}", "output":
                 "Chunk ID: 1\nProcess exited with code 1\nOutput:\n Tests  4 failed | 12 passed\n 4 failed" if n == 1
                 else "Chunk ID: 1\nProcess running with session ID 83395\nOutput:\n"})]
    lines = [
        {"timestamp": t(0), "type": "session_meta", "payload": {"id": "cx-2", "timestamp": t(0), "cwd": "/repo"}},
        item(1, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run the reasoning tests"}]}),
        item(2, {"type": "function_call", "name": "exec_command", "call_id": "run1",
                 "arguments": orjson.dumps({"cmd": "npm test -- --run src/reasoning.test.ts"}).decode()}),
        item(3, {"type": "function_call_output", "call_id": "run1",
                 "output": "Chunk ID: 1\nProcess running with session ID 83395\nOutput:\n"}),
        *poll(4, 0), *poll(5, 1),
        item(8, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Four tests fail."}]}),
    ]
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    assert run("import", path, "--name", "cx").exit_code == 0
    mem = Memory.open("cx", home)
    line = extractive.Digest(mem).merge(3, 0)
    assert "write_stdin" not in line and "ran npm → exit 1, 4 failed" in line, line


def test_codex_polls_without_their_command_say_its_program_or_nothing(run, home, tmp_path):
    """Two commands run in parallel, each polled to its end: a span holding a poll and its result but not the
    command's call said ``write_stdin → exit 1, 51 test`` (npm's banner ``> app@0.0.51 test`` taken for a count);
    it says the program polled and how it ended, and a poll that ended well says nothing of its own."""
    t = "2026-05-11T08:27:{:02d}.000Z".format
    item = lambda s, payload: {"timestamp": t(s), "type": "response_item", "payload": payload}  # noqa: E731
    call = lambda s, name, n, args: item(s, {"type": "function_call", "name": name, "call_id": n,  # noqa: E731
                                             "arguments": orjson.dumps(args).decode()})
    out = lambda s, n, text: item(s, {"type": "function_call_output", "call_id": n, "output": text})  # noqa: E731
    lines = [
        {"timestamp": t(0), "type": "session_meta", "payload": {"id": "cx-4", "timestamp": t(0), "cwd": "/repo"}},
        item(1, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run the tests"}]}),
        item(2, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Running both."}]}),
        call(3, "exec_command", "run1", {"cmd": "npm test -- --run"}),
        call(4, "exec_command", "run2", {"cmd": "rg -n compaction src"}),
        out(5, "run1", "Chunk ID: 1\nProcess running with session ID 7\nOutput:\n"),
        out(6, "run2", "Chunk ID: 2\nProcess running with session ID 8\nOutput:\n"),
        call(7, "write_stdin", "p1", {"session_id": 7, "chars": ""}),
        out(8, "p1", "Chunk ID: 3\nProcess exited with code 1\nOutput:\n> app@0.0.51 test\n> vitest --run\n"
                     " Tests  1 failed | 50 passed (51)\n"),
        call(9, "write_stdin", "p2", {"session_id": 8, "chars": "\u0003"}),
        out(10, "p2", "Chunk ID: 4\nProcess exited with code 0\nOutput:\nsrc/a.ts:1:compaction\n"),
    ]
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    assert run("import", path, "--name", "cx").exit_code == 0
    mem = Memory.open("cx", home)
    assert extractive.Digest(mem).merge(1, 3).endswith(": npm → exit 1, 1 failed")  # messages 6 and 7
    assert "ran npm → exit 1, 1 failed" in extractive.Digest(mem).merge(3, 0)
    assert extractive.Digest(mem).merge(1, 4).split(": ", 1)[1] == "rg"  # (a span of tool work alone: what ran)
    for l, i in ((1, 3), (1, 4), (2, 1), (3, 0)):
        line = extractive.Digest(mem).merge(l, i)
        assert "write_stdin" not in line and "51 test" not in line and "exit 0" not in line, (l, i, line)


@pytest.mark.parametrize("output, said", [
    ("> @codemieai/code@0.0.51 test\n> vitest --run src/a.test.ts\n", "exit 1"),
    ("we need 51 test fixtures", "exit 1"),
    (" Test Files  1 failed (1)\n      Tests  1 failed | 15 skipped (16)\n", "exit 1, 1 failed"),
    ("Tests:       1 failed, 50 passed, 51 total", "exit 1, 1 failed"),
    ("=== 4 failed, 12 passed in 1.20s ===", "exit 1, 4 failed"),
    ("test result: FAILED. 50 passed; 1 failed; 0 ignored", "exit 1, 1 failed"),
    ("51 tests passed", "exit 1, 51 tests"),
    ("Ran 51 tests in 0.204s\n\nFAILED (failures=1)", "exit 1, 51 tests"),
])
def test_a_test_count_is_a_test_runners_count(output, said):
    msg = {"kind": "echo", "text": output, "meta": {"tool": "bash", "exit_code": 1}}
    assert toolwork.summary(msg) == said


def test_a_count_of_no_failures_is_not_what_failed():
    """cargo's summary of a run that ended well: ``51 passed; 0 failed`` said ``exit 0`` (``0 failed`` taken first)."""
    msg = {"kind": "echo", "text": "test result: ok. 51 passed; 0 failed; 0 ignored", "meta": {"exit_code": 0}}
    assert toolwork.summary(msg) == "51 passed"


def test_a_span_of_tool_results_alone_says_which_tools_ran(home):
    """Four file reads whose calls are in the span before: the line said ``echo`` alone."""
    mem, _ = build(home, [{"kind": "user", "text": "look at the selectors"}, {"kind": "pi", "text": "Reading them."}]
                   + [{"kind": "tool", "text": f'read({{"path":"src/s{k}.ts"}})', "meta": {"tool": "read", "call_id": f"r{k}"}}
                      for k in range(2)]
                   + [{"kind": "echo", "text": f"export const select{k} = (s) => s.items[{k}];",
                       "meta": {"tool": "read", "call_id": f"r{k}"}} for k in range(4)])
    line = extractive.Digest(mem).merge(2, 1)
    assert line.split(": ", 1)[1] == "read ×4", line


# (a message, and the facts in it that no piece may cut: each is in a piece whole, and no piece holds part of it)
WHOLE_FACTS = [
    ("Die Kosten stiegen, ein Anstieg von 46,7%.", ["46,7%"]),
    ("Le taux d'erreur est passé de 0,3 % à 2,75 % après la mise à jour.", ["0,3 % à 2,75 %"]),
    ("והחשבונית האחרונה הייתה ₪18,340 (עלייה של 46.7%).", ["₪18,340", "46.7%"]),
    ("השרת prod-db-2 נפל ב-14:05 בגלל שגיאה.", ["prod-db-2", "14:05"]),
    ("الخادم prod-db-2 توقف عن العمل.", ["prod-db-2"]),
    ("Бюджет — 45 000 ₽ в месяц, сейчас тратим 52 300 ₽, то есть на 16,2 % больше.", ["45 000 ₽", "52 300 ₽", "16,2 %"]),
    ("Температура в стойке −2…+3 °C от нормы.", ["−2…+3 °C"]),
    ("Ни в коем случае не удаляйте ветку release/2.4 до пятницы", ["release/2.4"]),
    ("Ticket OPS-4711 aktualisiert, Latin-1 reicht nicht.", ["OPS-4711", "Latin-1"]),
    ("It crashed at node:events:634:26 when cache.internal:6380 went away.", ["node:events:634:26", "cache.internal:6380"]),
    ("Das Log liegt unter %APPDATA%\\Acme\\logs\\install-2026-04-02.log jetzt.",
     ["%APPDATA%\\Acme\\logs\\install-2026-04-02.log"]),
    ("Das Update ist für den 15. April 2026 geplant, Wartungsfenster 22:00–02:00 Uhr.", ["15. April 2026", "22:00–02:00"]),
    ("Dann bleibt bis zum 15. April 2026 nur wenig Zeit.", ["15. April 2026"]),
    ("Faltan entre 3 y 5 días, la reunión es el 12 de mayo.", ["3 y 5", "12 de mayo"]),
    ("The meeting moved to May 12, 2026 at noon.", ["May 12, 2026"]),
    ("会議は14時05分11秒に終わりました。", ["14時05分11秒"]),
    ("Der Preis ist 2.400 € zzgl. MwSt., insgesamt 1.234.567,89 €, etwa 92,9 % davon.",
     ["2.400 €", "1.234.567,89 €", "92,9 %"]),
    ("El total es €1.299,00 o US$ 3.781,20 al cambio; faltan 3.482,50 €.", ["€1.299,00", "US$ 3.781,20", "3.482,50 €"]),
    ("The budget is €250,000 and ¥1,500,000 for Japan, CPU at 70%. Memory at 88.7% (+15,4 %) today.",
     ["€250,000", "¥1,500,000", "70%", "88.7%", "+15,4 %"]),
    ("予算は¥1,500,000で、承認済みです。", ["¥1,500,000"]),
    ("Le montant s'élevait à 18 340 euros le mois dernier.", ["18 340"]),
]


@pytest.mark.parametrize("text, facts", WHOLE_FACTS)
def test_a_number_or_identifier_is_one_fact_whole_and_no_piece_cuts_it(text, facts):
    """A decimal comma's number, a grouped one, a range, a date with its month, a number with its currency, unit or
    sign, words joined to a number by a hyphen, a slash or colons: each was cut (``ein Anstieg von 46``, ``₪18``,
    ``2 ואת`` of ``prod-db-2``, ``634:26``, ``2.400`` without its ``€``, ``entre 3 y``, ``den 15``, ``時05分``), or
    said twice in overlapping pieces (``46, 46,7%``). Each is a fact whole, and no piece of its message holds part of
    it."""
    for kind in ("pi", "user"):
        found = extractive.units({"i": 0, "kind": kind, "text": text})
        for fact in facts:
            at = text.index(fact)
            assert any(fact in u.text for u in found), (fact, [u.text for u in found])
            cut = [u.text for u in found if u.pos < at + len(fact) and at < u.pos + len(u.text)
                   and not (u.pos <= at and at + len(fact) <= u.pos + len(u.text))]
            assert not cut, (fact, cut)


def test_a_line_says_no_two_pieces_that_overlap_in_their_message():
    """Two pieces of one message that overlap in its text were both said (``ioredis gives, gives up after 20
    retries, 20 retries per request``, ``Dann bleibt bis zum, zum 15``): a line says the text they cover once, as
    written, in their place."""
    text = "ioredis gives up after 20 retries per request"
    unit = extractive.Unit
    pool = [unit(3.0, 0, text.index(piece), piece, "pi", 1, tuple(piece.split()))
            for piece in ("ioredis gives", "gives up after 20 retries", "20 retries per request")]
    assert extractive.compose(pool) == f"pi: {text}"
    assert extractive.compose(pool[:2] + [unit(3.0, 1, 23, "20 retries per request", "pi", 1, ("x",))]) == (
        "pi: ioredis gives up after 20 retries, 20 retries per request")  # (another message's: said as it is)
    pad = ("Both crashes are the worker losing Redis at cache.internal:6380 after the failover last night. {} The "
           "dashboards show the queue depth peaking at 18,000 jobs around 03:20, and draining by 04:05 once the "
           "replica caught up with the primary. Tomorrow we will review the alert thresholds for the queue depth, the "
           "replica lag and the disk usage on the storage nodes with the platform team.")
    for said in (text + " (maxRetriesPerRequest) and the supervisor restarts it within 3 seconds.",
                 "Dann bleibt bis zum 15. April 2026 nur wenig Zeit.", "Die Kosten stiegen, ein Anstieg von 46,7%.",
                 "Le montant s'élevait à 18 340 euros le mois dernier."):
        message = pad.format(said)
        line = extractive.leaf("pi", message)
        said = pieces(line.removeprefix("pi: "))
        for a, b in zip(said, said[1:]):  # (two pieces side by side in the line that overlap in the message)
            assert not any(a.endswith(b[:k]) and a + b[k:] in message for k in range(1, min(len(a), len(b)))
                           if b[:k].strip()), (a, b, line)


def test_a_users_sentence_holds_a_date_whole():
    """``den 15. April 2026``: a day's full stop ends no sentence (the ask was ``Das Update ist für den 15.``)."""
    line = extractive.leaf("user", "Das Update ist für den 15. April 2026 geplant. Bitte prüfe die Migration vorher.")
    assert "Das Update ist für den 15. April 2026 geplant." in line, line


_PAIRED_MARKS = ('"„“”‟', "«»", "‹›", "「」", "『』", "《》")


def _halves(piece: str) -> list[str]:
    """The families of quote marks ``piece`` holds an odd number of (a Hebrew abbreviation's ``"`` aside)."""
    piece = re.sub('(?<=[\u05d0-\u05ea])"(?=[\u05d0-\u05ea])', "", piece)
    return [family for family in _PAIRED_MARKS if sum(map(piece.count, family)) % 2]


def test_a_japanese_or_korean_number_is_read_with_whole_words():
    """A number in Japanese was read with the four characters before it and three after, whatever they were:
    ``終了コード137で異常終了`` gave ``了コード137で異常`` (half of 終了, half of 異常終了). A katakana word, a kanji run
    or a Hangul run written against it is taken whole or not at all, a hiragana particle not at all; a counter stays
    (``2回目``, ``3か月``); Chinese, which has no such runs, is read as before."""
    found = lambda text: {u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})}
    text = ("昨日の夜、バッチ処理のジョブが終了コード137で異常終了しました。データベースのポート5433に接続できません。"
            "ポート番号5432を使います。（2回目）3か月後にリリースします。")
    said = found(text)
    assert {"コード137", "ポート5433", "番号5432", "2回目", "3か月"} <= said, said
    script = lambda c: "k" if "\u30a1" <= c <= "\u30ff" else "h" if "\u3400" <= c <= "\u9fff" else c
    for u in extractive.units({"i": 0, "kind": "pi", "text": text}):  # (a number's piece: whole runs)
        before, after = text[u.pos - 1 : u.pos], text[u.pos + len(u.text) : u.pos + len(u.text) + 1]
        if re.search(r"\d", u.text) and before and after:
            assert script(before) not in ("k", "h") or script(before) != script(u.text[0]), u
            assert script(after) not in ("k", "h") or script(after) != script(u.text[-1]) or u.text[-1] in "月目", u
    assert not {"了コード137で異常", "了コード137", "コード137で異常", "のポート5433に"} & said, said
    assert "포트5433으로" in found("포트5433으로 연결하세요. 데이터베이스8개가 있습니다.")
    assert "重试6次" in found("重试6次之后也一样。")  # (Chinese as before)


def test_no_piece_holds_half_a_code_span_a_fences_language_or_half_a_call():
    """A phrase ran from inside one code span into the next (``n` reached `len`: a backtick of each); a code fence's
    language was a piece (``ts``, ``sql`` of "```ts"); a statement was cut at a call's bracket (``size = int``,
    ``const res = await fetch``). A piece holds both backticks of a code span or neither (the spans whole when they
    fit), a fence's line gives no piece, and a statement running into a call takes the call whole."""
    text = ("The loop stopped once `n` reached `len(b.items)` and then `b.items[b.n]` panicked.\nHere is the fix:\n"
            "```ts\nconst res = await fetch(url, { method: 'POST' });\n```\nand in Python: size = int(os.environ.get("
            "'SIZE', '10'))\n```sql\nSELECT id FROM orders WHERE status = 'pending';\n```\n")
    spans = [m.span() for m in re.finditer(r"`[^`\n]+`", text)]
    for kind in ("user", "pi"):
        units = extractive.units({"i": 0, "kind": kind, "text": text})
        found = {u.text for u in units}
        assert {"`n` reached `len(b.items)`", "size = int(os.environ.get('SIZE', '10'))",
                "const res = await fetch(url, { method: 'POST' })"} <= found, found
        assert not {"ts", "sql", "size = int", "const res = await fetch", "n` reached `len"} & found, found
        for u in units:
            assert text[u.pos : u.pos + len(u.text)] == u.text
            for s, e in spans:
                assert (u.pos <= s < u.pos + len(u.text)) == (u.pos <= e - 1 < u.pos + len(u.text)), (u.text, s)
        line = extractive.leaf(kind, text)
        assert not {"ts", "sql"} & set(pieces(line.split(": ", 1)[1])), line


def test_a_piece_holds_both_marks_of_a_pair_of_quotes_or_neither():
    """``„شركة النور“`` gave ``وصلنا عرض من „شركة``, ``„Low, line voltage“`` gave ``Der Techniker schrieb „Low``, and a
    Hebrew abbreviation's ASCII gershayim (``בע"מ``) was taken for a quote: ``שלום בע``. No piece holds half a pair of
    quotes of any kind (German, Polish, Hebrew, French, Chinese and Japanese ones too); ``בע"מ`` is one word."""
    texts = ["קיבלתי את ההצעה מ„שלום בע\"מ“ והם מבקשים תשלום מראש של 30 אחוז לפני תחילת העבודה.",
             "وصلنا عرض من „شركة النور“ للصيانة السنوية، والسعر أعلى بعشرين في المئة من العام الماضي.",
             "Der Techniker schrieb „Low, line voltage“ ins Protokoll und tauschte danach das Netzteil im Rack 4 aus.",
             "Il a écrit « tension basse sur la ligne » dans le rapport et il a changé l’alimentation du rack.",
             "鈴木部長から「明日の会議は中止です。資料は来週送ります」との伝言がありました。",
             "他说“数据库连接超时，请重启服务”然后就下线了。我们读了《运维手册》第三章。"]
    for text in texts:
        for kind in ("user", "pi"):
            found = [u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})]
            assert found and not [p for p in found if _halves(p)], found
            line = extractive.leaf(kind, f"{text} {LONG}")
            assert len(line.encode()) < len(f"{text} {LONG}".encode()) and not _halves(line), line
    found = {u.text for u in extractive.units({"i": 0, "kind": "pi", "text": texts[0]})}
    assert 'שלום בע"מ' in found and "שלום בע" not in found, found


def test_an_endpoint_is_one_fact_with_its_query_and_no_clause_ends_inside_it():
    """``/api/v1/orders?status=pending&page=2 的响应时间`` gave ``/api/v1/orders`` and a clause from its query on
    (``status=pending&page=2 的响应时间…``): a line joined them with a ``，`` the text does not hold there. A path's
    query is part of it, and its ``?`` ends no clause."""
    path = "/api/v1/orders?status=pending&page=2"
    text = f"接口 {path} 的响应时间从 200ms 上升到了 3 秒，需要排查数据库索引。"
    for kind in ("user", "pi"):
        units = extractive.units({"i": 0, "kind": kind, "text": text})
        assert path in {u.text for u in units}, units
        at = text.find(path)
        for u in units:  # (a piece holds the whole path or none of it)
            assert u.pos + len(u.text) <= at or u.pos >= at + len(path) or (
                u.pos <= at and u.pos + len(u.text) >= at + len(path)), u
    assert "/v2/users?id=5&sort=name" in {u.text for u in extractive.units(
        {"i": 0, "kind": "pi", "text": "Then GET /v2/users?id=5&sort=name. It 404s."})}


def test_a_key_and_its_value_are_one_piece_or_none():
    """A JSON object's keys were pieces without their values (``new_pricing``, ``beta_ui`` without the ``false`` asked
    about), and its values without their keys (``true``). A key with a literal, a number or a short string after it is
    one piece as written, quotes and all; a key whose value is a path is none (the path is its own fact)."""
    text = ('The flags file is {"new_pricing": false, "beta_ui": true, "rollout_pct": 25, "stage": "prod"}; set '
            'max_connections: 200, DEBUG=false and retryCount = 3. Logs go to {"path": "/var/log/app.log"}.')
    for kind in ("user", "pi"):
        found = {u.text for u in extractive.units({"i": 0, "kind": kind, "text": text})}
        assert {'"new_pricing": false', '"beta_ui": true', '"rollout_pct": 25', '"stage": "prod"',
                "max_connections: 200", "DEBUG=false", "retryCount = 3", "/var/log/app.log"} <= found, found
        assert not {"new_pricing", "beta_ui", "rollout_pct", "true", "false", "DEBUG", "retryCount", "path",
                    '"path"', "prod"} & found, found


def test_a_piece_is_widened_over_facts_no_further_than_it_may_be_long():
    """``12,50 € 12,50 € …`` (each number took the currency on both sides, so its facts overlap one another): each
    piece cutting one was widened over the whole chain, one fact a round, and 6 KB of such a row took over a minute.
    A piece wider than it may be is widened no more (it is left out all the same), and the units are as before."""
    chain = [(k * 10, k * 10 + 12) for k in range(3000)]
    lo, hi = extractive._widener(chain)(5, 15, 120)
    assert lo == 0 and 120 < hi < 150, (lo, hi)
    text = "Preise: " + "12,50 € " * 40 + "am Freitag."
    found = [u.text for u in extractive.units({"i": 0, "kind": "pi", "text": text})]
    assert "12,50 €" in found and all(len(piece) <= 120 for piece in found), found
