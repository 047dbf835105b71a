"""What the reliability tests and ``scripts/soak`` share: load generators that keep a ledger
of acknowledged writes, the checks of a data dir against that ledger, a raw wire connection
for hostile and slow clients, and the figures a run reports.
"""

from __future__ import annotations

import random
import sqlite3
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import cast

import anyio
import msgspec
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream
from recall_client import protocol as p
from recall_client.client import DaemonUnavailable, RemoteError, connect

from tests.support.daemon import DaemonProcess

from .writes import SOCKET_WRITES, SocketWrite

__all__ = [
    "FIGURES",
    "Ledger",
    "RawConnection",
    "capture_load",
    "check_ledger",
    "crash_trial",
    "db_snapshot",
    "integrity",
    "retry_unacknowledged",
    "rss_kib",
    "snapshot_ids",
    "unique_text",
    "unique_word",
    "vector_ids",
    "wait_index_agrees",
]

# Counts (and a few timings) every reliability test adds to; printed at the end of the run
# (see conftest.py). Counts stay ints: the factory is int.
FIGURES: defaultdict[str, float] = defaultdict(int)

_WORDS = (
    "deploy cache postgres replica migration index vector socket retry timeout queue "
    "backup snapshot lockfile release branch rebase pipeline runner container volume "
    "kernel scheduler tokenizer embedding latency throughput shard partition commit"
).split()


def unique_word(key: str) -> str:
    """One search token (no separators) that names ``key``."""
    return "u" + "".join(ch for ch in key if ch.isalnum())


def unique_text(rng: random.Random, key: str) -> str:
    """A realistic-looking note carrying :func:`unique_word` of ``key``."""
    words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 18)))
    return f"note {unique_word(key)}: {words}."


@dataclass(slots=True)
class Attempt:
    write: SocketWrite
    agent: str  # idempotency keys are per agent: a retry must come from the same one
    text: str
    key: str
    record_id: str | None = None


@dataclass(slots=True)
class Ledger:
    """What the clients know: writes acknowledged, and writes sent but never answered."""

    acked: dict[str, Attempt] = field(default_factory=dict)
    unanswered: dict[str, Attempt] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def sent(self, attempt: Attempt) -> None:
        self.unanswered[attempt.key] = attempt

    def answered(self, attempt: Attempt, record_id: str) -> None:
        self.unanswered.pop(attempt.key, None)
        attempt.record_id = record_id
        self.acked[attempt.key] = attempt


async def capture_load(
    socket: Path,
    ledger: Ledger,
    *,
    clients: int,
    run: str,
    per_client: int | None = None,
    pipeline: int = 4,
    workspace: str = "/ws/load",
    stop: anyio.Event | None = None,
    first_ack: anyio.Event | None = None,
    seed: int = 0,
) -> None:
    """``clients`` connections, each keeping ``pipeline`` captures in flight, drawing in turn
    from every socket write kind, until ``per_client`` writes each, ``stop``, or the daemon
    goes away. Acknowledgements go in ``ledger`` (``first_ack`` is set at the first); a
    broken connection ends its client."""

    async def client(n: int) -> None:
        rng = random.Random(f"{seed}-{run}-{n}")
        agent = f"load-{n}"
        counter = iter(range(per_client if per_client is not None else 10**9))
        try:
            async with connect(agent=agent, workspace=workspace, path=socket) as rc:

                async def lane() -> None:
                    for i in counter:
                        if stop is not None and stop.is_set():
                            return
                        write = SOCKET_WRITES[i % len(SOCKET_WRITES)]
                        key = f"{run}-c{n}-w{i}"
                        attempt = Attempt(write, agent, unique_text(rng, key), key)
                        ledger.sent(attempt)
                        try:
                            reply = await rc.call(write.request(attempt.text, key), write.reply)
                        except RemoteError as exc:
                            ledger.errors.append(f"{key}: {exc}")
                            if not exc.retryable:
                                raise
                            continue
                        except DaemonUnavailable:
                            return  # killed: what was acknowledged is in the ledger
                        ledger.answered(attempt, write.record_id(reply))
                        if first_ack is not None:
                            first_ack.set()

                async with anyio.create_task_group() as tg:
                    for _ in range(pipeline):
                        tg.start_soon(lane)
        except DaemonUnavailable:
            pass  # killed before this client connected

    async with anyio.create_task_group() as tg:
        for n in range(clients):
            tg.start_soon(client, n)


async def retry_unacknowledged(
    socket: Path, ledger: Ledger, *, workspace: str = "/ws/load"
) -> tuple[int, int]:
    """Send every unanswered write again with its idempotency key, as a client would after a
    reconnect. Returns (retried, already committed): the second are writes that committed but
    whose acknowledgement the kill swallowed; their retry must be a replay, not a new record."""
    retried = list(ledger.unanswered.values())
    replayed = 0
    for agent in sorted({a.agent for a in retried}):
        async with connect(agent=agent, workspace=workspace, path=socket) as rc:
            for attempt in (a for a in retried if a.agent == agent):
                reply = await rc.call(
                    attempt.write.request(attempt.text, attempt.key), attempt.write.reply
                )
                replayed += bool(getattr(reply, "replayed", False))
                ledger.answered(attempt, attempt.write.record_id(reply))
    return len(retried), replayed


async def crash_trial(
    d: DaemonProcess, ledger: Ledger, rng: random.Random, *, run: str, clients: int
) -> tuple[int, int]:
    """Capture from ``clients`` clients, kill -9 at a random moment, restart, check the
    ledger, retry what was never answered, check again, and wait for the index to agree.
    Returns :func:`retry_unacknowledged`'s (retried, already committed)."""
    under_way = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            partial(
                capture_load,
                d.socket,
                ledger,
                clients=clients,
                run=run,
                first_ack=under_way,
                seed=rng.randrange(2**32),
            )
        )
        # At a random moment once the load is under way (on a busy machine, connecting
        # alone can take longer than the whole window).
        with anyio.fail_after(60):
            await under_way.wait()
        await anyio.sleep(rng.uniform(0, 1.5))
        d.kill()
    await d.start()
    check_ledger(d.data_dir, ledger)
    retried = await retry_unacknowledged(d.socket, ledger)
    check_ledger(d.data_dir, ledger)
    await wait_index_agrees(d)
    return retried


def _read_only(data_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{data_dir / 'recalld.db'}?mode=ro", uri=True, timeout=10)


def check_ledger(data_dir: Path, ledger: Ledger) -> None:
    """Every acknowledged write is in the database exactly once, under its acknowledged id."""
    missing: list[str] = []
    wrong: list[str] = []
    with _read_only(data_dir) as conn:
        for key, attempt in ledger.acked.items():
            ids = [row[0] for row in conn.execute(attempt.write.locate, (attempt.text,))]
            if not ids:
                missing.append(key)
            elif ids != [attempt.record_id]:
                wrong.append(f"{key}: acknowledged {attempt.record_id}, found {ids}")
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"
    assert not wrong, f"{len(wrong)} acknowledged writes duplicated or renamed: {wrong[:5]}"


def vector_ids(data_dir: Path) -> tuple[set[int], int]:
    """(rowids with a vector, count of records marked embedded), both non-tombstoned."""
    with _read_only(data_dir) as conn:
        ids = {
            row[0]
            for row in conn.execute(
                "SELECT v.rowid FROM vectors v JOIN records r ON r.rowid = v.rowid"
                " WHERE r.tombstoned_at IS NULL"
            )
        }
        embedded = conn.execute(
            "SELECT count(*) FROM records WHERE embed_state = 1 AND tombstoned_at IS NULL"
        ).fetchone()[0]
    return ids, int(embedded)


async def wait_index_agrees(
    d: DaemonProcess, within_s: float = 60, data_dir: Path | None = None
) -> int:
    """Wait for the embedding backlog to drain, then check the daemon's FAISS index holds as
    many vectors as SQLite has embedded records. Returns that size."""
    data_dir = data_dir or d.data_dir
    report = await d.status(wait_model_s=within_s, wait_settled_s=within_s)
    ids, embedded = vector_ids(data_dir)
    if report.index.embedding_backlog == 0 and report.index.size == embedded == len(ids):
        return embedded
    raise AssertionError(
        f"index never agreed with SQLite: index {report.index}, embedded {embedded}, "
        f"vectors {len(ids)}"
    )


def snapshot_ids(data_dir: Path) -> set[int]:
    """The ids in the FAISS snapshot on disk (the daemon writes it on a clean stop)."""
    import faiss

    # While small (as in every test here) the snapshot is a flat IndexIDMap2.
    index = cast(faiss.IndexIDMap2, faiss.read_index(str(data_dir / "index.faiss")))
    return {int(i) for i in faiss.vector_to_array(index.id_map)}


def integrity(data_dir: Path) -> str:
    """``PRAGMA integrity_check`` of the database (on a read-only connection)."""
    with _read_only(data_dir) as conn:
        return "; ".join(row[0] for row in conn.execute("PRAGMA integrity_check"))


def db_snapshot(data_dir: Path) -> dict[str, int]:
    """Counts of records by kind, for figures."""
    with _read_only(data_dir) as conn:
        return dict(conn.execute("SELECT kind, count(*) FROM records GROUP BY kind").fetchall())


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


class RawConnection:
    """A connection that speaks bytes, not the client library: for hostile and slow clients."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self._reader = BufferedByteReceiveStream(stream)

    @classmethod
    async def open(cls, d: DaemonProcess, *, hello: bool = True) -> RawConnection:
        conn = cls(await anyio.connect_unix(d.socket))
        if hello:
            await conn.send(
                p.frame(p.Hello(id=1, version=p.PROTOCOL_VERSION, agent="raw", workspace="/ws/raw"))
            )
            welcome = await conn.reply()
            assert isinstance(welcome, p.Welcome), welcome
        return conn

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)

    async def send_body(self, body: bytes) -> None:
        await self.stream.send(struct.pack(">I", len(body)) + body)

    async def reply(self, within_s: float = 10) -> p.Reply | None:
        """The next reply, or None when the daemon closed the connection."""
        try:
            with anyio.fail_after(within_s):
                (size,) = p.HEADER.unpack(await self._reader.receive_exactly(p.HEADER.size))
                body = await self._reader.receive_exactly(size)
        except (
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.BrokenResourceError,
            ConnectionResetError,
        ):
            return None
        return msgspec.msgpack.decode(body, type=p.Replies)

    async def closed_by_peer(self, within_s: float) -> bool:
        """Read (and drop) until the daemon hangs up; False if it has not within ``within_s``."""
        with anyio.move_on_after(within_s):
            try:
                while await self.stream.receive(65536):
                    pass
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                pass
            return True
        return False

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def __aenter__(self) -> RawConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
