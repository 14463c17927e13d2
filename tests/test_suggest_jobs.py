"""`tagalign suggest --jobs` (`tagalign.project.jobs`): a tiny hybrid (Omikuji, faiss, the
static encoder, the compiled-free ranker) tagged in forked processes answers as one
process does, also when the parent used its thread pools before the fork; a job that dies
is a clear error, not a hang."""

from __future__ import annotations

import os
import signal

import pytest

from tagalign.project import Project, Tagger
from tagalign.project.jobs import JobsError, TaggingJobs, resolve_jobs, usable_cores
from tagalign.runtime import Runtime
from tagalign.suggest import SuggestRequest
from tiny_models import tiny_records


def answers(tagged) -> list:
    return [([(s.id, round(s.score, 6)) for s in t.suggestions], t.warning,
             None if t.quality is None else (round(t.quality.recall, 6),
                                            round(t.quality.precision, 6)))
            for t in tagged]


@pytest.mark.parametrize("threads", [1, 4])
def test_jobs_answer_as_one_process_does(tiny_hybrid, threads):
    project = Project.load(tiny_hybrid, runtime=Runtime(threads=threads))
    recs = tiny_records(60, seed=7)
    # the parent tags first: with 4 threads its pools exist at the fork, and each job (2
    # threads) would wait forever on the copies of pools whose threads it lacks
    request = SuggestRequest(limit=5)
    expected = answers(Tagger(project).tag(recs, request))
    assert any(row for row, _, _ in expected)
    with TaggingJobs(Tagger(project), 2) as jobs:
        assert jobs.jobs == 2
        assert answers(jobs.submit(recs, request)()) == expected
        assert answers(jobs.submit(recs[:1], request)()) == expected[:1]  # one record: here
        assert answers(jobs.submit(recs[:3], request)()) == expected[:3]
        # batches queued at once (the jobs never wait between two) come back in order
        waiting = [jobs.submit(recs[i:i + 16], request) for i in range(0, len(recs), 16)]
        assert [row for wait in waiting for row in answers(wait())] == expected


def test_a_job_that_dies_is_a_clear_error(tiny_hybrid, monkeypatch):
    project = Project.load(tiny_hybrid, runtime=Runtime(threads=1))
    original = Tagger.tag

    def dying(self, records, *args, **kwargs):
        if any(r.id == "r5" for r in records):
            os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would
        return original(self, records, *args, **kwargs)

    monkeypatch.setattr(Tagger, "tag", dying)
    recs = tiny_records(10, seed=7)
    with TaggingJobs(Tagger(project), 2) as jobs, \
            pytest.raises(JobsError, match="out of memory"):
        jobs.submit(recs, SuggestRequest(limit=5))()


def test_jobs_count():
    assert resolve_jobs(0) == usable_cores() >= 1
    assert resolve_jobs(3) == 3
    with pytest.raises(ValueError):
        resolve_jobs(-1)
