"""The typer app: registers the commands and runs them in the one error boundary (``pimem.boundary``), nothing else.

Agent wrappers run pimem every turn, so only the command being run is imported: ``main`` looks at the
first argument and builds an app holding that one command (every command for ``--help``).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Annotated

import typer
from typer._click.exceptions import ClickException, NoArgsIsHelpError, NoSuchOption  # typer <0.29 vendors click
from typer.core import TyperCommand

from . import boundary, env, output, stopping
from .errors import ExitStatus, one_line, shortened

# command name -> module in pimem.commands; each module has one function, ``command``
COMMANDS = {
    "append": "append",
    "since": "since",
    "message": "message",
    "date": "date",
    "list": "list_",
    "status": "status",
    "demo": "demo",
    "view": "view",
    "zoom": "zoom",
    "rename": "rename",
    "delete": "delete",
    "fsck": "fsck",
    "mcp": "mcp",
    "map": "map",
    "import": "import_",
    "remember": "remember",
    "memories": "memories",
    "forget": "forget",
    "compact": "compact",
    "recall": "recall",
    "context": "context",
    "model": "model",
    "build-tree": "build_tree",
    "watch": "watch",
    "search": "search",
    "reindex": "reindex",
    "hook": "hook",
}

# the commands that write the store: a reader of their stdout that goes away ends their printing, not their
# writing (see output.writing); the others stop at their next line
WRITERS = {"append", "import", "remember", "forget", "compact", "rename", "delete", "demo", "fsck", "reindex",
           "build-tree", "watch", "hook", "model"}

HELP = """Endless, lossless memory for LLM chats and coding agents.

Every message is kept verbatim in an append-only log; a background model folds it into a tree of one-line
summaries; each turn the model reads a constant-size view and can zoom, search and date back to any original.
"""


def usage(cmd) -> list[str]:
    """The arguments of a command as its usage line shows them: ``NAME``, ``[NAME]``, ``FILE…``. An argument the
    parser sees as optional only because a default NAME may come before it (``zoom [NAME] ID+N``) is named in
    the command function's ``needs``; one whose metavar spells out its words (``[install|uninstall] AGENT``: a
    space in it) is shown so, not as repeated."""
    needs = getattr(cmd.callback, "needs", ())
    pieces = []
    for param in cmd.params:
        if param.param_type_name != "argument":
            continue
        shown = (param.metavar or param.name.upper()).removesuffix("...").removesuffix("…")
        if param.nargs == -1 and " " not in shown:
            shown += "…"
        pieces.append(shown if param.required or param.name in needs or shown.startswith("[") else f"[{shown}]")
    return pieces


class Command(TyperCommand):
    """A command whose usage line reads as typed and whose help keeps indented blocks (examples) verbatim."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        return ["[OPTIONS]", *usage(self)]

    def format_help_text(self, ctx, formatter) -> None:
        paragraphs = inspect.cleandoc(self.help or "").split("\n\n")
        # click rewraps every paragraph but one starting with a \b line
        verbatim = ["\b\n" + p if any(l[:1].isspace() for l in p.splitlines()) else p for p in paragraphs]
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text("\n\n".join(verbatim))


def _version(given: bool) -> None:
    if given:
        from . import __version__

        output.line(f"pimem {__version__}")
        raise typer.Exit(0)


def _root() -> None:
    pass


def _root_with_version(
    version: Annotated[bool, typer.Option("--version", help="Print pimem's version and exit.", is_eager=True, callback=_version)] = False,
) -> None:
    pass


def build(only: str | None = None) -> typer.Typer:
    """The app with every command, just ``only`` (what ``main`` runs), or none (``only=""``: ``pimem --version``
    alone, which would otherwise import every command module and what it imports, for one line)."""
    app = typer.Typer(
        name="pimem",
        help=HELP,
        add_completion=False,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    # the root's own option only when no command runs (`pimem --version`, `pimem --help`): typer reads every
    # parameter's annotations as it builds the app, and agent wrappers run a command every turn
    app.callback(help=HELP)(_root if only else _root_with_version)
    for name, module in COMMANDS.items():
        if only is None or name == only:
            func = importlib.import_module(f"pimem.commands.{module}").command
            app.command(name, help=func.__doc__, cls=Command)(boundary.guarded(func, name in WRITERS, typer.Exit))
    return app


def command_of(args: list[str]) -> str | None:
    """The subcommand named in ``args`` (the first word not starting with '-'), if it is one of ours."""
    for arg in args:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
        if arg in ("-h", "--help"):
            return None
    return None


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    boundary.begin(args)
    try:
        if argv is None:  # (a signal is noted while the command's modules load, as from pimem.__main__'s first line)
            stopping.defer()
        app = build("" if args == ["--version"] else command_of(args))
        if argv is None and command_of(args) != "watch":  # (watch stops for one itself, with exit 0)
            boundary.take_signals()  # (and raises one that came meanwhile)
        code = app(args=args, prog_name="pimem", standalone_mode=False)
        if boundary.untold() is not None:  # (typer made a signal while it parsed a silent exit 130)
            raise boundary.untold()
        output.flush()  # (the version; a command's boundary flushed what it printed)
    except ClickException as exc:
        code = _usage_error(exc, args)
    except boundary.ENDINGS as exc:  # (a reader gone, stdout refusing the help, a signal outside the command)
        code = boundary.ended(exc)
    if code == ExitStatus.USAGE and runs_hook(args):  # (Claude Code takes 2 as blocking: every prompt erased)
        code = ExitStatus.NOTHING_FOUND
    boundary.ARGS.clear()  # (a program or a test calling main again, or a command without it, starts afresh)
    boundary.leave(code, now=command_of(args) == "hook")


def runs_hook(args: list[str]) -> bool:
    """Whether ``args`` run ``pimem hook`` as an agent's hook (not ``hook install`` or ``hook uninstall``): Claude
    Code runs it on every event and takes exit 2 as blocking, so its usage errors exit 1, its non-blocking error."""
    if command_of(args) != "hook":
        return False
    from .__main__ import HOOK_OPTIONS  # (the hook's options, each taking a value)

    rest = args[args.index("hook") + 1:]
    while rest:
        arg = rest.pop(0)
        if arg in HOOK_OPTIONS:
            rest[:1] = []  # (the option's value)
        elif not arg.startswith("-"):
            return arg not in ("install", "uninstall")
    return True


CLOSE_OPTION = 0.6  # how alike an unknown option and one suggested for it are (difflib's ratio, Click's cutoff)


def _usage_error(exc: ClickException, args: list[str]) -> ExitStatus:
    """Usage errors go through the same boundary as ours: one line, ``pimem: error: …``, exit 2, a long argument
    it names shortened as ours are (``errors.shortened``)."""
    if isinstance(exc, NoArgsIsHelpError):  # plain `pimem`: the help is the answer
        exc.show()
        return ExitStatus.USAGE
    if isinstance(exc, NoSuchOption) and exc.possibilities:  # (close without their dashes: --session is no --json)
        import difflib

        bare = exc.option_name.lstrip("-")
        exc.possibilities = [p for p in exc.possibilities
                             if difflib.SequenceMatcher(None, bare, p.lstrip("-")).ratio() >= CLOSE_OPTION]
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    message = shortened(one_line(exc.format_message().rstrip(".")), tuple(args))
    from .when import unquoted

    env.stderr().write(f"pimem: error: {message[:1].lower() + message[1:]}{unquoted(args, message)}{hint}\n")
    return ExitStatus.USAGE


def app() -> typer.Typer:
    """The whole app, for tests (``CliRunner().invoke(cli.app(), …)``) and the doc generator."""
    return build()
