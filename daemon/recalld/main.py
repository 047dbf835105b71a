"""``recalld``: run the daemon in the foreground (systemd runs it the same way)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

import anyio

from . import __version__, systemd
from .app import Daemon, SocketInUse
from .config import ConfigError, Settings, load_settings

__all__ = ["main"]

log = logging.getLogger("recalld")

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
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="recalld",
        description="Run the recalld memory daemon in the foreground. Logs go to stderr.",
    )
    ap.add_argument("--socket", help="Unix socket to listen on (default: $RECALLD_SOCKET, "
                    "else $XDG_RUNTIME_DIR/recalld/recalld.sock)")
    ap.add_argument("--data-dir", help="where the database and index live (default: "
                    "$RECALLD_DATA_DIR, else $XDG_DATA_HOME/recalld)")
    ap.add_argument("--embedder", choices=["minilm", "hash", "none"],
                    help="embedding model (default minilm: the bundled all-MiniLM-L6-v2)")
    ap.add_argument("--config", type=Path, help="config file (default "
                    "$XDG_CONFIG_HOME/recalld/config.toml)")
    ap.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    ap.add_argument("--version", action="version", version=f"recalld {__version__}")
    return ap.parse_args(argv)


async def _run(settings: Settings, config: Path | None) -> None:
    daemon = Daemon(settings)
    passed = systemd.listen_fds()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_handle_signals, daemon, tg.cancel_scope, config, name="signal handler")
        await daemon.run(listener_socket=passed[0] if passed else None)
        tg.cancel_scope.cancel()


async def _handle_signals(daemon: Daemon, scope: anyio.CancelScope, config: Path | None) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            if signum == signal.SIGHUP:
                _reload(config)
            elif daemon.state == "stopping":
                # Acknowledged writes are committed already; only in-flight work is dropped.
                log.warning("second %s: stopping now", name)
                scope.cancel()
                return
            else:
                log.info("%s: draining", name)
                daemon.request_stop()


def _reload(config: Path | None) -> None:
    """SIGHUP: re-read the config. Only the log level applies to a running daemon; the rest
    takes effect at the next start, and the log says so."""
    try:
        fresh = load_settings(config)
    except ConfigError as exc:
        log.error("SIGHUP: config not reloaded: %s", exc)
        return
    logging.getLogger().setLevel(fresh.log_level)
    log.info("SIGHUP: config reloaded (log level %s; other keys apply at next start)",
             fresh.log_level)


def _have_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    try:
        settings = load_settings(
            args.config,
            socket=args.socket,
            data_dir=args.data_dir,
            embedder=args.embedder,
            log_level=args.log_level,
        )
    except ConfigError as exc:
        print(f"recalld: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    setup_logging(settings.log_level)
    # Everything the daemon creates (database, index, backups) is for its user alone.
    os.umask(0o077)
    try:
        # uvloop roughly doubles socket round trips per second over the default loop.
        anyio.run(_run, settings, args.config, backend="asyncio",
                  backend_options={"use_uvloop": _have_uvloop()})
    except* SocketInUse as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup):  # nested task groups nest the error
            leaf = leaf.exceptions[0]
        log.error("%s", leaf)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
