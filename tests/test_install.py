"""What pip installs: the console script, and the man pages and completions under the prefix's share/, where
man-db finds them from PATH (``<prefix>/bin`` → ``<prefix>/share/man``) in a venv or under pipx."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT

SHIPPED = ["pyproject.toml", "README.md", "pimem", "man", "completions"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel pip builds from this checkout (from a copy: building writes build/ and egg-info)."""
    src = tmp_path_factory.mktemp("src")
    for name in SHIPPED:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / name).is_dir() else {}))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(out)], check=True, capture_output=True, timeout=300)
    return next(out.glob("pimem-*.whl"))


def test_the_wheel_carries_every_man_page_and_completion(wheel):
    data = {n.split(".data/data/", 1)[1] for n in zipfile.ZipFile(wheel).namelist() if ".data/data/" in n}
    pages = {f"share/man/man1/{p.name}" for p in (ROOT / "man").glob("*.1")}
    assert "share/man/man1/pimem.1" in pages and "share/man/man1/pimem-search.1" in pages
    assert data == pages | {"share/bash-completion/completions/pimem.bash", "share/zsh/site-functions/_pimem",
                            "share/fish/vendor_completions.d/pimem.fish"}


@pytest.mark.skipif(not shutil.which("man"), reason="man is not installed")
def test_man_finds_the_pages_of_an_install_from_path(wheel, tmp_path):
    prefix = tmp_path / "prefix"  # as a venv or pipx lays it out: <prefix>/bin/pimem, <prefix>/share/man
    installed = _installed_here()
    # --ignore-installed: without it pip uninstalls the pimem of the environment running the tests (a
    # developer's editable install) before it installs under the prefix
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--ignore-installed",
                    "--prefix", str(prefix), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    assert (prefix / "bin" / "pimem").is_file()
    assert _installed_here() == installed  # the environment running the tests keeps its own pimem
    env = {k: v for k, v in os.environ.items() if k != "MANPATH"}
    env["PATH"] = f"{prefix / 'bin'}{os.pathsep}/usr/bin:/bin"
    for page in ("pimem", "pimem-search"):
        found = subprocess.run(["man", "-w", page], capture_output=True, text=True, env=env)
        assert found.stdout.strip() == str(prefix / "share" / "man" / "man1" / f"{page}.1"), found.stderr
    shown = subprocess.run(["man", "pimem-search"], capture_output=True, text=True, env={**env, "MANPAGER": "cat", "MANWIDTH": "100"})
    assert "pimem search [OPTIONS] QUERY [NAME…]" in shown.stdout


def _installed_here() -> str:
    """The version of this environment's installed pimem, as a fresh process finds it: empty when none is
    installed (the tests run from a checkout)."""
    probe = "import importlib.metadata as m\ntry: print(m.version('pimem'))\nexcept m.PackageNotFoundError: pass"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd="/").stdout.strip()


def test_the_console_script_starts_at_main_so_hooks_skip_typer(wheel, tmp_path):
    """The installed ``pimem`` is what ``hook install`` writes into Claude Code's settings: it starts at
    ``pimem.__main__:main``, whose path for the hook's events imports neither typer nor click (``pimem.cli:main``
    imports typer first, ~15 ms of every event)."""
    entry = zipfile.ZipFile(wheel).read(next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("entry_points.txt")))
    assert "pimem = pimem.__main__:main" in entry.decode().splitlines()
    script = tmp_path / "pimem"  # as pip writes it
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\nimport atexit\n"
                      "atexit.register(lambda: sys.stderr.write(' '.join(m for m in ('typer', 'click', 'pimem.boundary') if m in sys.modules)))\n"
                      "from pimem.__main__ import main\nif __name__ == '__main__':\n    sys.exit(main())\n")
    script.chmod(0o755)
    event = b'{"hook_event_name": "Stop", "session_id": "s1", "cwd": "/nowhere/api"}'
    proc = subprocess.run([str(script), "hook", "claude-code", "--home", str(tmp_path / "home")], input=event,
                          capture_output=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == b"pimem.boundary", proc.stderr  # (the probe ran, no typer)
