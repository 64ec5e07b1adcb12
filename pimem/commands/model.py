from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import naming, output
from ..config import MAX_PRICE
from ..numbers import decimal, param
from ..options import Home, Json


PRICE = param(decimal, "USD", hi=MAX_PRICE)  # (as config.json takes it: a cost that stays finite)


def command(
    name: Annotated[Optional[str], typer.Argument(help="Memory name (default: $PIMEM_MEMORY, else main; with --default: the model).", metavar="NAME", show_default=False)] = None,
    spec: Annotated[Optional[str], typer.Argument(help="PROVIDER/MODEL to set, e.g. openai/gpt-4o-mini.", metavar="PROVIDER/MODEL", show_default=False, autocompletion=lambda: _providers())] = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="Endpoint of an OpenAI-compatible or Anthropic API.", metavar="URL")] = None,
    key_env: Annotated[Optional[str], typer.Option("--key-env", help="Name of the environment variable holding the API key.", metavar="VAR")] = None,
    command_: Annotated[Optional[str], typer.Option("--command", help="Shell command reading the prompt on stdin (provider 'command').", metavar="CMD")] = None,
    price_in: Annotated[Optional[float], typer.Option("--price-in", help="Price per million input tokens, for cost accounting.", metavar="USD", click_type=PRICE)] = None,
    price_out: Annotated[Optional[float], typer.Option("--price-out", help="Price per million output tokens.", metavar="USD", click_type=PRICE)] = None,
    price_cached_in: Annotated[Optional[float], typer.Option("--price-cached-in", help="Price per million input tokens read from the provider's prompt cache (default: --price-in).", metavar="USD", click_type=PRICE)] = None,
    default: Annotated[bool, typer.Option("--default", help="Show or set the default for memories without their own (<home>/config.json).")] = False,
    json: Json = False,
    home: Home = None,
) -> None:
    """Show or set the compactor: the model that writes a memory's summaries.

    PROVIDER is openai (any OpenAI-compatible endpoint), anthropic, command, extractive (offline, the default),
    or a shortcut for a known OpenAI-compatible service: deepseek, openrouter, ollama. Keys are read from the
    environment variable named by --key-env (each shortcut has a default); they are never stored. Setting a
    model replaces the previous provider settings. With --default the setting goes to <home>/config.json and
    applies to every memory that has no compactor of its own.

    Examples:
      pimem model
      pimem model main
      pimem model main openai/gpt-4o-mini --price-in 0.15 --price-out 0.6
      pimem model main deepseek/deepseek-chat
      pimem model main anthropic/claude-haiku-4-5 --key-env ANTHROPIC_API_KEY
      pimem model main ollama/llama3.2
      pimem model main command --command 'llm -n -m gpt-4o-mini -s {system}'
      pimem model --default extractive
    """
    from .. import compactor, config
    from ..errors import BadInput
    from ..memory import Memory

    if default:
        if spec is not None:
            raise BadInput("with --default give only PROVIDER/MODEL (no memory name)")
        name, spec = None, name
    else:
        name, spec = naming.lone(name, spec, home, reads_as=lambda word: word.partition("/")[0] in compactor.PRESETS)
    options = (base_url, key_env, command_, price_in, price_out, price_cached_in)
    if spec is None and any(v is not None for v in options):
        raise BadInput("--base-url, --key-env, --command and prices go with a PROVIDER/MODEL to set")
    if spec is None:
        output.read_only()
    else:
        cfg = compactor.parse_spec(spec, base_url, key_env, command_, price_in, price_out, price_cached_in)
    if default:
        if spec is not None:
            config.save_home(home, {"compactor": cfg})
        shown = config.of_home(home).get("compactor") or {}
        where = "default"
    else:
        mem = Memory.open(name, home)
        if spec is not None:
            mem.save_config({"compactor": cfg})
        shown = mem.config.get("compactor") or {}
        where = mem.name
    row = {"memory": None if default else where, **compactor.describe(shown)}
    wrong = compactor.key_problem(shown)
    if wrong:
        output.info(f"pimem: warning: {wrong} here: {row['model']} cannot summarise until it is set right "
                    "(cron and services need it in their own environment)")
    unsent = compactor.unsent_password(shown)
    if unsent:
        output.info(f"pimem: warning: {unsent}")
    if json:
        output.json_line(row)
        return
    output.line(f"{where}: {row['model']}")
    for key in ("base_url", "key_env", "command", "price_in", "price_out", "price_cached_in"):
        if key in row:
            output.line(f"  {key:<9} {row[key]}{_kept(key, shown[key]) if row[key] != shown[key] else ''}")


def _kept(key: str, value: str) -> str:
    """What a setting shown otherwise than config.json holds it left out (config.json keeps it, to use it)."""
    from ..compactor.providers import strip_userinfo

    if key != "base_url":
        return " (its secrets redacted, kept in config.json)"
    hidden = [what for what, there in (("a user and password", strip_userinfo(value) != value),
                                       ("the query's values", "=" in value.partition("?")[2])) if there]
    return f" (and {' and '.join(hidden)}, kept in config.json)" if hidden else ""


def _providers() -> list[str]:
    """What completion offers for PROVIDER/MODEL: each provider, with its slash when it needs a model."""
    from ..compactor import PRESETS

    return [word if PRESETS[word]["provider"] in ("command", "extractive") else f"{word}/" for word in PRESETS]
