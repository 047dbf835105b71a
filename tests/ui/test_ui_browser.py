"""The web page in a real browser: Debian's chromium, driven by Selenium through chromedriver.

Each test starts a real daemon and the real ``recallctl ui``, signs the browser in through
the sign-in page it wrote, clicks through the pages, and checks both what the page shows and
what the daemon then holds. A screenshot of every page lands in the test's tmp dir.
"""

from __future__ import annotations

import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlencode, urlsplit

import anyio
import pytest
from mcp import Client
from recall_client import protocol as p
from recall_client.client import RemoteError
from recall_client.ui.guard import MAX_SESSIONS
from selenium.common.exceptions import WebDriverException
from selenium.webdriver import Chrome, ChromeOptions
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement

from tests.support.context import AGENT, hook_session, make_shop, seed_shop
from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.mcp_client import open_tools, shim
from tests.support.ui import Http, UiServer, ui_server

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="Debian's chromium and chromium-driver are not installed (.ci/run installs them)",
)

WS = "/ws/ui-browser"
T = TypeVar("T")


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Chrome]:
    """Debian's chromium, headless, through Debian's chromedriver: both named explicitly, so
    Selenium Manager (which would look for, and download, a browser and a driver of its own)
    is never run; SE_OFFLINE keeps it from the network even if it were."""
    assert CHROMIUM is not None and CHROMEDRIVER is not None
    monkeypatch.setenv("SE_OFFLINE", "true")
    options = ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        # This machine's network is closed: no background connections to be refused.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        f"--user-data-dir={tmp_path / 'chromium'}",
        "--window-size=1280,1000",
    ):
        options.add_argument(arg)
    driver = Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        assert driver.service.path == CHROMEDRIVER  # the system driver, nothing fetched
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        driver.quit()


class Page:
    """The browser on one ``recallctl ui``: open paths, wait, fill and submit, screenshot."""

    def __init__(self, driver: Chrome, server: UiServer, shots: Path) -> None:
        self.driver = driver
        self.server = server
        self.shots = shots
        shots.mkdir(exist_ok=True)
        # The sign-in page recallctl ui wrote: it sends the browser to the one-time link,
        # which trades its token for the cookie and lands on the overview.
        driver.get(server.page)
        self.wait(lambda: driver.current_url == server.base + "/" and "Overview" in self.text())
        server.new_link()  # that link is spent: the next browser gets another

    def open(self, path: str) -> None:
        self.driver.get(self.server.base + path)

    def wait(self, what: Callable[[], T], within_s: float = 15.0) -> T:
        """What ``what`` returns once it is true; it is asked again every 0.1 s meanwhile
        (the page changes by itself: there is nothing to be told of)."""
        deadline = time.monotonic() + within_s
        while True:
            try:
                found = what()
            except WebDriverException:  # not there yet, or replaced while it was read
                found = None
            if found:
                return found
            if time.monotonic() > deadline:
                shot = self.shot("timed-out")
                raise AssertionError(
                    f"{self.driver.current_url} never got there ({shot}); it shows:\n"
                    + self.driver.page_source
                )
            time.sleep(0.1)

    def text(self) -> str:
        return self.css("main").text

    def css(self, selector: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def click(self, selector: str) -> None:
        self.css(selector).click()

    def link(self, text: str) -> None:
        self.driver.find_element(By.PARTIAL_LINK_TEXT, text).click()

    def choose(self, selector: str, option: str) -> None:
        """Pick the option shown as ``option`` in the select at ``selector``."""
        [chosen] = [
            o for o in self.css(selector).find_elements(By.TAG_NAME, "option") if o.text == option
        ]
        chosen.click()

    def fill(self, selector: str, value: str) -> None:
        field = self.css(selector)
        field.clear()
        field.send_keys(value)

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        assert self.driver.save_screenshot(path), path
        return path

    def unlabelled_controls(self) -> list[str]:
        """Form controls a screen reader could not name (no label, no aria-label)."""
        found: list[str] = self.driver.execute_script(
            """
            return [...document.querySelectorAll('input, select, textarea')]
              .filter(e => e.type !== 'hidden')
              .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
              .map(e => e.outerHTML);
            """
        )
        return found

    def overflows(self) -> bool:
        """The page is wider than the window (a narrow window must not scroll sideways)."""
        return bool(
            self.driver.execute_script(
                "return document.documentElement.scrollWidth > window.innerWidth + 1;"
            )
        )


@pytest.fixture
def page_on(browser: Chrome, tmp_path: Path) -> Callable[[UiServer], Page]:
    return lambda server: Page(browser, server, tmp_path / "screenshots")


async def test_every_page_renders_labelled_and_the_overview_is_live(
    running_daemon: DaemonProcess, page_on: Callable[[UiServer], Page], tmp_path: Path
) -> None:
    d = running_daemon
    async with d.client(workspace=WS) as rc:
        await rc.call(p.MemoryStore(text="The CI cache lives in /var/cache/ci"), p.Stored)
        await rc.call(
            p.CaptureEpisode(summary="ran the tests", session_id="s-1"), p.EpisodeCaptured
        )
        await rc.call(
            p.RecordExperience(description="Fixed the flaky cache test", status="success"),
            p.ExperienceRecorded,
        )
    with ui_server(d, WS) as server:
        page = page_on(server)
        assert "Overview" in page.text() and "running" in page.text()
        before = page.css("#live").text
        # The overview updates by itself: more records arrive, the live fragment follows.
        async with d.client(workspace=WS) as rc:
            for i in range(5):
                await rc.call(p.MemoryStore(text=f"live figure number {i}"), p.Stored)
            await rc.call(p.Status(wait_settled_s=10), p.StatusResult)
        page.wait(lambda: "memory" in page.css("#live").text and page.css("#live").text != before)
        assert page.css("#live svg.spark") is not None
        # The first tab stop is the skip link; it moves focus to the content.
        page.css("body").send_keys(Keys.TAB)
        active = page.driver.switch_to.active_element
        assert active.text == "Skip to content"
        pages = {
            "overview": "/",
            "memories": f"/memories?ws={WS}",
            "work": f"/work?ws={WS}",
            "sessions": f"/sessions?ws={WS}",
            "experiences": f"/experiences?ws={WS}",
            "operations": "/operations?doctor=1",
        }
        for name, path in pages.items():
            page.open(path)
            assert "did not go through" not in page.text(), (name, page.text())
            assert page.unlabelled_controls() == [], name
            page.shot(name)
        assert "ok" in page.text() and "Doctor" in page.text()
        page.driver.set_window_size(420, 900)
        for name, path in pages.items():
            page.open(path)
            page.shot(f"{name}-narrow")
            assert not page.overflows(), f"{name} scrolls sideways at 420 px"
    assert len(list((tmp_path / "screenshots").glob("*.png"))) == 2 * len(pages)


async def test_a_memory_stored_through_mcp_is_listed_edited_verified_and_forgotten(
    running_daemon: DaemonProcess, page_on: Callable[[UiServer], Page]
) -> None:
    d = running_daemon
    async with Client(shim(str(d.socket), "--workspace", WS)) as client:
        call = await open_tools(client)
        stored = await call(
            "memory_store", text="The release train leaves on Tuesdays", tags=["release"]
        )
    memory_id = stored["id"]
    with ui_server(d, WS) as server:
        page = page_on(server)
        page.open(f"/memories?ws={WS}")
        assert "The release train leaves on Tuesdays" in page.text()
        page.link("The release train leaves on Tuesdays")
        page.wait(lambda: memory_id in page.text())
        assert "shim-test" in page.text()  # the agent that wrote it
        page.shot("memory")

        page.fill("#text", "The release train leaves on Wednesdays")
        page.fill("#tags", "release, schedule")
        page.click("form[action$='/edit'] button")
        page.wait(lambda: "edited" in page.css(".notice").text)
        assert "Wednesdays" in page.css("#memory-text").text
        async with d.client(workspace=WS) as rc:
            shown = (await rc.call(p.MemoryShow(memory_id=memory_id), p.MemoryShown)).memory
        assert shown.text == "The release train leaves on Wednesdays"
        assert shown.tags == ["release", "schedule"]

        page.fill("#verify-note", "checked the calendar")
        page.click("form[action$='/verify'] button")
        page.wait(lambda: "verified" in page.css(".notice").text)

        page.choose("#outcome", "used")
        page.click("form[action$='/outcome'] button")
        page.wait(lambda: "outcome used recorded" in page.css(".notice").text)
        assert "used 1" in page.text()
        async with d.client(workspace=WS) as rc:
            shown = (await rc.call(p.MemoryShow(memory_id=memory_id), p.MemoryShown)).memory
        assert shown.outcomes == {"used": 1}
        assert shown.last_verified_at >= shown.created_at

        page.link("Forget…")
        page.wait(lambda: "Forget this memory?" in page.text())
        page.shot("forget-confirm")
        page.click("form button.danger")
        page.wait(lambda: f"Forgot {memory_id}" in page.text())
        assert "Wednesdays" not in page.text()
    async with d.client(workspace=WS) as rc:
        with pytest.raises(RemoteError) as err:
            await rc.call(p.MemoryShow(memory_id=memory_id), p.MemoryShown)
    assert err.value.code == "not_found"


async def test_search_shows_scores_bands_match_terms_and_a_readable_explain(
    running_daemon: DaemonProcess, page_on: Callable[[UiServer], Page]
) -> None:
    d = running_daemon
    async with d.client(workspace=WS) as rc:
        await rc.call(p.MemoryStore(text="Production PostgreSQL listens on port 5433"), p.Stored)
        await rc.call(p.MemoryStore(text="The office plants need water on Fridays"), p.Stored)
        await rc.call(p.Status(wait_settled_s=10), p.StatusResult)
    with ui_server(d, WS) as server:
        page = page_on(server)
        page.open(f"/memories?ws={WS}")
        page.fill("#q", "postgresql port")
        page.click("#explain")
        page.click("form.filters button[type=submit]")
        page.wait(lambda: "for “postgresql port”" in page.text())
        hit = page.css("li.hit")
        assert "Production PostgreSQL listens on port 5433" in hit.text
        assert "score" in hit.text and page.css("li.hit .band").text in ("high", "medium", "low")
        terms = {t.text for t in hit.find_elements(By.CSS_SELECTOR, ".term")}
        assert {"postgresql", "port"} <= terms
        hit.find_element(By.CSS_SELECTOR, "summary").click()
        assert hit.find_element(By.CSS_SELECTOR, "dl.tree").is_displayed()
        page.shot("search-explain")


async def test_a_contested_fact_is_resolved_on_its_page(
    running_daemon: DaemonProcess, page_on: Callable[[UiServer], Page]
) -> None:
    d = running_daemon
    ts = time.time() - 86400
    async with d.client(workspace=WS) as rc:
        await rc.call(
            p.MemoryStore(
                text="Staging runs in eu-west-1", kind="fact", subject="staging region", ts=ts
            ),
            p.MemoryStored,
        )
        second = await rc.call(
            p.MemoryStore(
                text="Staging runs in us-east-2", kind="fact", subject="staging region", ts=ts
            ),
            p.MemoryStored,
        )
    assert second.action == "contested"
    with ui_server(d, WS) as server:
        page = page_on(server)
        page.open(f"/memories?ws={WS}&kind=fact")
        page.link("eu-west-1")
        page.wait(lambda: "This fact is contested" in page.text())
        page.shot("contested")
        page.click(f"input[value='keep:{second.record_id}']")
        page.click("form[action='/facts/resolve'] button")
        page.wait(lambda: "fact resolved" in page.css(".notice").text)
        assert "us-east-2" in page.css("#memory-text").text
        assert "This fact is contested" not in page.text()
    async with d.client(workspace=WS) as rc:
        found = await rc.call(
            p.MemorySearch(query="staging region", min_score=0.0), p.MemorySearchResult
        )
    assert [(c.id, c.contested) for c in found.cortex] == [(second.record_id, False)]


async def test_a_refused_workspace_is_approved_from_operations(
    daemon_factory: DaemonFactory, page_on: Callable[[UiServer], Page]
) -> None:
    d = daemon_factory(extra_env={"RECALLD_REQUIRE_APPROVAL": "1"})
    await d.start()
    newcomer = "/ws/new-project"
    async with d.client(workspace=newcomer) as rc:
        with pytest.raises(RemoteError) as err:
            await rc.call(p.MemoryStore(text="refused until approved"), p.Stored)
    assert err.value.code == "forbidden"
    with ui_server(d, WS) as server:
        page = page_on(server)
        page.open("/operations")
        assert "Refused since the daemon started" in page.text() and newcomer in page.text()
        page.click(f"button[aria-label='Approve {newcomer}']")
        page.wait(lambda: f"{newcomer} approved" in page.css(".notice").text)
        page.shot("operations-approved")
        assert page.css("button[aria-label='Revoke /ws/new-project']") is not None
    async with d.client(workspace=newcomer) as rc:
        assert isinstance(await rc.call(p.MemoryStore(text="served now"), p.Stored), p.Stored)
    assert await d.stop() == 0


async def test_a_session_is_a_timeline_and_takes_a_verdict(
    running_daemon: DaemonProcess, page_on: Callable[[UiServer], Page]
) -> None:
    d = running_daemon
    steps = ["opened the failing test", "found the race in the cache", "fixed and re-ran the suite"]
    async with d.client(workspace=WS, agent="builder") as rc:
        for i, step in enumerate(steps):
            await rc.call(
                p.CaptureEpisode(
                    summary=step, session_id="sess-42", tool="Bash", ts=1_700_000_000 + i
                ),
                p.EpisodeCaptured,
            )
    with ui_server(d, WS) as server:
        page = page_on(server)
        page.open(f"/work?ws={WS}")
        page.link("sess-42")
        page.wait(lambda: "Session" in page.text())
        shown = [
            e.text for e in page.driver.find_elements(By.CSS_SELECTOR, "li.episode .record-text")
        ]
        assert shown == steps  # the prev_id chain, oldest first
        page.shot("session")
        page.fill("#task_result", "0.25")
        page.click("form[action^='/work/verdict'] button")
        page.wait(lambda: "verdict 0.25 set on 3 of 3 episodes" in page.css(".notice").text)
    async with d.client(workspace=WS, agent="builder") as rc:
        found = await rc.call(
            p.WorkSearch(session_id="sess-42", include_pending=True, min_trust=0.0),
            p.WorkSearchResult,
        )
    assert [e.task_result for e in found.results] == [0.25, 0.25, 0.25]


async def test_a_sessions_injections_show_each_items_outcome_and_lead_to_the_memory(
    running_daemon: DaemonProcess, page_on: Callable[[UiServer], Page], tmp_path: Path
) -> None:
    d = running_daemon
    shop = make_shop(tmp_path)
    ids = await seed_shop(d, shop)
    _, prompt = await hook_session(d, shop, "sess-ctx-7")
    [item] = [i for i in prompt.items if i.id == ids["discount"]]
    assert item.use_token is not None
    async with d.client(agent=AGENT, workspace=str(shop)) as rc:
        await rc.call(p.MemoryRecordUse(use_token=item.use_token, outcome="used"), p.UseRecorded)
    with ui_server(d, shop) as server:
        page = page_on(server)
        page.link("Sessions")
        page.wait(lambda: "sess-ctx-7" in page.text())
        page.shot("sessions")
        page.link("sess-ctx-7")
        page.wait(lambda: "Context injected into" in page.text())
        assert [h.text.split()[0] for h in page.driver.find_elements(By.CSS_SELECTOR, "h2")] == [
            "Session",
            "Prompt",
        ]
        row = page.css(f"a[href='/memory/{ids['discount']}']").find_element(By.XPATH, "../..")
        assert row.find_element(By.CSS_SELECTOR, "td.outcome").text == "used"
        assert page.unlabelled_controls() == []
        page.shot("context-session")
        page.link(ids["discount"])
        page.wait(lambda: "Injected into sessions" in page.text())
        assert "sess-ctx-7" in page.css("ul.injected").text
        assert "used" in page.css("ul.injected").text


async def test_a_sessions_page_shows_each_items_current_text_with_links_at_1280_and_420_px(
    running_daemon: DaemonProcess, page_on: Callable[[UiServer], Page], tmp_path: Path
) -> None:
    d = running_daemon
    shop = make_shop(tmp_path)
    ids = await seed_shop(d, shop)
    failure = "pytest failed: test_total_rounding expected 10.00, got 9.99"
    async with d.client(agent=AGENT, workspace=str(shop)) as rc:
        # The session before: a failed step no verdict judged, which the next start recalls.
        failed = await rc.call(
            p.CaptureEpisode(
                summary=failure, status="error", tool="Bash", session_id="sess-before"
            ),
            p.EpisodeCaptured,
        )
    ids["failure"] = failed.record_id
    start, prompt = await hook_session(d, shop, "sess-text-9")
    injected = {i.id for i in [*start.items, *prompt.items]}
    assert {ids["discount"], ids["total"], ids["lesson"], ids["failure"]} <= injected
    edited = "The cart total is computed in total.py with Decimal; tax is added per line."
    async with d.client(agent=AGENT, workspace=str(shop)) as rc:
        await rc.call(p.MemoryUpdate(memory_id=ids["total"], text=edited), p.MemoryChanged)
        await rc.call(p.Forget(record_id=ids["discount"]), p.Forgotten)
        await rc.call(
            p.CaptureEpisode(
                summary="prompt: Make the cart total round once, at the end",
                episode_type="prompt",
                session_id="sess-text-9",
                ts=1_700_000_000,
            ),
            p.EpisodeCaptured,
        )
    with ui_server(d, shop) as server:
        page = page_on(server)
        page.open(f"/sessions/show?{urlencode({'session': 'sess-text-9', 'ws': str(shop)})}")
        page.wait(lambda: "Context injected into" in page.text())
        assert "its current text" in page.text()

        def row(item_id: str) -> WebElement:
            return page.css(f"a.item-link[href*='{item_id}']").find_element(By.XPATH, "../..")

        def current(item_id: str) -> str:
            return str(row(item_id).find_element(By.CSS_SELECTOR, "td.item-text").text)

        assert current(ids["total"]).startswith(edited) and "changed since" in current(ids["total"])
        assert "forgotten" in current(ids["discount"]) and "Discounted" not in page.text()
        assert current(ids["fact"]) == "Releases of the shop go out on Fridays."
        lesson = "Round the cart total once, at the end, on main and release branches"
        assert current(ids["lesson"]) == lesson
        sections = {i.id: i.section for i in [*start.items, *prompt.items]}
        for item_id, section in sections.items():
            assert row(item_id).find_element(By.CSS_SELECTOR, "td").text == section
        page.shot("context-items")
        # Each id is a link to its own page.
        page.click(f"a.item-link[href*='{ids['lesson']}']")
        page.wait(lambda: "Experiences and lessons" in page.text())
        assert page.css(f"li[id='{ids['lesson']}']").text.startswith(lesson)
        page.driver.back()
        assert current(ids["failure"]) == failure
        page.click(f"a.item-link[href*='{ids['failure']}']")
        page.wait(lambda: "Set the session's verdict" in page.text())
        assert urlsplit(page.driver.current_url).path == "/work/session/sess-before"
        assert page.css(f"li[id='{ids['failure']}'] .record-text").text == failure
        page.driver.back()
        page.click(f"a.item-link[href*='{ids['total']}']")
        page.wait(lambda: edited in page.text())
        assert urlsplit(page.driver.current_url).path == f"/memory/{ids['total']}"
        # The Work page names the session by its first prompt.
        page.open(f"/work?{urlencode({'ws': str(shop)})}")
        page.link("Make the cart total round once, at the end")
        page.wait(lambda: "Session sess-text-9" in page.text())
        assert page.css("h1").text == "Make the cart total round once, at the end"

        # At 420 px: every outcome column on screen, a memory's text given the width.
        page.driver.set_window_size(420, 900)
        width = page.driver.execute_script("return window.innerWidth;")
        page.open(f"/sessions?{urlencode({'ws': str(shop)})}")
        page.wait(lambda: "sess-text-9" in page.text())
        page.shot("sessions-420")
        for column in ("used", "ignored", "contradicted"):
            cell = page.css(f"td.outcome-{column}")
            box = cell.rect
            assert cell.is_displayed() and 0 <= box["x"] and box["x"] + box["width"] <= width
        assert not page.overflows()
        page.open(f"/memories?{urlencode({'ws': str(shop)})}")
        page.wait(lambda: "newest first" in page.text())
        page.driver.execute_script("document.querySelector('#list-h').scrollIntoView();")
        page.shot("memories-420")
        texts = page.driver.find_elements(By.CSS_SELECTOR, "td.memory-text")
        assert texts and all(t.rect["width"] > 0.8 * width for t in texts)
        assert not page.overflows()
        page.open(f"/sessions/show?{urlencode({'session': 'sess-text-9', 'ws': str(shop)})}")
        page.wait(lambda: "Context injected into" in page.text())
        page.shot("context-items-420")
        assert row(ids["total"]).find_element(By.CSS_SELECTOR, "td.item-text").rect["width"] > (
            0.8 * width
        )
        assert not page.overflows()


async def test_open_without_a_browser_says_so_and_what_to_do(
    running_daemon: DaemonProcess,
) -> None:
    with ui_server(running_daemon, WS, "--open", env={"BROWSER": "/bin/false"}) as server:
        deadline = time.monotonic() + 20
        while "no browser could be opened" not in "".join(server.log):
            assert time.monotonic() < deadline, "".join(server.log)
            await anyio.sleep(0.1)
        said = "".join(server.log)
        assert server.page in said.split("no browser could be opened")[1]
        assert "--print-url" in said


async def test_an_experience_shows_its_lessons_and_is_forgotten(
    running_daemon: DaemonProcess, page_on: Callable[[UiServer], Page]
) -> None:
    d = running_daemon
    async with d.client(workspace=WS) as rc:
        recorded = await rc.call(
            p.RecordExperience(
                description="Migrated the billing service to the new queue",
                status="success",
                lessons=["Drain the old queue before switching consumers"],
            ),
            p.ExperienceRecorded,
        )
    with ui_server(d, WS) as server:
        page = page_on(server)
        page.open(f"/experiences?ws={WS}")
        assert "Drain the old queue before switching consumers" in page.text()
        page.link("Migrated the billing service")
        page.wait(lambda: recorded.record_id in page.text())
        assert "support 1" in page.text()
        page.shot("experience")
        page.link("Forget…")
        page.wait(lambda: "Forget this experience?" in page.text())
        page.click("form button.danger")
        page.wait(lambda: "1 retired" in page.css(".notice").text)
        assert "Migrated the billing service" not in page.css("table").text
    async with d.client(workspace=WS) as rc:
        listing = await rc.call(p.ExperienceList(), p.ExperienceListResult)
    assert listing.experiences == []


def processes_holding(secret: str) -> list[str]:
    """Every process whose command line or environment holds ``secret``. Any local user
    reads every command line (/proc/PID/cmdline); this test, as root, reads environments too."""
    found: list[str] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        for part in ("cmdline", "environ"):
            try:
                if secret.encode() in (proc / part).read_bytes():
                    found.append(f"{proc.name}/{part}")
            except OSError:  # it ended meanwhile
                continue
    return found


def read_when_there(path: Path, within_s: float = 20.0) -> str:
    """The text of ``path`` once it exists (another process writes it)."""
    deadline = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    return path.read_text()


def modes(path: Path) -> tuple[int, int] | None:
    """The permission bits of ``path`` and of its directory; None if it is gone."""
    try:
        return stat.S_IMODE(path.stat().st_mode), stat.S_IMODE(path.parent.stat().st_mode)
    except FileNotFoundError:
        return None


async def test_open_puts_no_token_on_any_command_line_and_its_page_signs_in_once(
    running_daemon: DaemonProcess, page_on: Callable[[UiServer], Page], tmp_path: Path
) -> None:
    # The "browser" records what it was handed (argv, environment), as `ps` would show it.
    handed = tmp_path / "handed"
    recorder = tmp_path / "record-argv"
    recorder.write_text(
        f'#!/bin/sh\n{{ printf "%s\\n" "$@"; env; }} > {handed}.part && mv {handed}.part {handed}\n'
    )
    recorder.chmod(0o700)
    with ui_server(running_daemon, WS, "--open", env={"BROWSER": str(recorder)}) as server:
        seen = read_when_there(handed)
        assert seen.splitlines()[0] == server.page  # the browser gets the sign-in page...
        sign_in_page = Path(urlsplit(server.page).path)
        found = re.search(r"\?token=([A-Za-z0-9_-]+)", read_when_there(sign_in_page))
        assert found is not None
        token = found.group(1)
        assert token not in seen and "token=" not in seen  # ...and never the token itself
        assert processes_holding(token) == []
        assert "token=" not in "".join(server.log)  # not printed either, unless asked
        assert modes(sign_in_page) == (0o600, 0o700)
        # The real browser on that page reaches the overview (Page waits for it)...
        page = page_on(server)
        assert "Overview" in page.text()
        assert modes(sign_in_page) is None  # spent: its page is gone
        assert processes_holding(token) == []
        # ...and nobody else gets in with the same token.
        replay = Http(server).get(f"/?token={token}")
        assert replay.status_code == 403 and "set-cookie" not in replay.headers
        page.open("/operations")
        assert "Doctor" in page.text()
        unused = Path(urlsplit(server.page).path)  # the next link, which nobody opened
        assert modes(unused) == (0o600, 0o700)
    assert modes(unused) is None  # the server took its page along when it stopped


async def test_a_full_session_table_refuses_newcomers_and_signs_nobody_out(
    running_daemon: DaemonProcess, page_on: Callable[[UiServer], Page]
) -> None:
    with ui_server(running_daemon, WS) as server:
        page = page_on(server)  # the user's browser holds the first session
        others = [Http(server).sign_in() for _ in range(MAX_SESSIONS - 1)]
        newcomer = Http(server)
        refused = newcomer.get(f"/?token={server.token}")
        assert refused.status_code == 503
        assert f"{MAX_SESSIONS} browsers are signed in already" in refused.text
        assert "set-cookie" not in refused.headers
        assert newcomer.get("/operations/export.jsonl").status_code == 403
        # Everyone signed in before stays signed in, the user's own browser first.
        page.open("/operations")
        assert "Doctor" in page.text()
        assert [o.get("/").status_code for o in others] == [200] * len(others)
