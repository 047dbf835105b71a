"""Finding 4: no text makes redaction, path scraping or trust scoring (and the instruction
scorer in it) slower than linear.

The reviewer's families ("token." repeated was cubic, "--token..." and "mysql " repeated
quadratic, "+" repeated in path scraping quadratic) and more built the same way from every
rule's literal parts, each at the protocol's maximum text length (redaction's at four times
it): doubling the length may at most about double the time (checked over a fourfold length:
at most 2.5 x 2.5), and the longest text stays within a budget. Then, live: one
client storing such a text does not stall another's pings.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import time
from collections.abc import Callable, Iterator

import anyio
import pytest
from recall_client import protocol as p
from recalld.domain.drift import scrape_paths
from recalld.domain.instructions import instruction_signals
from recalld.ingest.redact import redact
from recalld.ingest.trust import assess

from tests.support.daemon import DaemonProcess

from .harness import FIGURES

MAX_TEXT = 100_000
# Per doubling of the length: linear work doubles, quadratic work quadruples. The slack
# covers timer noise on a shared machine; lengths four times apart average it out better.
MAX_GROWTH = 2.5
SPAN = 4
MAX_SPAN_GROWTH = MAX_GROWTH**2
BUDGET_S = 2.0  # per MAX_TEXT characters
# Redaction's families run at four times the protocol's maximum (400,000 characters): a
# margin over any text a client can send, for the many rules a new form of secret adds.
LENGTHS = {"redact": 4 * MAX_TEXT, "scrape_paths": MAX_TEXT, "assess": MAX_TEXT}

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
    # The command lines, headers, URLs and config keys of the later rules.
    "aws configure set ",
    "aws configure set a.aws_session_token ",
    "redis-cli ",
    "redis-cli -a ",
    "-pass ",
    "-passin pass:",
    "openssl ",
    "openssl -k ",
    "ssh-keygen ",
    "ssh-keygen -N ",
    "htpasswd",
    "htpasswd -b",
    "htpasswd -nb ",
    "htpasswd -b a ",
    " -b",
    "smbclient ",
    "smbclient -U a%",
    "%",
    "ldapsearch -w",
    "ldappasswd -a ",
    "net use ",
    "net use \\\\a ",
    "/user:",
    "net use /user:a ",
    "echo ",
    "echo 'a:",
    "echo a | ",
    "echo a | sudo ",
    "chpasswd <<< a:",
    "\u2026",
    "cookie: ",
    "cookie: a=",
    "set-cookie: a=b; ",
    "curl -b ",
    "?key=",
    "&key=a1",
    "psk=",
    "passphrase: ",
    "client-key-data: ",
    "private_key_id: ",
    "$1$",
    "$apr1$a$",
    "$2y$05$",
    "$y$a$",
    "$argon2id$v=19$m=1,t=1,p=1$",
    "{SHA}",
    "pbkdf2_sha256$1$",
    "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0",
    "aB3/",
    # base64 holding an issuer's prefix; hex under a key's name.
    "Z2hwX",
    "aZ2hwX",
    "Z2hwX=",
    "Z2hwXZ2hwXZ2hwXZ2hwXZ2hwX",
    "docF",
    "key=",
    "key=0f",
    "_key: ",
    "a key ",
    "api key is ",
    "0f",
    # What folding drops, expands or replaces.
    "\u200b",
    "a\u00ad",
    "t\u043eken=",
    "\uff54\uff4f\uff4b\uff45\uff4e=",
    "\ufb01",
    "\u0130",
    "\u200bghp_",
]
SEPARATORS = ["", " ", "."]

# The instruction scorer's own pieces (recalld.domain.instructions): the words its windows
# start from and stop at, the spacing and punctuation its folding joins or drops, the marks
# its command patterns scan from, and characters folding expands or drops.
SCORER_PIECES = [
    "ignore ",
    "ignore all ",
    "ignore previous ",
    "previous ",
    "instructions ",
    "new instructions",
    "ig-",
    "a-",
    "s ",
    "s.",
    "s y ",
    "S.Y.",
    "system",
    "system:",
    "\nsystem:",
    "SYSTEM ",
    "### system",
    "<|",
    "<|a|",
    "[system]",
    "[inst",
    "you are now ",
    "you are now in ",
    "from now on ",
    "act as ",
    "you act ",
    "as an ai ",
    "note to the ",
    "hey ",
    "the assistant ",
    "ai must ",
    "do not tell ",
    "reveal the ",
    "reading ",
    "curl ",
    "curl x ",
    "curl x | ",
    "| ",
    "|x",
    "curl |",
    "base64 -d ",
    "bash <(",
    'sh -c "$(',
    "eval `",
    "iex (",
    "iex (new-object ",
    "sudo -",
    "send ",
    "send the token ",
    "token to ",
    "exfiltrat",
    "cat ",
    "cat .env ",
    "env | ",
    "- [mem_",
    "\n- [",
    "current facts",
    "current facts:\n",
    "\u200b",
    "a\u200b",
    "\u202e",
    "\U000e0041",
    "\u0430",
    "\uff53",
    "\u5ffd\u7565",
    "\u7cfb\u7edf:",
    "\u0441\u0438\u0441\u0442\u0435\u043c\u0430:",
    "e\u0301",
]

Scan = Callable[[str], object]
SCANS: dict[str, Scan] = {"redact": redact, "scrape_paths": scrape_paths, "assess": assess}
SCORER = "instruction_signals"


def family(piece: str, size: int) -> str:
    return (piece * (size // len(piece) + 1))[:size]


# glibc's malloc serves a buffer over 128 KiB from fresh pages (mmap) that the kernel zeroes
# on first touch, a buffer under it from reused heap. The quarter-length text's copies stay
# under it and the full length's do not, so on a loaded machine the long scan also pays for
# page faults and looked 7.8x slower than its quarter. Both lengths come from the heap while
# this module measures; 128 KiB, glibc's default, is put back after.
M_MMAP_THRESHOLD = -3
DEFAULT_MMAP_THRESHOLD = 128 * 1024


@pytest.fixture(autouse=True, scope="module")
def heap_for_large_buffers() -> Iterator[None]:
    name = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None) if name else None
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, 64 * 1024 * 1024)
    yield
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, DEFAULT_MMAP_THRESHOLD)


def seconds(scan: Scan, text: str) -> float:
    """CPU seconds of one scan on this thread (time spent descheduled, other threads' work
    and garbage collections left out: the process's clock also counts threads earlier tests
    left running)."""
    gc.disable()
    try:
        started = time.thread_time()
        scan(text)
        return time.thread_time() - started
    finally:
        gc.enable()


def growth(scan: Scan, unit: str, size: int) -> tuple[float, float]:
    """(seconds at a quarter of ``size``, at ``size``), measured again when the first look
    is superlinear: a busy machine can stretch any one run. Another process hammering the
    memory stretches the long text's run more than the short one's (its working set leaves
    the caches), for as long as that process runs: the later looks wait longer and longer
    (up to about 3 s in all), so such a spell can pass; a superlinear scan stays so."""
    short, long = family(unit, size // SPAN), family(unit, size)
    part, full = seconds(scan, short), seconds(scan, long)
    for attempt in range(6):
        if full <= MAX_SPAN_GROWTH * part:
            break
        time.sleep(0.2 * attempt)
        part, full = min(part, seconds(scan, short)), min(full, seconds(scan, long))
    return part, full


@pytest.mark.parametrize("piece", PIECES, ids=[repr(piece) for piece in PIECES])
@pytest.mark.parametrize("scan", list(SCANS), ids=list(SCANS))
def test_every_family_is_linear_at_the_maximum_length(scan: str, piece: str) -> None:
    fn, size = SCANS[scan], LENGTHS[scan]
    budget = BUDGET_S * size / MAX_TEXT
    worst = 0.0
    for sep in SEPARATORS:
        unit = piece + sep
        part, full = growth(fn, unit, size)
        # Below a few milliseconds timer noise dominates; such a text is harmless anyway.
        if part > 0.004:
            assert full <= MAX_SPAN_GROWTH * part, (
                f"{scan}: {unit!r} x{SPAN} length took {full / part:.1f}x ({part:.3f}s -> "
                f"{full:.3f}s): superlinear"
            )
        assert full <= budget, f"{scan}: {unit!r} at {size} chars took {full:.2f}s"
        worst = max(worst, full)
    key = f"redos: {scan} slowest family at {size // 1000}k chars (ms)"
    FIGURES[key] = max(FIGURES[key], round(worst * 1000))


@pytest.mark.parametrize("piece", SCORER_PIECES, ids=[repr(piece) for piece in SCORER_PIECES])
def test_every_family_of_the_instruction_scorer_is_linear(piece: str) -> None:
    budget = BUDGET_S
    worst = 0.0
    for sep in SEPARATORS:
        unit = piece + sep
        part, full = growth(instruction_signals, unit, MAX_TEXT)
        if part > 0.004:
            assert full <= MAX_SPAN_GROWTH * part, (
                f"{SCORER}: {unit!r} x{SPAN} length took {full / part:.1f}x ({part:.3f}s -> "
                f"{full:.3f}s): superlinear"
            )
        assert full <= budget, f"{SCORER}: {unit!r} at {MAX_TEXT} chars took {full:.2f}s"
        worst = max(worst, full)
    key = f"redos: {SCORER} slowest family at {MAX_TEXT // 1000}k chars (ms)"
    FIGURES[key] = max(FIGURES[key], round(worst * 1000))


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
