"""The web page's guard, over real HTTP to a real ``recallctl ui`` and daemon (no browser).

A loopback port is reachable by every local user and every page the user's browser visits:
nothing is served without the session cookie, a sign-in link buys one once, a forged Host is
refused, writes need the page's own Origin and CSRF token, and stored markup renders as text.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from recall_client import protocol as p
from recall_client.ui.guard import (
    MAX_SESSIONS,
    SESSION_IDLE_S,
    Guard,
    Message,
    Receive,
    Scope,
    Send,
)

from tests.support.daemon import DaemonProcess
from tests.support.ui import Http, UiServer, csrf_of, ui_server

WS = "/ws/ui-security"


@pytest.fixture
async def page(running_daemon: DaemonProcess) -> AsyncIterator[tuple[UiServer, DaemonProcess]]:
    with ui_server(running_daemon, WS) as server:
        yield server, running_daemon


def signed_in(server: UiServer) -> Http:
    return Http(server).sign_in()


async def store(d: DaemonProcess, text: str) -> str:
    async with d.client(workspace=WS) as rc:
        stored = await rc.call(p.MemoryStore(text=text), p.MemoryStored)
    return stored.record_id


async def test_nothing_is_served_without_the_session_cookie(
    page: tuple[UiServer, DaemonProcess],
) -> None:
    server, _ = page
    anon = Http(server)
    for path in (
        "/",
        "/memories",
        "/operations",
        "/static/app.css",
        "/events",
        "/operations/export.jsonl",
    ):
        reply = anon.get(path)
        assert reply.status_code == 403, path
        assert "not signed in" in reply.text
    # A cookie the server never issued is no cookie.
    anon.cookie = "made-up"
    assert anon.get("/").status_code == 403


async def test_a_wrong_token_is_refused_and_the_right_one_buys_a_strict_httponly_cookie(
    page: tuple[UiServer, DaemonProcess],
) -> None:
    server, _ = page
    client = Http(server)
    wrong = client.get("/?token=" + "x" * len(server.token))
    assert wrong.status_code == 403
    assert "set-cookie" not in wrong.headers
    right = client.get(f"/?token={server.token}")
    assert right.status_code == 200
    cookie = right.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    overview = client.get("/")
    assert overview.status_code == 200
    assert "Overview" in overview.text


async def test_a_spent_sign_in_link_buys_nothing(page: tuple[UiServer, DaemonProcess]) -> None:
    # Whoever saw the link after the user opened it (a shoulder, a history file, a process
    # list) replays it: no cookie, no export. The user's own session is untouched.
    server, _ = page
    spent = server.token
    user = Http(server)
    assert "set-cookie" in user.get(f"/?token={spent}").headers
    thief = Http(server)
    replay = thief.get(f"/?token={spent}")
    assert replay.status_code == 403
    assert "spent" in replay.text
    assert "set-cookie" not in replay.headers
    assert thief.get("/operations/export.jsonl").status_code == 403
    assert user.get("/operations/export.jsonl?kind=memory").status_code == 200
    # A link minted later works once; the one before it, unused, stops working.
    unused = server.new_link()
    server.new_link()
    assert thief.get(unused.removeprefix(server.base)).status_code == 403
    assert thief.get(f"/?token={server.token}").status_code == 200
    assert thief.get("/").status_code == 200
    # A browser already signed in that goes back to its spent link just lands on the page.
    back = user.get(f"/?token={spent}")
    assert back.status_code == 200 and "set-cookie" not in back.headers
    assert user.get("/").status_code == 200


async def test_a_session_unused_for_a_day_ends_and_frees_its_place() -> None:
    clock = [1000.0]
    guard = Guard(now=lambda: clock[0])
    guard.port = 8080

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"page"})

    guard.app = app
    cookies = []
    for _ in range(MAX_SESSIONS):
        status, headers = await asgi_get(guard, f"/?token={guard.new_launch_token()}")
        assert status == 200
        cookies.append(headers["set-cookie"].split(";")[0])
    token = guard.new_launch_token()
    assert (await asgi_get(guard, f"/?token={token}"))[0] == 503
    clock[0] += SESSION_IDLE_S / 2
    assert (await asgi_get(guard, "/", cookies[0]))[0] == 200  # used: its idle time restarts
    clock[0] += SESSION_IDLE_S / 2 + 1
    assert (await asgi_get(guard, "/", cookies[1]))[0] == 403  # unused a day: ended
    assert (await asgi_get(guard, "/", cookies[0]))[0] == 200
    # The refused link was not spent; now there is room, it signs in.
    assert (await asgi_get(guard, f"/?token={token}"))[0] == 200


async def asgi_get(guard: Guard, target: str, cookie: str = "") -> tuple[int, dict[str, str]]:
    """One GET straight through the guard's ASGI interface: (status, headers)."""
    path, _, query = target.partition("?")
    headers = [(b"host", b"127.0.0.1:8080")]
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": query.encode(),
        "headers": headers,
    }
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await guard(scope, receive, send)
    start = sent[0]
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}


async def test_a_forged_host_is_refused_even_with_the_cookie(
    page: tuple[UiServer, DaemonProcess],
) -> None:
    server, _ = page
    client = signed_in(server)
    for host in (
        "evil.example",
        f"evil.example:{server.port}",
        f"127.0.0.1:{server.port + 1}",
        "127.0.0.1",
    ):
        reply = client.get("/", headers={"host": host})
        assert reply.status_code == 421, host
    # The launch token is no way around it either (DNS rebinding with a stolen link).
    reply = client.get(f"/?token={server.token}", headers={"host": "evil.example"})
    assert reply.status_code == 421
    assert (client.get("/", headers={"host": f"localhost:{server.port}"})).status_code == 200


async def test_a_write_needs_same_origin_and_the_csrf_token(
    page: tuple[UiServer, DaemonProcess],
) -> None:
    server, d = page
    memory_id = await store(d, "The staging database listens on port 6543")
    client = signed_in(server)
    shown = client.get(f"/memory/{memory_id}")
    assert shown.status_code == 200
    token = csrf_of(shown.text)
    form = {"text": "rewritten by an attacker", "tags": "", "source": ""}
    url = f"/memory/{memory_id}/edit"
    # No CSRF token, same origin.
    reply = client.post(url, data=form, headers={"origin": server.origin})
    assert reply.status_code == 403
    # The right token from another origin, and with no Origin at all.
    reply = client.post(
        url, data={**form, "csrf": token}, headers={"origin": "http://evil.example"}
    )
    assert reply.status_code == 403
    reply = client.post(url, data={**form, "csrf": token})
    assert reply.status_code == 403
    # Another session's token is not this session's.
    other = signed_in(server)
    other_token = csrf_of(other.get(f"/memory/{memory_id}").text)
    assert other_token != token
    reply = client.post(url, data={**form, "csrf": other_token}, headers={"origin": server.origin})
    assert reply.status_code == 403
    # Methods other than GET and POST are not served.
    assert (client.request("PUT", url, headers={"origin": server.origin})).status_code == 405
    async with d.client(workspace=WS) as rc:
        kept = await rc.call(p.MemoryShow(memory_id=memory_id), p.MemoryShown)
    assert kept.memory.text == "The staging database listens on port 6543"
    # With both, the edit goes through to the daemon.
    reply = client.post(
        url,
        data={**form, "text": "The staging database listens on port 6544", "csrf": token},
        headers={"origin": server.origin},
    )
    assert reply.status_code == 303
    async with d.client(workspace=WS) as rc:
        changed = await rc.call(p.MemoryShow(memory_id=memory_id), p.MemoryShown)
    assert changed.memory.text == "The staging database listens on port 6544"


async def test_an_oversized_form_is_refused_before_it_is_read(
    page: tuple[UiServer, DaemonProcess],
) -> None:
    server, d = page
    memory_id = await store(d, "A memory someone tries to flood")
    client = signed_in(server)
    token = csrf_of(client.get(f"/memory/{memory_id}").text)
    reply = client.post(
        f"/memory/{memory_id}/edit",
        data={"text": "a" * 400_000, "csrf": token},
        headers={"origin": server.origin},
    )
    assert reply.status_code == 413


async def test_every_reply_carries_a_strict_policy_and_no_cors(
    page: tuple[UiServer, DaemonProcess],
) -> None:
    server, _ = page
    client = signed_in(server)
    for path in ("/", "/memories", "/static/app.js", "/nowhere"):
        reply = client.get(path, headers={"origin": "http://evil.example"})
        csp = reply.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp
        assert "frame-ancestors 'none'" in csp
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert not any(h.startswith("access-control-") for h in reply.headers)
    refused = client.get("/", headers={"host": "evil.example"})
    assert "content-security-policy" in refused.headers


async def test_stored_markup_renders_as_inert_text(page: tuple[UiServer, DaemonProcess]) -> None:
    server, d = page
    script = "<script>document.title='pwned'</script> deploy notes"
    img = 'release checklist <img src=x onerror="alert(1)">'
    tagged = await store(d, script)
    await store(d, img)
    client = signed_in(server)
    listing = (client.get("/memories")).text
    found = (client.get("/memories?q=deploy+notes+release+checklist&mode=keyword")).text
    detail = (client.get(f"/memory/{tagged}")).text
    for html in (listing, found, detail):
        assert "<script>document.title" not in html
        assert "&lt;script&gt;document.title" in html
    for html in (listing, found):
        assert "<img src=x" not in html
        assert "&lt;img src=x onerror=" in html
    # The only script tag the page has is its own static one.
    assert re.findall(r"<script[^>]*>", detail) == ['<script src="/static/app.js" defer>']


async def test_the_icon_is_served_without_a_session_and_nothing_else_is(
    page: tuple[UiServer, DaemonProcess],
) -> None:
    server, _ = page
    anon = Http(server)
    icon = anon.get("/favicon.ico")
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/svg+xml"
    assert icon.text.startswith("<svg") and "set-cookie" not in icon.headers
    assert icon.headers["content-security-policy"].startswith("default-src 'none'")
    # Public by its exact path, for reading only: no neighbour and no write rides on it.
    assert anon.get("/favicon.ico/").status_code == 403
    assert anon.get("/favicon.icox").status_code == 403
    assert anon.post("/favicon.ico").status_code == 403
    # The guard's other rules hold for it: a forged Host is refused.
    assert anon.get("/favicon.ico", headers={"host": "evil.example"}).status_code == 421
