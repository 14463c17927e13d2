"""`tagalign suggest --jobs` (`tagalign.project.jobs`): a tiny hybrid (Omikuji, faiss, the
static encoder, the compiled-free ranker) tagged in forked processes answers as one
process does, also when the parent used its thread pools before the fork; a job that dies
is a clear error, not a hang."""

from __future__ import annotations

import os
import signal

import pytest

from tagalign.project import Project
from tagalign.project.jobs import JobsError, TaggingJobs, resolve_jobs, usable_cores
from tagalign.runtime import Runtime
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
    expected = answers(project.tag(recs, limit=5))
    assert any(row for row, _, _ in expected)
    with TaggingJobs(project, 2) as jobs:
        assert jobs.jobs == 2
        assert answers(jobs.tag(recs, limit=5)) == expected
        assert answers(jobs.tag(recs[:1], limit=5)) == expected[:1]  # one record: here
        assert answers(jobs.tag(recs[:3], limit=5)) == expected[:3]
    assert [[s.id for s in row] for row in project.suggest(recs, 5, jobs=2, batch_size=16)] \
        == [[i for i, _ in row] for row, _, _ in expected]


def test_a_job_that_dies_is_a_clear_error(tiny_hybrid, monkeypatch):
    project = Project.load(tiny_hybrid, runtime=Runtime(threads=1))
    original = Project.tag

    def dying(self, records, *args, **kwargs):
        if any(r.id == "r5" for r in records):
            os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would
        return original(self, records, *args, **kwargs)

    monkeypatch.setattr(Project, "tag", dying)
    recs = tiny_records(10, seed=7)
    with TaggingJobs(project, 2) as jobs, pytest.raises(JobsError, match="out of memory"):
        jobs.tag(recs, limit=5)


def test_jobs_count():
    assert resolve_jobs(0) == usable_cores() >= 1
    assert resolve_jobs(3) == 3
    with pytest.raises(ValueError):
        resolve_jobs(-1)
