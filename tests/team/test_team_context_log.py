"""The context hooks' log in a team database: each person's own.

alice's hook is given a team memory; bob's daemon, on the same database, in the same
checkout, as the same uid and with the admin token, reads none of alice's injections,
through context_log or in raw SQL: row-level security keeps them alice's.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
from recall_client import protocol as p
from recall_client.client import connect
from recall_client.paths import read_admin_token

from tests.support.context import AGENT, context_hook, hook_payload, make_shop, remember
from tests.support.daemon import DaemonFactory
from tests.support.team import TeamDb, raw_count, team


async def test_a_members_injections_are_no_one_elses(
    daemon_factory: DaemonFactory, team_db: TeamDb, tmp_path: Path
) -> None:
    shop = make_shop(tmp_path)
    async with team(daemon_factory, team_db, ("alice", "alice"), ("bob", "bob")) as (a, b):
        async with a.client(agent=AGENT, workspace=str(shop)) as rc:
            shared = await remember(
                rc,
                "Releases of the shop go out on Fridays.",
                kind="fact",
                subject="release day",
                visibility="team",
            )
        await a.settled()
        await b.settled()
        payload = hook_payload("claude_code_session_start.json", shop, session_id="alice-1")
        out = context_hook(a, payload, "--json")
        assert out.returncode == 0, out.stderr
        block = msgspec.json.decode(out.stdout, type=p.ContextInjected)
        assert shared in {i.id for i in block.items}
        # bob's own hook is given the team fact too, in a session of his own.
        bobs = context_hook(
            b, hook_payload("claude_code_session_start.json", shop, session_id="bob-1")
        )
        assert bobs.returncode == 0, bobs.stderr
        wide = p.ContextLog(any_caller=True, all_workspaces=True)
        for d, session in ((a, "alice-1"), (b, "bob-1")):
            async with d.client(agent=AGENT, workspace=str(shop)) as rc:
                await rc.call(p.CaptureEpisode(summary="a later step", session_id=session))
            async with connect(
                agent=AGENT, workspace=str(shop), path=d.socket, admin_token=read_admin_token()
            ) as rc:
                log = await rc.call(wide, p.ContextLogResult)
            assert [e.session_id for e in log.injections] == [session]
        for table in ("context_injections", "context_items"):
            mine = f"SELECT count(*) FROM {table} WHERE owner = 'alice'"
            assert raw_count(team_db, "bob", mine) == 0
            assert raw_count(team_db, "alice", mine) > 0
