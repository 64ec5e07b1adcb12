"""Generated docs stay in step with the CLI, and the static completions work without Python."""

import re
import subprocess
import sys

import pytest

from conftest import ROOT
from pimem import cli
from pimem.options import WHEN_WORDS

sys.path.insert(0, str(ROOT / "scripts"))
import gen_docs  # noqa: E402


def test_man_pages_and_completions_match_the_cli(tmp_path):
    """Fails when a command changed and `python scripts/gen_docs.py` was not rerun."""
    gen_docs.write(tmp_path)
    for sub in ("man", "completions"):
        fresh = {p.name: p.read_text() for p in (tmp_path / sub).iterdir()}
        kept = {p.name: p.read_text() for p in (ROOT / sub).iterdir()}
        assert sorted(kept) == sorted(fresh), f"{sub}/ has stale or missing files: run python scripts/gen_docs.py"
        for name in fresh:
            assert kept[name] == fresh[name], f"{sub}/{name} drifted from the CLI: run python scripts/gen_docs.py"


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_has_help_examples_a_man_page_and_a_readme_mention(name):
    _, commands = gen_docs.describe()
    cmd = next(c for c in commands if c.name == name)
    assert cmd.summary and cmd.examples, f"{name}: its docstring needs a summary line and Examples:"
    assert all(e.startswith(("pimem ", "echo ", "cat ")) or "| pimem" in e for e in cmd.examples)
    assert (ROOT / "man" / f"pimem-{name}.1").is_file()
    assert f"pimem {name}" in (ROOT / "README.md").read_text()


def test_readme_exit_code_table_is_the_one_in_errors():
    from pimem.errors import EXIT_CODES

    readme = (ROOT / "README.md").read_text()
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", readme, re.M))
    assert {int(code): meaning for code, meaning in rows.items()} == EXIT_CODES


def test_every_exception_carries_a_status_of_the_one_enum():
    from pimem import errors

    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.PimemError)]
    assert {c.__name__ for c in classes} >= {"PimemError", "NotFound", "Busy", "LeaseLost", "ProviderError"}
    assert all(type(c.code) is errors.ExitStatus for c in classes)
    assert errors.LeaseLost.code == errors.ExitStatus.BUSY == 4
    assert errors.PimemError("x", code=6).code is errors.ExitStatus.PROVIDER


def _bash_complete(words: list[str], env: dict) -> list[str]:
    script = (
        f"source {ROOT / 'completions' / 'pimem.bash'}\n"
        'COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _pimem; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(["bash", "-c", script, "bash", *words], capture_output=True, text=True, env=env, check=True)
    return sorted(filter(None, out.stdout.splitlines()))


def test_bash_completes_commands_options_and_memory_names_from_the_home(tmp_path):
    for home, names in (("a", ["alpha", "beta"]), ("b", ["gamma"]), ("c", ["delta"])):
        for name in names:
            (tmp_path / home / name / "main").mkdir(parents=True)
    (tmp_path / "a" / "not-a-memory").mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "c"), "PIMEM_HOME": str(tmp_path / "a")}
    assert _bash_complete(["pimem", "s"], env) == ["search", "since", "status"]
    assert _bash_complete(["pimem", "since", "--inc"], env) == ["--include-tools"]
    assert _bash_complete(["pimem", "since", ""], env) == sorted(["alpha", "beta", *WHEN_WORDS])  # NAME or WHEN
    assert _bash_complete(["pimem", "since", "--until", "3d", "al"], env) == ["alpha"]
    assert _bash_complete(["pimem", "since", "--home", str(tmp_path / "b"), "g"], env) == ["gamma"]
    assert _bash_complete(["pimem", "since", "alpha", ""], env) == sorted(WHEN_WORDS)  # WHEN is not a memory name
    no_pimem_home = {k: v for k, v in env.items() if k != "PIMEM_HOME"}
    assert _bash_complete(["pimem", "status", ""], {**no_pimem_home, "PI_MEM_HOME": str(tmp_path / "b")}) == ["gamma"]
    (tmp_path / "c" / ".pi" / "memory" / "delta" / "main").mkdir(parents=True)
    assert _bash_complete(["pimem", "status", ""], no_pimem_home) == ["delta"]


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_help_and_man_page_show_what_the_generator_makes(name):
    """The usage line reads NAME, [NAME], FILE…; the examples come one a line, exactly as typed, in --help and
    in the man page alike."""
    from typer.testing import CliRunner

    _, commands = gen_docs.describe()
    cmd = next(c for c in commands if c.name == name)
    assert not re.search(r"[{}]|\.\.\.|…\.", cmd.usage), cmd.usage
    shown = CliRunner().invoke(cli.build(name), [name, "--help"], env={"COLUMNS": "100"}).output.splitlines()
    assert shown[0] == f"Usage: pimem {name} {cmd.usage}"
    examples = shown[shown.index("  Examples:") + 1 : shown.index("  Examples:") + 1 + len(cmd.examples)]
    assert examples == [f"    {e}" for e in cmd.examples]
    page = (ROOT / "man" / f"pimem-{name}.1").read_text().splitlines()
    assert page[page.index(".SH SYNOPSIS") + 1 : page.index(".SH SYNOPSIS") + 3] == [f".B pimem {gen_docs._roff(name)}", gen_docs._roff(cmd.usage)]
    start = page.index(".SH EXAMPLES") + 3  # after .nf and .RS
    assert page[start : start + len(cmd.examples)] == [gen_docs._roff(e) for e in cmd.examples]


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_help_says_an_options_default_once(name):
    """An option whose help names its default is not followed by click's own ``[default: …]`` too
    (``hook --budget``: "(default 4000). [default: 4000]")."""
    from typer.testing import CliRunner

    shown = CliRunner().invoke(cli.build(name), [name, "--help"], env={"COLUMNS": "100"}).output
    options = re.split(r"\n(?=  -)", shown.split("Options:", 1)[1])
    assert not [o for o in options if "(default" in o and "[default:" in o]


def test_usage_lines_name_optional_and_repeated_arguments_as_typed():
    _, commands = gen_docs.describe()
    usage = {c.name: c.usage for c in commands}
    assert usage["since"] == "[OPTIONS] [NAME] [WHEN]"
    assert usage["zoom"] == "[OPTIONS] [NAME] ID+N"
    assert usage["import"] == "[OPTIONS] FILE…"
    assert usage["search"] == "[OPTIONS] QUERY [NAME…]"
    assert usage["delete"] == "[OPTIONS] NAME"
    # (one agent, after install or uninstall or alone: not AGENT…, which read as several)
    assert usage["hook"] == "[OPTIONS] [install|uninstall] AGENT"


def test_version(run):
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    out = run("--version")
    assert out.exit_code == 0 and out.stdout == f"pimem {version}\n"
    assert "--version" in (ROOT / "man" / "pimem.1").read_text().replace("\\-", "-")


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_help_names_each_argument_as_its_usage_line_does(name):
    """The Arguments section lists each argument under the name its usage line gives it (``TEXT``, not the
    parameter's own ``text...``: append, remember, memories and recall listed ``text...``, ``words...`` and
    ``query...`` under a usage line of ``[TEXT…]``, ``[WORDS…]``, ``[QUERY…]``)."""
    import typer.main
    from typer.testing import CliRunner

    app = cli.build(name)
    shown = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "100"}).output
    rows = shown.split("\nArguments:\n", 1)[1].split("\n\n", 1)[0].splitlines() if "\nArguments:\n" in shown else []
    listed = [re.split(r"\s{2,}", row.strip())[0].removesuffix("…") for row in rows if not row.startswith("   ")]
    usage = [piece if piece.startswith("[install") else piece.removeprefix("[").removesuffix("]")
             for piece in cli.usage(typer.main.get_command(app).commands[name])]
    assert listed == [piece.removesuffix("…") for piece in usage]
