"""The review queue in a real browser: Debian's chromium driven by Playwright.

A toy project (tests/serve_recipe.py, milliseconds) serves a queue of three records. The
librarian works by keyboard only — accept, move, reject, search-and-add, next — then
reloads the page, which must resume at the record not finished yet with its stored
decision shown. Decisions and progress are checked in the SQLite file. Screenshots go
to test-artifacts/.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import serve_recipe  # noqa: F401 - registers the "test-overlap" recipe
from serving import LiveServer
from suggesting import suggestions
from tagalign.feedback import FeedbackStore
from tagalign.project import Project, ServingSettings
from tagalign.serve.app import create_app
from tagalign.serve.queue import RecordQueue
from test_serve_browser import ARTIFACTS, CHROMIUM, chromium_page
from test_subject_queue import QUEUE
from tiny_models import tiny_records, tiny_vocab

pytestmark = pytest.mark.browser

PHILOSOPHIE = "4045791-6"  # English label "ethics"; not among q0's suggestions


@pytest.fixture()
def live(tmp_path: Path):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (make test installs it as root)")
    project = Project.create(tmp_path / "toy", tiny_vocab(), "test-overlap", {})
    project.train(tiny_records(40))
    # decisions are stored through learn (Annif: off)
    project = project.with_serving(ServingSettings(allow_learn=True))
    assert PHILOSOPHIE not in {s.id for s in suggestions(project, QUEUE[:1], limit=10)[0]}
    app = create_app({"toy": project}, FeedbackStore.for_project(tmp_path / "toy"),
                     review=RecordQueue(QUEUE[:3]))
    with LiveServer(app) as srv:
        srv.db = tmp_path / "toy" / "feedback.sqlite"
        yield srv


def _sql(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(query).fetchall()


def _latest(db: Path, record_id: str) -> dict[str, str]:
    rows = _sql(db, "select subject_id, decision from decisions "
                    f"where record_id = '{record_id}' order by id")
    return dict(rows)


def test_queue_by_keyboard_search_add_and_resume_after_reload(live):
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(exist_ok=True)
    with chromium_page() as page:
        page.goto(live.url + "/")
        progress = page.locator("#queue-progress")
        expect(progress).to_have_text("Record 1 of 3 · 0 finished", timeout=10_000)
        expect(page.locator("#title")).to_have_value(QUEUE[0].title)
        items = page.locator("#results > li")
        expect(items).to_have_count(4)
        expect(page.locator("#keys")).to_contain_text("finish this record and show the next")
        # every suggestion links to its GND record; no estimate in the response, no text
        first_sid = items.first.get_attribute("data-subject")
        assert items.first.locator("a.label").get_attribute("href") == (
            f"https://d-nb.info/gnd/{first_sid}")
        expect(page.locator("#quality")).to_be_hidden()

        # keys: a accepts the marked (first) subject, j moves on, r rejects the second
        page.locator("body").click(position={"x": 5, "y": 5})
        page.keyboard.press("a")
        expect(items.first.locator("button.accept")).to_have_attribute("aria-pressed", "true")
        page.keyboard.press("j")
        expect(items.nth(1)).to_have_class("selected")
        second_sid = items.nth(1).get_attribute("data-subject")
        page.keyboard.press("r")
        expect(items.nth(1).locator("button.reject")).to_have_attribute("aria-pressed", "true")

        # / searches the vocabulary; an English prefix finds Philosophie; Enter adds it
        page.keyboard.press("/")
        expect(page.locator("#subject-search")).to_be_focused()
        page.keyboard.type("ethi")
        option = page.locator("#subject-options [role=option]")
        expect(option).to_have_count(1)
        expect(option.first).to_contain_text("ethics (en) · 4045791-6 · de: Philosophie")
        with page.expect_response(lambda r: r.url.endswith("/projects/toy/learn")) as saved:
            page.keyboard.press("Enter")
        assert saved.value.ok
        added = page.locator(f"#results > li[data-subject='{PHILOSOPHIE}']")
        expect(added.locator(".added")).to_have_text("added")
        expect(added.locator("a.label")).to_have_text("Philosophie")  # the record's language
        expect(added.locator("button.accept")).to_have_attribute("aria-pressed", "true")
        expect(page.locator("#accepted-count")).to_have_text("2 accepted")
        assert _latest(live.db, "q0") == {first_sid: "accept", second_sid: "reject",
                                          PHILOSOPHIE: "accept"}
        # the page tells a subject found by search from a suggestion (the catalogue
        # export writes them as intellectual and confirmed): stored as each row's origin
        assert dict(_sql(live.db, "select subject_id, origin from decisions "
                                  "where record_id = 'q0' order by id")) == {
            first_sid: "suggested", second_sid: "suggested", PHILOSOPHIE: "added"}
        page.screenshot(path=str(ARTIFACTS / "web-queue.png"), full_page=True)

        # n finishes q0 and shows q1; its response carries a quality estimate this time
        def with_quality(route):
            body = route.fetch().json() | {"quality": {"recall": 0.72, "precision": 0.4}}
            route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

        page.route("**/projects/toy/suggest", with_quality)
        page.locator("#subject-search").press("Escape")
        page.keyboard.press("n")
        expect(progress).to_have_text("Record 2 of 3 · 1 finished")
        expect(page.locator("#title")).to_have_value(QUEUE[1].title)
        expect(page.locator("#quality")).to_have_text(
            "About 7 in 10 of the right subjects are in this list. "
            "About 4 in 10 of these suggestions are right.")
        page.unroute("**/projects/toy/suggest")
        assert _sql(live.db, "select record_id from queue_progress") == [("q0",)]

        # one decision on q1, then a reload: the page resumes at q1 with that decision
        with page.expect_response(lambda r: r.url.endswith("/projects/toy/learn")) as saved:
            page.keyboard.press("a")
        assert saved.value.ok
        q1_sid = items.first.get_attribute("data-subject")
        page.reload()
        expect(progress).to_have_text("Record 2 of 3 · 1 finished", timeout=10_000)
        expect(page.locator("#title")).to_have_value(QUEUE[1].title)
        accept = page.locator(f"#results > li[data-subject='{q1_sid}'] button.accept")
        expect(accept).to_have_attribute("aria-pressed", "true")
        expect(page.locator("#quality")).to_be_hidden()
        page.screenshot(path=str(ARTIFACTS / "web-queue-resumed.png"), full_page=True)

        # the last two records: the queue ends with everything finished
        page.keyboard.press("n")
        expect(progress).to_have_text("Record 3 of 3 · 2 finished")
        page.click("#queue-next")
        expect(progress).to_have_text("All 3 records finished")
        expect(page.locator("#queue-next")).to_be_disabled()
    assert sorted(_sql(live.db, "select record_id from queue_progress")) == [
        ("q0",), ("q1",), ("q2",)]
