"""API tokens in a real browser (Debian's chromium, Playwright): a server with a tokens file;
the first accept answers 401, the page asks for a token (a wrong one is asked again), keeps
it in sessionStorage and sends it with every later request; the decisions reach SQLite."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from serving import LiveServer
from tagalign.feedback import FeedbackStore
from tagalign.project import Project, ServingSettings
from tagalign.serve.app import create_app
from tagalign.serve.tokens import TokenStore
from test_serve_browser import ARTIFACTS, CHROMIUM, chromium_page
from tiny_models import tiny_records, tiny_vocab

pytestmark = pytest.mark.browser


@pytest.fixture()
def live(tmp_path: Path):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make test installs it as root)")
    project = Project.create(tmp_path / "toy", tiny_vocab(), "test-overlap", {})
    project.train(tiny_records(40))
    project = project.with_serving(ServingSettings(allow_learn=True))
    store = TokenStore(tmp_path / "tokens.toml")
    token = store.add("librarian")
    app = create_app({"toy": project}, FeedbackStore.for_project(tmp_path / "toy"),
                     tokens=TokenStore.read(store.path))
    with LiveServer(app) as srv:
        srv.db = tmp_path / "toy" / "feedback.sqlite"
        srv.token = token
        yield srv


def _decisions(db: Path) -> list[tuple[str, str]]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        return conn.execute("select subject_id, decision from decisions order by id").fetchall()


def test_page_asks_for_a_token_once_and_keeps_it_for_the_session(live):
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(exist_ok=True)
    with chromium_page() as page:
        page.goto(live.url + "/")
        expect(page.locator("#forget-token")).to_be_hidden()
        page.fill("#title", "Pilze im Fachwerk")
        page.fill("#abstract", "wood rot timber decay")
        page.click("#suggest")  # suggest stays open: no dialog
        items = page.locator("#results > li")
        expect(items.first).to_be_visible(timeout=10_000)
        dialog = page.locator("#token-dialog")
        expect(dialog).to_be_hidden()

        first = items.first.locator("button.accept")
        sid = first.get_attribute("data-subject")
        first.click()  # learn: 401 → the page asks
        expect(dialog).to_be_visible()
        expect(page.locator("#token-why")).to_contain_text("needs an API token")
        page.fill("#token-input", "tga_not-a-token")
        page.click("#token-ok")  # 403 → asked again, saying why
        expect(dialog).to_be_visible()
        expect(page.locator("#token-why")).to_contain_text("does not know this token")
        expect(page.locator("#forget-token")).to_be_hidden()  # the unknown one is dropped
        page.screenshot(path=str(ARTIFACTS / "web-token.png"), full_page=True)
        page.fill("#token-input", live.token)
        page.keyboard.press("Enter")
        expect(dialog).to_be_hidden()
        expect(page.locator("#status")).to_have_text("Saved", timeout=10_000)
        assert _decisions(live.db) == [(sid, "accept")]
        assert page.evaluate("sessionStorage.getItem('tagalign-token')") == live.token
        expect(page.locator("#forget-token")).to_be_visible()

        # later writes send the kept token: no dialog
        second = items.nth(1).locator("button.accept")
        sid2 = second.get_attribute("data-subject")
        second.click()
        expect(page.locator("#accepted-count")).to_have_text("2 accepted")
        page.wait_for_function("document.getElementById('status').textContent === 'Saved'")
        expect(dialog).to_be_hidden()
        assert _decisions(live.db)[-2:] == [(sid, "accept"), (sid2, "accept")]

        # forgotten: the next write asks again; cancelled, nothing is stored
        page.click("#forget-token")
        assert page.evaluate("sessionStorage.getItem('tagalign-token')") is None
        expect(page.locator("#forget-token")).to_be_hidden()
        rows = _decisions(live.db)
        items.nth(2).locator("button.reject").click()
        expect(dialog).to_be_visible()
        page.click("#token-cancel")
        expect(page.locator("#status")).to_contain_text("needs an API token")
        assert _decisions(live.db) == rows
