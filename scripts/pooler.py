"""A throwaway PgBouncer (Debian's ``pgbouncer``) in transaction mode in front of a
:class:`~pgserver.PgServer`, for tests and benchmarks.

Every role logs in to PgBouncer with its own password (scram-sha-256, from an auth file
with the passwords given), and PgBouncer logs in to PostgreSQL as that same role: a pool per
role and database, so row-level security still sees each person's role. It listens on
127.0.0.1 on a free port. PgBouncer refuses to run as root: under root it runs as
pgserver's unprivileged user, in a private directory under /tmp.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

from pgserver import PG_USER, PgServer, ensure_user, free_port

__all__ = ["PgBouncer", "installed"]


def installed() -> str | None:
    """The pgbouncer program, or None when it is not installed."""
    return shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
    )


class PgBouncer:
    def __init__(self, server: PgServer, passwords: dict[str, str], *, pool_size: int = 4) -> None:
        """PgBouncer for ``server``'s databases, letting in each role of ``passwords``
        (name -> password) with a pool of ``pool_size`` server connections per role and
        database."""
        self.server = server
        self.passwords = passwords
        self.pool_size = pool_size
        self.port = free_port()
        self._pw = ensure_user(PG_USER) if os.geteuid() == 0 else None
        self._workdir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def url_for(self, role: str, dbname: str) -> str:
        """``role``'s URL for ``dbname`` through PgBouncer."""

        def q(s: str) -> str:
            return quote(s, safe="")

        password = self.passwords[role]
        return f"postgresql://{q(role)}:{q(password)}@127.0.0.1:{self.port}/{q(dbname)}"

    @property
    def log_path(self) -> Path:
        assert self._workdir is not None, "not started"
        return self._workdir / "pgbouncer.log"

    def _config(self, workdir: Path) -> Path:
        def quoted(s: str) -> str:
            return '"' + s.replace('"', '""') + '"'

        users = workdir / "userlist.txt"
        users.write_text("".join(f"{quoted(r)} {quoted(pw)}\n" for r, pw in self.passwords.items()))
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "scram-sha-256",
            "auth_file": str(users),
            "pool_mode": "transaction",
            "default_pool_size": str(self.pool_size),
            "max_client_conn": "2000",
            "logfile": str(self.log_path),
            # A query waits this long for a server connection (the server is down), then
            # fails: the daemon answers unavailable (retryable) instead of hanging.
            "query_wait_timeout": "5",
            "server_login_retry": "1",
            "server_connect_timeout": "3",
        }
        config = workdir / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={self.server.port}\n"
            "[pgbouncer]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items())
        )
        if self._pw is not None:
            for path in (workdir, users, config):
                os.chown(path, self._pw.pw_uid, self._pw.pw_gid)
        users.chmod(0o600)
        return config

    def start(self, timeout: float = 30.0) -> None:
        program = installed()
        if program is None:
            raise RuntimeError("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        self._workdir = Path(tempfile.mkdtemp(prefix="recalld-pgbouncer-", dir="/tmp"))
        config = self._config(self._workdir)
        kw: dict[str, Any] = {}
        if self._pw is not None:
            kw = {"user": self._pw.pw_uid, "group": self._pw.pw_gid, "extra_groups": []}
        self._proc = subprocess.Popen(
            [program, str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self._workdir,
            **kw,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                pass
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgbouncer did not start:\n{self.log_tail()}")
            time.sleep(0.02)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, AssertionError) as e:
            return f"(no log: {e})"

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # "safe shutdown": after the clients' queries
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
