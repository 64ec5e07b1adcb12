"""NDJSON of ``{kind, text, date?, meta?}`` (what ``pimem since`` prints and ``append --ndjson`` reads).

A record's own meta is kept; ``source`` defaults to ``ndjson`` and ``entry`` to the line's hash (``.n`` after
it for the n-th repeat of the same line, ``Parser.line_entry``), or for a line of a memory's export (it holds
its ``i``) to that ``i`` and the line's hash, so re-importing an export, a copy of a memory that was itself
imported, or exports that overlap (``since main 2h`` each hour) adds nothing twice. An export's line whose
``i`` names a message the memory holds with the same kind, text and date is that message (a memory's own
export read back into it: its appended messages have no source ids to key them by).
"""

from __future__ import annotations

import orjson

from .parser import Malformed, Parser, line_digest


class NdjsonParser(Parser):
    source = "ndjson"

    @staticmethod
    def sniff(obj: dict) -> bool:
        return isinstance(obj.get("kind"), str) and "text" in obj

    @staticmethod
    def describe(obj: dict) -> dict:
        meta = obj.get("meta") if isinstance(obj.get("meta"), dict) else {}
        return {"date": obj.get("date"), "cwd": meta.get("cwd")}

    def parse(self, line_no: int, raw: bytes, obj) -> list[dict]:
        if not isinstance(obj, dict):
            raise Malformed("expected a JSON object with kind and text")
        meta = obj.get("meta", {})
        if not isinstance(meta, dict):
            raise Malformed("meta must be a JSON object")
        out = {key: obj[key] for key in obj if key not in ("meta", "i", "size")}  # the message check names any extra field
        if out.get("date") is not None:  # (a date the log cannot store: the line before's, as every importer does)
            date = out["date"]
            if isinstance(date, bool) or not isinstance(date, (str, int, float)):
                self.notes.append(f"bad date {orjson.dumps(date).decode()[:40]}: not a date; taken as no date: the line "
                                  "before's date stands")
            dated = self.date(date)
            if dated is None:
                del out["date"]  # (no line before it dated: logged now, as a line with no date is)
            else:
                out["date"] = dated
        if type(obj.get("i")) is int:
            out["i"] = obj["i"]  # (the import looks there for the message itself: ``job``)
        out["meta"] = {"source": self.source, **meta}
        if "entry" not in out["meta"]:
            out["meta"]["entry"] = f"i{obj['i']}-{line_digest(raw)}" if type(obj.get("i")) is int else self.line_entry(raw)
        out["meta"].setdefault("file", self.file)
        return [out]
