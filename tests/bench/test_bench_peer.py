"""`scripts/bench --peer`: the bench's side of the peer-driver protocol, without the peer.

The peer itself (mcp-memory-service, a multi-minute install) never runs in the suite. A fake
driver speaks the protocol so the job sent, the parsing, the refusals and the ratios are
checked; the real driver is run without the peer to check its failure path.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import peer_bench  # noqa: E402

TEXTS = [f"The deploy script needs the VPN #{i}" for i in range(40)]
QUERIES = ["deploy script", "vpn", "why does the deploy script fail"]
FIGURES = {
    "peer": "mcp-memory-service 12.4.0",
    "embedder": "SentenceTransformer",
    "dim": 384,
    "model_load_s": 9.5,
    "store_per_s": 30.0,
    "store_batch_per_s": 120.0,
    "search_p50_ms": 100.0,
    "search_p99_ms": 400.0,
}


def fake_driver(tmp_path: Path, overrides: dict[str, object], exit_code: int = 0) -> Path:
    """A driver that records the job it got and answers FIGURES (with overrides) for it."""
    path = tmp_path / "fake_driver.py"
    path.write_text(
        textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        job = json.load(sys.stdin)
        Path(job["db_dir"], "job.json").write_text(json.dumps(job))
        print("peer log line", file=sys.stderr)
        answer = dict({FIGURES!r}, records=len(job["texts"]), queries=len(job["queries"]))
        answer.update(json.loads({json.dumps(overrides)!r}))
        print(json.dumps(answer))
        sys.exit({exit_code})
    """)
    )
    return path


def run(tmp_path: Path, driver: Path) -> peer_bench.PeerFigures:
    return peer_bench.run_peer(
        Path(sys.executable),
        tmp_path / "work",
        Path("/models/minilm"),
        TEXTS,
        QUERIES,
        window=8,
        limit=10,
        batch=16,
        timeout=60,
        driver=driver,
    )


def test_the_driver_gets_the_same_workload_and_its_figures_become_ratios(tmp_path: Path) -> None:
    figures = run(tmp_path, fake_driver(tmp_path, {}))

    job = json.loads((tmp_path / "work" / "job.json").read_text())
    assert job == {
        "db_dir": str(tmp_path / "work"),
        "model_path": "/models/minilm",
        "texts": TEXTS,
        "queries": QUERIES,
        "window": 8,
        "limit": 10,
        "batch": 16,
    }
    assert figures == peer_bench.PeerFigures(
        peer="mcp-memory-service 12.4.0",
        records=40,
        queries=3,
        model_load_s=9.5,
        store_per_s=30.0,
        store_batch_per_s=120.0,
        search_p50_ms=100.0,
        search_p99_ms=400.0,
    )
    # The peer's logs land beside its databases, not in the bench's output.
    assert "peer log line" in (tmp_path / "work" / "driver.log").read_text()
    assert peer_bench.ratios(600.0, 5.0, figures) == {
        "capture_vs_peer_ratio": 20.0,
        "search_vs_peer_ratio": 0.05,
    }


def test_a_driver_error_is_raised_with_its_message_and_log(tmp_path: Path) -> None:
    driver = fake_driver(tmp_path, {"error": "RuntimeError: sqlite extension loading"}, exit_code=1)
    with pytest.raises(peer_bench.PeerError, match="sqlite extension loading") as err:
        run(tmp_path, driver)
    assert "exit 1" in str(err.value) and "peer log line" in str(err.value)


@pytest.mark.parametrize(
    "overrides, reason",
    [
        ({"embedder": "_HashEmbeddingModel"}, "did not embed with MiniLM"),
        ({"dim": 768}, "did not embed with MiniLM"),
        ({"records": 39}, "measured 39 records"),
        ({"queries": 1}, "measured 40 records and 1 queries"),
        ({"store_per_s": 0}, "store_per_s=0"),
        ({"search_p50_ms": float("nan")}, "search_p50_ms=nan"),
        ({"search_p99_ms": "fast"}, "search_p99_ms='fast'"),
    ],
)
def test_figures_that_cannot_be_compared_are_refused(
    tmp_path: Path, overrides: dict[str, object], reason: str
) -> None:
    with pytest.raises(peer_bench.PeerError, match=reason):
        run(tmp_path, fake_driver(tmp_path, overrides))


def test_a_driver_that_answers_nothing_is_a_failure(tmp_path: Path) -> None:
    driver = tmp_path / "silent.py"
    driver.write_text("import sys; sys.stdin.read()\n")
    with pytest.raises(peer_bench.PeerError, match="no answer"):
        run(tmp_path, driver)


def test_the_real_driver_without_the_peer_answers_a_typed_error(tmp_path: Path) -> None:
    # recalld's venv has no mcp-memory-service: the real driver must say so in one JSON
    # line on stdout (anything the import prints goes to stderr) and exit non-zero.
    with pytest.raises(peer_bench.PeerError, match=r"ModuleNotFoundError.*mcp_memory_service"):
        run(tmp_path, peer_bench.DRIVER)
