from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from .. import env, ingest, memories, naming, output
from ..memory import Memory
from ..options import Home, Json, Name, Session, Timeout, offer


def command(
    name: Name = None,
    text: Annotated[Optional[list[str]], typer.Argument(help="What to remember (default: read stdin; - reads stdin too).", metavar="TEXT…", show_default=False)] = None,
    pin: Annotated[bool, typer.Option("--pin", help="Pin it: pinned memories come first in every context.")] = False,
    kind: Annotated[Optional[str], typer.Option("--kind", help="fact (default), preference, constraint, decision, working or derived.", autocompletion=offer(*memories.KINDS))] = None,
    priority: Annotated[Optional[str], typer.Option("--priority", help="low, normal (default) or high.", autocompletion=offer(*memories.PRIORITIES))] = None,
    scope: Annotated[Optional[str], typer.Option("--scope", help="project (default), user, or session (needs --session).", autocompletion=offer(*memories.SCOPES))] = None,
    supersede: Annotated[Optional[str], typer.Option("--supersede", help="Replace this memory (its text is kept when no TEXT is given).", metavar="ID")] = None,
    propose: Annotated[bool, typer.Option("--propose", help="Write it as the model would: provisional until the user confirms it.")] = False,
    session: Session = None,
    json: Json = False,
    timeout: Timeout = None,
    home: Home = None,
) -> None:
    """Write an authoritative memory and print its id.

    Your memories are active (or pinned with --pin) and reach the model every turn through 'pimem context'.
    --propose writes a provisional one, as a model's tool call would; only you make it active, by
    superseding it. Events are appended to the hash-chained memory.jsonl; remember creates the memory.

    Examples:
      pimem remember "use pnpm, not npm"
      pimem remember main "use pnpm, not npm"
      pimem remember main --pin --kind constraint "never touch the production database"
      pimem remember main --supersede mem_3f9a0c1d2e4b5a6c "use pnpm 9"
      pimem remember main --propose "the staging db listens on 5433"
    """
    name, text = naming.words(name, text, home, reads_stdin="remember")
    naming.memory_id(supersede, "--supersede"), naming.text_argument(session)
    body = " ".join(text) if text and text != ["-"] else None
    if body is None and (not env.stdin_is_tty() or text == ["-"]):  # (- reads a terminal too, up to Ctrl-D)
        body = ingest.read_text(sys.stdin.buffer, memories.TEXT_CAP, "a memory is a statement, not a document") or None
        # (nothing on stdin is no text, as on a terminal; an argument "" is a blank text given)
    mem = Memory.open(name, home) if supersede else Memory.at(name, home)
    record = memories.remember(
        mem, body, pin=pin, kind=kind, priority=priority, scope=scope, supersede=supersede, session=session,
        propose=propose, timeout=timeout,
    )
    if json:
        output.line(memories.read(record, limit=memories.SNIPPET))
    else:
        output.line(record["id"])
        output.info(f"remembered {record['id']} ({record['status']} {record['kind']})")
