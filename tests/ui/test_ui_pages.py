"""The web page's views over real HTTP (no browser): what the daemon's rules let it show.

The page acts as recallctl does: with the admin token it sees every workspace; with
``--no-admin`` the daemon refuses it what it refuses any agent, and the page says so.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from recall_client import protocol as p

from tests.support.context import AGENT, hook_session, make_shop, seed_shop
from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.team import TeamDb, raw_count, team
from tests.support.ui import Http, csrf_of, ui_server

WS = "/ws/ui-pages"
OTHER = "/ws/ui-pages-other"


async def seed(d: DaemonProcess) -> None:
    async with d.client(workspace=WS) as rc:
        await rc.call(
            p.MemoryStore(text="Builds use the ccache in /srv/ccache", tags=["build"]), p.Stored
        )
        await rc.call(p.MemoryStore(text="Lunch is at noon on Thursdays"), p.Stored)
    async with d.client(workspace=OTHER) as rc:
        await rc.call(p.MemoryStore(text="The other project deploys with Helm"), p.Stored)


async def test_with_the_admin_token_every_workspace_is_listed_and_exported(
    running_daemon: DaemonProcess,
) -> None:
    await seed(running_daemon)
    with ui_server(running_daemon, WS) as server:
        http = Http(server).sign_in()
        everything = http.get("/memories?ws=*").text
        assert "Helm" in everything and "ccache" in everything
        only_build = http.get(f"/memories?ws={WS}&tag=build").text
        assert "ccache" in only_build and "Lunch" not in only_build and "Helm" not in only_build
        # What the workspace's searches rank by: nothing learned yet, the prior.
        assert "Ranking learned from use: the prior" in only_build, only_build[-3000:]
        # Search options beyond the list's filters reach memory_search.
        found = http.get(f"/memories?ws={WS}&q=ccache+builds&mode=bm25&min_score=0&bm25=on").text
        assert "1 hit for" in found
        export = http.get("/operations/export.jsonl?kind=memory")
        assert export.status_code == 200
        assert export.headers["content-disposition"].startswith("attachment")
        rows = [json.loads(line) for line in export.text.splitlines()]
        assert sorted(r["text"] for r in rows) == [
            "Builds use the ccache in /srv/ccache",
            "Lunch is at noon on Thursdays",
            "The other project deploys with Helm",
        ]
        assert http.get("/operations?doctor=1").status_code == 200


async def test_without_the_admin_token_the_daemon_refuses_what_it_refuses_an_agent(
    running_daemon: DaemonProcess,
) -> None:
    await seed(running_daemon)
    with ui_server(running_daemon, WS, admin=False) as server:
        http = Http(server).sign_in()
        own = http.get("/memories")
        assert own.status_code == 200 and "ccache" in own.text and "Helm" not in own.text
        other = http.get(f"/memories?ws={OTHER}")
        assert other.status_code == 403
        assert "forbidden" in other.text and "Helm" not in other.text
        for path in ("/operations", "/operations/export.jsonl"):
            refused = http.get(path)
            assert refused.status_code == 403, path
            assert "admin:workspace" in refused.text


async def test_bad_input_gets_a_clear_error_page(running_daemon: DaemonProcess) -> None:
    with ui_server(running_daemon, WS) as server:
        http = Http(server).sign_in()
        for path, says in (
            ("/memories?kind=bogus", "is not one of"),
            ("/memories?since=yesterday", "is not a date"),
            ("/memories?q=x&min_score=lots", "must be a number"),
            ("/memory/mem_does_not_exist", "not_found"),
            ("/memories?before=not-a-cursor", "invalid_request"),
        ):
            reply = http.get(path)
            assert reply.status_code in (400, 404), (path, reply.status_code)
            assert says in reply.text, (path, reply.text)


async def test_the_page_says_when_the_daemon_is_away_and_recovers_when_it_is_back(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    with ui_server(d, WS) as server:
        http = Http(server).sign_in()
        assert http.get("/memories").status_code == 200
        assert await d.stop() == 0
        away = http.get("/memories")
        assert away.status_code == 503 and "unavailable" in away.text
        await d.start()
        assert http.get("/memories").status_code == 200


async def test_the_memory_page_reviews_then_shares_a_private_memory_with_the_team(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    text = "The nightly build publishes to the internal mirror at 02:00"
    async with team(daemon_factory, team_db, ("alice", "alice"), ("bob", "bob")) as (a, b):
        async with a.client(workspace=WS) as rc:
            stored = await rc.call(p.MemoryStore(text=text, source="ops"), p.MemoryStored)
        memory_id = stored.record_id
        with ui_server(a, WS) as server:
            http = Http(server).sign_in()
            page = http.get(f"/memory/{memory_id}").text
            assert f'href="/memory/{memory_id}/share"' in page
            review = http.get(f"/memory/{memory_id}/share")
            assert review.status_code == 200
            assert text in review.text and "alice" in review.text and "ops" in review.text
            assert "Share with the team" in review.text
            # The review shared nothing; the form's POST, with the page's token, does.
            like = "SELECT count(*) FROM records WHERE text = %s"
            assert raw_count(team_db, "bob", like, text) == 0
            done = http.post(
                f"/memory/{memory_id}/share",
                data={"csrf": csrf_of(review.text)},
                headers={"origin": server.origin},
            )
            assert done.status_code == 303, done.text
            assert done.headers["location"].startswith(f"/memory/{memory_id}?done=shared")
            assert raw_count(team_db, "bob", like, text) == 1
            shared = http.get(f"/memory/{memory_id}").text
            assert "with the team" in shared and f"/memory/{memory_id}/share" not in shared
        # bob's page has no share button for it, and the daemon refuses him the share.
        with ui_server(b, WS) as server:
            http = Http(server).sign_in()
            assert f"/memory/{memory_id}/share" not in http.get(f"/memory/{memory_id}").text
            refused = http.get(f"/memory/{memory_id}/share")
            assert refused.status_code == 403 and "only its owner" in refused.text


async def test_a_local_store_offers_no_share(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(workspace=WS) as rc:
        stored = await rc.call(p.MemoryStore(text="Kept on this machine only"), p.MemoryStored)
    with ui_server(running_daemon, WS) as server:
        page = Http(server).sign_in().get(f"/memory/{stored.record_id}").text
    assert "Kept on this machine only" in page
    assert "/share" not in page and "Review and share" not in page


FORMATTER_QUERY = "which formatter should I use"


async def formatter_search(d: DaemonProcess) -> tuple[p.MemorySearchResult, str]:
    """The daemon's answer to the formatter query, and the page's search for it."""
    async with d.client(workspace=WS) as rc:
        await rc.call(p.MemoryStore(text="Use black as the formatter for python"), p.Stored)
        answer = await rc.call(
            p.MemorySearch(query=FORMATTER_QUERY, workspace=WS, verbose=True),
            p.MemorySearchResult,
        )
    with ui_server(d, WS) as server:
        query = FORMATTER_QUERY.replace(" ", "+")
        page = Http(server).sign_in().get(f"/memories?ws={WS}&q={query}").text
    return answer, page


def matched_on_page(page: str) -> list[str]:
    """The terms the page shows as matched (its term chips)."""
    return [html.unescape(t) for t in re.findall(r'<span class="term">([^<]*)</span>', page)]


async def test_a_hits_matched_terms_are_the_daemons_not_the_pages_split_of_the_query(
    running_daemon: DaemonProcess,
) -> None:
    answer, page = await formatter_search(running_daemon)
    [hit] = answer.hits
    assert "formatter" in hit.match_terms
    assert matched_on_page(page) == hit.match_terms
    for word in ("which", "should"):
        assert word not in matched_on_page(page)


async def test_a_word_with_no_information_is_never_shown_as_matched(
    running_daemon: DaemonProcess,
) -> None:
    _, page = await formatter_search(running_daemon)
    assert "formatter" in matched_on_page(page)
    assert "use" not in matched_on_page(page)


async def test_sessions_show_what_the_hooks_injected_and_what_became_of_it(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    d = running_daemon
    shop = make_shop(tmp_path)
    ids = await seed_shop(d, shop)
    # A host session id is whatever the host sent: the page shows it as text.
    session = '<script>alert("s")</script>-9f2'
    start, prompt = await hook_session(d, shop, session)
    token = next(i.use_token for i in prompt.items if i.id == ids["discount"])
    assert token is not None
    async with d.client(agent=AGENT, workspace=str(shop)) as rc:
        await rc.call(p.MemoryRecordUse(use_token=token, outcome="contradicted"), p.UseRecorded)
    escaped = "&lt;script&gt;alert("  # as the templates escape it
    with ui_server(d, shop) as server:
        http = Http(server).sign_in()
        assert 'href="/sessions"' in http.get("/").text
        listing = http.get("/sessions")
        assert listing.status_code == 200
        assert escaped in listing.text and session not in listing.text
        assert AGENT in listing.text
        # One session row: its items, one contradicted, the other memories injected only.
        [row] = re.findall(
            r"<tr><td[^>]*><a href=\"/sessions/show\?[^\"]+\">.*?</tr>", listing.text, re.S
        )
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        memories = [i for b in (start, prompt) for i in b.items if i.id.startswith("mem_")]
        # injections, items, then used, ignored, contradicted, corrected, injected only.
        assert cells[4:] == [
            "2",
            str(len(start.items) + len(prompt.items)),
            "0",
            "0",
            "1",
            "0",
            str(len(memories) - 1),
        ]
        link = re.search(r'href="(/sessions/show\?[^"]+)"', row)
        assert link is not None
        shown = http.get(html.unescape(link.group(1))).text
        assert escaped in shown and session not in shown
        # Each injection, oldest first, with each item as injected and its outcome now.
        assert shown.index("Session start") < shown.index("Prompt")
        assert f"{start.tokens} of {start.budget} tokens" in shown
        for item in (*start.items, *prompt.items):
            assert item.id in shown
        assert f'<a class="item-link" href="/memory/{ids["discount"]}">' in shown
        assert "contradicted" in shown and "injected only" in shown and "not a use" in shown
        # A memory's page names the sessions it was injected into.
        memory = http.get(f"/memory/{ids['discount']}").text
        assert "Injected into sessions" in memory and escaped in memory
        assert "/sessions/show?" in memory and "contradicted" in memory
        assert http.get("/sessions/show").status_code == 400


async def test_without_the_admin_token_sessions_are_the_pages_own_agents(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    d = running_daemon
    shop = make_shop(tmp_path)
    await seed_shop(d, shop)
    await hook_session(d, shop, "s-of-claude")
    with ui_server(d, shop, admin=False) as server:
        http = Http(server).sign_in()
        own = http.get("/sessions")
        assert own.status_code == 200
        assert "s-of-claude" not in own.text and "No context was injected" in own.text
        every = http.get("/sessions?ws=*")
        assert every.status_code == 403 and "admin:workspace" in every.text
