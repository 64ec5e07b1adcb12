"""The injected environment: tests build one with overrides instead of patching globals, and everything
(the lock timeout, the streams and their terminal flags, the clock, the home) is read from it when asked."""

from __future__ import annotations

import io
import json
import os
import re
from datetime import datetime, timezone

import pytest

from pimem import Memory, env, index, output
from pimem.errors import Busy


def test_an_environment_overrides_home_clock_streams_flags_and_lock_timeout(tmp_path):
    err = io.StringIO()
    moment = datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc)
    with env.using(env.Environment(home=tmp_path, now=lambda: moment, stderr=err, stderr_isatty=True,
                                   stdout_isatty=False, lock_timeout=0.25)):
        assert env.home() == tmp_path and env.home("/elsewhere").as_posix() == "/elsewhere"
        assert env.now() == moment
        assert env.stderr_is_tty() and not env.stdout_is_tty()
        assert env.lock_timeout() == 0.25
        output.warn("careful")
        assert index.stderr_progress("m") is not None  # a terminal: progress is shown, on the injected stream
    assert err.getvalue() == "pimem: warning: careful\n"
    assert index.stderr_progress("m") is None  # pytest's captured stderr is no terminal


def test_the_lock_timeout_is_read_when_a_lock_is_taken_not_at_import(home, monkeypatch):
    mem = Memory.at("m")
    mem.append([{"kind": "user", "text": "hi"}])
    monkeypatch.setenv("PIMEM_LOCK_TIMEOUT", "0.2")  # after pimem.memory was imported
    assert env.lock_timeout() == 0.2
    with mem.lock():
        with pytest.raises(Busy):  # another Memory (another descriptor) waits 0.2 s, not 60
            Memory.open("m").append([{"kind": "user", "text": "blocked"}])
    with env.using(env.Environment(lock_timeout=0.1)), mem.lock():
        with pytest.raises(Busy):
            Memory.open("m").append([{"kind": "user", "text": "blocked"}])
    assert [m["text"] for m in Memory.open("m").messages()] == ["hi"]


@pytest.mark.parametrize("given", ["", "relative/dir"])
def test_an_empty_or_relative_home_variable_falls_back_to_the_accounts_home(monkeypatch, tmp_path, given):
    import pwd
    import types

    from pimem.errors import BadInput

    for var in ("PIMEM_HOME", "PI_MEM_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", given)
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: types.SimpleNamespace(pw_dir=str(tmp_path)))
    assert env.home() == tmp_path / ".pi" / "memory"  # not /.pi/memory, nor one under the working directory
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    assert env.home() == tmp_path / "me" / ".pi" / "memory"

    def unknown(uid):
        raise KeyError(uid)

    monkeypatch.setenv("HOME", given)
    monkeypatch.setattr(pwd, "getpwuid", unknown)
    with pytest.raises(BadInput, match="set PIMEM_HOME"):
        env.home()


@pytest.mark.parametrize("value", ["abc", "inf", "1e400", "-1", "nan", " ", "1e-7"])
def test_a_bad_lock_timeout_in_the_environment_is_one_line_and_creates_nothing(sh, home, value):
    out = sh("append", "fresh", "x", PIMEM_LOCK_TIMEOUT=value)
    assert out.returncode == 2
    assert out.stderr == (f"pimem: error: bad $PIMEM_LOCK_TIMEOUT {value!r}: use a number from 0 to 31,622,400, in plain "
                          "digits (0.0000001, not 1e-7)\n").encode()
    assert not home.exists()  # no empty memory left behind
    assert sh("append", "fresh", "x", PIMEM_LOCK_TIMEOUT="0.5").returncode == 0  # (as --timeout takes it)


@pytest.mark.parametrize("args", [["list"], ["append", "notes", "hi"], ["view", "notes"], ["build-tree"], ["status"],
                                  ["date", "5"], ["zoom", "5"], ["since", "3d"]])
def test_a_home_that_is_a_file_is_one_line_and_the_file_is_kept(sh, tmp_path, args):
    """$PIMEM_HOME naming a file (a typo, a path mixed up): ``list`` said there were no memories yet (exit 1),
    ``build-tree`` built nothing and exited 0, the others said 'Not a directory: FILE/notes'; ``date 5`` took
    its lone 5 for a memory's name (the home could not say there was none) and asked for a message number."""
    home = tmp_path / "memory"
    home.write_bytes(b"not a home\n")
    out = sh(*args, PIMEM_HOME=home)
    assert out.returncode == 7 and out.stdout == b""
    assert out.stderr == f"pimem: error: the home {home} is not a directory: set --home or $PIMEM_HOME to one\n".encode()
    assert home.read_bytes() == b"not a home\n"


def test_a_home_that_is_a_file_reaches_a_library_caller_as_the_oserror_it_is(tmp_path):
    """It raised a bare ``PimemError``, which a caller's ``except OSError`` missed, where a path through a file
    deeper down is a ``SystemRefused`` that is a ``NotADirectoryError``: the same here, its line kept."""
    from pimem import Memory
    from pimem.errors import SystemRefused

    home = tmp_path / "memory"
    home.write_bytes(b"not a home\n")
    with pytest.raises(NotADirectoryError) as caught:
        Memory.at("m", home=home).append([{"kind": "user", "text": "x"}])
    assert isinstance(caught.value, SystemRefused) and (caught.value.errno, caught.value.code) == (20, 7)
    assert str(caught.value) == f"the home {home} is not a directory: set --home or $PIMEM_HOME to one"


def test_a_path_through_a_file_names_the_file_in_the_way(sh, tmp_path):
    """'Not a directory: FILE/sub/config.json' named the path asked for, which does not exist, not the file that
    stands where a directory goes: it is named too, from the CLI and the library alike; a path that is itself the
    file in the way (a file where main/ goes) is said as before."""
    from pimem import Memory
    from pimem.errors import SystemRefused

    (tmp_path / "file").write_text("x")
    out = sh("append", "notes", "hi", PIMEM_HOME=tmp_path / "file" / "sub")
    assert (out.returncode, out.stderr.decode()) == (7, f"pimem: error: Not a directory: {tmp_path / 'file' / 'sub' / 'config.json'} "
                                                        f"({tmp_path / 'file'} is a file)\n")
    with pytest.raises(SystemRefused, match=r"\(.*/file is a file\)$"):
        Memory.at("m", home=tmp_path / "file" / "a" / "b").append("hi")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(NotADirectoryError, match=r"\(.*/pipe is no directory\)$"):
        Memory.at("m", home=tmp_path / "pipe" / "a").append("hi")
    assert (tmp_path / "file").read_text() == "x"


def test_a_relative_home_is_refused_before_a_lone_word_is_taken_for_a_memorys_name(sh):
    """``date 5`` under a relative $PIMEM_HOME said 'give either a message number I or --at WHEN' (exit 2 all
    the same, for the wrong reason): the home's error is the one line."""
    for args in (["date", "5"], ["zoom", "5"], ["since", "3d"]):
        out = sh(*args, PIMEM_HOME="relative/home")
        assert out.returncode == 2 and out.stderr.startswith(b"pimem: error: $PIMEM_HOME is a relative path"), (args, out.stderr)


def test_an_amount_with_all_a_floats_decimals_is_taken():
    """``str(3.024 / 3)`` in a script ('1.0080000000000002'): 16 decimals, which were refused as out of range."""
    from pimem import numbers
    from pimem.errors import BadInput

    assert numbers.usd(str(3.024 / 3)) == 3.024 / 3 and numbers.seconds("0.1000000000000000055511") == 0.1
    with pytest.raises(BadInput, match="use a number from 0 to 1,000,000,000"):
        numbers.usd("1" * 13)


@pytest.mark.parametrize("value", ["garbage", "2026-10-08", "2026-10-08T09:30:00", "2026-10-08T09:30+08:00", "2026-13-08T09:30:00Z"])
def test_a_bad_frozen_clock_is_one_line_and_creates_nothing(sh, home, value):
    out = sh("append", "fresh", "x", PIMEM_NOW=value)
    assert out.returncode == 2
    assert out.stderr == f"pimem: error: bad $PIMEM_NOW {value!r}: use an RFC 3339 date-time such as 2026-10-08T09:30:00+08:00\n".encode()
    assert not home.exists()
    assert sh("append", "fresh", "x", PIMEM_NOW="2026-10-08t01:30:00.5z").returncode == 0
    assert json.loads(sh("since", "fresh", "#0").stdout)["date"] == "2026-10-08T01:30:00.500+00:00"


@pytest.mark.parametrize("var", ["PIMEM_HOME", "PI_MEM_HOME"])
def test_a_relative_home_variable_is_refused_and_creates_nothing(tmp_path, var):
    """A relative $PIMEM_HOME was taken from the working directory: run from / it created /rel, from a project
    a home inside it, so a hook, cron and a shell each wrote a memory of their own. It is refused (exit 2, one
    line); ``--home rel``, typed where it is meant, is taken from the working directory as any path argument."""
    import subprocess

    from conftest import pimem_cmd, subprocess_env

    environ = {k: v for k, v in subprocess_env().items() if k not in ("PIMEM_HOME", "PI_MEM_HOME")}
    for argv in (["append", "m", "hi"], ["list"], ["hook", "install", "claude-code", "--dry-run"]):
        out = subprocess.run(pimem_cmd(*argv), cwd=tmp_path, capture_output=True,
                             env={**environ, var: "rel", "HOME": str(tmp_path / "me")})
        assert out.returncode == 2 and out.stdout == b"", (argv, out)
        assert out.stderr == (f"pimem: error: ${var} is a relative path ('rel'): set it to an absolute one (it would "
                              "name another home in each directory a command runs in)\n").encode(), argv
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    out = subprocess.run(pimem_cmd("append", "--home", "rel", "m", "hi"), cwd=tmp_path, capture_output=True, env=environ)
    assert out.returncode == 0 and (tmp_path / "rel" / "m" / "main").is_dir()


def test_a_home_holding_a_nul_byte_is_bad_input_naming_home(tmp_path):
    """``Memory.at("zz", home="/x\\x00y")`` raised the system's bare ValueError ("embedded null byte")."""
    from pimem import Memory, api
    from pimem.errors import BadInput

    for call in (lambda: Memory.at("zz", home="/x\x00y"), lambda: Memory.all(home=tmp_path / "a\x00b"),
                 lambda: api.list_memories(home="/x\x00y")):
        with pytest.raises(BadInput, match=r"^home is a directory's path, which holds no NUL byte, not '/"):
            call()


def test_a_home_given_empty_is_refused_not_read_as_none_given(tmp_path):
    """``--home ''`` (a script's unset variable, ``--home "$DIR"``) and ``home=""`` used ``$PIMEM_HOME``, or
    ``~/.pi/memory``: the memory written where the caller did not say. Refused as every empty argument is."""
    import subprocess

    from conftest import pimem_cmd, subprocess_env
    from pimem import Memory, api
    from pimem.errors import BadInput

    said = "empty home: give the store's directory, or none for $PIMEM_HOME or ~/.pi/memory"
    environ = {**subprocess_env(), "PIMEM_HOME": str(tmp_path / "default")}
    for argv in (["append", "--home", "", "m", "hi"], ["list", "--home="], ["mcp", "--home", ""]):
        out = subprocess.run(pimem_cmd(*argv), cwd=tmp_path, capture_output=True, env=environ, input=b"")
        assert (out.returncode, out.stdout, out.stderr) == (2, b"", f"pimem: error: {said}\n".encode()), argv
    for call in (lambda: Memory.at("m", home=""), lambda: api.list_memories(home=""), lambda: api.remember("m", "x", home="")):
        with pytest.raises(BadInput, match=f"^{re.escape(said)}$"):
            call()
    assert list(tmp_path.iterdir()) == []
