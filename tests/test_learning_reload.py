"""A model reloaded while its feedback store is away is swapped in, not refused, and
learns what was stored since the start once the store answers (issue 64: the soak's
reload during an outage answered 409)."""

from __future__ import annotations

from tagalign.feedback import StoreUnavailableError
from tagalign.records import Record
from tagalign.serve.learning import Learning


class Rows:
    """The store's rows after the start (row id → record); ``away``: every read fails."""

    def __init__(self) -> None:
        self.rows: dict[int, Record] = {}
        self.away = False

    def last_id(self, project: str) -> int:
        return max(self.rows, default=0)

    def learned_since(self, project: str, after: int) -> tuple[list[Record], int]:
        if self.away:
            raise StoreUnavailableError()
        new = [(i, r) for i, r in sorted(self.rows.items()) if i > after]
        return [r for _, r in new], new[-1][0] if new else after


class Model:
    is_trained, mmap, allow_learn = True, False, True

    def __init__(self) -> None:
        self.taught: list[str] = []

    def learn(self, records) -> bool:
        self.taught += [r.id for r in records]
        return True


def rec(rid: str) -> Record:
    return Record(id=rid, title=rid, subjects=["s"])


def test_a_reload_while_the_store_is_away_swaps_and_learns_once_it_is_back():
    store = Rows()
    store.rows[1] = rec("before")  # stored before the server started: never taught
    learning = Learning(store, ["p"])
    assert learning.start == {"p": 1}
    store.rows[2] = rec("learned-1")
    old = Model()
    assert learning.catch_up("p", lambda: old)[0] == [store.rows[2]]
    serving = {"p": old}
    new = Model()
    store.away = True
    assert learning.replay("p", new, lambda: serving.update(p=new)) == 0
    assert serving["p"] is new and new.taught == []  # swapped, not refused
    assert learning.before_suggest("p", new, lambda: serving["p"]) == []  # still away
    store.away = False
    store.rows[3] = rec("learned-2")
    taught = learning.before_suggest("p", new, lambda: serving["p"])
    assert [r.id for r in taught] == ["learned-1", "learned-2"]
    assert new.taught == ["learned-1", "learned-2"]  # everything since the start, once
    assert learning.behind == set()
    # caught up: a single process (not shared) no longer reads before each suggest
    store.rows[4] = rec("learned-3")
    assert learning.before_suggest("p", new, lambda: serving["p"]) == []


def test_a_reload_with_the_store_there_teaches_first_as_before():
    store = Rows()
    learning = Learning(store, ["p"])
    store.rows[1] = rec("learned-1")
    new, serving = Model(), {}
    assert learning.replay("p", new, lambda: serving.update(p=new)) == 1
    assert new.taught == ["learned-1"] and learning.behind == set()
