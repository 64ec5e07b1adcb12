"""Settings saved from Python and by ``pimem model``: what a None means in the changes."""

from __future__ import annotations

import orjson


def test_a_none_saved_removes_the_setting_so_the_home_s_or_the_default_applies_again(run, home):
    """``save_config({"key": None})`` takes the memory's own setting away (it read as null, which hid the home's
    cap and which most settings cannot be): the home's applies again, and the home's own None the default."""
    from pimem import Memory, config

    assert run("append", "m", "hello").exit_code == 0
    config.save_home(None, {"max_cost_per_day": 5, "context_wait": 2})
    mem = Memory.open("m")
    mem.save_config({"max_cost_per_day": 1, "view": {"hi": 200_000, "lo": 150_000}, "context_wait": 3})
    assert (mem.config["max_cost_per_day"], mem.config["context_wait"]) == (1, 3)

    mem.save_config({"max_cost_per_day": None, "view": {"lo": None}, "context_wait": None, "never_set": None})
    own = orjson.loads((mem.path / "config.json").read_bytes())
    assert own == {"view": {"hi": 200_000}}  # (no null left behind)
    assert (mem.config["max_cost_per_day"], mem.config["context_wait"]) == (5, 2)  # the home's
    assert mem.config["view"] == {"hi": 200_000, "lo": 64_000}  # (the default lo)
    assert run("status", "m").exit_code == 0

    config.save_home(None, {"max_cost_per_day": None})
    assert "max_cost_per_day" not in orjson.loads((home / "config.json").read_bytes())
    assert Memory.open("m").config["max_cost_per_day"] is None  # the default: no cap


def test_pimem_model_still_unsets_what_the_home_s_compactor_sets(run, home):
    """Within the compactor a null is kept: the knobs ``pimem model`` does not set are written null, so a memory's
    model takes no price or URL from the home's default model."""
    from pimem import Memory

    assert run("append", "m", "hello").exit_code == 0
    assert run("model", "--default", "openai/big", "--base-url", "http://example.com/v1", "--price-in", "3",
               "--price-out", "15").exit_code == 0
    assert run("model", "m", "ollama/llama3.2").exit_code == 0
    cfg = Memory.open("m").config["compactor"]
    assert cfg["model"] == "llama3.2" and cfg["price_in"] is None and cfg["price_out"] is None
    assert cfg["base_url"] != "http://example.com/v1"
    assert orjson.loads((home / "m" / "config.json").read_bytes())["compactor"]["price_in"] is None


def test_a_line_bytes_below_64_is_refused_in_one_line_and_64_is_taken(sh, home):
    """``line_bytes`` took 1 to 20, and every summary then read ``u`` or ``user: me``: below 64 a config.json is
    refused as a wrong setting (one line naming it and the range it takes, exit 2, nothing written), from Python
    too; 64 is taken, and so is 1 MiB. One past the range (1e12 was taken: a line of a terabyte is no summary)
    or no whole number (1e20 was refused as "cannot be 1e+20", no more said) is refused with the range too."""
    import pytest

    from conftest import snapshot
    from pimem import Memory
    from pimem.errors import BadInput

    assert sh("append", "m", "a message long enough to want a summary line of its own, on port 5433").returncode == 0
    path = home / "m" / "config.json"
    for value, said in ((1, 1), (20, 20), (63, 63), (1e20, "1e+20"), (2**63, 2**63), (1e12, "1000000000000.0"),
                        (2**20 + 1, 2**20 + 1), (64.5, 64.5),
                        (True, "true"), ("512", '"512"')):
        path.write_bytes(orjson.dumps({"line_bytes": value}))
        before = snapshot(home)
        for argv in (["build-tree", "m"], ["view", "m"], ["append", "m", "not logged"]):
            out = sh(*argv)
            assert out.returncode == 2, (argv, out.stderr)
            err = out.stderr.decode()  # (build-tree names the memory first)
            assert err.startswith("pimem: error: ") and err.count("\n") == 1, err
            assert err.endswith(f"{path}: line_bytes cannot be {said} (use a whole number of bytes from 64 to "
                                "1,048,576); fix it or remove it\n"), err
        assert snapshot(home) == before
    path.write_bytes(b"")
    with pytest.raises(BadInput, match="line_bytes cannot be 20 .use a whole number of bytes from 64 to 1,048,576."):
        Memory.open("m").save_config({"line_bytes": 20})
    assert path.read_bytes() == b""
    Memory.open("m").save_config({"line_bytes": 2**20})
    Memory.open("m").save_config({"line_bytes": 64})
    assert sh("build-tree", "m").returncode == 0
    assert all(len(line.split("|", 1)[1].encode()) <= 64 for line in sh("view", "m").stdout.decode().splitlines())


def test_a_number_setting_refused_says_what_it_takes(sh, home):
    """Every number setting refused in a config.json (1e20 said only "cannot be 1e+20") says the range it takes,
    as line_bytes does: one line, exit 2, nothing written; a view's hi or lo is named as such."""
    import pytest

    from conftest import snapshot
    from pimem import Memory
    from pimem.errors import BadInput

    assert sh("append", "m", "hello").returncode == 0
    path = home / "m" / "config.json"
    for setting, said in (
            ({"max_text_bytes": 1e20}, "max_text_bytes cannot be 1e+20 (use a whole number of bytes above 0)"),
            ({"max_text_bytes": 0}, "max_text_bytes cannot be 0 (use a whole number of bytes above 0)"),
            ({"view": {"hi": 1e20}}, "view.hi cannot be 1e+20 (use a whole number of bytes above 0, lo at most hi)"),
            ({"cview": {"hi": 100, "lo": 0}}, "cview.lo cannot be 0 (use a whole number of bytes above 0, lo at most hi)"),
            ({"view": 5}, "view cannot be 5 (use an object of hi and lo, in bytes)"),
            ({"context_wait": 1e20}, "context_wait cannot be 1e+20 (use seconds, from 0 to 31,622,400)"),
            ({"max_cost_per_day": -1}, "max_cost_per_day cannot be -1 (use dollars, from 0 to 1,000,000,000, or null)"),
            ({"compactor": {"timeout": 0}}, "compactor.timeout cannot be 0 (use seconds above 0, at most 31,622,400)"),
            ({"compactor": {"retry_seconds": 1e20}},
             "compactor.retry_seconds cannot be 1e+20 (use seconds, from 0 to 31,622,400)"),
            ({"compactor": {"max_tokens": 1e20}}, "compactor.max_tokens cannot be 1e+20 (use a whole number of tokens above 0)"),
            ({"compactor": {"workers": -1}},
             "compactor.workers cannot be -1 (use a whole number of worker processes, 0 or more)")):
        path.write_bytes(orjson.dumps(setting))
        before = snapshot(home)
        for argv in (["view", "m"], ["append", "m", "not logged"]):
            out = sh(*argv)
            err = out.stderr.decode()
            assert out.returncode == 2 and err.count("\n") == 1, (argv, err)
            assert err == f"pimem: error: {path}: {said}; fix it or remove it\n", err
        assert snapshot(home) == before
    path.write_bytes(b"")
    with pytest.raises(BadInput, match=r"max_text_bytes cannot be 1e\+20 \(use a whole number of bytes above 0\)"):
        Memory.open("m").save_config({"max_text_bytes": 1e20})
    assert path.read_bytes() == b""


def test_an_unknown_setting_is_refused_with_the_one_likely_meant_and_never_saved(sh, home):
    """A misspelled setting was taken silently (``max_cost_per_dya``: a watcher then had no cap at all), from
    Python too: every command reading the file refuses it as it refuses a wrong value (one line naming the file,
    the setting and the one likely meant, exit 2, nothing written), ``save_config`` writes nothing, and an API key
    is said to come from the environment (its value never repeated)."""
    import pytest

    from conftest import snapshot
    from pimem import Memory
    from pimem.errors import BadInput

    assert sh("append", "m", "hello").returncode == 0
    path = home / "m" / "config.json"
    for setting, said in (
            ({"max_cost_per_dya": 0.001}, "max_cost_per_dya is no setting (did you mean max_cost_per_day?)"),
            ({"compactor": {"provider": "extractive", "timout": 5}},
             "compactor.timout is no setting (did you mean compactor.timeout?)"),
            ({"view": {"hi": 2000, "low": 1000}}, "view.low is no setting (did you mean view.lo?)"),
            ({"zzz": 1}, "zzz is no setting (the settings are view, cview, line_bytes, max_text_bytes, compactor, "
                         "max_cost_per_day, context_wait)"),
            ({"api_key": "sk-test-Zx9Yw8Vu7Ts6"}, "api_key: pimem reads API keys only from the environment, from "
                                                  "the variable the compactor's key_env names (pimem model NAME "
                                                  "PROVIDER/MODEL --key-env VAR); remove it"),
            ({"compactor": {"provider": "openai", "model": "m", "api_key": "sk-test-Zx9Yw8Vu7Ts6"}},
             "compactor.api_key: pimem reads API keys only from the environment, from the variable the compactor's "
             "key_env names (pimem model NAME PROVIDER/MODEL --key-env VAR); remove it")):
        end = "" if said.endswith("remove it") else "; fix it or remove it"
        path.write_bytes(orjson.dumps(setting))
        before = snapshot(home)
        for argv in (["status", "m"], ["model", "m"], ["build-tree", "m"], ["watch", "m"],
                     ["append", "m", "not logged"]):
            out = sh(*argv)
            err = out.stderr.decode()
            assert out.returncode == 2 and err.count("\n") == 1, (argv, err)
            assert err.startswith("pimem: error: ") and err.endswith(f"{path}: {said}{end}\n"), (argv, err)
            assert "sk-test" not in err
        out = sh("fsck", "m")  # (fsck names it as a finding, with what every other command does at it)
        remedy = (end or "; remove it")[2:]
        body = said.removesuffix("; remove it")
        assert (out.returncode, out.stdout.decode()) == (5, f"m: settings: config.json: problem: {body}: the commands reading "
                                                            "its settings (view, context, search, append …) stop at it "
                                                            f"(exit 2); pimem leaves it ({remedy})\n")
        assert "sk-test" not in out.stdout.decode() + out.stderr.decode()
        assert snapshot(home) == before
        path.write_bytes(b"")
        with pytest.raises(BadInput, match=said.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
            Memory.open("m").save_config(setting)
        assert path.read_bytes() == b""
    home_path = home / "config.json"
    home_path.write_bytes(orjson.dumps({"context_wiat": 2}))
    out = sh("status", "m")
    assert out.returncode == 2 and out.stderr.decode().endswith(
        f"{home_path}: context_wiat is no setting (did you mean context_wait?); fix it or remove it\n")
    home_path.unlink()
    Memory.open("m").save_config({"max_cost_per_dya": None})  # (a None takes a setting away: one misspelled too)
    assert sh("status", "m").returncode == 0


def test_fsck_names_settings_every_command_refuses_as_a_finding_and_checks_the_other_memories(sh, home):
    """fsck stopped at a memory's ``config.json`` that was not JSON, or whose settings did not agree (exit 2, the
    other memories' findings and ``--json`` records never said, as if fsck had not run); one in the home stopped it
    at the first memory. Each is a finding (exit 5): the memory's said for it, the other memories checked; the
    home's once, for the home; nothing written."""
    from conftest import snapshot

    assert sh("append", "a", "hello").returncode == 0 and sh("append", "b", "hi").returncode == 0
    said = ": the commands reading its settings (view, context, search, append …) stop at it (exit 2); pimem leaves it (fix it or remove it)"
    for written, problem in ((b"{bad", "not valid JSON (unexpected character, expected a string key: line 1 column 2 (char 1))"),
                             (b"[1]", "not a JSON object"),
                             (b'{"view": {"hi": 2000, "lo": 3000}}', "view lo 3000 is above its hi 2000 (the default lo is 64000)")):
        (home / "a" / "config.json").write_bytes(written)
        before = snapshot(home)
        for argv in (["fsck"], ["fsck", "--repair"]):
            out = sh(*argv)
            assert (out.returncode, out.stdout.decode()) == (5, f"a: settings: config.json: problem: {problem}{said}\nb: ok (1 message)\n"), argv
            assert out.stderr.decode() == "pimem: error: 1 problem found\n"
        out = sh("fsck", "--json")
        records = [orjson.loads(line) for line in out.stdout.splitlines()]
        assert records == [{"memory": "a", "area": "settings", "where": "config.json", "problem": problem + said,
                            "fatal": True, "repair": None, "repaired": False}, {"memory": "b", "ok": True, "messages": 1}]
        assert snapshot(home) == before
    (home / "a" / "config.json").unlink()
    (home / "config.json").write_bytes(b'{"view": {"lo": "x"}}')
    out = sh("fsck")
    assert (out.returncode, out.stdout.decode()) == (5, f"{home}: settings: config.json: problem: view.lo cannot be \"x\" (use "
                                                        f"a whole number of bytes above 0, lo at most hi){said}\n")
    (home / "config.json").unlink()
    assert sh("fsck").returncode == 0


def test_fsck_json_says_a_memory_it_cannot_read_as_a_record(sh, home):
    """A memory fsck could not read at all (a link in the home, say) was said only on stderr: ``fsck --json | jq``
    saw the other memories and nothing of it. It is a record too, a problem, with the exit code it gives."""
    assert sh("append", "a", "hello").returncode == 0
    (home / "c").symlink_to(home / "a")
    out = sh("fsck", "--json")
    records = [orjson.loads(line) for line in out.stdout.splitlines()]
    said = f"{home / 'c'} is a symbolic link: pimem never follows links inside its home; remove it"
    assert records == [{"memory": "c", "area": "files", "where": None, "problem": said, "fatal": True, "repair": None,
                        "repaired": False, "exit": 5}, {"memory": "a", "ok": True, "messages": 1}]
    assert out.returncode == 5 and out.stderr.decode() == f"pimem: error: c: {said}\n"
