"""``python -m pimem``: the typer app (``pimem.cli``), and a path around it for Claude Code's hook.

Claude Code runs ``pimem hook claude-code`` on every event of every turn, and importing typer and click is
about 25 ms of an event's ~65. So exactly that command, with only its own options (``--home``, ``-n/--name``,
``--budget``, ``--timeout``, each once, as ``--opt value`` or ``--opt=value``) and values typer would take,
runs here in the same boundary as every command (``pimem.boundary``), with no typer. Anything else (install,
uninstall, --help, another option, a value typer would refuse, a shell completion) goes to the typer app,
which says what is wrong as it always has.

From ``main``'s first line, a signal (Ctrl-C, SIGTERM, SIGHUP) is noted while pimem imports its modules, and taken
as the command's boundary begins (``stopping.defer``, ``boundary.take_signals``): one line and 130, 143 or 129,
as later, never a traceback from the middle of an import or a silent death.
"""

import os
import sys

from .errors import ExitStatus

# the hook's options (pimem.commands.hook) -> its keyword in claude_code.handle
HOOK_OPTIONS = {"--home": "home", "-n": "name", "--name": "name", "--budget": "budget", "--timeout": "timeout"}


def hook_options(args: list[str]) -> dict | None:
    """The options of ``hook claude-code`` in ``args`` as typer would parse them, or None if the typer app
    should parse them (anything but those options, each given once with a value typer would take)."""
    if args[:1] != ["hook"] or os.environ.get("_PIMEM_COMPLETE"):  # (click's completion variable)
        return None
    from .errors import BadInput
    from .numbers import count, seconds

    words, given, rest = [], {}, args[1:]
    while rest:
        arg = rest.pop(0)
        if not arg.startswith("-"):
            words.append(arg)
            continue
        option, equals, value = arg.partition("=")
        if option not in HOOK_OPTIONS or (equals and option == "-n"):  # (click reads -n=x as the name '=x')
            return None
        if not equals:
            if not rest or rest[0].startswith("-"):  # (a missing value; one like an option: typer decides)
                return None
            value = rest.pop(0)
        key = HOOK_OPTIONS[option]
        if key in given:
            return None
        given[key] = value
    if words != ["claude-code"]:
        return None
    try:  # (as the typer options' types parse them: numbers.param(count, "CHARS"), numbers.param(seconds, "S"))
        if "budget" in given:
            given["budget"] = count(given["budget"], None)
        if "timeout" in given:
            given["timeout"] = seconds(given["timeout"], None)
    except BadInput:
        return None
    return given


def _hook(**options) -> None:
    from . import boundary, claude_code, env

    raise boundary.Exit(claude_code.handle(env.current().stdin.buffer, **options))


def hook(options: dict) -> None:
    """``pimem hook claude-code`` as the typer app runs it (``cli.main``): the same streams, signals and
    boundary; the exit without the interpreter's teardown."""
    from . import boundary, output

    boundary.begin()
    try:
        boundary.take_signals()  # (a signal that came as pimem started is raised here)
        try:
            boundary.guarded(_hook, writes=True)(**options)
            code = 0
        except boundary.Exit as exc:
            code = exc.exit_code
        output.flush()
    except boundary.ENDINGS as exc:
        code = boundary.ended(exc)
    boundary.leave(code, now=True)


def _interrupted() -> None:
    """Ctrl-C before the signals were noted: as the boundary ends a command it stops (``boundary.ended``)."""
    try:
        os.write(2, b"pimem: interrupted\n")
    except OSError:  # (a stderr closed or full changes nothing)
        pass
    os._exit(ExitStatus.INTERRUPTED)


def main() -> None:
    try:
        from . import stopping

        stopping.defer()  # a signal is noted from here on, and taken as the command's boundary begins
    except KeyboardInterrupt:  # (Ctrl-C before that, from Python's own handler: nothing has begun)
        _interrupted()
    options = hook_options(sys.argv[1:])
    if options is not None:
        hook(options)
    from .cli import main

    main()


if __name__ == "__main__":
    main()
