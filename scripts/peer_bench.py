"""`scripts/bench --peer`: the peer, mcp-memory-service, in its own venv, and the ratios.

``scripts/setup-peer`` installs the peer into ``.peer-venv/``; ``scripts/peer_driver.py`` runs
there and answers one JSON job over stdin/stdout. This module is the bench's side of that
protocol: it sends the same texts and queries recalld was measured on, checks the answer
(including that the peer embedded with the real 384-dim MiniLM) and computes the ratios.
"""

from __future__ import annotations

import json
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DRIVER", "PeerError", "PeerFigures", "ratios", "run_peer", "setup_peer"]

REPO = Path(__file__).resolve().parent.parent
DRIVER = Path(__file__).with_name("peer_driver.py")
MINILM_DIM = 384


class PeerError(RuntimeError):
    """The peer could not be installed, failed, or answered something the bench cannot trust."""


@dataclass(frozen=True)
class PeerFigures:
    peer: str
    records: int
    queries: int
    model_load_s: float
    store_per_s: float
    store_batch_per_s: float
    search_p50_ms: float
    search_p99_ms: float


def setup_peer() -> Path:
    """Install the peer's venv (a no-op when current); return its python."""
    done = subprocess.run([str(REPO / "scripts" / "setup-peer")], check=False)
    if done.returncode != 0:
        raise PeerError(f"scripts/setup-peer failed (exit {done.returncode})")
    return REPO / ".peer-venv" / "bin" / "python"


def run_peer(
    python: Path,
    work: Path,
    model_path: Path,
    texts: list[str],
    queries: list[str],
    *,
    window: int = 32,
    limit: int = 10,
    batch: int = 32,
    timeout: float = 3600,
    driver: Path = DRIVER,
) -> PeerFigures:
    """Run the driver on one job; its stderr (the peer's logs) goes to ``work/driver.log``."""
    work.mkdir(parents=True, exist_ok=True)
    job = {
        "db_dir": str(work),
        "model_path": str(model_path),
        "texts": texts,
        "queries": queries,
        "window": window,
        "limit": limit,
        "batch": batch,
    }
    log = work / "driver.log"
    with log.open("wb") as err:
        try:
            done = subprocess.run(
                [str(python), str(driver)],
                input=json.dumps(job).encode(),
                stdout=subprocess.PIPE,
                stderr=err,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise PeerError(f"peer driver ran past {timeout:.0f}s; see {log}") from None
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        answer = {}
    if not isinstance(answer, dict):
        answer = {}
    if done.returncode != 0 or not answer or "error" in answer:
        raise PeerError(
            f"peer driver failed (exit {done.returncode}): "
            f"{answer.get('error', 'no answer')}\n{tail}"
        )
    return _checked(answer, len(texts), len(queries))


def _checked(answer: dict[str, object], records: int, queries: int) -> PeerFigures:
    """Refuse figures that are not what was asked for, or not from the real model."""
    if answer.get("embedder") != "SentenceTransformer" or answer.get("dim") != MINILM_DIM:
        raise PeerError(
            f"peer did not embed with MiniLM ({answer.get('embedder')!r}, "
            f"dim {answer.get('dim')!r}); its figures would not be comparable"
        )
    if answer.get("records") != records or answer.get("queries") != queries:
        raise PeerError(
            f"peer measured {answer.get('records')!r} records and "
            f"{answer.get('queries')!r} queries, not {records} and {queries}"
        )
    numbers = {}
    for key in (
        "model_load_s",
        "store_per_s",
        "store_batch_per_s",
        "search_p50_ms",
        "search_p99_ms",
    ):
        value = answer.get(key)
        if (
            not isinstance(value, (int, float))
            or isinstance(value, bool)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise PeerError(f"peer answered {key}={value!r}")
        numbers[key] = float(value)
    return PeerFigures(
        peer=str(answer.get("peer", "mcp-memory-service")),
        records=records,
        queries=queries,
        **numbers,
    )


def ratios(
    recalld_store_per_s: float, recalld_search_p50_ms: float, peer: PeerFigures
) -> dict[str, float]:
    """recalld / peer on the same workload: capture above 1 and search below 1 favour recalld."""
    return {
        "capture_vs_peer_ratio": recalld_store_per_s / peer.store_per_s,
        "search_vs_peer_ratio": recalld_search_p50_ms / peer.search_p50_ms,
    }
