"""Cron as the README writes it: its crontab lines run under cron's bare environment in a real process, and a
compactor whose key variable is unset is refused at once."""

import os
import re
import subprocess
import sys

import orjson
import pytest

from conftest import ROOT
from bench.llm_server import FakeLLM
from pimem import Memory

README = (ROOT / "README.md").read_text()
USER_HOME = "/home/me"  # the README's example account
CRON_LINE = re.compile(r"^((?:\S+\s+){5})(/\S+/pimem)( .*)$")  # five time fields, pimem's absolute path, arguments


def crontab() -> list[str]:
    """The README's crontab block: the ```text block holding a pimem build-tree job."""
    blocks = re.findall(r"^```text\n(.*?)^```", README, re.S | re.M)
    return next(b for b in blocks if CRON_LINE.search(b.splitlines()[-1])).splitlines()


def console_script(bin_dir):
    """A ``pimem`` as pip installs it: an absolute interpreter in its #! line (cron's PATH has no python)."""
    bin_dir.mkdir()
    script = bin_dir / "pimem"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                      "from pimem.cli import main\nmain()\n")
    script.chmod(0o755)
    return script


def long_messages(n):
    return [{"kind": "user", "text": f"message {k}: " + "the staging database listens on 5433. " * 20} for k in range(n)]


def test_the_readme_crontab_runs_under_cron_environment(tmp_path):
    account = tmp_path / "me"  # a fresh account: nothing but a memory with work to do
    pimem = console_script(tmp_path / "bin")
    lines = [l.replace("/home/me/.local/bin/pimem", str(pimem)).replace(USER_HOME, str(account)) for l in crontab()]
    env = dict(l.split("=", 1) for l in lines if re.match(r"^[A-Z_]+=", l))
    jobs = [CRON_LINE.match(l) for l in lines if CRON_LINE.match(l)]
    assert env.keys() == {"PIMEM_HOME"} and len(jobs) == 1
    home = env["PIMEM_HOME"]
    Memory.at("main", home).append(long_messages(3))
    Memory.at("work", home).append(long_messages(2))
    command = jobs[0][2] + jobs[0][3]
    log = re.search(r"--log (\S+)", command)[1]
    assert not os.path.exists(os.path.dirname(log))
    # as cron runs it: /bin/sh -c LINE with PATH=/usr/bin:/bin and the crontab's own variables, nothing else
    proc = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", *(f"{k}={v}" for k, v in env.items()), "/bin/sh", "-c", command],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == proc.stderr == ""  # cron mails any output: there is none
    written = open(log).read().splitlines()
    assert written[0].endswith(" pimem build-tree") and any(l.startswith("main: ") for l in written)
    assert any(l.startswith("work: ") for l in written)
    assert oct(os.stat(os.path.dirname(log)).st_mode & 0o777) == "0o700"
    for name in ("main", "work"):
        status = subprocess.run([str(pimem), "status", name, "--json"], capture_output=True, env={"PIMEM_HOME": home}, check=True)
        assert orjson.loads(status.stdout)["tree"]["pending"] == 0
    # a second run appends to the same log
    subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"PIMEM_HOME={home}", "/bin/sh", "-c", command], check=True, timeout=120)
    assert sum(l.endswith(" pimem build-tree") for l in open(log).read().splitlines()) == 2


def test_the_readme_prints_that_crontab_for_this_account(tmp_path):
    pimem = console_script(tmp_path / "bin")
    printf = next(l for l in re.findall(r"^```sh\n(.*?)^```", README, re.S | re.M) if "command -v pimem" in l).strip()
    env = {"PATH": f"{pimem.parent}:/usr/bin:/bin", "HOME": str(tmp_path / "me")}
    out = subprocess.run(["/bin/sh", "-c", printf], capture_output=True, text=True, env=env, check=True).stdout
    expected = [l.replace("/home/me/.local/bin/pimem", str(pimem)).replace(USER_HOME, str(tmp_path / "me")) for l in crontab()]
    assert out.splitlines() == expected


def test_an_unset_key_variable_is_named_at_once_and_never_retried(run, home, monkeypatch):
    monkeypatch.delenv("PIMEM_TEST_KEY", raising=False)
    Memory.at("main").append(long_messages(3))
    Memory.at("offline").append(long_messages(2))
    with FakeLLM("openai") as server:
        out = run("model", "main", "openai/some-model", "--base-url", server.url, "--key-env", "PIMEM_TEST_KEY")
        assert out.exit_code == 0 and "$PIMEM_TEST_KEY is not set" in out.stderr
        assert "$PIMEM_TEST_KEY is not set" in run("model", "main").stderr  # shown again: a warning, every time
        out = run("build-tree", "--dry-run")  # (it estimated the calls as if they could go out)
        assert out.exit_code == 0 and out.stdout.splitlines()[0].endswith(
            " built; but $PIMEM_TEST_KEY is not set here: the run would send nothing"), out.stdout
        assert "not set" not in out.stdout.splitlines()[1]  # (the offline memory: no key)
        dry = [orjson.loads(line) for line in run("build-tree", "--dry-run", "--json").stdout.splitlines()]
        assert [row.get("key_problem") for row in dry] == ["$PIMEM_TEST_KEY is not set", None]
        out = run("build-tree", "--retries", "3")
        assert out.exit_code == 6
        assert out.stderr.splitlines()[-1] == ("pimem: error: main: $PIMEM_TEST_KEY is not set (the API key of its "
                                               "compactor openai/some-model); nothing was sent")
        assert server.requests == []  # no call, so nothing to retry
        assert orjson.loads(run("status", "offline", "--json").stdout)["tree"]["pending"] == 0  # the others are built
        assert orjson.loads(run("status", "main", "--json").stdout)["failures"] == []
        for key, said in (("   ", "is blank"), ("sk-abc\ndef\n", "holds a control character"),
                          ("sk-abc–def", "holds a character no HTTP header can carry")):
            monkeypatch.setenv("PIMEM_TEST_KEY", key)  # (no call could use it either)
            assert f"$PIMEM_TEST_KEY {said}" in run("model", "main").stderr
            out = run("build-tree", "--retries", "3")
            assert out.exit_code == 6 and f"main: $PIMEM_TEST_KEY {said}" in out.stderr and server.requests == []
        monkeypatch.setenv("PIMEM_TEST_KEY", "k-1")
        assert run("model", "main").stderr == ""
        assert run("build-tree").exit_code == 0 and server.requests


def test_build_tree_json_says_a_memory_left_for_its_unset_key_in_a_refused_event(run, home, monkeypatch):
    """A reader of the events heard of the others' builds and nothing of the memory left out for its key, as it
    hears of one left out for its log or its settings."""
    monkeypatch.delenv("PIMEM_TEST_KEY", raising=False)
    Memory.at("main").append(long_messages(3))
    Memory.at("offline").append(long_messages(2))
    with FakeLLM("openai") as server:
        run("model", "main", "openai/some-model", "--base-url", server.url, "--key-env", "PIMEM_TEST_KEY")
        out = run("build-tree", "--json")
    assert out.exit_code == 6 and server.requests == []
    events = [orjson.loads(line) for line in out.stdout.splitlines()]
    assert {"event": "refused", "memory": "main", "error": "$PIMEM_TEST_KEY is not set (the API key of its compactor "
            "openai/some-model)"} in events
    assert [e["memory"] for e in events if e["event"] == "done"] == ["offline"]


def test_watch_writes_its_log_where_it_is_told(home, tmp_path):
    import signal
    import time

    from conftest import pimem_cmd, subprocess_env

    Memory.at("main").append(long_messages(2))
    log = tmp_path / "logs" / "deep" / "watch.log"
    proc = subprocess.Popen(pimem_cmd("watch", "--log", log), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env())
    deadline = time.monotonic() + 60
    while "main: watching" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() is not None else "timed out"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert err == b"" and log.read_text().splitlines()[0].endswith(" pimem watch")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_log_that_refuses_writes_is_said_on_the_terminal(home):
    from conftest import pimem_cmd, subprocess_env

    Memory.at("main").append(long_messages(2))
    done = subprocess.run(pimem_cmd("build-tree", "--log", "/dev/full"), capture_output=True, env=subprocess_env())
    assert done.returncode == 7 and done.stderr == b"pimem: error: --log /dev/full: No space left on device\n"
    assert not list(Memory.at("main").tree.records())  # (refused before anything was built)
    # (a log whose directory cannot be made is named as the --log file too: it said only "No such file or
    # directory: /proc/nope", which names no option)
    done = subprocess.run(pimem_cmd("watch", "--log", "/proc/nope/x.log"), capture_output=True, env=subprocess_env())
    assert done.returncode == 7 and done.stderr == (b"pimem: error: --log /proc/nope/x.log: No such file or directory: "
                                                    b"/proc/nope\n")


# ``pimem ARGS`` (a real process: the user's own command) run right after the command under test listed the
# memories of the home, then that command run (``sys.argv[2:]``): the user's rename or delete within a run
USER_MEANWHILE = """
import subprocess, sys
from pimem.cli import main
from pimem.memory import Memory
listed = Memory.all
def then_the_user(*args, **kwargs):
    mems = listed(*args, **kwargs)
    subprocess.run([sys.executable, "-m", "pimem", *sys.argv[1].split()], check=True, capture_output=True)
    return mems
Memory.all = then_the_user
main(sys.argv[2:])
"""


@pytest.mark.parametrize("user", ["delete b", "rename b b2"])
def test_build_tree_over_all_memories_leaves_one_the_user_renamed_or_deleted_meanwhile_with_one_line(home, user):
    """Cron's ``build-tree`` over every memory, with the user's ``pimem delete b`` (or ``rename b b2``) run
    after it listed them: it built the others and said one line for b, exit 0 (the next run builds b2). It
    exited 3 (``b: memory 'b' was renamed or deleted while this had it open``), as if a run had failed."""
    for name in ("a", "b", "c"):
        Memory.at(name, home).append(long_messages(3))
    proc = subprocess.run([sys.executable, "-c", USER_MEANWHILE, user, "build-tree"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["a: 3 written by extractive, 1 free", "c: 3 written by extractive, 1 free",
                    "b: renamed or deleted during this run; left out"], proc.stderr
    with_json = subprocess.run([sys.executable, "-c", USER_MEANWHILE, "delete c", "build-tree", "--json"],
                               capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert with_json.returncode == 0, with_json.stderr
    events = [orjson.loads(line) for line in with_json.stdout.splitlines()]
    assert [e for e in events if e["event"] == "refused"] == [
        {"event": "refused", "memory": "c", "gone": True,
         "error": f"memory 'c' was renamed or deleted meanwhile (from {home / 'c'})"}]
    assert [e["memory"] for e in events if e["event"] == "done"] == ["a"] + (["b2"] if "b2" in user else [])


def test_build_tree_json_says_a_memory_left_for_a_file_it_cannot_read_as_its_error_line_does(run, home):
    """A memory left out before building (its ``compactor.json`` a directory: an OS error pimem translates) is
    said in the ``refused`` event as on stderr, ``Is a directory: PATH``; the event said Python's own
    ``[Errno 21] Is a directory: 'PATH'`` (ee91bda)."""
    Memory.at("a").append(long_messages(3))
    Memory.at("b").append(long_messages(3))
    (home / "b" / "compactor.json").mkdir()
    out = run("build-tree", "--dry-run", "--json")
    said = f"Is a directory: {home / 'b' / 'compactor.json'}"
    assert out.exit_code == 7 and f"b: {said}" in out.stderr, out.stderr
    events = [orjson.loads(line) for line in out.stdout.splitlines()]
    assert {"event": "refused", "memory": "b", "error": said} in events, events
