"""What the index holds of a text is its definition (``terms.runs_bag``: the terms of the runs of the folded
text) however ``terms.bag`` gets there: by whitespace-separated words and their pieces between
``terms.BREAKS``, each cached, the first time or the hundredth; and ``ranker.document`` with its cached
speaker-and-day terms is what it was written as."""

from __future__ import annotations

import sys
import unicodedata

from hypothesis import HealthCheck, given, settings, strategies as st

from pimem import ranker, terms

WHITESPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace())
TEXTS = [
    "",
    "   \n\t ",
    "The staging database refuses connections since this morning; can you check why port 5433 listens?",
    "don't stop: it's the deploys' fault (again!) — “quoted” ‘words’ «guillemets» and… ellipses…",
    "def apply_refund(order, amount):  # line 12\n    return round(amount * 3 / 100, 2)",
    "FAILED tests/test_orders.py::test_refund_roundtrip - AssertionError: assert 1234 == 56",
    "  File \"/srv/shop/orders/refund.py\", line 88, in apply_refund  src/auth/session.ts max_pool_size=3.14",
    "00001f40  7f 45 4c 46 02 01 01 00  00 00 00 00 00 00 00 00  |.ELF............|",
    "https://example.com/a/b?c=d&e=f#frag user@example.com C:\\Users\\me\\file.txt a-b_c.d/e:f",
    "预发环境的数据库从今天早上开始拒绝连接，帮我查一下原因。服务在 5433 端口监听；配置文件里的地址还是旧的！",
    "构建完成：1234 个模块，耗时 56 毫秒（缓存命中）【注意】「引号」『双引号』、顿号。",
    "我们在蓝鲸副本上" * 20 + "，" + "很长的句子" * 30,  # words and pieces past the cached length
    "日本語のテキスト、カタカナとひらがな。ภาษาไทยไม่มีช่องว่าง ພາສາລາວ ဗမာစာ ភាសាខ្មែរ 한국어 텍스트",
    "ＦＵＬＬＷＩＤＴＨ　ｌｅｔｔｅｒｓ　１２３：４５６．７８９／ａｂｃ－ｄｅｆ＿ｇｈｉ（ｘ）＜ｙ＞",
    "ΟΔΟΣ ΑΣ'Β ΣΑΣ^Α ΣΑΣ`Α ΑΣ·Β ΑΣ,Β ΑΣ!Β Σ's ΟΔΟΣ.",
    "café CAFÉ cafe\u0301 e\u0301,\u0301 ﬁnance ﬂoor ½ ² Å Ω K \u00a0nbsp\u2003em\u3000ideo",
    "<\u0338 =\u0338 >\u0338 (\u0338) ,\u0301 \u1100\u1161 \u1100,\u1161 a\u200db zero\u200bwidth",
    "x" * 200 + " " + "y" * 63 + "," + "y" * 63 + " " + "z" * 64 + "(" + "z" * 64,
    "I me my myself i I'm I've — the and of to in",
]


def reference_document(msg: dict) -> tuple[set[str], int]:
    """``ranker.document`` as first written, by the definition and nothing cached."""
    found, length = terms.runs_bag(ranker.ranked_text(msg))
    extra = ranker.speaker(msg) or ""
    if isinstance(msg.get("date"), str):
        extra += " " + ranker.date_words(msg["date"])
    return found | terms.runs_bag(extra)[0], length


def fresh_caches() -> None:
    for cache in (terms._words, terms._word_runs, terms._runs, ranker._extras):
        cache.clear()


def test_bag_is_its_definition_uncached_and_cached():
    fresh_caches()
    first = [terms.bag(text) for text in TEXTS]  # each word learned (from its pieces) as it comes
    assert first == [terms.runs_bag(text) for text in TEXTS]
    assert [terms.bag(text) for text in TEXTS] == first  # from the cache
    assert [terms.bag(text) for text in reversed(TEXTS)] == first[::-1]
    assert all(len(word) < terms._LONG for word in terms._words)  # long words and pieces are not kept
    assert terms.bag(TEXTS[2] + " " + TEXTS[9])[1] == first[2][1] + first[9][1]


def test_bag_counts_repeated_words_and_words_of_several_runs():
    assert terms.bag("ab,cd ab,cd ab,cd") == ({"ab", "cd"}, 6)
    assert terms.bag("(),; —— !!") == (set(), 0)
    assert terms.bag("f(x, y) f(x, y)") == terms.runs_bag("f(x, y) f(x, y)")


def test_documents_are_what_they_were_written_as():
    fresh_caches()
    speakers = [None, "Caroline", "ci-bot", "王小明", "Ünïcode Σ"]
    dates = ["2023-05-08T13:56:00+00:00", "2023-05-08T23:59:00-07:00", "2026-10-08T09:30:00+08:00", "junk",
             "2023-02-30T00:00:00+00:00", None, 5]
    msgs = []
    for k, text in enumerate(TEXTS * 3):
        msg = {"kind": ("user", "pi", "tool", "echo")[k % 4], "text": text * (1 + (k % 4 == 3) * 200)}
        if dates[k % len(dates)] is not None:
            msg["date"] = dates[k % len(dates)]
        if speakers[k % len(speakers)] is not None:
            msg["meta"] = {("speaker", "author", "name")[k % 3]: speakers[k % len(speakers)]}
        msgs.append(msg)
    expected = [reference_document(msg) for msg in msgs]
    assert [ranker.document(msg) for msg in msgs] == expected
    assert [ranker.document(msg) for msg in msgs] == expected  # cached words, speakers and days


def interacting() -> list[str]:
    """Every character NFKC or lowercasing could join to a neighbour: combining or not its own NFKC form, part
    of a decomposition, a Hangul jamo, or a letter whose lowercase depends on its neighbours (sigma)."""
    out = set("\u03a3\u03c3\u03c2Aa")
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if 0xD800 <= code < 0xE000:
            continue
        decomposition = unicodedata.decomposition(char)
        if decomposition or unicodedata.combining(char) or unicodedata.normalize("NFKC", char) != char:
            out.add(char)
            out.update(chr(int(part, 16)) for part in decomposition.split() if not part.startswith("<"))
    out.update(map(chr, range(0x1100, 0x1200)))
    return sorted(out)


def test_whitespace_and_breaks_are_safe_places_to_cut():
    """A text's runs are its words' runs and a word's its pieces' (what ``bag`` relies on): no break nor
    whitespace turns into a run character, and none changes what its neighbours fold to."""
    runs = lambda text: terms._RUN.findall(terms.fold(text))  # noqa: E731
    for cut in terms.BREAKS + WHITESPACE:
        assert not runs(cut), cut
    for y in interacting():
        for cut in terms.BREAKS + WHITESPACE:
            for text in (y + cut + y, "A" + y + cut + y + "b"):
                assert runs(text) == runs(text.replace(cut, " ")), (cut, y)


ALPHABET = (terms.BREAKS + WHITESPACE + "aAbBzZ019_./:-'^`·‧…Σσς\u0301\u0338\u1100\u1161\u11a8<=>"
            "蓝鲸数据库テキストภาษาไทย한ＡＢ１：．／－＿ﬁ½é\u00a0\u3000")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(ALPHABET, max_size=80), min_size=1, max_size=6))
def test_bag_is_its_definition_on_any_text(texts):
    for text in texts:  # (the cache fills as it goes: later texts meet words learned from earlier ones)
        assert terms.bag(text) == terms.runs_bag(text), repr(text)
