"""``scripts/soak``: the long run of the reliability suite, printing its figures.

Two phases, each bounded:

1. **Crash**: ``--crash-trials`` kill -9 trials under a ``--clients``-client capture load; after
   each restart every acknowledged write must be present exactly once and the vector index
   must agree with SQLite.
2. **RSS**: ``--minutes`` of mixed load (captures, duplicates, idempotent replays, searches,
   connection churn with the odd garbage frame), printing the daemon's RSS every
   ``--interval`` seconds. New records stop at ``--records`` so the data, and the caches that
   follow it, stop growing; from the moment they have (every new record written and
   embedded), which must be within the first three quarters of the run, RSS must stay within
   ``--max-growth-mib``. Exit status 1 if any check fails.

Run it as ``scripts/soak`` (``--help`` for the options).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Literal

import anyio
from recall_client import protocol as p
from recall_client.client import DaemonUnavailable, RemoteError

from tests.support.daemon import DaemonProcess

from .harness import (
    Attempt,
    Ledger,
    RawConnection,
    check_ledger,
    crash_trial,
    integrity,
    rss_kib,
    unique_text,
    wait_index_agrees,
)
from .writes import SOCKET_WRITES

__all__ = ["main"]

SEARCH_MODES: tuple[Literal["hybrid", "bm25", "keyword"], ...] = ("hybrid", "bm25", "keyword")


def say(line: str) -> None:
    print(line, flush=True)


async def crash_phase(root: Path, trials: int, clients: int, seed: int) -> bool:
    if trials <= 0:
        return True
    say(f"== crash: {trials} kill -9 trials, {clients} clients each (seed {seed})")
    rng = random.Random(seed)
    d = DaemonProcess(root=root / "crash")
    d.root.mkdir()
    ledger = Ledger()
    retried = replayed = 0
    started = time.monotonic()
    try:
        await d.start()
        for trial in range(trials):
            before = len(ledger.acked)
            r, c = await crash_trial(d, ledger, rng, run=f"s{trial}", clients=clients)
            retried += r
            replayed += c
            say(
                f"trial {trial + 1:3}/{trials}: {len(ledger.acked) - before:5} acknowledged, "
                f"{r:3} unanswered retried ({c} had committed); all present exactly once"
            )
        assert await d.stop() == 0
        assert integrity(d.data_dir) == "ok"
    except AssertionError as exc:
        say(f"crash: FAILED: {exc}")
        return False
    finally:
        d.kill()
    say(
        f"crash: {trials} trials, {clients} clients, {len(ledger.acked)} acknowledged writes "
        f"checked, {retried} unanswered retried ({replayed} had committed), "
        f"{time.monotonic() - started:.0f}s: OK"
    )
    return True


class Mix:
    """The mixed load of the RSS phase and its counters."""

    def __init__(self, d: DaemonProcess, records: int, seed: int) -> None:
        self.d = d
        self.records = records
        self.rng = random.Random(seed)
        self.ledger = Ledger()
        self.counts: Counter[str] = Counter()
        self.stop = anyio.Event()

    async def writer(self, n: int) -> None:
        rng = random.Random(f"{n}-{self.rng.random()}")
        agent = f"soak-w{n}"
        mine: list[Attempt] = []
        async with self.d.client(agent=agent, workspace="/ws/soak") as rc:
            i = 0
            while not self.stop.is_set():
                if len(self.ledger.acked) < self.records or not mine:
                    write = SOCKET_WRITES[i % len(SOCKET_WRITES)]
                    key = f"soak-w{n}-{i}"
                    attempt = Attempt(write, agent, unique_text(rng, key), key)
                    kind = "new"
                else:
                    # The data has stopped growing; the write path has not. A replay (same
                    # key, same agent) or, for a memory, the same text without its key: the
                    # content hash must catch it, and the idempotency table stays as it is.
                    attempt = rng.choice(mine)
                    duplicate = attempt.write.name == "memory_store" and rng.random() < 0.5
                    kind = "duplicate" if duplicate else "replayed"
                i += 1
                sent_key = None if kind == "duplicate" else attempt.key
                try:
                    reply = await rc.call(
                        attempt.write.request(attempt.text, sent_key), attempt.write.reply
                    )
                except RemoteError as exc:
                    self.counts[f"error {exc.code}"] += 1
                    continue
                if kind == "new":
                    self.ledger.answered(attempt, attempt.write.record_id(reply))
                    mine.append(attempt)
                self.counts[f"writes {kind}"] += 1

    async def searcher(self, n: int) -> None:
        rng = random.Random(f"s{n}-{self.rng.random()}")
        words = unique_text(rng, "x").split()[2:]
        async with self.d.client(agent=f"soak-s{n}", workspace="/ws/soak") as rc:
            while not self.stop.is_set():
                query = " ".join(rng.sample(words, min(3, len(words))))
                mode = rng.choice(SEARCH_MODES)
                try:
                    await rc.call(
                        p.MemorySearch(query=query, mode=mode, limit=rng.randint(1, 50)),
                        p.MemorySearchResult,
                    )
                except RemoteError as exc:
                    self.counts[f"error {exc.code}"] += 1
                    continue
                self.counts["searches"] += 1

    async def churner(self) -> None:
        rng = random.Random(self.rng.random())
        i = 0
        while not self.stop.is_set():
            i += 1
            if i % 5 == 0:
                async with await RawConnection.open(self.d) as raw:
                    await raw.send_body(rng.randbytes(rng.randint(1, 512)))
                    reply = await raw.reply()
                self.counts["garbage frames"] += 1
                if isinstance(reply, p.Error) and reply.code == "internal":
                    self.counts["error internal"] += 1
                continue
            async with self.d.client(agent=f"soak-c{i % 50}", workspace="/ws/soak") as rc:
                await rc.call(p.Ping(), p.Pong)
                if i % 10 == 0:
                    await rc.call(p.Status(), p.StatusResult)
            self.counts["connections"] += 1


def _rss_anon_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return 0


async def rss_phase(root: Path, args: argparse.Namespace) -> bool:
    say(
        f"== rss: {args.minutes:g} minutes of mixed load, {args.clients} writers, "
        f"{args.searchers} searchers, new records up to {args.records}, embedder {args.embedder}"
    )
    d = DaemonProcess(root=root / "rss", embedder=args.embedder)
    d.root.mkdir()
    mix = Mix(d, args.records, args.seed)
    # (minutes into the run, RSS in KiB, whether the data had stopped growing by then)
    samples: list[tuple[float, int, bool]] = []
    ok = True
    try:
        await d.start()
        await d.status(wait_model_s=600)
        assert d.proc is not None
        pid = d.proc.pid
        deadline = time.monotonic() + args.minutes * 60
        say(
            f"{'min':>6} {'rss MiB':>8} {'anon MiB':>9} {'db MiB':>7} {'records':>8} "
            f"{'vectors':>8} "
            f"{'writes/s':>9} {'search/s':>9} {'conn/s':>7} {'errors':>7}"
        )

        async def sampler() -> None:
            started = last_t = time.monotonic()
            last = Counter(mix.counts)
            while True:
                now = time.monotonic()
                report = await d.status()
                rss = rss_kib(pid)
                # The data has stopped growing once the writers only replay and every
                # record has its vector: from there on, RSS must stay flat beyond caches.
                settled = (
                    len(mix.ledger.acked) >= mix.records and report.index.embedding_backlog == 0
                )
                samples.append(((now - started) / 60, rss, settled))
                span = now - last_t
                # No rates on the first line: there is no interval yet.
                rate = {k: (mix.counts[k] - last[k]) / span for k in mix.counts}
                if span < 1:
                    rate = {}
                writes = sum(v for k, v in rate.items() if k.startswith("writes"))
                errors = sum(v for k, v in mix.counts.items() if k.startswith("error"))
                records = report.records.get("memory", {}).get("total", 0)
                db = sum(f.stat().st_size for f in d.data_dir.glob("recalld.db*")) / 2**20
                say(
                    f"{(now - started) / 60:6.1f} {rss / 1024:8.1f} "
                    f"{_rss_anon_kib(pid) / 1024:9.1f} {db:7.1f} {records:8} "
                    f"{report.index.size:8} "
                    f"{writes:9.1f} {rate.get('searches', 0):9.1f} "
                    f"{rate.get('connections', 0) + rate.get('garbage frames', 0):7.1f} {errors:7}"
                )
                last, last_t = Counter(mix.counts), now
                if now >= deadline:
                    mix.stop.set()
                    return
                await anyio.sleep(min(args.interval, max(0.0, deadline - now)))

        async with anyio.create_task_group() as tg:
            for n in range(args.clients):
                tg.start_soon(mix.writer, n)
            for n in range(args.searchers):
                tg.start_soon(mix.searcher, n)
            tg.start_soon(mix.churner)
            tg.start_soon(sampler)

        check_ledger(d.data_dir, mix.ledger)
        await wait_index_agrees(d, within_s=600)
        assert await d.stop() == 0, "the daemon did not stop cleanly"
        assert integrity(d.data_dir) == "ok"
    except (AssertionError, DaemonUnavailable) as exc:
        say(f"rss: FAILED: {exc}")
        ok = False
    finally:
        d.kill()

    errors = {k: v for k, v in mix.counts.items() if k.startswith("error")}
    if errors:
        say(f"rss: FAILED: errors under load: {errors}")
        ok = False
    if len(samples) >= 2:
        rss = [kib for _, kib, _ in samples]
        flat = [(t, kib) for t, kib, settled in samples if settled]
        say(
            f"rss: start {rss[0] / 1024:.1f} MiB, end {rss[-1] / 1024:.1f} MiB, "
            f"max {max(rss) / 1024:.1f} MiB"
        )
        # Judged only over a stretch long enough to show a trend: the last quarter of the
        # run at least (a slow machine reaches the record cap late; then run longer).
        if not flat or flat[0][0] > samples[-1][0] * 3 / 4:
            say(
                "rss: FAILED: the data was still growing in the last quarter of the run; "
                "run longer (--minutes) or write fewer records (--records)"
            )
            ok = False
        else:
            tail = [kib for _, kib in flat[-max(1, len(flat) // 4) :]]
            growth = (statistics.median(tail) - flat[0][1]) / 1024
            say(
                f"rss: data settled at {flat[0][0]:.1f} min with {flat[0][1] / 1024:.1f} MiB; "
                f"growth since {growth:+.1f} MiB over {samples[-1][0] - flat[0][0]:.1f} min "
                f"(allowed {args.max_growth_mib} MiB)"
            )
            if growth > args.max_growth_mib:
                say("rss: FAILED: memory keeps growing once the data has stopped")
                ok = False
    say("rss: totals " + ", ".join(f"{k} {v}" for k, v in sorted(mix.counts.items())))
    say(f"rss: {'OK' if ok else 'FAILED'}")
    return ok


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="scripts/soak",
        description="Crash trials, then a long mixed load printing the daemon's RSS over time.",
    )
    ap.add_argument("--minutes", type=float, default=60.0, help="length of the RSS phase")
    ap.add_argument("--crash-trials", type=int, default=25, help="kill -9 trials (0: skip)")
    ap.add_argument("--clients", type=int, default=16, help="capture clients in both phases")
    ap.add_argument("--searchers", type=int, default=8, help="search clients in the RSS phase")
    ap.add_argument(
        "--records",
        type=int,
        default=20_000,
        help="new records the RSS phase writes before it only replays",
    )
    ap.add_argument("--interval", type=float, default=30.0, help="seconds between RSS samples")
    ap.add_argument(
        "--max-growth-mib",
        type=float,
        default=32.0,
        help="RSS growth allowed once the data has stopped growing",
    )
    ap.add_argument(
        "--embedder",
        choices=["hash", "minilm"],
        default="hash",
        help="hash (default) keeps the model out of the picture; minilm adds it",
    )
    ap.add_argument("--seed", type=int, default=None, help="seed for a replayable run")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    args = ap.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    root = Path(tempfile.mkdtemp(prefix="recalld-soak-"))
    say(f"scripts/soak: working in {root} (seed {args.seed})")
    try:
        ok = anyio.run(crash_phase, root, args.crash_trials, args.clients, args.seed)
        if args.minutes > 0:
            ok = anyio.run(rss_phase, root, args) and ok
    finally:
        if args.keep:
            say(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
