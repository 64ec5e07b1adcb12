from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from .. import bulk, decoder, env, ingest, naming, output, stopping, when
from ..errors import BadInput
from ..memory import Memory
from ..message import check_numbers, kind_of
from ..options import MESSAGE_KINDS, Home, Json, Name, Timeout


def command(
    name: Name = None,
    text: Annotated[Optional[list[str]], typer.Argument(help="Message text (default, or -: read stdin).", metavar="TEXT…", show_default=False)] = None,
    kind: Annotated[str, typer.Option("-k", "--kind", help="user, pi, tool, echo, work or note (aliases: assistant, tool_call, tool_result, bash, custom).", autocompletion=MESSAGE_KINDS)] = "user",
    date: Annotated[Optional[str], typer.Option("--date", help="The message's date: RFC 3339, or any WHEN (yesterday 9:30, 2h ago; default: now).", metavar="WHEN")] = None,
    meta: Annotated[Optional[str], typer.Option("--meta", help="A JSON object stored with the message.", metavar="JSON")] = None,
    ndjson: Annotated[bool, typer.Option("--ndjson", help="Read a stream of {kind,text,date?,meta?} lines from stdin; one fsync per batch.")] = False,
    json: Json = False,
    timeout: Timeout = None,
    home: Home = None,
) -> None:
    """Log one message (or a stream) verbatim and print its number i.

    The message is acknowledged only after it is on disk (fsync). Invalid input is refused whole, before
    anything is written, with exit 2.

    NAME is optional ($PIMEM_MEMORY, else main): a lone word is the NAME when a memory has that name, else
    the text; of two or more words the first is the NAME (a new name creates the memory).

    Examples:
      pimem append "the staging db listens on 5433"
      pimem append main "the staging db listens on 5433"
      pimem append -k pi < reply.txt
      pimem append notes - < notes.txt
      echo '{"kind":"user","text":"hi"}' | pimem append main --ndjson
    """
    if ndjson:  # the one word it takes is the NAME
        if text or date or meta or kind != "user":
            raise BadInput("--ndjson reads kind, text, date and meta from each line; drop TEXT, -k, --date and --meta")
        _append_stream(naming.given(name), json, timeout, home)
        return
    name, text = naming.words(name, text, home, reads_stdin="append")
    dash = text == ["-"]  # (stdin read even from a terminal, up to Ctrl-D)
    mem = Memory.at(name, home)
    if text and not dash:
        body = " ".join(text)
    elif env.stdin_is_tty() and not dash:
        raise BadInput("no text: give it as arguments, pipe it on stdin, or give - to type it (Ctrl-D ends it)")
    else:  # tool output is trimmed, not refused: it may be longer, up to an input line's cap
        body = ingest.read_text(sys.stdin.buffer, ingest.line_cap(mem.text_cap) if kind_of(kind) == "echo" else mem.text_cap)
    record: dict = {"kind": kind, "text": body}
    if date is not None:
        record["date"] = when.message_date(date)
    if meta is not None:
        try:
            record["meta"] = decoder.loads(meta)
        except decoder.JSONDecodeError as exc:
            raise BadInput(f"--meta: {decoder.refusal(exc)}") from None
        check_numbers(record, meta)
    _print_ids(mem.append([record], timeout), json)


def _append_stream(name: str, json: bool, timeout: float | None, home: str | None) -> None:
    mem = Memory.at(name, home)
    logged = 0
    if bulk.available():
        logging = bulk.append_ndjson(mem, sys.stdin.buffer, timeout)
    else:
        batches = (mem.prepare(records, labels) for records, labels in ingest.ndjson_batches(sys.stdin.buffer, mem.text_cap))
        logging = mem.append_stream(batches, timeout)
    try:
        with stopping.armed():
            for ids in logging:
                _print_ids(ids, json)
                logged += len(ids)
    except stopping.Interrupted as exc:
        output.info(f"pimem: interrupted: {output.count(logged, 'message')} logged and printed; "
                    "the rest of stdin was not logged")
        raise typer.Exit(exc.code) from None
    except BadInput as exc:
        if logged:
            raise BadInput(f"{exc} (that batch was refused; the {output.count(logged, 'message')} before it {'was' if logged == 1 else 'were'} logged)") from None
        raise
    if not logged:
        raise BadInput("no messages on stdin")


def _print_ids(ids: list[int], json: bool) -> None:
    if json:
        for i in ids:
            output.json_line({"i": i})
    else:
        output.raw_line("\n".join(map(str, ids)).encode())
    output.flush()
