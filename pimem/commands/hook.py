from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from .. import env, output
from ..errors import BadInput
from ..numbers import count, param, seconds
from ..options import Home, offer

AGENTS = ("claude-code",)


def command(
    words: Annotated[list[str], typer.Argument(help="claude-code (run as Claude Code's hook), install claude-code or uninstall claude-code.", metavar="[install|uninstall] AGENT", autocompletion=offer("install", "uninstall", *AGENTS))],
    budget: Annotated[int, typer.Option("--budget", help="Most characters of context to answer with (default 4000).", metavar="CHARS", click_type=param(count, "CHARS"), show_default=False)] = 4_000,
    timeout: Annotated[float, typer.Option("--timeout", help="Most seconds the hook takes (default 10; a watchdog ends it a second later).", metavar="S", click_type=param(seconds, "S"), show_default=False)] = 10.0,
    name: Annotated[Optional[str], typer.Option("-n", "--name", help="Memory to capture into (default: the session's project, as import names it).")] = None,
    project: Annotated[bool, typer.Option("--project", help="install, uninstall: this project's .claude/settings.json.")] = False,
    user: Annotated[bool, typer.Option("--user", help="install, uninstall: ~/.claude/settings.json (the default).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="install, uninstall: print the settings as they would be, write nothing.")] = False,
    home: Home = None,
) -> None:
    """Capture an agent's sessions as they happen, and answer its hooks with context.

    pimem hook claude-code is the command for Claude Code's hooks: it reads the event's JSON on stdin and
    imports the session transcript's new lines (and its sub-agents') into the project's memory (named as
    import names it), nothing twice. On SessionStart and UserPromptSubmit it prints the context Claude Code adds
    (hookSpecificOutput.additionalContext, at most --budget characters): the user's pinned and active
    memories and, for a prompt, the best ranked relevant messages that are not in the agent's context (not
    what its transcript holds after its last compaction boundary). A payload it cannot read, or an option it
    cannot take, exits 1 (Claude Code's non-blocking error, not 2, which Claude Code treats as blocking); any
    later failure is a warning and exit 0.

    pimem hook install claude-code merges pimem's hooks (SessionStart, UserPromptSubmit, PreCompact, Stop,
    SessionEnd) into ~/.claude/settings.json (--project: ./.claude/settings.json), keeping everything there
    and writing a backup first; a $PIMEM_HOME set then goes into the hooks as --home; run again with other --name, --budget, --home or --timeout, it changes
    pimem's hooks there to the new command and says so. pimem hook uninstall claude-code (--project) takes
    pimem's hooks out again, and nothing else, after the same backup.

    Examples:
      pimem hook install claude-code --dry-run
      pimem hook install claude-code
      pimem hook install claude-code --project
      pimem hook uninstall claude-code
      echo '{"hook_event_name":"SessionStart","session_id":"s1","cwd":"/home/dev/shop"}' | pimem hook claude-code
    """
    from .. import claude_code

    if words[:1] in (["install"], ["uninstall"]):
        agent = _agent(words[1:], words[0])
        if project and user:
            raise BadInput("give --project or --user, not both")
    if words[:1] == ["uninstall"]:  # (pimem's hooks go whatever their options: one given means nothing here)
        given = [option for option, value, default in (("--name", name, None), ("--budget", budget, claude_code.BUDGET),
                                                       ("--timeout", timeout, claude_code.TIMEOUT), ("--home", home, None))
                 if value != default]
        if given:
            raise BadInput(f"{', '.join(given)}: 'pimem hook uninstall' takes pimem's hooks out whatever their options "
                           "(it takes --project or --user, and --dry-run)")
        _uninstall(agent, claude_code.settings_path(project), dry_run)
        return
    if words[:1] == ["install"]:
        if home is not None:  # (--home '' is refused, as every command refuses it: not the environment's home)
            env.given(home)
        if name is not None:  # (refused now, not at every event it would then capture nothing)
            from ..home import validate_name

            validate_name(name)
        path = claude_code.settings_path(project)
        # (a home set in this shell: Claude Code may start without it, so the hooks would capture elsewhere)
        variable = next((v for v in ("PIMEM_HOME", "PI_MEM_HOME") if home is None and os.environ.get(v)), None)
        if variable:
            home = os.environ[variable]
            env.absolute(home, f"${variable}")  # (refused as every command refuses it)
        given = home and os.path.abspath(os.path.expanduser(home))
        if given and os.path.exists(given) and not os.path.isdir(given):  # (every event would fail on it)
            raise BadInput(f"{'$' + variable if variable else '--home'} {given} is not a directory: the hooks would capture "
                           "nowhere; give --home a directory")
        # (the hook's own options go into the installed command, when they are not the defaults)
        command_line = claude_code.hook_command(home, name, budget if budget != claude_code.BUDGET else None,
                                                timeout if timeout != claude_code.TIMEOUT else None)
        hook_timeout = max(claude_code.HOOK_TIMEOUT, int(timeout) + 5)  # Claude Code's, above the watchdog's
        settings, added, updated, backup = claude_code.install(path, command_line, dry_run, hook_timeout)
        changed = [f"pimem's {', '.join(events)} hooks in {path} from {old} to {command_line}"
                   for old, events in updated.items()]  # (installed before with other options)
        if dry_run:
            output.line(claude_code.render(settings).decode().rstrip("\n"))
            said = ([f"add {', '.join(added)} to {path}"] if added else []) + [f"change {text}" for text in changed]
            output.info("would " + "; ".join(said) if said else f"{agent} hooks already in {path}")
        elif added or changed:
            said = ([f"added pimem's {', '.join(added)} hooks to {path}"] if added else []) + [f"changed {text}" for text in changed]
            output.line("; ".join(said) + (f" (backup: {backup})" if backup else ""))
        else:
            output.line(f"pimem's {agent} hooks are already in {path}; nothing changed")
        if variable:
            output.info(f"the hooks capture into ${variable} as set now, {home}, written into them as --home "
                        "(Claude Code may start without it); give --home to choose another")
        other = claude_code.settings_path(not project)
        if os.path.realpath(other) != os.path.realpath(path) and claude_code.installed_in(other):  # (Claude Code would run both)
            output.warn(f"pimem's hooks are in {other} as well: Claude Code runs both, so each prompt gets the context "
                        f"twice; remove one with pimem hook uninstall {agent}{'' if project else ' --project'}")
        return
    _agent(words)  # (a usage error exits 1 here, not 2, which Claude Code takes as blocking: cli.runs_hook)
    if project or user or dry_run:
        raise BadInput("--project, --user and --dry-run are for 'pimem hook install'")
    code = claude_code.handle(env.current().stdin.buffer, home, name, budget, timeout)
    raise typer.Exit(code)


def _uninstall(agent: str, path, dry_run: bool) -> None:
    from .. import claude_code

    settings, removed, backup = claude_code.uninstall(path, dry_run)
    if dry_run:
        if removed:
            output.line(claude_code.render(settings).decode().rstrip("\n"))
        output.info(f"would remove pimem's {', '.join(removed)} hooks from {path}" if removed else f"no pimem {agent} hooks in {path}; nothing to remove")
    elif removed:
        output.line(f"removed pimem's {', '.join(removed)} hooks from {path}" + (f" (backup: {backup})" if backup else ""))
    else:
        output.line(f"no pimem {agent} hooks in {path}; nothing changed")


def _agent(words: list[str], verb: str = "") -> str:
    if not words:
        raise BadInput(f"give the agent: pimem hook {verb + ' ' if verb else ''}{' or '.join(AGENTS)}")
    if len(words) != 1 or words[0] not in AGENTS:
        raise BadInput(f"unknown agent {' '.join(words)!r}: use 'pimem hook claude-code', 'pimem hook install claude-code' "
                       "or 'pimem hook uninstall claude-code'")
    return words[0]
