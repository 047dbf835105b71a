"""``recalld``: run the daemon in the foreground (systemd runs it the same way)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import anyio
from recall_client import __version__, paths, running
from recall_client.protocol import RunState

from . import systemd
from .app import Daemon, SocketInUse
from .config import ConfigError, Settings, load_settings

__all__ = ["main"]

log = logging.getLogger("recalld")

# After a second SIGTERM/SIGINT the daemon cancels everything; if something still holds it up
# (a commit or a snapshot runs in a thread that cannot be interrupted), it exits hard after
# this. Acknowledged writes are committed already; the index is rebuilt from SQLite at start.
FORCE_GRACE = 3.0

# sd-daemon(3) priority prefixes: journald keeps the level of each stderr line.
_PRIORITY = {
    logging.DEBUG: "<7>",
    logging.INFO: "<6>",
    logging.WARNING: "<4>",
    logging.ERROR: "<3>",
    logging.CRITICAL: "<2>",
}


class _JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return _PRIORITY.get(record.levelno, "<6>") + super().format(record)


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("JOURNAL_STREAM"):
        # journald adds its own timestamps.
        handler.setFormatter(_JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="recalld",
        description="Run the recalld memory daemon in the foreground. Logs go to stderr.",
    )
    ap.add_argument(
        "--socket",
        help="Unix socket to listen on (default: $RECALLD_SOCKET, "
        "else $XDG_RUNTIME_DIR/recalld/recalld.sock)",
    )
    ap.add_argument(
        "--data-dir",
        help="where the database and index live (default: "
        "$RECALLD_DATA_DIR, else $XDG_DATA_HOME/recalld)",
    )
    ap.add_argument(
        "--embedder",
        choices=["minilm", "hash", "none"],
        help="embedding model (default minilm: the bundled all-MiniLM-L6-v2)",
    )
    ap.add_argument(
        "--config", type=Path, help="config file (default $XDG_CONFIG_HOME/recalld/config.toml)"
    )
    ap.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    ap.add_argument("--version", action="version", version=f"recalld {__version__}")
    return ap.parse_args(argv)


async def _run(settings: Settings, config: Path | None, overrides: dict[str, object]) -> bool:
    """Run the daemon until it stops; True when a second signal forced the stop."""
    daemon = Daemon(settings)
    passed = systemd.listen_fds()
    forced = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            _handle_signals,
            daemon,
            tg.cancel_scope,
            forced,
            config,
            overrides,
            name="signal handler",
        )
        await daemon.run(listener_socket=passed[0] if passed else None)
        tg.cancel_scope.cancel()
    return forced.is_set()


async def _handle_signals(
    daemon: Daemon,
    scope: anyio.CancelScope,
    forced: anyio.Event,
    config: Path | None,
    overrides: dict[str, object],
) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            if signum == signal.SIGHUP:
                _reload(daemon, config, overrides)
            elif daemon.state is RunState.STOPPING:
                # Acknowledged writes are committed already; only in-flight work is dropped.
                log.warning("second %s: stopping now without draining", name)
                forced.set()
                timer = threading.Timer(FORCE_GRACE, _exit_hard)
                timer.daemon = True
                timer.start()
                scope.cancel()
                return
            else:
                log.info("%s: draining (send it again to stop at once)", name)
                daemon.request_stop()


def _exit_hard() -> None:
    log.error("still not stopped %.0fs after the forcing signal; exiting now", FORCE_GRACE)
    logging.shutdown()
    os._exit(1)


def _reload(daemon: Daemon, config: Path | None, overrides: dict[str, object]) -> None:
    """SIGHUP: re-read the config. ``log_level`` and ``require_approval`` apply at once; the
    other keys at the next start, and the log names the ones that changed."""
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    systemd.notify(f"RELOADING=1\nMONOTONIC_USEC={usec}")
    try:
        fresh = load_settings(config, **overrides)
    except ConfigError as exc:
        log.error("SIGHUP: config not reloaded: %s", exc)
    else:
        logging.getLogger().setLevel(fresh.log_level)
        pending = daemon.reload(fresh)
        log.info(
            "SIGHUP: config reloaded (log_level %s, require_approval %s)%s",
            fresh.log_level,
            fresh.require_approval,
            f"; {', '.join(pending)} apply at the next start" if pending else "",
        )
    systemd.notify("READY=1\nSTATUS=config reloaded")


def _have_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    # Command-line options win over the file and the environment, at reload too.
    overrides: dict[str, object] = {
        "socket": args.socket,
        "data_dir": args.data_dir,
        "embedder": args.embedder,
        "log_level": args.log_level,
    }
    try:
        settings = load_settings(args.config, **overrides)
    except ConfigError as exc:
        print(f"recalld: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    setup_logging(settings.log_level)
    # Everything the daemon creates (database, index, backups) is for its user alone.
    os.umask(0o077)
    forced = False
    try:
        # uvloop roughly doubles socket round trips per second over the default loop.
        forced = anyio.run(
            _run,
            settings,
            args.config,
            overrides,
            backend="asyncio",
            backend_options={"use_uvloop": _have_uvloop()},
        )
    except* (running.DataDirInUse, SocketInUse, paths.InsecureDirectory) as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup):  # nested task groups nest the error
            leaf = leaf.exceptions[0]
        log.error("%s", leaf)
        raise SystemExit(1) from None
    code = 1 if forced else 0
    # Idle worker threads end by themselves in a moment; a thread still busy after that was
    # abandoned at shutdown (say, a model load blocked in I/O) and would keep the
    # interpreter from exiting.
    deadline = time.monotonic() + 1.0
    stuck = []
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.daemon:
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            stuck.append(thread)
    if stuck:
        # Everything that matters (database, index snapshot) is closed by now.
        log.warning(
            "leaving %d worker threads behind: %s", len(stuck), ", ".join(t.name for t in stuck)
        )
        logging.shutdown()
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
