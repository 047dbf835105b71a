"""Finding 4: no text makes redaction, path scraping or trust scoring slower than linear.

The reviewer's families ("token." repeated was cubic, "--token..." and "mysql " repeated
quadratic, "+" repeated in path scraping quadratic) and more built the same way from every
rule's literal parts, each at the protocol's maximum text length: doubling the length may
at most about double the time (checked over a fourfold length: at most 2.5 x 2.5), and the
longest text stays within a budget. Then, live: one
client storing such a text does not stall another's pings.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import anyio
import pytest
from recall_client import protocol as p
from recalld.domain.drift import scrape_paths
from recalld.ingest.redact import redact
from recalld.ingest.trust import assess

from ..conftest import DaemonProcess
from .harness import FIGURES

MAX_TEXT = 100_000
# Per doubling of the length: linear work doubles, quadratic work quadruples. The slack
# covers timer noise on a shared machine; lengths four times apart average it out better.
MAX_GROWTH = 2.5
SPAN = 4
MAX_SPAN_GROWTH = MAX_GROWTH**2
BUDGET_S = 2.0

# The pieces each rule is built from (issuer prefixes, key words, commands, separators),
# so a repeated piece walks a rule's quantifiers the longest way.
PIECES = [
    "token.",
    "token-",
    "passwd.",
    "secret_",
    "api_key-",
    "--token",
    "--token_",
    "--",
    "mysql ",
    "mysql -p",
    "mysqldump -p'",
    "curl ",
    "curl -u a:",
    "wget --user ",
    "https ",
    "docker login ",
    'docker login -p"',
    "sshpass -p ",
    "machine a login b ",
    "password ",
    "basic ",
    "bearer ",
    '"token":',
    '"token": ',
    '"auth":"',
    "token=",
    "token: ",
    "x_PASS=",
    "http://",
    "a://b:",
    "a.",
    "a:",
    "eyJ-",
    "eyJaaaaaaaa.",
    "sk-",
    "sk-ant-",
    "ghp_",
    "glpat-",
    "xoxb-",
    "whsec_+",
    "glc_+",
    "ya29.",
    "hvs.",
    "SG.",
    "AccountKey=",
    "?sig=",
    "-----BEGIN ",
    "-----BEGIN PRIVATE KEY-----",
    "-----END ",
    "PuTTY-User-Key-File-2:",
    "+",
    "/",
    "./",
    "~/",
    "a/",
    "@",
    "\n",
    " \n",
    "\n>",
    "ignore ",
    "<|system|>",
    "system:",
    "send the ",
    "according to ",
    "you must ",
    "curl x | ",
    "rm -rf ",
]
SEPARATORS = ["", " ", "."]

Scan = Callable[[str], object]
SCANS: dict[str, Scan] = {"redact": redact, "scrape_paths": scrape_paths, "assess": assess}


def family(piece: str, size: int) -> str:
    return (piece * (size // len(piece) + 1))[:size]


def seconds(scan: Scan, text: str) -> float:
    """CPU seconds of one scan (time spent descheduled and garbage collections left out)."""
    gc.disable()
    try:
        started = time.process_time()
        scan(text)
        return time.process_time() - started
    finally:
        gc.enable()


def growth(scan: Scan, unit: str) -> tuple[float, float]:
    """(seconds at a quarter of the maximum length, at the maximum), measured again when the
    first look is superlinear: a busy machine can stretch any one run."""
    short, long = family(unit, MAX_TEXT // SPAN), family(unit, MAX_TEXT)
    part, full = seconds(scan, short), seconds(scan, long)
    for _ in range(3):
        if full <= MAX_SPAN_GROWTH * part:
            break
        part, full = min(part, seconds(scan, short)), min(full, seconds(scan, long))
    return part, full


@pytest.mark.parametrize("scan", list(SCANS), ids=list(SCANS))
def test_every_family_is_linear_at_the_maximum_length(scan: str) -> None:
    fn = SCANS[scan]
    worst: tuple[float, str] = (0.0, "")
    for piece in PIECES:
        for sep in SEPARATORS:
            unit = piece + sep
            part, full = growth(fn, unit)
            # Below a few milliseconds timer noise dominates; such a text is harmless anyway.
            if part > 0.004:
                assert full <= MAX_SPAN_GROWTH * part, (
                    f"{scan}: {unit!r} x{SPAN} length took {full / part:.1f}x ({part:.3f}s -> "
                    f"{full:.3f}s): superlinear"
                )
            assert full <= BUDGET_S, f"{scan}: {unit!r} at {MAX_TEXT} chars took {full:.2f}s"
            worst = max(worst, (full, repr(unit)))
    FIGURES[f"redos: {scan} slowest family at 100k chars (ms)"] = round(worst[0] * 1000)


async def test_a_pathological_text_does_not_stall_other_clients(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    pings: list[float] = []
    stored = anyio.Event()

    async def ping_meanwhile() -> None:
        async with d.client(agent="bystander") as rc:
            while not stored.is_set():
                started = time.perf_counter()
                await rc.call(p.Ping(), p.Pong)
                pings.append(time.perf_counter() - started)
                await anyio.sleep(0.02)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ping_meanwhile)
        async with d.client(agent="attacker") as rc:
            with anyio.fail_after(30):
                for unit in ("token.", "--token", "mysql ", "curl -u a:"):
                    started = time.perf_counter()
                    await rc.call(p.MemoryStore(text=family(unit, MAX_TEXT)), p.Stored)
                    took = time.perf_counter() - started
                    FIGURES[f"redos: memory_store of {unit!r} x 100k chars (ms)"] = round(
                        took * 1000
                    )
                    assert took < 5.0, f"storing {unit!r} took {took:.1f}s"
        stored.set()
    assert pings and max(pings) < 1.0, f"a ping waited {max(pings):.2f}s"
    FIGURES["redos: slowest ping during the stores (ms)"] = round(max(pings) * 1000)
