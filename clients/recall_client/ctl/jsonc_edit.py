"""Editing one member of a JSON or JSONC file in place, leaving every other byte as it was.

Agent hosts keep their settings in JSON (Claude Code, Cursor, Gemini CLI) or JSONC (VS Code:
``//`` and ``/* */`` comments, trailing commas). A load-and-dump round trip would reorder,
reformat and, for JSONC, drop the user's comments, so edits are made on the text: the file is
scanned once for the spans of its objects' members, and a member's value is replaced,
inserted after the last member, or removed with its comma. The scan is linear in the file
and its nesting is bounded.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JsonDocument", "JsonSyntaxError"]

MAX_DEPTH = 64
# Containers down to this depth are scanned into members and items (edits reach members of
# the root's objects and items of their arrays); deeper values are kept as spans only, but for
# the objects on a document's ``focus`` (Claude Code's projects[<dir>].mcpServers), so that a
# large file's deep values cost the C decoder's time, not the scanner's.
SHAPED_DEPTH = 3
_DECODER = json.JSONDecoder()
_WS = " \t\r\n"
# Runs the scanner skips at once (each one character class: linear).
_PLAIN = re.compile(r'[^"\\\n]+')
_SPACE = re.compile(r"[ \t\r\n]+")
_SCALAR = re.compile(r"[^ \t\r\n,\]}/]+")


class JsonSyntaxError(ValueError):
    """The text is not JSON (or JSONC, when comments are allowed); says where."""


@dataclass
class _Member:
    key_start: int
    value_start: int
    value_end: int
    value: _Node


@dataclass
class _Node:
    start: int
    end: int
    # Members of an object, in order; None for any other value.
    members: dict[str, _Member] | None = None
    order: list[str] = field(default_factory=list)
    # Items of an array; None for any other value.
    items: list[_Node] | None = None


class JsonDocument:
    """A JSON(C) document whose root is an object; :meth:`set` and :meth:`delete` edit its
    text, :attr:`text` is the result, :attr:`value` what it parses to. Edits reach members of
    objects down to :data:`SHAPED_DEPTH`, and of the objects on ``focus`` (a path of keys)
    at any depth."""

    def __init__(self, text: str, *, comments: bool, focus: tuple[str, ...] = ()) -> None:
        """Raises: JsonSyntaxError: the text does not parse, or its root is no object."""
        self.comments = comments
        self.focus = focus
        self.text = text if text.strip() else "{}\n"
        self._scan()

    def _scan(self) -> None:
        scanner = _Scanner(self.text, self.comments, self.focus)
        self._root = scanner.document()
        if self._root.members is None:
            raise JsonSyntaxError("the top level is not a JSON object")
        try:
            self.value: dict[str, Any] = json.loads(scanner.plain())
        except json.JSONDecodeError as exc:  # a scalar the scanner took whole, say
            raise JsonSyntaxError(str(exc)) from exc
        except RecursionError:
            raise JsonSyntaxError("nesting too deep") from None

    def get(self, path: tuple[str, ...]) -> Any:
        value: Any = self.value
        for key in path:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return value

    def set(self, path: tuple[str, ...], value: Any) -> None:
        """Make ``path`` (object keys from the root) hold ``value``, creating the objects on
        the way. Raises: JsonSyntaxError: a value on the way is not an object."""
        node = self._root
        for depth, key in enumerate(path):
            assert node.members is not None
            member = node.members.get(key)
            last = depth == len(path) - 1
            if member is None:
                rest: Any = value
                for k in reversed(path[depth + 1 :]):
                    rest = {k: rest}
                self._insert(node, key, rest, depth)
                break
            if last:
                indent = _indent_of(self.text, node, depth)
                self._splice(member.value_start, member.value_end, _dump(value, depth + 1, indent))
                break
            if member.value.members is None:
                raise JsonSyntaxError(f"{'.'.join(path[: depth + 1])} is not an object")
            node = member.value
        self._scan()

    def delete(self, path: tuple[str, ...]) -> bool:
        """Remove the member at ``path`` (and its comma); False when there is none."""
        node = self._root
        for key in path[:-1]:
            assert node.members is not None
            member = node.members.get(key)
            if member is None or member.value.members is None:
                return False
            node = member.value
        assert node.members is not None
        name = path[-1]
        member = node.members.get(name)
        if member is None:
            return False
        spans = [(node.members[k].key_start, node.members[k].value_end) for k in node.order]
        self._remove(node, spans, node.order.index(name))
        return True

    def append(self, path: tuple[str, ...], value: Any) -> None:
        """Add ``value`` at the end of the array at ``path`` (created if missing).

        Raises:
            JsonSyntaxError: the value at ``path`` is not an array.
        """
        node, depth = self._at_path(path)
        if node is None:
            self.set(path, [value])
            return
        if node.items is None:
            raise JsonSyntaxError(f"{'.'.join(path)} is not an array")
        indent = _indent_of(self.text, node, depth)
        item = _dump(value, depth + 1, indent)
        if node.items:
            end = node.items[-1].end
            self._splice(end, end, f",\n{indent * (depth + 1)}{item}")
        else:
            self._splice(
                node.start + 1, node.end - 1, f"\n{indent * (depth + 1)}{item}\n{indent * depth}"
            )
        self._scan()

    def remove(self, path: tuple[str, ...], index: int) -> None:
        """Remove item ``index`` of the array at ``path`` (and its comma)."""
        node, _depth = self._at_path(path)
        assert node is not None and node.items is not None
        self._remove(node, [(item.start, item.end) for item in node.items], index)

    def _at_path(self, path: tuple[str, ...]) -> tuple[_Node | None, int]:
        node = self._root
        for key in path:
            member = node.members.get(key) if node.members is not None else None
            if member is None:
                return None, 0
            node = member.value
        return node, len(path)

    def _remove(self, node: _Node, spans: list[tuple[int, int]], index: int) -> None:
        """Cut entry ``index`` of ``node`` (whose entries span ``spans``), with one comma."""
        start, end = spans[index]
        if len(spans) == 1:
            # The only entry: the blank space around it goes too ({} is left), comments stay.
            while start > node.start + 1 and self.text[start - 1] in _WS:
                start -= 1
            while end < node.end - 1 and self.text[end] in _WS:
                end += 1
        elif index + 1 < len(spans):
            end = spans[index + 1][0]  # its comma and the space up to the next entry
        elif index > 0:
            start = spans[index - 1][1]  # the comma before it
        self._splice(start, end, "")
        self._scan()

    def _insert(self, node: _Node, key: str, value: Any, depth: int) -> None:
        indent = _indent_of(self.text, node, depth)
        entry = f"{json.dumps(key)}: {_dump(value, depth + 1, indent)}"
        assert node.members is not None
        if node.order:
            last = node.members[node.order[-1]]
            self._splice(last.value_end, last.value_end, f",\n{indent * (depth + 1)}{entry}")
        else:
            close = node.end - 1  # the closing brace
            self._splice(
                node.start + 1, close, f"\n{indent * (depth + 1)}{entry}\n{indent * depth}"
            )

    def _splice(self, start: int, end: int, new: str) -> None:
        self.text = self.text[:start] + new + self.text[end:]


def _dump(value: Any, depth: int, indent: str = "  ") -> str:
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    return text.replace("\n", "\n" + indent * depth)


def _indent_of(text: str, node: _Node, depth: int) -> str:
    """The file's indent unit, guessed from this object's first member (two spaces if none)."""
    if node.members:
        start: int | None = node.members[node.order[0]].key_start
    else:
        start = node.items[0].start if node.items else None
    if start is not None:
        line = text.rfind("\n", 0, start) + 1
        lead = text[line:start]
        unit = len(lead) // (depth + 1)
        if lead and not lead.strip() and unit:
            return lead[:unit]
    return "  "


def _blank(text: str) -> str:
    """``text`` as spaces, its line breaks kept (offsets and line numbers stay)."""
    return "".join(c if c == "\n" else " " for c in text)


class _Scanner:
    """One pass over the text: the spans of the values, and the text with comments and
    trailing commas blanked out (same offsets) for :func:`json.loads`."""

    def __init__(self, text: str, comments: bool, focus: tuple[str, ...]) -> None:
        self.s = text
        self.i = 0
        self.comments = comments
        self.focus = focus
        self.blank: list[tuple[int, int]] = []

    def plain(self) -> str:
        parts, at = [], 0
        for start, end in self.blank:
            cut = self.s[start:end]
            parts += [self.s[at:start], " " * len(cut) if "\n" not in cut else _blank(cut)]
            at = end
        parts.append(self.s[at:])
        return "".join(parts)

    def document(self) -> _Node:
        self._space()
        node = self._value(0, focused=True)
        self._space()
        if self.i != len(self.s):
            self._fail("unexpected text after the top-level value")
        return node

    def _fail(self, what: str) -> None:
        line = self.s.count("\n", 0, self.i) + 1
        col = self.i - (self.s.rfind("\n", 0, self.i) + 1) + 1
        raise JsonSyntaxError(f"{what} at line {line} column {col}")

    def _space(self) -> None:
        s, n = self.s, len(self.s)
        while self.i < n:
            c = s[self.i]
            if c in _WS:
                run = _SPACE.match(s, self.i)
                assert run is not None
                self.i = run.end()
            elif c == "/" and self.comments and s.startswith("//", self.i):
                end = s.find("\n", self.i)
                end = n if end < 0 else end
                self.blank.append((self.i, end))
                self.i = end
            elif c == "/" and self.comments and s.startswith("/*", self.i):
                end = s.find("*/", self.i + 2)
                if end < 0:
                    self._fail("unterminated comment")
                self.blank.append((self.i, end + 2))
                self.i = end + 2
            else:
                return

    def _value(self, depth: int, *, focused: bool = False) -> _Node:
        """The value at ``i``; ``focused``: its keys from the root are ``focus``'s first."""
        if depth > MAX_DEPTH:
            self._fail(f"nesting deeper than {MAX_DEPTH}")
        if self.i >= len(self.s):
            self._fail("unexpected end of file")
        c = self.s[self.i]
        start = self.i
        if depth >= SHAPED_DEPTH and not self.comments and not focused:
            # Below what edits reach only the span counts: the C decoder finds its end.
            try:
                _value, self.i = _DECODER.raw_decode(self.s, start)
            except json.JSONDecodeError as exc:
                self.i = exc.pos
                self._fail(exc.msg)
            except RecursionError:
                self._fail("nesting too deep")
            return _Node(start, self.i)
        if c == "{":
            return self._object(depth, focused)
        if c == "[":
            return self._array(depth)
        if c == '"':
            self._string()
        else:
            run = _SCALAR.match(self.s, self.i)
            if run is None:
                self._fail("expected a value")
            else:
                self.i = run.end()
        return _Node(start, self.i)

    def _object(self, depth: int, focused: bool) -> _Node:
        node = _Node(self.i, self.i, members={})
        assert node.members is not None
        self.i += 1
        self._space()
        while True:
            if self._at("}"):
                break
            key_start = self.i
            if not self._at('"'):
                self._fail("expected a key")
            raw = self.s[key_start : self._string()]
            try:
                key = json.loads(raw) if "\\" in raw else raw[1:-1]
            except json.JSONDecodeError:
                self.i = key_start
                self._fail("a key that is not a valid string")
            self._space()
            if not self._at(":"):
                self._fail("expected ':'")
            self.i += 1
            self._space()
            on_focus = focused and depth < len(self.focus) and self.focus[depth] == key
            value = self._value(depth + 1, focused=on_focus)
            if key not in node.members:
                node.order.append(key)
            node.members[key] = _Member(key_start, value.start, value.end, value)
            self._space()
            if self._at(","):
                comma = self.i
                self.i += 1
                self._space()
                if self._at("}"):
                    self._trailing(comma)
                    break
            elif not self._at("}"):
                self._fail("expected ',' or '}'")
        self.i += 1
        node.end = self.i
        return node

    def _array(self, depth: int) -> _Node:
        node = _Node(self.i, self.i, items=[])
        assert node.items is not None
        self.i += 1
        self._space()
        while not self._at("]"):
            node.items.append(self._value(depth + 1))
            self._space()
            if self._at(","):
                comma = self.i
                self.i += 1
                self._space()
                if self._at("]"):
                    self._trailing(comma)
            elif not self._at("]"):
                self._fail("expected ',' or ']'")
        self.i += 1
        node.end = self.i
        return node

    def _trailing(self, comma: int) -> None:
        if not self.comments:
            self.i = comma
            self._fail("trailing comma")
        self.blank.append((comma, comma + 1))

    def _string(self) -> int:
        """Skip the string at ``i``; its end (after the quote)."""
        s, n = self.s, len(self.s)
        self.i += 1
        while self.i < n:
            if run := _PLAIN.match(s, self.i):
                self.i = run.end()
                continue
            c = s[self.i]
            if c == "\\":
                self.i += 2
            elif c == '"':
                self.i += 1
                return self.i
            else:
                break
        self._fail("unterminated string")
        return self.i

    def _at(self, char: str) -> bool:
        return self.i < len(self.s) and self.s[self.i] == char
