"""An agent host's config file, read and written by ``recallctl connect``, which may run in a
repository someone else prepared (``--project DIR`` in a fresh clone).

So a file is read only if it is a regular file, and at most :data:`MAX_CONFIG_BYTES` of it:
opened without blocking (a FIFO named ``.mcp.json`` would hang a plain open), checked with
fstat on the open descriptor (``/dev/zero`` reports size 0 and never ends), read under the
bound. And a file is written only inside the directory connect reports: a project's
``.claude`` that is a symlink to ``~/.claude`` would otherwise make a project connect edit
the user's own settings (:func:`confine`).

:class:`HostFile` edits JSON and JSONC through :mod:`.jsonc_edit` (other members, comments and
layout untouched) and TOML through tomlkit (likewise); :func:`commit` writes the result
beside a backup of the old text, atomically.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .jsonc_edit import JsonDocument, JsonSyntaxError

__all__ = [
    "BACKUP_SUFFIX",
    "MAX_CONFIG_BYTES",
    "ConfigError",
    "Edit",
    "Format",
    "HostFile",
    "commit",
    "confine",
    "read_config",
]

BACKUP_SUFFIX = ".recalld-backup"
# A config file larger than this is no host's settings; refused rather than read whole.
MAX_CONFIG_BYTES = 16 * 1024 * 1024

Format = Literal["json", "jsonc", "toml"]


class ConfigError(Exception):
    """A host's file cannot be read, parsed or written where it lies; nothing was changed."""


def confine(path: Path, root: Path) -> Path:
    """``path`` (``root`` / a relative path, ``root`` resolved) with every symlink on the way
    resolved, which must stay inside ``root``: the file connect reads and writes for a
    project is the project's.

    Raises:
        ConfigError: a symlink on the way (the file's or a directory's) leads out of
            ``root``; the message names it and where it leads.
    """
    real = path.resolve()
    if real.is_relative_to(root):
        return real
    link = path
    step = root
    for part in path.relative_to(root).parts:
        step = step / part
        if step.is_symlink() and not step.resolve().is_relative_to(root):
            link = step
            break
    raise ConfigError(
        f"{link} is a symlink that leads out of {root} (to {link.resolve()}); a project's "
        "config must lie inside the project, so nothing was changed"
    )


def read_config(path: Path) -> str | None:
    """The text of ``path`` (a resolved path: its last component is not followed if it is a
    symlink, in case it became one since), None when there is none.

    Raises:
        ConfigError: it is not a regular file (a FIFO, a device, a directory), is larger
            than :data:`MAX_CONFIG_BYTES`, or cannot be read or decoded.
    """
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{path} is not a regular file; refusing to read it")
        try:
            data = fh.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes; refusing to read it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc


@dataclass
class Edit:
    path: Path
    before: str
    after: str
    existed: bool


class HostFile:
    """A host config file, parsed, edited in memory, written by :func:`commit`."""

    def __init__(self, path: Path, fmt: Format, focus: tuple[str, ...] = ()) -> None:
        """``focus``: the object a JSON edit reaches deepest (:class:`JsonDocument`'s)."""
        self.path = path
        self.fmt = fmt
        self.touched = False
        text = read_config(path)
        self.existed = text is not None
        self.before = text or ""
        # Only this command needs tomlkit.
        from tomlkit import parse
        from tomlkit.exceptions import TOMLKitError

        try:
            if fmt == "toml":
                self._toml = parse(self.before)
            else:
                self._json = JsonDocument(self.before, comments=fmt == "jsonc", focus=focus)
        except (JsonSyntaxError, TOMLKitError) as exc:
            raise ConfigError(
                f"cannot parse {path} ({exc}); fix or move it first, nothing was changed"
            ) from exc

    def get(self, path: tuple[str, ...]) -> Any:
        if self.fmt == "toml":
            value: Any = self._toml.unwrap()
            for key in path:
                if not isinstance(value, dict) or key not in value:
                    return None
                value = value[key]
            return value
        return self._json.get(path)

    def set(self, path: tuple[str, ...], value: Any, *, comment: str | None = None) -> None:
        """Make ``path`` hold ``value``; a TOML value gets ``comment`` after it."""
        if self.get(path) == value:
            return  # already so: leave the text exactly as it is
        self.touched = True
        if self.fmt == "toml":
            self._toml_set(path, value, comment)
        else:
            try:
                self._json.set(path, value)
            except JsonSyntaxError as exc:
                raise ConfigError(f"cannot edit {self.path}: {exc}") from exc

    def delete(self, path: tuple[str, ...]) -> None:
        if self.get(path) is None:
            return
        self.touched = True
        if self.fmt == "toml":
            del self._toml_parent(path)[path[-1]]
        else:
            self._json.delete(path)

    def append(self, path: tuple[str, ...], value: Any) -> None:
        """Add ``value`` to the array at ``path`` (made when missing)."""
        self.touched = True
        if self.fmt == "toml":
            import tomlkit

            parent = self._toml_parent(path, make=True)
            if path[-1] not in parent:
                parent[path[-1]] = tomlkit.aot()
            parent[path[-1]].append(tomlkit.item(value))
            return
        try:
            self._json.append(path, value)
        except JsonSyntaxError as exc:
            raise ConfigError(f"cannot edit {self.path}: {exc}") from exc

    def remove(self, path: tuple[str, ...], index: int) -> None:
        """Remove item ``index`` of the array at ``path``."""
        self.touched = True
        if self.fmt == "toml":
            del self._toml_parent(path)[path[-1]][index]
        else:
            self._json.remove(path, index)

    def _toml_parent(self, path: tuple[str, ...], *, make: bool = False) -> Any:
        import tomlkit

        parent: Any = self._toml
        for key in path[:-1]:
            if key not in parent and make:
                parent[key] = tomlkit.table(is_super_table=True)
            parent = parent[key]
            if not isinstance(parent, dict):
                raise ConfigError(f"cannot edit {self.path}: {key} is not a table")
        return parent

    def _toml_set(self, path: tuple[str, ...], value: Any, comment: str | None) -> None:
        import tomlkit

        if not isinstance(value, dict):
            item = tomlkit.item(value)
            if comment:
                item.comment(comment)
            if path[0] not in self._toml:
                # A dotted key among the top-level ones (`features.x = true`): a new table
                # at the end would take the blank line before it from the table above, which
                # its removal would leave behind.
                self._toml.add(tomlkit.key(list(path)), item)
            else:
                self._toml_parent(path)[path[-1]] = item
            return
        parent = self._toml_parent(path, make=True)
        table = tomlkit.table()
        for k, v in value.items():
            table[k] = v
        table.add(tomlkit.nl())  # a blank line before whatever table follows
        if path[-1] in parent:
            del parent[path[-1]]
        parent[path[-1]] = table

    def comment_of(self, path: tuple[str, ...]) -> str | None:
        """The comment after a TOML value (None for JSON, or when there is none)."""
        if self.fmt != "toml" or self.get(path) is None:
            return None
        comment: str = self._toml_parent(path).item(path[-1]).trivia.comment
        return comment.lstrip("#").strip() or None

    def edit(self) -> Edit:
        if not self.touched:
            return Edit(self.path, self.before, self.before, self.existed)
        after = self._toml.as_string() if self.fmt == "toml" else self._json.text
        return Edit(self.path, self.before, after, self.existed)


def commit(edit: Edit) -> str | None:
    """Write ``edit`` (a backup of the old file first) where it lies, a symlink's target
    included (the caller has confined the path); the backup's path."""
    target = edit.path.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    mode = 0o600
    if edit.existed:
        mode = target.stat().st_mode & 0o777
        backup = target.with_name(target.name + BACKUP_SUFFIX)
        _write(backup, edit.before, 0o600)
    _write(target, edit.after, mode)
    return str(backup) if backup else None


def _write(path: Path, text: str, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
