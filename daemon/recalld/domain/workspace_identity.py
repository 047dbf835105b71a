"""A workspace's identity: the repository it is a checkout of, not the path it sits at.

Records are filed under a workspace, and two checkouts of one project (two people's
``/home/alice/src/app`` and ``/Users/bob/work/app``, or one person's git worktrees) must file
under the same one. The identity is, in order:

1. the normalised URL of the ``origin`` remote, folded only where git and the host answer
   one repository (:func:`normalise_remote`): ``git@github.com:Acme/App.git``,
   ``ssh://git@github.com/acme/app`` and ``https://github.com/acme/app.git`` are all
   ``github.com/acme/app``, but ``/srv/git/Payments.git`` is ``file:/srv/git/Payments``,
   ``ssh://host:2222/team/app`` is ``host:2222/team/app`` and ``alice@devbox:app.git`` is
   ``alice@devbox/app``;
2. else the repository's root commit, ``git-root:<id>`` (the first-parent chain's root from
   HEAD): every clone of a repository without a remote agrees on it;
3. else the path itself (not in a repository, or one refused as unsafe to read: see
   :func:`.git_history.refusal`): an absolute path, and no other identity starts with
   ``/``. A refused repository so shares nothing with any other checkout, whatever its
   config claims to be a clone of.

Every worktree of a repository reads the same config and history (git's common dir), so
they are one workspace. The path stays the workspace's local alias.

The repository is data, never instructions: nothing here runs git or anything its config
names. libgit2 (:mod:`.git_history`, which runs nothing) finds the git dir and reads the
history; this module reads ``commondir`` and ``config`` itself, each opened without
following a symlink, refused unless a regular file (a FIFO would block the read), and read
only up to a bound.
``include`` and ``url.*.insteadOf`` of the config are not followed: the remote's URL as the
repository records it is the identity.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Literal

from recall_client.files import read_regular

from . import git_config, git_history

__all__ = [
    "FOLDING_HOSTS",
    "Workspace",
    "alias",
    "cached",
    "identify",
    "named",
    "normalise_remote",
]

# What an identity was derived from; "named": given by a client trusted to name one.
Basis = Literal["origin", "root_commit", "path", "named"]

MAX_URL = 2048
# Hosts that answer one repository under every casing of its owner and name (GitHub, GitLab.com
# and Bitbucket Cloud all do), whose ssh user is always ``git``. Other hosts (a GitLab or Gitea
# of one's own, a plain ssh server) may not: their paths keep their case.
FOLDING_HOSTS = frozenset({"github.com", "gitlab.com", "bitbucket.org"})
_SSH = frozenset({"ssh", "git+ssh", "ssh+git"})
_DEFAULT_PORTS = {
    "ssh": "22",
    "git+ssh": "22",
    "ssh+git": "22",
    "git": "9418",
    "https": "443",
    "http": "80",
}
TTL = 30.0
CACHE = 1024


@dataclass(frozen=True, slots=True)
class Workspace:
    """Where a request files: ``id`` (the identity records are keyed by) and ``path`` (the
    local alias: the checkout's top level, or the path given)."""

    id: str
    path: str
    basis: Basis


_workspaces: git_history.LRU[str, tuple[float, Workspace]] = git_history.LRU(CACHE)
# identity -> the path it was last derived from here
_aliases: git_history.LRU[str, str] = git_history.LRU(CACHE)

# Each is anchored and its runs possessive or disjoint: linear in the line, however hostile.
_SCP = re.compile(r"^(?:([^@/:]*+)@)?([^:/@]++):(.*)$")
_URL = re.compile(r"^([a-z][a-z0-9+.-]*+)://([^/?#]*+)([^?#]*+)", re.IGNORECASE)


def normalise_remote(url: str) -> str | None:
    """The identity a remote URL names; None for one that names no place (empty, relative,
    overlong, a port that is no number). Linear in the URL.

    Folded, because git and the hosts answer one repository under each: the URL's form
    (scp-like, ``ssh://``, ``https://``, ``git://``), the host's case, a trailing ``.git`` or
    slash, the scheme's default port, an https user or password (a credential, which never
    reaches the store), and, on the hosts of :data:`FOLDING_HOSTS`, the path's case and the
    ssh user (always ``git`` there). Kept, because they name another repository: the path's
    case elsewhere (a file remote's too), any other port, and an ssh user other than ``git``
    (``alice@devbox:app.git`` is in alice's home, ``mallory@devbox:app.git`` in mallory's).
    """
    url = url.strip()
    if not url or len(url) > MAX_URL:
        return None
    user = port = ""
    match = _URL.match(url)
    if match is not None:
        scheme, authority, path = match.groups()
        scheme = scheme.lower()
        if scheme == "file":
            return _file(path)
        userinfo, _, hostport = authority.rpartition("@")
        host, port = _host_port(hostport)
        if scheme in _SSH:
            user = userinfo.split(":", 1)[0]
        if port == _DEFAULT_PORTS.get(scheme):
            port = ""
    elif url.startswith("/"):
        return _file(url)
    elif (scp := _SCP.match(url)) is not None:
        user, host, path = scp.group(1) or "", scp.group(2), scp.group(3)
    else:
        return None  # a relative path: it names a place only from where it was cloned
    host = host.lower()
    path = _trimmed(path)
    if not host or not path or (port and not port.isdigit()):
        return None
    if host in FOLDING_HOSTS:
        path, user = path.lower(), ""
    elif user == "git":
        user = ""
    where = f"{user}@{host}" if user else host
    if port:
        where = f"{where}:{int(port)}"
    return f"{where}/{path}"


def _host_port(hostport: str) -> tuple[str, str]:
    """``host`` and ``port`` ("" when none) of a URL's ``host[:port]`` (``[v6]:port`` too)."""
    if hostport.startswith("["):
        host, _, rest = hostport.partition("]")
        return host + "]", rest.removeprefix(":")
    host, _, port = hostport.partition(":")
    return host, port


def _trimmed(path: str) -> str:
    """``path`` without its slashes at either end and a trailing ``.git``."""
    path = path.strip("/")
    while path.endswith(".git") or path.endswith("/"):
        path = path.removesuffix(".git").rstrip("/")
    return path


def _file(path: str) -> str | None:
    """A local remote: its path as it is (a file system's names are case-sensitive)."""
    path = _trimmed(path)
    return f"file:/{path}" if path else None


def cached(path: str) -> Workspace | None:
    """The identity of ``path`` when :func:`identify` would answer from its cache."""
    hit = _workspaces.get(path)
    if hit is None or time.monotonic() - hit[0] >= TTL:
        return None
    return hit[1]


def identify(path: str) -> Workspace:
    """The workspace ``path`` (absolute) is in. Cached for :data:`TTL` seconds."""
    hit = cached(path)
    if hit is not None:
        return hit
    given = os.path.normpath(path)
    found = _identify(given)
    _workspaces.put(path, (time.monotonic(), found))
    _aliases.put(found.id, found.path)
    return found


def alias(identity: str) -> str:
    """The path ``identity`` was last derived from here; "" when none was."""
    return _aliases.get(identity) or ""


def named(identity: str) -> Workspace:
    """A workspace named by its identity (by a client that may), at its last known path."""
    return Workspace(id=identity, path=alias(identity), basis="named")


def _identify(path: str) -> Workspace:
    top = git_history.top_level(path)
    if top is None:
        return Workspace(id=path, path=path, basis="path")
    common = _common_dir(top)
    if common is not None:
        remote = _origin_url(os.path.join(common, "config"))
        identity = normalise_remote(remote) if remote is not None else None
        if identity is not None:
            return Workspace(id=identity, path=top, basis="origin")
    root = git_history.root_commit(top)
    if root is not None:
        return Workspace(id=f"git-root:{root}", path=top, basis="root_commit")
    return Workspace(id=top, path=top, basis="path")


def _common_dir(top: str) -> str | None:
    gitdir = git_history.git_dir(top)
    return git_history.common_dir(gitdir) if gitdir is not None else None


def _origin_url(config: str) -> str | None:
    """``remote.origin.url`` as the repository's own config file records it (the last one,
    as git takes), read by git's rules (:mod:`.git_config`); None when there is none or the
    file is not one git reads."""
    data = read_regular(config, git_history.MAX_CONFIG_BYTES)
    if data is None:
        return None
    try:
        entries = git_config.parse(data)
    except git_config.ConfigSyntax:
        return None
    url: str | None = None
    for e in entries:
        if (e.section, e.subsection, e.key) == ("remote", "origin", "url") and e.value:
            url = e.value
    return url
