"""The library's memory of librarians' decisions: the feedback store.

Every accept and reject a librarian gives a suggested subject (through `tagalign serve`'s
``/learn``, the web page, a review queue) is kept here, so that training reads the records
they confirmed (`tagalign train --feedback`, `tagalign.workflows.training`), the catalogue
gets them back (`export`: MARC 21 or JSONL, ``tagalign feedback export``) and a served
model learns them (`tagalign.serve`).

`schema` (the tables, a `Decision`, a `Reviewed` record), `store` (`FeedbackStore`, one
SQLite file or database; `prepare`), `served` (`ServedStores`: a server's projects routed to
their stores), `follow` (decisions read as a vocabulary updated since stands: redirected
headings' as their targets'); what a database failing means: `faults` (a full disk or a
database gone, told apart and raised as `StoreFault`; a store that is wrong rather than
away, `WrongStoreError`) and `health` (a write tried again while a database restarts, a store
that is down tried in the background, one log line an outage). The package sits below
`tagalign.serve` and `tagalign.workflows`, above `tagalign.project`.
"""

from tagalign.feedback.faults import (
    NO_SPACE,
    RETRY_AFTER,
    UNAVAILABLE,
    NewerStoreError,
    NotAStoreError,
    StoreFault,
    StoreFullError,
    StoreUnavailableError,
    WrongStoreError,
)
from tagalign.feedback.schema import ADDED, CLEARED, SUGGESTED, Decision, Reviewed
from tagalign.feedback.served import ServedStores
from tagalign.feedback.store import FeedbackStore, normalise_url, prepare, sqlite_file, sqlite_url

__all__ = ["ADDED", "CLEARED", "NO_SPACE", "RETRY_AFTER", "SUGGESTED", "UNAVAILABLE",
           "Decision", "FeedbackStore", "NewerStoreError", "NotAStoreError", "Reviewed",
           "ServedStores", "StoreFault", "StoreFullError", "StoreUnavailableError",
           "WrongStoreError", "normalise_url", "prepare", "sqlite_file", "sqlite_url"]
