"""Learning paused in a real browser (Debian's chromium, Playwright; issue 64): the served
project's SQLite feedback store goes away for real (its folder taken away: learns answer
503) and fills up (SQLite's "database or disk is full": 507). The page then says "Learning
is paused: the feedback store is unavailable" (or "…is full"), keeps accept and reject
disabled with that reason instead of failing a click, and enables them again by itself once
the store is back (it asks the project's ``learning`` while paused)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from serving import LiveServer
from tagalign.feedback import Decision, StoreFullError
from tagalign.records import Record
from tagalign.serve.app import create_app
from test_serve_browser import ARTIFACTS, CHROMIUM, chromium_page
from test_serve_health import AwayStore, trained_toy

pytestmark = pytest.mark.browser

UNAVAILABLE = "Learning is paused: the feedback store is unavailable."
FULL = "Learning is paused: the feedback store is full."
WAIT = 15_000  # ms: the page asks again every 2 s while paused


@pytest.fixture()
def live(tmp_path: Path):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make test installs it as root)")
    away = AwayStore(tmp_path / "fb")
    app = create_app({"toy": trained_toy(tmp_path, "toy")}, away.store)
    with LiveServer(app) as srv:
        srv.away = away
        yield srv


def _accepted(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {r for (r,) in conn.execute("select record_id from decisions where "
                                           "decision = 'accept'")}


def _write(away: AwayStore, rid: str) -> None:
    """A write that is not the page's: what brings the server's view of the store back."""
    away.store.add("toy", [Decision(Record(id=rid, title="Pilze"), ["4046076-9"])])


def test_page_pauses_learning_while_the_store_is_away_or_full_and_resumes(live):
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(exist_ok=True)
    away = live.away
    with chromium_page() as page:
        page.goto(live.url + "/")
        page.fill("#record-id", "web-1")
        page.fill("#title", "Pilze im Fachwerk")
        page.fill("#abstract", "wood rot timber decay")
        page.click("#suggest")
        items = page.locator("#results > li")
        expect(items.first).to_be_visible(timeout=10_000)
        buttons = page.locator("#results button.accept, #results button.reject")
        note = page.locator("#learn-off")
        expect(note).to_be_hidden()

        # the store goes away: the click's learn answers 503, nothing is stored
        away.away()
        first = items.first.locator("button.accept")
        first.click()
        expect(note).to_be_visible(timeout=WAIT)
        expect(note).to_contain_text(UNAVAILABLE)
        expect(first).to_have_attribute("aria-pressed", "false")  # taken back
        expect(page.locator("#status")).to_contain_text("nothing was stored")
        assert buttons.count() >= 2
        for i in range(buttons.count()):
            expect(buttons.nth(i)).to_be_disabled()
            expect(buttons.nth(i)).to_have_attribute("title", note.text_content() or "")
        page.locator("body").press("a")  # the key does not store either
        expect(page.locator("#status")).to_have_text(note.text_content() or "")
        page.screenshot(path=str(ARTIFACTS / "web-learning-paused.png"), full_page=True)

        # back, as the server sees it once a write goes through: the page asks and resumes
        away.back()
        _write(away, "server-side")
        expect(note).to_be_hidden(timeout=WAIT)
        expect(first).to_be_enabled()
        first.click()
        expect(page.locator("#status")).to_have_text("Saved", timeout=10_000)
        expect(first).to_have_attribute("aria-pressed", "true")
        assert "web-1" in _accepted(away.folder / "feedback.sqlite")

        # full: a page loaded now reads it from the project (no click needed), in German too
        away.full()
        with pytest.raises(StoreFullError):
            for i in range(200):  # until the file would need another page
                _write(away, f"fill-{i}")
        page.goto(live.url + "/")
        expect(note).to_be_visible(timeout=WAIT)
        expect(note).to_contain_text(FULL)
        page.click("#ui-de")
        expect(note).to_contain_text("Lernen ist pausiert: der Rückmeldungsspeicher ist voll.")
        page.click("#ui-en")
        page.fill("#title", "Pilze im Fachwerk")
        page.click("#suggest")
        expect(items.first).to_be_visible(timeout=10_000)
        for i in range(buttons.count()):
            expect(buttons.nth(i)).to_be_disabled()
        away.roomy()
        _write(away, "roomy")
        expect(note).to_be_hidden(timeout=WAIT)
        expect(items.first.locator("button.accept")).to_be_enabled()
