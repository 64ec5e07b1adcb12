"""Numbers the user types, parsed once and bounded: message numbers, counts, seconds, amounts of money.

Only ASCII digits count (Python's ``int`` would take Arabic-Indic or full-width digits, and spaces around
them); a value out of range is refused with the range, never passed on to overflow in SQLite or the clock.
``Param`` turns each parser into a type for typer options and arguments, so a bad value is a usage error
(exit 2, one line) before the command runs.
"""

from __future__ import annotations

import math
import re

from .errors import BadInput

MAX_I = 2**63 - 1  # message numbers are SQLite INTEGERs
MAX_SECONDS = 366 * 86400.0  # the longest wait anyone means (a year); past it the clock overflows
MAX_COUNT = 10**9
_DIGITS = re.compile(r"[0-9]{1,19}")
# (as many decimals as a float's shortest repr has, and some: a script passing on Python's 1/3 is not refused)
_DECIMAL = re.compile(r"[0-9]{1,12}(?:\.[0-9]{0,24})?|\.[0-9]{1,24}")


def _refuse(text: str, what: str | None, rule: str) -> BadInput:
    return BadInput(f"bad {what} {text!r}: use {rule}" if what else f"{text!r}: use {rule}")


def index(text: str, what: str | None = "message number") -> int:
    """A message number 0 … 2^63−1, written in ASCII digits."""
    value = int(text) if _DIGITS.fullmatch(text) else -1
    if not 0 <= value <= MAX_I:
        raise _refuse(text, what, f"a whole number from 0 to {MAX_I}")
    return value


def count(text: str, what: str | None, lo: int = 0, hi: int = MAX_COUNT) -> int:
    """A whole number lo … hi."""
    value = int(text) if _DIGITS.fullmatch(text) else -1
    if not lo <= value <= hi:
        raise _refuse(text, what, f"a whole number from {lo} to {hi:,}")
    return value


def decimal(text: str, what: str | None, hi: float) -> float:
    """A finite, non-negative decimal number up to ``hi`` (no nan, inf, exponents or signs)."""
    value = float(text) if _DECIMAL.fullmatch(text) else -1.0
    if not (0 <= value <= hi and math.isfinite(value)):
        raise _refuse(text, what, f"a number from 0 to {hi:,.0f}, in plain digits (0.0000001, not 1e-7)")
    return value


def seconds(text: str, what: str | None = "number of seconds") -> float:
    return decimal(text, what, MAX_SECONDS)


def usd(text: str, what: str | None = "amount in USD") -> float:
    return decimal(text, what, 1e9)


def dollars(amount: float) -> str:
    """``amount`` as it was typed, in plain digits: ``$0.00001``, ``$5``, ``$1000000`` (``:g`` wrote ``$1e-05``)."""
    from decimal import Decimal

    return f"${Decimal(repr(float(amount))).normalize():f}"


def money(amount: float) -> str:
    """A computed amount of money: ``$0.0179`` (four decimals), or two significant digits in plain digits
    under a hundredth of a cent (``$0.000011``, where four decimals said ``$0.0000``)."""
    if amount == 0 or abs(amount) >= 0.0001:
        return f"${amount:.4f}"
    from decimal import Decimal

    return f"${Decimal(f'{amount:.2g}'):f}"


def param(parse, metavar: str, **bounds):
    """A click parameter type parsing with ``parse(text, None, **bounds)`` (click names the option)."""
    from typer._click.types import ParamType  # (typer vendors click)

    class Param(ParamType):
        name = metavar

        def convert(self, value, param, ctx):
            if not isinstance(value, str):
                return value
            try:
                return parse(value, None, **bounds)
            except BadInput as exc:
                self.fail(str(exc), param, ctx)

    return Param()
