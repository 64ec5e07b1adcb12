"""`pimem map`: the panorama fits any width (East Asian wide characters count two cells) and shows the view."""

import unicodedata
from datetime import date

import pytest

from pimem import panorama
from pimem.panorama import Facts, Span


def cells(line: str) -> int:
    """Display width, measured independently of the code under test."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 0 if unicodedata.combining(ch) else 1 for ch in line)


CJK = "部署讨论：staging 数据库端口是 5433，用户要求保持原样，不要动生产库。"


def facts() -> Facts:
    spans = [
        Span(0, 8, CJK, 120, "2026-10-01", summary=True),
        Span(8, 4, "caching strategy agreed 缓存策略", 80, "2026-10-03", summary=True),
        Span(12, 2, "short", 30, "2026-10-05", summary=True),
        Span(14, 1, "好的，端口是 5433。", 30, "2026-10-08", kind="pi"),
        Span(15, 1, "cat .env", 20, "2026-10-08", kind="tool"),
        Span(16, 1, "记住：不要动生产库", 30, "2026-10-08", kind="user"),
    ]
    return Facts("main", 17, "2026-10-01T09:00:00+08:00", date(2026, 10, 8), 620, spans)


def test_exact_picture_at_40_columns():
    assert panorama.to_text(panorama.rows(facts(), 40)).splitlines() == [
        "main · 17 msgs · 10-01 · day 8",
        "said  620 B ████████████████████████████",
        "reads 310 B ▒▒▒▒▒▒▒▒▒▒████",
        "            ▒ summaries  █ verbatim",
        "",
        "▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▄▄▄▄▄▄▄▄▄▄▆▆▆▆███████",
        "████████████████████████████████████████",
        "",
        "── 2026-10-01 Thu ──────────────────────",
        " 0+8 8 msgs 部署讨论：staging 数据库端…",
        "── 2026-10-03 Sat ──────────────────────",
        " 8+4 4 msgs caching strategy agreed 缓…",
        "── 2026-10-05 Mon ──────────────────────",
        "12+2 2 msgs short",
        "── 2026-10-08 Thu ──────────────────────",
        "14+1 pi     好的，端口是 5433。",
        "16+1 you    记住：不要动生产库",
    ]


@pytest.mark.parametrize("width", [40, 41, 57, 80, 99, 120, 163, 200])
def test_no_line_exceeds_the_width(width):
    lines = panorama.to_text(panorama.rows(facts(), width, include_tools=True)).splitlines()
    assert max(cells(l) for l in lines) <= width
    assert cells(lines[5]) == cells(lines[6]) == width  # the timeline spans the whole width
    assert "cat .env" in "\n".join(lines)


@pytest.fixture
def chat(run):
    run("append", "main", "--date", "2026-10-06T21:00:00+08:00", CJK * 3)
    run("append", "main", "-k", "pi", "--date", "2026-10-06T21:01:00+08:00", "好的，我记住了：端口 5433，不动生产库。")
    run("append", "main", "-k", "tool", "cat .env")
    run("append", "main", "deploy it today " * 40)


@pytest.mark.parametrize("width", [40, 53, 80, 120, 200])
def test_map_command_fits_every_width(run, chat, width):
    out = run("map", "main", "--width", width)
    assert out.exit_code == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("main · 4 ")
    assert max(cells(l) for l in lines) <= width
    assert any(l.startswith("── 2026-10-06 Tue ─") for l in lines)
    assert any(l.startswith("── 2026-10-08 Thu ─") for l in lines)
    assert "\x1b[" not in out.stdout  # colour only on a terminal
    assert "cat .env" not in out.stdout  # tool calls only with --include-tools
    assert "cat .env" in run("map", "main", "--width", width, "--include-tools").stdout


def test_map_writes_the_same_picture_as_svg(run, chat, tmp_path):
    path = tmp_path / "main.svg"
    out = run("map", "main", "--width", 60, "--svg", path)
    assert out.exit_code == 0
    svg = path.read_text()
    svg = svg.replace("&#160;", " ")
    assert svg.startswith("<svg") and "pimem map main" in svg
    assert "好的，我记住了" in svg


def test_an_svg_that_cannot_be_written_ends_the_map_before_it_prints(run, chat, tmp_path):
    out = run("map", "main", "--svg", tmp_path / "no-such-dir" / "main.svg")
    assert out.exit_code == 7 and out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
    for directory, said in (("", "not an empty name"), (str(tmp_path), f"and {str(tmp_path)!r} is a directory")):
        out = run("map", "main", "--svg", directory)  # (typer made '' the working directory, '.': said as that)
        assert (out.exit_code, out.stdout, out.stderr) == (2, "", f"pimem: error: --svg wants a file to write, {said}\n")


def test_an_svg_the_disk_refuses_is_named_in_the_line(run, chat):
    out = run("map", "main", "--svg", "/dev/full")  # (the write's own error named no file: 'No space left on device')
    assert (out.exit_code, out.stdout, out.stderr) == (7, "", "pimem: error: No space left on device: /dev/full\n")


def test_map_refuses_unknown_memories_and_tiny_widths(run, home, chat):
    assert run("map", "nope").exit_code == 3
    assert run("map", "main", "--width", 5).exit_code == 2


def test_a_terminal_width_from_columns_is_held_to_the_widest_width_taken(run, chat, monkeypatch):
    """``$COLUMNS`` past what ``--width`` takes (100,000) was drawn at that width: ``COLUMNS=100000000`` built
    lines of 100 million cells, until the system killed the process."""
    monkeypatch.setenv("COLUMNS", str(panorama.MAX_WIDTH + 50_000))
    out = run("map", "main")
    assert out.exit_code == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(cells(l) for l in lines) == panorama.MAX_WIDTH == 100_000
    assert out.stdout == run("map", "main", "--width", panorama.MAX_WIDTH).stdout


def test_colour_on_a_terminal(run, chat, monkeypatch):
    from pimem import env

    monkeypatch.setattr(env, "stdout_is_tty", lambda: True)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert "\x1b[32m" in run("map", "main", "--width", 80).stdout


def test_folded_view_and_hidden_tool_traffic(run, home):
    home.mkdir()
    (home / "config.json").write_text('{"view": {"hi": 200, "lo": 100}}')  # small budgets: old lines fold
    for k in range(8):
        run("append", "main", "--date", f"2026-10-07T1{k}:00:00+08:00", f"filler {k} 天气不错")
    run("append", "main", "-k", "tool", "cat .env # sk-SECRET")
    run("append", "main", "-k", "pi", "done")
    lines = run("map", "main", "--width", 60).stdout.splitlines()
    assert lines[0] == "main · 10 messages since 2026-10-07 · day 2"
    assert lines[5:7] == ["▂" * 48 + "▆" * 12, "█" * 60]  # 0+8: 10 eighths high; 8+2: 14 eighths
    assert lines[8:] == [
        "── 2026-10-07 Wed ──────────────────────────────────────────",
        "0+8 8 msgs user: filler 0 天气不错 user: filler 1 天气不错…",
        "── 2026-10-08 Thu ──────────────────────────────────────────",
        "8+2 2 msgs tool: ran cat (hidden) pi: done",  # what ran, not what it read
    ]
    assert "sk-SECRET" not in "\n".join(lines)
    assert "sk-SECRET" in run("map", "main", "--width", 60, "--include-tools").stdout


def test_the_title_counts_days_from_the_earliest_message_not_message_0(run, home):
    # (an older session imported after a newer one: message 0 is not the earliest)
    run("append", "main", "--date", "2026-10-07T10:00:00+08:00", "the newer session")
    run("append", "main", "--date", "2026-10-01T10:00:00+08:00", "the older session, imported after it")
    assert run("map", "main", "--width", 60).stdout.splitlines()[0] == "main · 2 messages since 2026-10-01 · day 8"


def test_lines_are_grouped_by_the_readers_day_not_the_recorded_one(run, home):
    """Dates recorded in UTC were grouped by their UTC day: at UTC+14 10:00Z is the next day already."""
    import subprocess

    from conftest import pimem_cmd, subprocess_env

    run("append", "main", "--date", "2026-12-05T10:00:00Z", "midnight, the sixth begins")
    run("append", "main", "--date", "2026-12-06T09:59:59Z", "late on the sixth")
    run("append", "main", "--date", "2026-12-06T10:00:00Z", "first thing on the seventh")
    env = subprocess_env(TZ="Pacific/Kiritimati", PIMEM_NOW="2026-12-07T12:00:00+14:00")
    out = subprocess.run(pimem_cmd("map", "main", "--width", 60), capture_output=True, text=True, env=env, timeout=60).stdout
    lines = out.splitlines()
    assert lines[0] == "main · 3 messages since 2026-12-06 · day 2"
    assert [l.split()[1] for l in lines if l.startswith("──")] == ["2026-12-06", "2026-12-07"]
    assert lines[-1].endswith("first thing on the seventh") and "late on the sixth" in lines[-3] and "the sixth begins" in lines[-4]


def test_days_in_date_order_whatever_order_they_were_logged_in():
    """A message's id is its place in the log, not in time: an older day logged later was drawn last, a
    day logged in two stretches was drawn twice. Days go in date order; a day's lines keep log order."""
    spans = [
        Span(0, 1, "today, first", 10, "2026-12-06", kind="user"),
        Span(1, 1, "an old session", 10, "2026-10-08", kind="user"),
        Span(2, 1, "today, later", 10, "2026-12-06", kind="pi"),
        Span(3, 1, "older still", 10, "2026-10-01", kind="user"),
    ]
    lines = panorama.to_text(panorama.rows(Facts("main", 4, "2026-10-01T09:00:00+08:00", date(2026, 12, 6), 40, spans), 40)).splitlines()
    tail = lines[lines.index("") + 4 :]
    assert tail == [
        "── 2026-10-01 Thu ──────────────────────",
        "3+1 you    older still",
        "── 2026-10-08 Thu ──────────────────────",
        "1+1 you    an old session",
        "── 2026-12-06 Sun ──────────────────────",
        "0+1 you    today, first",
        "2+1 pi     today, later",
    ]


def test_map_puts_an_appended_older_date_above_today(run, home):
    run("append", "main", "--date", "2026-12-06T09:00:00+08:00", "this morning")
    run("append", "main", "--date", "2026-12-06T09:05:00+08:00", "a minute later")
    run("append", "main", "--date", "2026-10-08T09:30:00+08:00", "hello")
    lines = run("map", "main", "--width", 60).stdout.splitlines()
    heads = [l.split()[1] for l in lines if l.startswith("──")]
    assert heads == ["2026-10-08", "2026-12-06"]
    body = lines[lines.index(next(l for l in lines if l.startswith("──"))) :]
    assert [l.split(None, 2)[2] for l in body if not l.startswith("──")] == ["hello", "this morning", "a minute later"]


def test_a_summarised_message_says_its_speaker_once():
    """A long message's line is a summary opening with its kind (``pi: Implemented, …``); the kind column says
    it already, so the row shows it once (a named speaker stays)."""
    spans = [Span(0, 1, "pi: Implemented, retry budget", 40, "2026-10-08", kind="pi", summary=True),
             Span(1, 1, "user Caroline: pottery class, 3 kids", 40, "2026-10-08", kind="user", summary=True)]
    lines = panorama.to_text(panorama.rows(Facts("m", 2, "2026-10-08T09:00:00+08:00", date(2026, 10, 8), 80,
                                                 spans), 60)).splitlines()
    assert lines[-2:] == ["0+1 pi     Implemented, retry budget", "1+1 you    Caroline: pottery class, 3 kids"]


def test_a_message_another_process_logs_while_the_map_reads_waits_for_the_next_map(run, sh, monkeypatch):
    """map reads the log, then the view: a message logged in between (an agent appending every turn) was in the
    view but not among the messages read, and map failed with an IndexError."""
    from pimem import Memory

    run("append", "main", "one")
    run("append", "main", "two")
    messages = Memory.messages

    def then_another_process_appends(self, *args, **kwargs):
        yield from messages(self, *args, **kwargs)
        assert sh("append", "main", "-k", "pi", "three, logged between the map's two reads").returncode == 0

    monkeypatch.setattr(Memory, "messages", then_another_process_appends)
    out = run("map", "main", "--width", 60)
    assert out.exit_code == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("main · 2 messages")
    monkeypatch.setattr(Memory, "messages", messages)
    assert run("map", "main", "--width", 60).stdout.splitlines()[0].startswith("main · 3 messages")
