"""A store's learned relevance in a team database: each member's own.

alice's outcomes on a team memory teach alice's calibration; bob, on the same database, in
the same workspace, as the same uid, still ranks by the prior, cannot read alice's rows in
raw SQL, and his admin reset leaves hers in place.
"""

from __future__ import annotations

from recall_client import protocol as p
from recall_client.client import connect
from recall_client.paths import read_admin_token

from tests.support.daemon import DaemonFactory
from tests.support.team import TeamDb, raw_count, store, team

WS = "/ws/team-relevance"
QUERY = "when does the staging deploy run"


async def test_one_members_outcomes_never_move_anothers_calibration(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    async with team(daemon_factory, team_db, ("alice", "alice"), ("bob", "bob")) as (a, b):
        async with a.client(workspace=WS) as rc:
            await store(rc, "The staging deploy runs every Tuesday.", visibility="team")
            await store(rc, "Staging deploys wait for the nightly build.", visibility="team")
        await a.settled()
        await b.settled()
        async with a.client(workspace=WS) as rc:
            result = await rc.call(p.MemorySearch(query=QUERY, min_score=0.0), p.MemorySearchResult)
            for hit in result.hits:
                assert hit.use_token is not None
                await rc.call(
                    p.MemoryRecordUse(use_token=hit.use_token, outcome="used"), p.UseRecorded
                )
            alices = (await rc.call(p.RelevanceShow(), p.RelevanceShown)).calibration
        assert alices.source == "workspace" and alices.updates == len(result.hits) > 0
        async with b.client(workspace=WS) as rc:
            bobs = (await rc.call(p.RelevanceShow(), p.RelevanceShown)).calibration
            # bob's search of the same team memories ranks by the prior.
            seen = await rc.call(
                p.MemorySearch(query=QUERY, min_score=0.0, explain=True), p.MemorySearchResult
            )
        assert (bobs.source, bobs.updates, bobs.user_updates) == ("prior", 0, 0)
        assert seen.hits and seen.trace is not None
        assert seen.trace["calibration"]["source"] == "prior"
        mine = "SELECT count(*) FROM relevance_calibrations WHERE owner = 'alice'"
        assert raw_count(team_db, "bob", mine) == 0
        assert raw_count(team_db, "alice", mine) == 2  # the workspace's and her own
        async with connect(
            agent="operator", workspace=WS, path=b.socket, admin_token=read_admin_token()
        ) as rc:
            cleared = await rc.call(p.RelevanceReset(), p.RelevanceCleared)
        assert cleared.cleared == 0
        assert raw_count(team_db, "alice", mine) == 2
