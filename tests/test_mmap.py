"""A hybrid project loaded memory-mapped (`Project.load(mmap=True)`, ``--mmap``): the same
suggestions as a normal load, its large arrays really come from the files, and learning is
refused — by the project, the recipe, both REST APIs of a real server and not by a 500.

Model: the default hybrid (all five sources) trained on a seeded sample of 600 training
records, with a vocabulary cut to their subjects (so the label index is small): the
session's ``sample_hybrid`` (tests/conftest.py), trained once for tests/test_suggest_single.py too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import faiss
import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from serving import LiveServer
from suggesting import suggestions
from tagalign.batch.tasks import SuggestTask
from tagalign.feedback import FeedbackStore
from tagalign.index import VectorIndex
from tagalign.project import Project, ReadOnlyError, ServingSettings
from tagalign.serve.app import create_app

READ_ONLY = "was loaded with --mmap: read-only; reload without it to learn"


@pytest.fixture(scope="module")
def data(sample_case):
    return sample_case


@pytest.fixture(scope="module")
def trained(sample_hybrid) -> Path:
    """The session's `SAMPLE_HYBRID` on ``data`` (tests/conftest.py; read-only: a test that
    changes its files takes `copy_of` it)."""
    return sample_hybrid


def copy_of(trained: Path, tmp_path: Path, name: str) -> Path:
    """A fresh folder per load: /proc/self/maps then names only what that load mapped."""
    return Path(shutil.copytree(trained, tmp_path / name))


def mapped_files() -> set[str]:
    return {line.split(maxsplit=5)[-1] for line in Path("/proc/self/maps").read_text()
            .splitlines() if len(line.split()) == 6}


def file_backed(a: np.ndarray) -> bool:
    while getattr(a, "base", None) is not None:
        a = a.base
    return type(a).__name__ == "mmap"


def test_mapped_load_gives_identical_suggestions(trained, data):
    dev = data[2]
    normal = Project.load(trained)
    mapped = Project.load(trained, mmap=True)
    assert mapped.mmap and not normal.mmap
    a, b = suggestions(normal, dev, limit=20), suggestions(mapped, dev, limit=20)
    assert sum(len(row) for row in a) > 10 * len(dev)  # real suggestions, not empty rows
    assert [[s.id for s in row] for row in a] == [[s.id for s in row] for row in b]
    assert np.array_equal([s.score for row in a for s in row],
                          [s.score for row in b for s in row])


def test_mapped_arrays_come_from_the_files(trained, tmp_path):
    model_a = copy_of(trained, tmp_path, "a") / "model"
    model_b = copy_of(trained, tmp_path, "b") / "model"
    files = ["sources/emb_knn/index/index.faiss", "sources/labels/index/index.faiss",
             "sources/tfidf_knn/tknn-de-indices.npy", "sources/tfidf_knn/tknn-de-data.npy",
             "memory/memory-Y-indices.npy"]
    normal = Project.load(model_a.parent)
    assert not {str(model_a / f) for f in files} & mapped_files()
    mapped = Project.load(model_b.parent, mmap=True)
    assert {str(model_b / f) for f in files} <= mapped_files()
    tknn = {s.name: s for s in mapped.recipe.pipeline.sources}["tfidf_knn"]
    assert file_backed(tknn.X_["de"].indices) and file_backed(tknn.X_["de"].data)
    assert file_backed(mapped.recipe.pipeline.memory.Y.indices)
    assert not file_backed({s.name: s for s in normal.recipe.pipeline.sources}[
        "tfidf_knn"].X_["de"].indices)


def test_mapped_project_refuses_to_learn(trained, data):
    _, train, dev = data
    mapped = Project.load(trained, mmap=True)
    size = len(mapped.recipe.pipeline.memory)
    with pytest.raises(ReadOnlyError, match=f"project proj {READ_ONLY}"):
        mapped.learn(dev[:3])
    with pytest.raises(ReadOnlyError, match=READ_ONLY):
        mapped.recipe.learn(dev[:3])  # the recipe refuses on its own too
    assert len(mapped.recipe.pipeline.memory) == size
    normal = Project.load(trained)
    assert normal.learn(dev[:3]) is True
    assert len(normal.recipe.pipeline.memory) == size + 3


def test_live_server_answers_learn_on_a_mapped_project_with_409(trained, data, tmp_path):
    _, _, dev = data
    path = copy_of(trained, tmp_path, "gnd")
    store = FeedbackStore.for_project(path)
    # allowed, and still refused: the mapped project is read-only
    mapped = Project.load(path, mmap=True, serving=ServingSettings(allow_learn=True))
    rec = dev[0]
    with LiveServer(create_app({"gnd": mapped}, store)) as live:
        ours = httpx.post(f"{live.url}/tagalign/v1/projects/gnd/learn", json={"records": [
            {"id": rec.id, "title": rec.title, "subjects": rec.subjects[:1]}]}, timeout=30)
        annif = httpx.post(f"{live.url}/v1/projects/gnd/learn", json=[
            {"text": rec.title, "subjects": [{"uri": "https://d-nb.info/gnd/"
                                              + rec.subjects[0]}]}], timeout=30)
        suggest = httpx.post(f"{live.url}/tagalign/v1/projects/gnd/suggest",
                             json={"title": rec.title, "abstract": rec.abstract}, timeout=30)
        schema = httpx.get(f"{live.url}/openapi.json", timeout=30).json()
        info = httpx.get(f"{live.url}/tagalign/v1/projects/gnd", timeout=30).json()
    assert ours.status_code == 409
    assert ours.json() == {"detail": f"project gnd {READ_ONLY}"}
    assert annif.status_code == 403
    assert annif.headers["content-type"] == "application/problem+json"
    assert annif.json()["detail"] == f"project gnd {READ_ONLY}"
    assert store.count() == 0  # a refused request stores nothing
    assert suggest.status_code == 200 and suggest.json()["results"]
    assert info["read_only"] is True
    learn_doc = schema["paths"]["/tagalign/v1/projects/{project_id}/learn"]["post"]
    assert learn_doc["responses"]["409"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorOut"}


def test_cli_suggest_and_batch_take_the_flag(trained, data, tmp_path):
    from tagalign.cli.main import app

    rec = data[2][0]
    runner = CliRunner()
    args = ["suggest", str(trained), "--title", rec.title, "--abstract", rec.abstract,
            "--limit", "5"]
    plain = runner.invoke(app, args)
    mapped = runner.invoke(app, [*args, "--mmap"])
    assert plain.exit_code == 0 and mapped.exit_code == 0, mapped.output
    top = suggestions(Project.load(trained), [rec], limit=1)[0][0].id
    assert mapped.output == plain.output and top in plain.output
    task = SuggestTask({"task": "suggest", "project": str(trained), "mmap": True})
    assert task.project.mmap
    with pytest.raises(ReadOnlyError):
        task.project.learn([rec])


def test_mapped_ivf_lists_search_without_prefetch_threads(tmp_path):
    """faiss would start 32 prefetch threads per search on mapped inverted lists (10× slower
    per query on the full-train hybrid's indexes); the load turns them off."""
    rng = np.random.default_rng(0)
    base = rng.normal(size=(2000, 16)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    index = VectorIndex("ivf", nlist=16, nprobe=4, min_ivf=0).build(base)
    index.save(tmp_path / "ix")
    mapped = VectorIndex.load(tmp_path / "ix", mmap=True)
    lists = faiss.downcast_InvertedLists(mapped.index_.invlists)
    assert isinstance(lists, faiss.OnDiskInvertedLists) and lists.prefetch_nthread == 0
    s1, f1 = index.search(base[:20], 5)
    s2, f2 = mapped.search(base[:20], 5)
    assert (f1 == f2).all() and np.allclose(s1, s2)
