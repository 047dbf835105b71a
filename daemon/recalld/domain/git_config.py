"""A repository's config file read the way git reads it, before libgit2 is let near it.

libgit2 opens a repository's ``config`` on every open and follows each ``[include]`` and
``[includeIf "..."]`` it finds there, to any file, a FIFO or a device included. So the file
is parsed here first, by git's own rules (``config.c``): a UTF-8 BOM at the start skipped,
git's blanks (space, tab, a lone ``\\r``) skipped, CRLF a newline, ``\\v`` and ``\\f`` refused
(libgit2 skips them, git does not read such a file), section
names case-insensitive, ``[section "sub"]`` and the old ``[section.sub]``, a key-value pair
on a section's own line, quoted values, escapes and continuation lines. What git would
reject is rejected here too (:class:`ConfigSyntax`), so a file that reads one way here and
another way in libgit2 is refused rather than guessed at. One pass, linear in the file.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConfigSyntax", "Entry", "parse", "unsafe"]

_BOM = b"\xef\xbb\xbf"
# git's own isspace: not \v or \f, which libgit2 skips and git refuses (and so do we).
_SPACE = frozenset(b" \t\n\r")
_ESCAPES = {ord("n"): "\n", ord("t"): "\t", ord("b"): "\b", ord("\\"): "\\", ord('"'): '"'}
_TRUE = frozenset({"true", "yes", "on", "1"})


class ConfigSyntax(ValueError):
    """The config is not one git would read (and so not one to guess about)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One ``key = value``: section lowercased, subsection as written (None: none), key
    lowercased, value None for a bare key (git's boolean true)."""

    section: str
    subsection: str | None
    key: str
    value: str | None


def _name_byte(c: int) -> bool:
    return chr(c).isascii() and (chr(c).isalnum() or c in b"-.")


class _Reader:
    """The bytes of a config, read one at a time as git's ``get_next_char`` does."""

    def __init__(self, data: bytes) -> None:
        self.data = data[len(_BOM) :] if data.startswith(_BOM) else data
        self.pos = 0

    def next(self) -> int:
        """The next byte; a newline at the end (git's EOF reads as one); CRLF is one newline."""
        if self.pos >= len(self.data):
            self.pos += 1
            return ord("\n")
        c = self.data[self.pos]
        self.pos += 1
        if c == ord("\r") and self.pos < len(self.data) and self.data[self.pos] == ord("\n"):
            self.pos += 1
            return ord("\n")
        return c

    def at_end(self) -> bool:
        return self.pos >= len(self.data)


def _section(r: _Reader) -> tuple[str, str | None]:
    """A section header after its ``[``: its name and subsection."""
    name = bytearray()
    while True:
        c = r.next()
        if c == ord("]"):
            break
        if c in _SPACE and c != ord("\n"):
            return _extended(r, name)
        if not _name_byte(c):
            raise ConfigSyntax("bad section header")
        name.append(c)
    section, dot, sub = bytes(name).decode().partition(".")
    if not section:
        raise ConfigSyntax("empty section name")
    # The old [section.sub] form: git lowercases its subsection too.
    return section.lower(), sub.lower() if dot else None


def _extended(r: _Reader, name: bytearray) -> tuple[str, str | None]:
    """``[section "sub"]``, after the blank that follows the name."""
    c = r.next()
    while c in _SPACE and c != ord("\n"):
        c = r.next()
    if c != ord('"') or not name or b"." in name:
        raise ConfigSyntax("bad section header")
    sub = bytearray()
    while True:
        c = r.next()
        if c == ord("\n"):
            raise ConfigSyntax("unterminated subsection")
        if c == ord('"'):
            break
        if c == ord("\\"):
            c = r.next()
            if c == ord("\n"):
                raise ConfigSyntax("unterminated subsection")
        sub.append(c)
    if r.next() != ord("]"):
        raise ConfigSyntax("bad section header")
    return bytes(name).decode().lower(), bytes(sub).decode("utf-8", errors="replace")


def _value(r: _Reader) -> str:
    """A value after its ``=``, to the end of its (continued) line."""
    out = bytearray()
    quoted = comment = False
    spaces = 0
    while True:
        c = r.next()
        if c == ord("\n"):
            if quoted:
                raise ConfigSyntax("unterminated quote")
            return bytes(out).decode("utf-8", errors="replace")
        if comment:
            continue
        if c in _SPACE and not quoted:
            if out:
                spaces += 1
            continue
        if not quoted and c in b";#":
            comment = True
            continue
        out += b" " * spaces
        spaces = 0
        if c == ord("\\"):
            c = r.next()
            if c == ord("\n"):
                continue  # a continuation line
            if c not in _ESCAPES:
                raise ConfigSyntax("bad escape in a value")
            out += _ESCAPES[c].encode()
            continue
        if c == ord('"'):
            quoted = not quoted
            continue
        out.append(c)


def parse(data: bytes) -> list[Entry]:
    """Every entry of the config ``data``, in order.

    Raises:
        ConfigSyntax: git would not read it.
    """
    r = _Reader(data)
    entries: list[Entry] = []
    section: tuple[str, str | None] | None = None
    comment = False
    while not r.at_end():
        c = r.next()
        if c == ord("\n"):
            comment = False
            continue
        if comment or c in _SPACE:
            continue
        if c in b"#;":
            comment = True
            continue
        if c == ord("["):
            section = _section(r)
            continue
        if not chr(c).isascii() or not chr(c).isalpha():
            raise ConfigSyntax(f"unexpected byte {c:#x}")
        if section is None:
            raise ConfigSyntax("a key outside any section")
        key = bytearray([c])
        c = r.next()
        while chr(c).isascii() and (chr(c).isalnum() or c == ord("-")):
            key.append(c)
            c = r.next()
        while c in b" \t":
            c = r.next()
        value: str | None = None
        if c == ord("="):
            value = _value(r)
        elif c != ord("\n"):
            raise ConfigSyntax("bad key")
        entries.append(Entry(section[0], section[1], bytes(key).decode().lower(), value))
    return entries


def unsafe(entries: list[Entry]) -> str | None:
    """Why a repository with this config must not be opened by libgit2; None when it may.
    An include of any kind (libgit2 would read the file it names, wherever it is), or a
    partial clone or promisor remote (objects fetched on demand: answers would depend on
    what is not there)."""
    for e in entries:
        if e.section.startswith("include"):
            return "its config includes another file"
        if (e.section, e.key) == ("extensions", "partialclone"):
            return "it declares a partial clone"
        if e.section == "remote" and e.key == "promisor":
            if (e.value or "true").strip().lower() in _TRUE:
                return "it declares a promisor remote"
    return None
