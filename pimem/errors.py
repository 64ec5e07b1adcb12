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
    130: "stopped by SIGINT (Ctrl-C): what was durable is kept, one line says what (128 + the signal, as shells expect)",
    143: "stopped by SIGTERM: the same",
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
