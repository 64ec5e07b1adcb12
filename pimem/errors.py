"""Exit codes (DESIGN.md §4) and the exceptions that carry them.

Commands raise these; the one boundary in ``pimem.cli`` turns them into ``pimem: error: …`` on stderr and
the exit code. Library users catch ``PimemError``.
"""

OK = 0
NOTHING_FOUND = 1
USAGE = 2
NOT_FOUND = 3
BUSY = 4
INTEGRITY = 5
PROVIDER = 6
SYSTEM = 7

# the one exit-code table: the README, the man pages and --help all show this
EXIT_CODES = {
    OK: "ok",
    NOTHING_FOUND: "nothing found (like grep)",
    USAGE: "bad usage or bad input: one line on stderr names what was wrong; nothing was written",
    NOT_FOUND: "no such memory, message or node",
    BUSY: "busy: a lock or lease was held past `--timeout`",
    INTEGRITY: "integrity error: run `pimem fsck`",
    PROVIDER: "compactor or provider failure",
    SYSTEM: "the system refused: disk full, permission denied, a read-only file system (one line names it)",
}


class PimemError(Exception):
    """A failure the user can act on; ``code`` is the process exit code."""

    code = USAGE

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class NothingFound(PimemError):
    code = NOTHING_FOUND


class BadInput(PimemError):
    code = USAGE


class NotFound(PimemError):
    code = NOT_FOUND


class Busy(PimemError):
    code = BUSY


class IntegrityError(PimemError):
    code = INTEGRITY


class ProviderError(PimemError):
    code = PROVIDER


def translate(exc: BaseException) -> PimemError | None:
    """The error an OS or SQLite failure stands for, with one line naming it (disk full, permission denied:
    exit 7; a database busy past its timeout: 4; a damaged one: 5), or None for anything else. The CLI's
    boundary and the MCP server both use it, so a client reads the same reason a shell user does."""
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return PimemError(f"{exc.strerror or exc}{where}", SYSTEM)
    if type(exc).__module__ == "sqlite3":  # (sqlite3 is never imported just to ask)
        text = str(exc)
        code = BUSY if "locked" in text or "busy" in text else INTEGRITY if "malformed" in text or "not a database" in text else SYSTEM
        return PimemError(f"SQLite: {text}", code)
    return None
