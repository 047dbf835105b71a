"""The daemon's background loops besides the actors: the systemd watchdog, index snapshots
and text index merges, and the start-up replay of the capture spool. Each is a task of the
background group, cancelled first at shutdown; all of their work resumes from the store."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from recall_client import protocol as p
from recall_client.client import DaemonUnavailable, RemoteError
from recall_client.spool import default_spool

from . import systemd
from .errors import RecallError
from .handlers.ops import HealthProbe, MergeTextIndex
from .pipeline.writer import WriteJob
from .store.port import Store

__all__ = ["SNAPSHOT_EVERY", "replay_spool", "snapshot_periodically", "watchdog"]

log = logging.getLogger(__name__)

SNAPSHOT_EVERY = 120.0
# Text index merge steps per round (~500 pages each): a bound, in case writes outpace it.
MERGE_STEPS_MAX = 1_000

Submit = Callable[[WriteJob[Any]], Awaitable[None]]


async def replay_spool(socket_path: Path, admin_token: str | None) -> None:
    """Send what ``recallctl capture`` spooled while no daemon answered, oldest first,
    through this daemon's own socket: the path, checks and idempotency of any capture."""

    def refused(name: str, n: int, reply: p.EpisodeCaptured | RemoteError) -> None:
        if isinstance(reply, RemoteError):
            log.warning("spooled capture %s, episode %d refused: %s", name, n, reply)

    spool = default_spool()
    try:
        sent = await spool.replay(socket_path, admin_token, refused)
        if sent:
            log.info("replayed %d spooled capture(s) from %s", sent, spool.directory)
    except (DaemonUnavailable, RemoteError, OSError) as exc:
        log.warning("spool replay stopped (%s); what is left is sent later", exc)


async def watchdog(submit: Submit, interval: float) -> None:
    """Ping systemd's watchdog while the daemon is healthy: the event loop runs this task,
    and the writer commits a probe in time. A stuck writer stops the pings, so systemd
    restarts the daemon (Restart=on-failure) instead of it hanging silently."""
    while True:
        probe = HealthProbe()
        healthy = False
        with anyio.move_on_after(interval) as late:
            try:
                await submit(probe)
                await probe.wait()
                healthy = True
            except RecallError as exc:
                log.warning("watchdog: writer probe failed: %s", exc.message)
        if healthy:
            systemd.notify("WATCHDOG=1")
        elif late.cancelled_caught:
            log.warning("watchdog: the writer did not commit a probe within %.1fs", interval)
        await anyio.sleep(interval)


async def snapshot_periodically(store: Store, submit: Submit) -> None:
    """Snapshot the vector index, and merge the full-text index's segments, at start and
    every SNAPSHOT_EVERY."""
    while True:
        await _merge_text_index(submit)
        await anyio.sleep(SNAPSHOT_EVERY)
        try:
            await anyio.to_thread.run_sync(store.snapshot)
        except Exception:
            log.exception("index snapshot failed")


async def _merge_text_index(submit: Submit) -> None:
    # One step a batch of its own, as background work: client writes go between steps.
    for _ in range(MERGE_STEPS_MAX):
        step = MergeTextIndex()
        try:
            await submit(step)
            await step.wait()
        except RecallError as exc:
            log.warning("merging the text index: %s", exc.message)
            return
        if not step.result:
            return
