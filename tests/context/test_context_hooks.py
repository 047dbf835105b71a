"""The context hooks end to end: Claude Code's SessionStart and UserPromptSubmit payloads
through the real ``recallctl context`` (the command ``recallctl connect`` wires), against a
real daemon, in a git checkout with commits. The block is the host's
``hookSpecificOutput.additionalContext``, within its budget in the host's tokens (recalld's
estimate from above), with each item's id, provenance and drift state; a session is never
given the same item twice; each injected memory is a use its token can settle; with no
daemon or a bad payload the hook says nothing on stdout and exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from recall_client import protocol as p
from recalld.retrieval import host_tokens
from recalld.retrieval.host_tokens import estimate

from tests.support.context import AGENT, context_hook, hook_payload, item_ids, make_shop, remember
from tests.support.daemon import DaemonProcess
from tests.support.git import git

pytestmark = pytest.mark.both_backends

OLD_SESSION = "4d1c8a2e-old-session"


def additional_context(out: subprocess.CompletedProcess[str], event: str) -> str:
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert set(reply) == {"hookSpecificOutput"}
    assert reply["hookSpecificOutput"]["hookEventName"] == event
    text: str = reply["hookSpecificOutput"]["additionalContext"]
    return text


def line_of(block: str, record_id: str) -> str:
    [line] = [x for x in block.splitlines() if x.startswith(f"- [{record_id}]")]
    return line


def commit_after_now(repo: Path, message: str) -> None:
    """Commit, dated a couple of seconds ahead: git's commit times are whole seconds, and the
    session before ended within this one."""
    later = f"@{int(time.time()) + 2} +0000"
    env = dict(os.environ, GIT_AUTHOR_DATE=later, GIT_COMMITTER_DATE=later)
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com")
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", message], check=True, env=env)


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return make_shop(tmp_path)


async def previous_session(d: DaemonProcess, shop: Path) -> dict[str, str]:
    """What an earlier session left: memories (one citing total.py, one tax.py, one citing
    nothing), a fact, a lesson, a failed step nobody judged and one that succeeded."""
    async with d.client(agent=AGENT, workspace=str(shop)) as rc:
        ids = {
            "total": await remember(
                rc,
                "The cart total is computed in total.py with Decimal, never float: a float "
                "total is off by a cent on discounted orders.",
                paths=["services/cart/total.py"],
            ),
            "tax": await remember(
                rc, "The tax rate lives in tax.py.", paths=["services/cart/tax.py"]
            ),
            "discount": await remember(
                rc, "Discounted orders take the discount per line before the total is summed."
            ),
            "fact": await remember(
                rc, "Releases of the shop go out on Fridays.", kind="fact", subject="release day"
            ),
        }
        failed = await rc.call(
            p.CaptureEpisode(
                summary="pytest services/cart failed: test_discount_total",
                session_id=OLD_SESSION,
                tool="Bash",
                status="error",
                error_code="exit 1",
            ),
            p.EpisodeCaptured,
        )
        await rc.call(
            p.CaptureEpisode(summary="ran the linter", session_id=OLD_SESSION, tool="Bash"),
            p.EpisodeCaptured,
        )
        experience = await rc.call(
            p.RecordExperience(
                description="fixed rounding of the cart total on main",
                status="success",
                lessons=["Round the cart total once, at the end, on main and release branches"],
            ),
            p.ExperienceRecorded,
        )
    ids["failed"] = failed.record_id
    ids["lesson"] = experience.lessons[0].id
    await d.settled()
    return ids


async def test_session_start_and_prompts_inject_within_budget_with_ids_and_drift(
    running_daemon: DaemonProcess, shop: Path
) -> None:
    d = running_daemon
    ids = await previous_session(d, shop)
    # After that session, a commit changes total.py (a file a memory cites).
    (shop / "services" / "cart" / "total.py").write_text("TOTAL = 'Decimal, rounded once'\n")
    commit_after_now(shop, "round the total once")
    cwd = shop / "services" / "cart"

    start = context_hook(d, hook_payload("claude_code_session_start.json", cwd))
    block = additional_context(start, "SessionStart")
    assert estimate(block) <= 1_200  # the default session-start budget
    shown = item_ids(block)
    assert len(shown) == len(set(shown))
    # The current fact, the unjudged failure of the last session (not its success), the
    # memory citing the changed file (flagged: a commit touched its cited path), the lesson.
    assert ids["fact"] in shown and ids["failed"] in shown and ids["lesson"] in shown
    assert "error exit 1" in line_of(block, ids["failed"])
    assert "ran the linter" not in block
    changed = block.split("Memories citing files changed since the last session:\n", 1)[1]
    assert changed.splitlines()[0] == line_of(block, ids["total"])
    assert "drifted since verified (spot_check_recommended)" in line_of(block, ids["total"])
    assert ids["tax"] not in block  # tax.py did not change, and nothing asked for it
    assert ids["discount"] not in block
    assert "drifted" not in line_of(block, ids["fact"])

    # The first prompt: relevant memories not given yet (the total memory was given at the
    # session's start, so it is not again).
    prompt = hook_payload("claude_code_user_prompt_submit.json", cwd)
    first = additional_context(context_hook(d, prompt), "UserPromptSubmit")
    assert estimate(first) <= 600
    assert ids["discount"] in item_ids(first)
    assert ids["total"] not in item_ids(first) and ids["fact"] not in item_ids(first)
    # The same prompt again: nothing new to give.
    again = context_hook(d, prompt)
    assert again.returncode == 0 and again.stdout == ""

    # A new session starts afresh: the prompt now brings the total memory, drift flag and all.
    other = hook_payload("claude_code_user_prompt_submit.json", cwd, session_id="another-session")
    fresh = additional_context(context_hook(d, other), "UserPromptSubmit")
    assert {ids["total"], ids["discount"]} <= set(item_ids(fresh))
    assert "drifted since verified" in line_of(fresh, ids["total"])


async def test_a_small_budget_is_kept_by_the_host_token_estimate(
    running_daemon: DaemonProcess, shop: Path
) -> None:
    d = running_daemon
    await previous_session(d, shop)
    payload = hook_payload("claude_code_session_start.json", shop)
    out = context_hook(d, payload, "--budget", "200", "--json")
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert reply["budget"] == 200 and reply["tokenizer"] == host_tokens.NAME
    # Each line is counted with the newline that ends it: the block itself has one less.
    assert estimate(reply["text"]) == reply["tokens"] - 1 < 200
    assert reply["left_out"] > 0 and reply["items"]
    assert sum(i["tokens"] for i in reply["items"]) < reply["tokens"]  # headings count too
    assert context_hook(d, payload, "--budget", "0").stdout == ""


async def test_each_injected_memory_is_a_use_its_token_settles(
    running_daemon: DaemonProcess, shop: Path
) -> None:
    d = running_daemon
    ids = await previous_session(d, shop)
    prompt = hook_payload("claude_code_user_prompt_submit.json", shop, session_id="s-uses")
    out = context_hook(d, prompt, "--json")
    assert out.returncode == 0, out.stderr
    reply = msgspec.json.decode(out.stdout, type=p.ContextInjected)
    memories = {i.id: i for i in reply.items if i.id.startswith("mem_")}
    assert ids["total"] in memories and all(i.use_token for i in memories.values())
    assert all(i.drift == "fresh" for i in memories.values())  # no commit since they were made
    # The uses are queued before the hook's answer: any write after it commits after them.
    async with d.client(agent=AGENT, workspace=str(shop)) as rc:
        await rc.call(p.CaptureEpisode(summary="a later step", session_id="s-uses"))
    uses = (
        "SELECT r.id, u.outcome, u.session, u.note"
        " FROM memory_uses u JOIN records r ON r.rowid = u.rowid"
    )
    assert set(d.sql(uses)) == {(m, "injected", "s-uses", "prompt") for m in memories}

    # The agent reports that the total memory was wrong: its injection becomes that outcome.
    token = memories[ids["total"]].use_token
    assert token is not None
    async with d.client(agent=AGENT, workspace=str(shop)) as rc:
        await rc.call(p.MemoryRecordUse(use_token=token, outcome="contradicted"), p.UseRecorded)
        shown = (await rc.call(p.MemoryShow(memory_id=ids["total"]), p.MemoryShown)).memory
        found = await rc.call(
            p.MemorySearch(query="how is the cart total computed", verbose=True),
            p.MemorySearchResult,
        )
    # The same row, its outcome and note now the agent's: one use, not two.
    assert (ids["total"], "contradicted", "s-uses", None) in set(d.sql(uses))
    assert len(d.sql(uses)) == len(memories)
    assert shown.outcomes == {"contradicted": 1}
    assert [o.outcome for o in shown.recent_outcomes] == ["contradicted"]
    [hit] = [h for h in found.hits if h.id == ids["total"]]
    assert hit.recent_negative_outcomes and hit.staleness_verdict == "spot_check_required"
    # An injection alone says nothing of the memory: the tax memory's search is unchanged.
    assert all(not h.recent_negative_outcomes for h in found.hits if h.id != ids["total"])


async def test_with_no_daemon_the_hook_says_nothing_and_exits_0_at_once(
    daemon_factory: Any, shop: Path
) -> None:
    d = daemon_factory()  # never started: nothing answers on its socket
    for name in ("claude_code_session_start.json", "claude_code_user_prompt_submit.json"):
        started = time.monotonic()
        out = context_hook(d, hook_payload(name, shop))
        # Nothing on stderr either: Gemini CLI shows it to the user when stdout is empty.
        assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
        assert time.monotonic() - started < 5  # far inside the hook's timeout
        loud = context_hook(d, hook_payload(name, shop), "--verbose")
        assert loud.returncode == 0 and loud.stdout == ""
        assert loud.stderr.startswith("recallctl context: no context:")
    assert not d.socket.exists()  # and it started no daemon


@pytest.mark.parametrize(
    "stdin",
    [
        "not json",
        "[1, 2]",
        json.dumps({"hook_event_name": "PostToolUse", "session_id": "s"}),
        json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s"}),
        json.dumps({"hook_event_name": "SessionStart", "session_id": ""}),
        json.dumps({"hook_event_name": "SessionStart", "session_id": "s\u0000"}),
    ],
    ids=["not-json", "array", "other-event", "no-prompt", "blank-session", "nul"],
)
async def test_a_bad_payload_exits_0_silently_or_with_one_verbose_line(
    running_daemon: DaemonProcess, stdin: str
) -> None:
    out = context_hook(running_daemon, stdin)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
    loud = context_hook(running_daemon, stdin, "--verbose")
    assert loud.returncode == 0 and loud.stdout == ""
    assert len(loud.stderr.splitlines()) == 1 and loud.stderr.startswith("recallctl context: ")


async def test_budget_zero_in_the_config_turns_the_hook_off(
    daemon_factory: Any, shop: Path
) -> None:
    d = daemon_factory(extra_env={"RECALLD_CONTEXT_PROMPT_BUDGET": "0"})
    await d.start()
    await previous_session(d, shop)
    prompt = hook_payload("claude_code_user_prompt_submit.json", shop)
    out = context_hook(d, prompt)
    assert out.returncode == 0 and out.stdout == "", out.stderr
    start = context_hook(d, hook_payload("claude_code_session_start.json", shop))
    assert additional_context(start, "SessionStart")  # the other budget still applies


@pytest.mark.sqlite_only
async def test_gemini_clis_before_agent_payload_gets_its_own_event_name_back(
    running_daemon: DaemonProcess, shop: Path
) -> None:
    ids = await previous_session(running_daemon, shop)
    out = context_hook(running_daemon, hook_payload("gemini_cli_before_agent.json", shop))
    block = additional_context(out, "BeforeAgent")
    assert ids["total"] in item_ids(block) and estimate(block) <= 600


@pytest.mark.real_model
@pytest.mark.sqlite_only
async def test_with_the_real_model_the_budget_is_still_the_hosts_tokens(
    daemon_factory: Any, shop: Path
) -> None:
    d = daemon_factory(embedder="minilm")
    await d.start()
    await previous_session(d, shop)
    prompt = hook_payload("claude_code_user_prompt_submit.json", shop)
    reply = json.loads(context_hook(d, prompt, "--budget", "160", "--json").stdout)
    # The embedding model's WordPiece is not what the host's model counts with.
    assert reply["tokenizer"] == host_tokens.NAME
    assert reply.get("items"), reply
    assert estimate(reply["text"]) < reply["tokens"] <= 160


@pytest.mark.sqlite_only
async def test_a_workspace_table_gives_its_workspace_its_own_budgets(
    daemon_factory: Any, tmp_path: Path
) -> None:
    """``[workspace."ID or PATH"]`` in the daemon's config: the shop (named by identity) gets
    its own budgets, the docs checkout (named by path) has its prompts' block off, and any
    other workspace the daemon's defaults."""
    repos = {}
    for name in ("shop", "docs", "blog"):
        repo = tmp_path / name
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text(f"{name}\n")
        git(repo, "add", ".")
        git(repo, "commit", "-qm", "one")
        repos[name] = repo
    git(repos["shop"], "remote", "add", "origin", "git@github.com:Acme/Shop.git")
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "recalld" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        "context_prompt_budget = 500\n"
        '[workspace."github.com/acme/shop"]\n'
        "context_session_budget = 300\n"
        "context_prompt_budget = 150\n"
        f'[workspace."{repos["docs"]}"]\n'
        "context_prompt_budget = 0\n"
    )
    d = daemon_factory()
    await d.start()
    for repo in repos.values():
        async with d.client(agent=AGENT, workspace=str(repo)) as rc:
            await remember(rc, f"The {repo.name} README says what {repo.name} is for.")
    await d.settled()

    def budgets(repo: Path) -> tuple[int, int | None]:
        start = context_hook(d, hook_payload("claude_code_session_start.json", repo), "--json")
        prompt = context_hook(
            d,
            hook_payload("claude_code_user_prompt_submit.json", repo, prompt="what is README"),
            "--json",
        )
        assert start.returncode == prompt.returncode == 0, (start.stderr, prompt.stderr)
        got = json.loads(prompt.stdout)
        assert got["tokens"] <= got["budget"]
        return json.loads(start.stdout)["budget"], got["budget"]

    assert budgets(repos["shop"]) == (300, 150)  # its own, by identity
    assert budgets(repos["docs"]) == (1200, 0)  # by path: prompts off, the daemon's start
    assert budgets(repos["blog"]) == (1200, 500)  # the daemon's (the file's, then the default)
    # 0 turns it off: the docs checkout's prompts get nothing printed for the host.
    off = context_hook(d, hook_payload("claude_code_user_prompt_submit.json", repos["docs"]))
    assert off.returncode == 0 and off.stdout == "", off.stderr
    # --budget in a project's hook still says its own.
    shop_prompt = hook_payload(
        "claude_code_user_prompt_submit.json", repos["shop"], session_id="another"
    )
    assert (
        json.loads(context_hook(d, shop_prompt, "--budget", "40", "--json").stdout)["budget"] == 40
    )
