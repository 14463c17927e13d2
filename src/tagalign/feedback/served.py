"""The feedback stores of served projects, one `ServedStores` for a server process: a
request's project id is routed to the store its project keeps its feedback in
(`tagalign.project.feedback_location`), under the project's key."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator, Mapping, Sequence

from tagalign.errors import InputError
from tagalign.feedback.health import StoreHealth
from tagalign.feedback.schema import Decision, Reviewed
from tagalign.feedback.store import FeedbackStore, make_folder
from tagalign.project import Project, feedback_location
from tagalign.records import Record


class ServedStores:
    """The feedback of served projects, each where `tagalign.project.feedback_location`
    says (so `tagalign train --feedback` and `feedback export` find it): a request's
    project id (the id it is served under) is routed to its project's store and stored
    under the project's key (its folder's name). Projects with one URL share one store.
    Offers what the APIs and the review queue use of a `FeedbackStore`. A store that is
    away starts the server all the same: its operations raise its `StoreFault` until it
    answers (`FeedbackStore` with ``recover``)."""

    def __init__(self, projects: Mapping[str, Project], override: str | None = None):
        self.routes: dict[str, tuple[FeedbackStore, str]] = {}
        stores: dict[str, FeedbackStore] = {}
        owner: dict[tuple[str, str], str] = {}
        for pid, project in projects.items():
            url, key = feedback_location(project.path, project.feedback_db, override)
            if (url, key) in owner:  # two folders of one name writing into one store
                raise InputError(f"projects {owner[url, key]!r} and {pid!r} would keep their "
                                 f"feedback under one key ({key!r}) in {url}: rename a "
                                 "folder or give one another feedback_db")
            owner[url, key] = pid
            if url not in stores:
                make_folder(url)  # an untrained project's
                # one away (unreachable, full, read-only) opens once it answers; a wrong
                # one stops the start (`FeedbackStore`)
                stores[url] = FeedbackStore(url, recover=True)
            self.routes[pid] = (stores[url], key)

    def _route(self, project: str) -> tuple[FeedbackStore, str]:
        return self.routes[project]

    def add(self, project: str, items: Sequence[Decision]) -> int:
        store, key = self._route(project)
        return store.add(key, items)

    def latest_decisions(self, project: str, record_id: str) -> dict[str, str]:
        store, key = self._route(project)
        return store.latest_decisions(key, record_id)

    def finish(self, project: str, queue: str, record_id: str) -> None:
        store, key = self._route(project)
        store.finish(key, queue, record_id)

    def finished(self, project: str, queue: str) -> set[str]:
        store, key = self._route(project)
        return store.finished(key, queue)

    def count(self, project: str, record_prefix: str | None = None) -> int:
        store, key = self._route(project)
        return store.count(key, record_prefix)

    def health(self, project: str) -> StoreHealth:
        """The state of the store a project's feedback is kept in."""
        return self._route(project)[0].health

    def url(self, project: str) -> str:
        return self._route(project)[0].url

    def last_id(self, project: str) -> int:
        return self._route(project)[0].last_id()

    def learned_since(self, project: str, after: int) -> tuple[list[Record], int]:
        store, key = self._route(project)
        return store.learned_since(key, after)

    def confirmed_records(self, project: str) -> Iterator[Record]:
        store, key = self._route(project)
        return store.confirmed_records(key)

    def reviewed(self, project: str, since: _dt.datetime | None = None,
                 record_id: str | None = None) -> Iterator[Reviewed]:
        store, key = self._route(project)
        return store.reviewed(key, since, record_id)

    def close(self) -> None:
        for store in {id(s): s for s, _ in self.routes.values()}.values():
            store.close()


__all__ = ["ServedStores"]
