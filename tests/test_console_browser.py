"""The console in a real browser: Debian's chromium, headless, driven by Playwright.

The set-up installs chromium with apt when it is missing (CI runs as root); the tests
never skip: without a browser they fail, saying how to get one. A failing test leaves a
screenshot of its page under its tmp_path. `SFC_UPDATE_SCREENSHOT=1` writes the job page's screenshot to
docs/console-job.png (the README's tour shows it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright import sync_api as playwright

from tests.aptkit import installed
from tests.consolekit import TOKEN, Console, console
from tests.hostkit import Host, linear_recipe

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS = Path(__file__).resolve().parent.parent / "docs"
WAIT_MS = 15_000
"""The most any one thing may take to show in the page."""


def _chromium() -> str | None:
    path = installed("chromium", "chromium")
    return CHROMIUM if path is not None and Path(CHROMIUM).exists() else None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = _chromium()
    if path is None:  # never a skip: a browser test that does not run proves nothing
        pytest.fail(
            "chromium is missing and could not be installed (as root: apt-get install -y "
            "chromium): the console's browser tests need it"
        )
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def served(valkey_url: str) -> Iterator[Console]:
    with console(valkey_url) as c:
        yield c


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    p = context.new_page()
    try:
        yield p
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is None or report.failed:
            p.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
        context.close()


def submit(c: Console, scope: str, job: str, start: bool = True) -> None:
    doc = {"jobId": job, "recipe": _recipe(), "scope": scope, "start": start}
    r = c.post("/api/v1/jobs", doc, token=TOKEN)
    assert r.status == 201, r.body


def _recipe() -> Any:
    import json

    return json.loads(linear_recipe(3, timeout_s=600))


def running(host: Host, scope: str, job: str) -> None:
    w = host.worker([scope])
    host.run([w], [], lambda: host.order_path(scope, job).startswith("Running"), what="a start")


def test_the_jobs_list_shows_a_submitted_job_without_a_reload(
    served: Console, host: Host, page: Any
) -> None:
    scope = host.scope("browser-list")
    page.goto(f"{served.server.url}?scope={scope}")
    page.wait_for_selector("#live.on", timeout=WAIT_MS)
    page.evaluate("window.loadedOnce = true")
    submit(served, scope, "seen-live", start=False)
    page.wait_for_selector('tr[data-job="seen-live"]', timeout=WAIT_MS)
    row = page.inner_text('tr[data-job="seen-live"]')
    assert "NotAllowedToStart" in row and "start: sfc job start" in row and " ago" in row
    assert page.evaluate("window.loadedOnce") is True  # the same page: no reload


def test_the_job_page_marks_the_active_step_and_counts_the_deadline_down(
    served: Console, host: Host, page: Any
) -> None:
    scope = host.scope("browser-job")
    submit(served, scope, "j1")
    running(host, scope, "j1")
    page.goto(f"{served.server.url}jobs/{scope}/j1")
    page.wait_for_selector('#chart g[data-step="S1"][data-active="true"]', timeout=WAIT_MS)
    assert page.locator('#chart g[data-step="S2"][data-active="false"]').count() == 1
    assert page.locator('#chart g[data-action="a1"][data-status="open"]').count() == 1
    cell = page.locator('tr[data-action="a1"] td.deadline')
    first = cell.inner_text()
    assert first.startswith("in ")
    page.wait_for_function(
        "t => document.querySelector('tr[data-action=\"a1\"] td.deadline').textContent !== t",
        arg=first,
        timeout=WAIT_MS,
    )
    assert cell.inner_text().startswith("in ")
    page.wait_for_selector("#live.on", timeout=WAIT_MS)
    shot = page.screenshot(full_page=False)
    if os.environ.get("SFC_UPDATE_SCREENSHOT") == "1":
        (DOCS / "console-job.png").write_bytes(shot)


def test_enter_the_token_pause_and_resume_and_see_the_state_change(
    served: Console, host: Host, page: Any
) -> None:
    scope = host.scope("browser-control")
    submit(served, scope, "c1")
    running(host, scope, "c1")
    page.goto(f"{served.server.url}jobs/{scope}/c1")
    page.wait_for_selector("#live.on", timeout=WAIT_MS)
    page.evaluate("window.loadedOnce = true")
    page.fill("#token", TOKEN)
    page.click("#login button")
    page.wait_for_function(
        "() => document.getElementById('who').textContent.includes('control allowed')",
        timeout=WAIT_MS,
    )
    assert TOKEN not in page.content()
    page.click('button[data-method="pause"]')
    page.wait_for_function(
        "() => document.getElementById('state').textContent.startsWith('Interrupted')",
        timeout=WAIT_MS,
    )
    assert "ok (1)" in page.inner_text("#said")
    page.click('button[data-method="resume"]')
    page.wait_for_function(
        "() => document.getElementById('state').textContent.startsWith('Running')",
        timeout=WAIT_MS,
    )
    assert page.evaluate("window.loadedOnce") is True
    assert host.order_path(scope, "c1").startswith("Running")


def test_the_work_and_recipe_pages(served: Console, host: Host, page: Any) -> None:
    scope = host.scope("browser-work")
    page.goto(f"{served.server.url}work?scope={scope}")
    page.wait_for_selector("#unread:has-text('no worker has read yet')", timeout=WAIT_MS)
    page.goto(f"{served.server.url}recipe")
    page.fill("#recipe", linear_recipe(2).decode())
    page.click("#check button[type=submit]")
    page.wait_for_selector('#result svg g[data-step="S1"]', timeout=WAIT_MS)
    assert "Valid" in page.inner_text("#result")
    page.fill("#recipe", '{"Steps": []}')
    page.click("#check button[type=submit]")
    page.wait_for_selector("#result:has-text('Invalid')", timeout=WAIT_MS)


def test_a_page_that_loses_its_stream_says_so_and_reconnects(
    valkey_url: str, host: Host, page: Any, browser: Any
) -> None:
    scope = host.scope("browser-lost")
    with console(valkey_url) as c:
        page.goto(f"{c.server.url}?scope={scope}")
        page.wait_for_selector("#live.on", timeout=WAIT_MS)
        port = c.netloc.rsplit(":", 1)[1]
    page.wait_for_selector("#live.off", timeout=WAIT_MS)
    assert "reconnecting" in page.inner_text("#live")
    with console(valkey_url, addr=f"127.0.0.1:{port}"):
        page.wait_for_selector("#live.on", timeout=WAIT_MS)


def test_the_pages_read_without_javascript(served: Console, host: Host, browser: Any) -> None:
    """The rows are rendered on the server: the first HTML answer has them, and a browser
    with JavaScript off shows them; the script only keeps them live."""
    scope = host.scope("browser-nojs")
    submit(served, scope, "n1")
    running(host, scope, "n1")
    listing = served.get(f"/?scope={scope}").body.decode()
    assert '<tr data-job="n1">' in listing and "Running" in listing
    shown = served.get(f"/jobs/{scope}/n1").body.decode()
    assert '<tr data-action="a1" data-step="S1" data-status="open">' in shown
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"{served.server.url}?scope={scope}")
        row = page.inner_text('tr[data-job="n1"]')
        assert "Running" in row and "answer" in row, row
        assert "1 of 1 job(s)" in page.inner_text("#total")
        page.goto(f"{served.server.url}jobs/{scope}/n1")
        row = page.inner_text('tr[data-action="a1"]')
        assert "open" in row and "n1:a1#1" in row, row
        assert page.locator("#history li").count() >= 1
        assert '"jobOrderId": "n1"' in page.inner_text("#order")
        page.goto(f"{served.server.url}work?scope={scope}")
        assert "no worker has read yet" in page.inner_text("#unread")
    finally:
        context.close()
