"""The typer app: registers the commands and holds the one error boundary, nothing else.

Agent wrappers run pimem every turn, so only the command being run is imported: ``main`` looks at the
first argument and builds an app holding that one command (every command for ``--help``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import signal
import sys
from typing import Annotated

import typer
from typer._click.exceptions import ClickException, NoArgsIsHelpError, NoSuchOption  # typer <0.29 vendors click
from typer.core import TyperCommand

from . import env, output
from .errors import ExitStatus, PimemError, one_line, shortened, translate

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


def guarded(func, writes: bool = False):
    """The error boundary: every failure leaves as an ``ExitStatus``; a ``PimemError`` becomes
    ``pimem: error: …`` on stderr and its own status. A command that ``writes`` the store outlives the reader
    of its stdout."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            with output.writing(writes):
                try:
                    result = func(*args, **kwargs)
                except typer.Exit as exc:  # (a status the command chose)
                    output.finish(done=exc.exit_code == 0)
                    raise
                output.finish()
                return result
        except PimemError as exc:
            _flush_stdout()
            env.stderr().write(f"pimem: error: {exc}\n")
            raise typer.Exit(ExitStatus(exc.code)) from None
        except BrokenPipeError:
            output.quiet_stdout()
            raise typer.Exit(ExitStatus.OK) from None
        except KeyboardInterrupt as exc:  # (SIGTERM too: see main)
            env.stderr().write("pimem: interrupted\n")
            raise typer.Exit(_interrupted(exc)) from None
        except Exception as exc:  # the disk is full, a directory is not ours, SQLite refused: say so, no traceback
            error = translate(exc)
            if error is None:
                raise
            _flush_stdout()
            env.stderr().write(f"pimem: error: {error}\n")
            raise typer.Exit(ExitStatus(error.code)) from None

    return wrapper


def _flush_stdout() -> None:
    """What was printed before an error, ahead of its line; a reader that went away, or a stdout that refuses
    it (a full disk), does not hide the error."""
    try:
        env.current().stdout.flush()
    except OSError:
        output.quiet_stdout()


def usage(cmd) -> list[str]:
    """The arguments of a command as its usage line shows them: ``NAME``, ``[NAME]``, ``FILE…``. An argument the
    parser sees as optional only because a default NAME may come before it (``zoom [NAME] ID+N``) is named in
    the command function's ``needs``."""
    needs = getattr(cmd.callback, "needs", ())
    pieces = []
    for param in cmd.params:
        if param.param_type_name != "argument":
            continue
        shown = (param.metavar or param.name.upper()).removesuffix("...").removesuffix("…")
        if param.nargs == -1:
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
    """The app with every command, or just ``only`` (what ``main`` runs)."""
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
    app.callback(help=HELP)(_root if only is not None else _root_with_version)
    for name, module in COMMANDS.items():
        if only is None or name == only:
            func = importlib.import_module(f"pimem.commands.{module}").command
            app.command(name, help=func.__doc__, cls=Command)(guarded(func, name in WRITERS))
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
    if None in (sys.stdin, sys.stdout, sys.stderr):
        _closed_streams()
    sys.stderr = output.Unfailing(sys.stderr)
    args = sys.argv[1:] if argv is None else argv
    if argv is None and command_of(args) == "watch":  # (it exits 0 on a signal, one while it starts too)
        from . import stopping

        stopping.defer()
    elif argv is None:
        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGHUP, _hang_up)
    try:
        app = build(command_of(args))
        code = app(args=args, prog_name="pimem", standalone_mode=False)
        output.flush()  # (the version; a command's boundary flushed what it printed)
    except BrokenPipeError:
        output.quiet_stdout()
        code = ExitStatus.OK
    except OSError as exc:  # stdout refused the help (a command's own failures are said by its boundary)
        code = _refused(output.StdoutRefused(exc))
    except output.StdoutRefused as exc:  # the version
        code = _refused(exc)
    except ClickException as exc:
        code = _usage_error(exc, args)
    except KeyboardInterrupt as exc:  # (before a command began, or after it ended)
        env.stderr().write("pimem: interrupted\n")
        code = _interrupted(exc)
    status = int(code) if isinstance(code, int) else ExitStatus.OK
    if command_of(args) == "hook":
        _exit_now(status)
    sys.exit(status)


class Terminated(KeyboardInterrupt):
    """SIGTERM where a command does not take it itself (``watch``, ``build-tree``, ``import`` and ``append
    --ndjson`` do): the command stops as at Ctrl-C, with one line and exit 143, not silently."""


class HungUp(KeyboardInterrupt):
    """SIGHUP (the terminal closed) where a command does not take it itself: as SIGTERM, exit 129."""


def _terminate(_signum, _frame) -> None:
    raise Terminated


def _hang_up(_signum, _frame) -> None:
    raise HungUp


def _interrupted(exc: KeyboardInterrupt) -> ExitStatus:
    if isinstance(exc, HungUp):
        return ExitStatus.HANGUP
    return ExitStatus.TERMINATED if isinstance(exc, Terminated) else ExitStatus.INTERRUPTED


def _closed_streams() -> None:
    """A standard stream the caller closed (``>&-``) is ``/dev/null`` instead: what the command writes there
    goes nowhere, as to a reader that went away, and no file opened later takes its number."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        if getattr(sys, name) is None:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", errors="surrogateescape", closefd=False))


def _exit_now(status: int) -> None:
    """End the process without the interpreter's teardown (freeing every module and object costs Claude Code's
    hook, which runs every turn, about 15 ms of CPU): what ``atexit`` holds runs first (a view left to save),
    the streams are flushed. Everything the hook wrote is durable or committed by now; a live thread that is
    not a daemon gets the ordinary exit instead."""
    import atexit
    import threading

    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(status)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _refused(exc: output.StdoutRefused) -> ExitStatus:
    """stdout refused the help or the version: one line, exit 7, as for a command's output."""
    output.quiet_stdout()
    env.stderr().write(f"pimem: error: {exc}\n")
    return ExitStatus(exc.code)


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
    env.stderr().write(f"pimem: error: {message[:1].lower() + message[1:]}{hint}\n")
    return ExitStatus.USAGE


def app() -> typer.Typer:
    """The whole app, for tests (``CliRunner().invoke(cli.app(), …)``) and the doc generator."""
    return build()
