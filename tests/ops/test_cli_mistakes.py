"""A new user's mistakes at the terminal, through the installed ``recallctl`` against a real
daemon: each gets one line naming what to fix and a non-zero exit, never a traceback; and
what MCP could do that the terminal could not (a fact, a memory whole, an outcome)."""

from __future__ import annotations

import json
import os
import subprocess

from tests.support.daemon import BIN, DaemonProcess

WS = "/ws/mistakes"


def ctl(d: DaemonProcess, *args: str | bytes) -> subprocess.CompletedProcess[str]:
    """recallctl as typed (an argument may be raw bytes, as a shell passes them)."""
    done = subprocess.run(
        [
            os.fsencode(BIN / "recallctl"),
            b"--socket",
            os.fsencode(d.socket),
            b"--workspace",
            WS.encode(),
            *(a if isinstance(a, bytes) else a.encode() for a in args),
        ],
        capture_output=True,
        timeout=120,
        env=d.env(),
        stdin=subprocess.DEVNULL,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode(errors="replace")
    )


def into_closed_pipe(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[bytes]:
    """recallctl writing into a pipe whose reader has gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    argv = [str(BIN / "recallctl"), "--socket", str(d.socket), "--workspace", WS, *args]
    try:
        return subprocess.run(
            argv, stdout=write_end, stderr=subprocess.PIPE, env=d.env(), timeout=120
        )
    finally:
        os.close(write_end)


def refused(done: subprocess.CompletedProcess[str], *said: str) -> None:
    """Refused with a non-zero exit and one last line that says each of ``said``."""
    assert done.returncode != 0, done
    assert "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    for words in said:
        assert words in line, line


async def test_each_mistake_gets_one_line_that_names_the_fix(running_daemon: DaemonProcess) -> None:
    d = running_daemon
    refused(ctl(d, "store", b"na\xefve"), "TEXT is not UTF-8", "0xef", "offset 2")
    refused(ctl(d, "search", b"caf\xe9"), "QUERY is not UTF-8", "0xe9", "offset 3")
    refused(ctl(d, "memories", "--tag", b"\xff"), "--tag is not UTF-8", "0xff")
    refused(ctl(d, "status", "--watch", "--interval", "-1"), "--interval", "more than 0 seconds")
    refused(ctl(d, "search", "x", "--limit", "0"), "--limit", "must be 1-50, not 0")
    refused(ctl(d, "search", "x", "--limit", "many"), "--limit", "whole number 1-50")
    refused(ctl(d, "search", ""), "QUERY", "must not be empty")
    refused(ctl(d, "search", "x", "--in", "/nonexistent"), "/nonexistent", "no such workspace")
    refused(ctl(d, "work-search", "-k", "0"), "-k", "1-200")
    refused(ctl(d, "experience", "record", "a task", "--minutes", "-3"), "--minutes", "0-525600")
    # Nothing of it reached the store.
    listed = ctl(d, "memories", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["items"] == []


async def test_help_gives_each_range_from_the_protocol(running_daemon: DaemonProcess) -> None:
    said = ctl(running_daemon, "search", "--help").stdout
    assert "1-50 (default 5)" in said
    assert "1-200 (default 50)" in ctl(running_daemon, "memories", "--help").stdout
    assert "1-200 (default 20)" in ctl(running_daemon, "work-search", "--help").stdout


async def test_a_reader_that_went_away_ends_recallctl_quietly(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    assert ctl(d, "store", "The cache for the build lives in /var/cache/build").returncode == 0
    # As `recallctl memories | head -1` does once head has its line: the pipe's reading end
    # is closed before recallctl writes.
    done = into_closed_pipe(d, "memories")
    assert (done.returncode, done.stderr) == (141, b"")


async def test_the_terminal_stores_a_fact_shows_a_memory_whole_and_records_an_outcome(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    first = ctl(d, "store", "Production PostgreSQL runs on port 5433", "--fact", "prod db port")
    assert first.returncode == 0, first.stderr
    old_id = first.stdout.split()[0]
    second = ctl(d, "store", "Production PostgreSQL moved to port 5434", "--fact", "prod db port")
    assert second.returncode == 0, second.stderr
    new_id = second.stdout.split(";")[0].strip()
    assert f"supersedes {old_id}" in second.stdout
    facts = ctl(d, "memories", "--kind", "fact")
    assert "fact (prod db port)" in facts.stdout and "[superseded]" in facts.stdout

    shown = ctl(d, "show", old_id)
    assert shown.returncode == 0, shown.stderr
    assert f"superseded  by {new_id}" in shown.stdout
    assert "by recallctl" in shown.stdout and "port 5433" in shown.stdout

    used = ctl(d, "record-use", old_id, "--outcome", "contradicted", "--note", "it moved to 5434")
    assert used.returncode == 0, used.stderr
    assert used.stdout.strip() == f"{old_id} contradicted"
    assert "contradicted 1" in ctl(d, "show", old_id).stdout
    refused(ctl(d, "show", "mem_nosuchmemory00000"), "not_found")


async def test_search_shows_relevance_and_low_confidence_and_answers_in_the_seeds_names(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    assert ctl(d, "store", "The staging cluster deploys from the release branch").returncode == 0
    found = ctl(d, "search", "staging cluster release branch", "--mode", "keyword")
    assert found.returncode == 0, found.stderr
    (line,) = [row for row in found.stdout.splitlines() if "mem_" in row]
    assert line.startswith("high relevance") and "score " in line, line
    assert not found.stdout.startswith("low confidence")
    nothing = ctl(d, "search", "kubernetes helm chart values", "--mode", "keyword")
    assert nothing.returncode == 0 and nothing.stdout.strip() == "no matches"
    # One word of four: the best (only) candidate, but one chance in fifty of being what was
    # asked; it is not shown as a match scored near 1, it is under the floor.
    weak = ctl(d, "search", "kubernetes helm chart staging", "--mode", "keyword").stdout
    assert weak.strip() == "no matches", weak
    as_json = json.loads(ctl(d, "search", "staging cluster", "--json").stdout)
    assert "entries" in as_json and "hits" not in as_json
    assert as_json["entries"][0]["text"].startswith("The staging cluster")
