"""Which memory a command means when its NAME is left out.

Every command's NAME is optional: the default memory is ``$PIMEM_MEMORY``, else ``main``. A command whose
NAME comes before another positional (``since [NAME] [WHEN]``, ``zoom [NAME] ID+N``) sees a lone positional
first in NAME's place; ``lone`` moves it to the other slot unless a memory has that name. Commands whose
NAME comes before free words (``append``, ``remember``, ``memories``, ``recall``) split them with ``words``.
"""

from __future__ import annotations

import os
import stat
from typing import Callable

from . import env
from .errors import PimemError
from .home import NAME_RE, claimed, resolve

DEFAULT = "main"


def default() -> str:
    """The memory a command uses when none is named: ``$PIMEM_MEMORY``, else ``main``."""
    return os.environ.get("PIMEM_MEMORY") or DEFAULT


def taken() -> str:
    """The default memory, taken by a command that names none: a ``$PIMEM_MEMORY`` that is no memory's name is
    refused saying so (the user typed it there, not on the command line); ``BadInput``, exit 2."""
    name = default()
    if name != DEFAULT:
        from .errors import BadInput
        from .home import validate_name

        try:
            validate_name(name)
        except BadInput as exc:
            raise BadInput(f"$PIMEM_MEMORY: {exc}") from None
    return name


def given(name: str | None) -> str:
    """The memory a command was given: ``name``, or the default one when none was (an empty name given is
    refused by the memory's name check, not read as the default)."""
    return taken() if name is None else name


def exists(name: str, home: str | None) -> bool:
    """A memory (or a rename pointer to one) has this name, one claimed for a project with nothing logged yet
    too, or it is the default memory's name (before the first append creates it: ``pimem append main <
    reply.txt``); a broken pointer counts, for the command to report; a home that cannot be one (a relative
    ``$PIMEM_HOME``, a file) is refused here, as the command would refuse it."""
    if name == default():
        return True
    if not NAME_RE.fullmatch(name):
        return False
    where = env.home(home)  # (a home that cannot be one is said as it is: it cannot say whether the name is taken)
    try:
        path = resolve(where, name)
        return (path / "main").is_dir() or claimed(path)
    except PimemError:
        return True


def lone(name: str | None, other: str | None, home: str | None,
         reads_as: Callable[[str], bool] = lambda word: True) -> tuple[str, str | None]:
    """``(NAME, OTHER)`` for ``cmd [NAME] OTHER``: a lone positional is OTHER when no memory has that name
    and it ``reads_as`` one (a WHEN, a message number, a node id …); otherwise it is the NAME."""
    if other is None and name is not None and not exists(name, home) and reads_as(name):
        return taken(), name
    return given(name), other


def is_utf8(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (an argument's bytes that are not arrive as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text_argument(value: str | None) -> str | None:
    """``value``, an argument meant as text; ``BadInput`` (exit 2) when it holds bytes that are not UTF-8."""
    if value is not None and not is_utf8(value):
        from .errors import NOT_UTF8, BadInput

        raise BadInput(NOT_UTF8)
    return value


def memory_id(value: str | None, what: str) -> str | None:
    """``value``, a memory's id given as ``what`` (``ID``, ``--supersede``), as ``text_argument`` takes it;
    ``BadInput`` (exit 2) when it is empty, which names no memory (not one not found, exit 3)."""
    if value == "":
        from .errors import BadInput

        raise BadInput(f"empty {what}: give a memory's id (see 'pimem memories')",
                       tools=f"empty {what}: give a memory's id (see memory_search)")
    return text_argument(value)


def joined(words: list[str] | None, refused: str) -> str:
    """``words`` joined by spaces; ``BadInput`` (exit 2) saying ``refused`` when they were given but hold nothing
    but white space (``recall c ''``): an empty query is not the listing that no query asks for."""
    text = " ".join(words or [])
    if words and not text.strip():
        from .errors import BadInput

        raise BadInput(refused)
    return text


def words(name: str | None, rest: list[str] | None, home: str | None, reads_stdin: str = "") -> tuple[str, list[str]]:
    """``(NAME, WORDS)`` for ``cmd [NAME] [WORDS…]`` (the parser put the first word in NAME): the first word is
    the NAME when a memory has that name or when more words follow it (so ``pimem append scratch "an idea"``
    creates ``scratch`` as it always did, and a mistyped name is reported, not searched for). A command that
    ``reads_stdin`` (its name) without text notes on stderr when a lone word that could name a new memory is
    taken as the text while stdin holds something to read (``pimem append notes < notes.txt``, ``echo hi | pimem
    append notes``: ``_unread_on_stdin``)."""
    given = ([name] if name is not None else []) + list(rest or [])
    for word in given:  # (words are text: one not UTF-8 is a usage error, not a search that finds nothing)
        text_argument(word)
    if given and (len(given) > 1 or exists(given[0], home)):
        return given[0], given[1:]
    name = taken()
    if reads_stdin and len(given) == 1 and NAME_RE.fullmatch(given[0]) and _unread_on_stdin():
        env.stderr().write(f"pimem: no memory is named '{given[0]}': taking it as the text for '{name}' "
                           f"(to fill a new memory from stdin: pimem {reads_stdin} {given[0]} -)\n")
    return name, given


def say_none(home: str | os.PathLike | None, nothing: str) -> None:
    """For a command over every memory (``fsck``, ``build-tree``, ``reindex`` naming none) on a home that holds
    none: one line on stderr naming the home, and whether it exists (a typo in ``$PIMEM_HOME`` shows); the
    command exits 0 (cron runs build-tree on a home nothing was logged in yet), where ``list`` finds nothing (1)."""
    from . import output

    root = env.home(home)
    missing = "" if root.is_dir() else " (no such directory)"
    output.info(f"pimem: no memories in {root}{missing}; nothing to {nothing}")


def searched_in(name: str, rest: list[str], home: str | None, command: str) -> None:
    """For a command that searches (``recall``, ``memories``), after ``words``: a first word of several that
    names no memory is refused (``NotFound``, exit 3) saying how to search them all in the default memory,
    quoted as one argument (``Memory.open`` would say only that no memory has that name)."""
    if rest and NAME_RE.fullmatch(name) and not exists(name, home):
        import shlex

        from .errors import NotFound

        raise NotFound(f"no memory named '{name}' in {env.home(home)} (see 'pimem list'); to search several "
                       f"words in '{taken()}', quote them: pimem {command} {shlex.quote(' '.join([name, *rest]))}")


def searched_for(query: str, names: list[str], home: str | None) -> None:
    """For ``search QUERY [NAME…]``: a NAME that names no memory is refused (``NotFound``, exit 3) saying how to
    search it as a word of the query, quoted with it (``search staging db``: ``Memory.named`` would say only that
    no memory is named db)."""
    for k, name in enumerate(names):
        if NAME_RE.fullmatch(name) and not exists(name, home):
            import shlex

            from .errors import NotFound

            again = " ".join([shlex.quote(" ".join([query, *names[: k + 1]])), *map(shlex.quote, names[k + 1 :])])
            raise NotFound(f"no memory named '{name}' in {env.home(home)} (see 'pimem list'); to search for several "
                           f"words, quote them: pimem search {again}")


def _unread_on_stdin() -> bool:
    """Whether stdin is a file with something left to read, or a pipe or socket with bytes already waiting in it
    (``echo hi | pimem append notes``; an agent wrapper's pipe with nothing written in it gets no note)."""
    try:
        fd = env.current().stdin.fileno()
        info = os.fstat(fd)
        if stat.S_ISFIFO(info.st_mode) or stat.S_ISSOCK(info.st_mode):
            import fcntl
            import struct
            import termios

            return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0] > 0
        return stat.S_ISREG(info.st_mode) and info.st_size > os.lseek(fd, 0, os.SEEK_CUR)
    except (AttributeError, ValueError, OSError, ImportError):  # no descriptor (an in-process runner), not seekable, no FIONREAD
        return False
