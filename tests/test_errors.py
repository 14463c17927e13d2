"""One error base: every exception class of the package is a `TagalignError`, and the CLI's
one handler turns each into ``error: <message>`` and its exit code, without a traceback."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tagalign.cli import app
from tagalign.errors import InputError, NotTrainedError, TagalignError, UsageError
from tagalign.project import Project
from tagalign.vocab import Vocabulary, load_vocabulary

SRC = Path(__file__).resolve().parents[1] / "src" / "tagalign"
#: classes another engineer re-bases (io.py) or that are not errors of ours (the Annif
#: API's problem document)
NOT_YET = {("tagalign.io", "LineError"), ("tagalign.io", "BadInputError"),
           ("tagalign.serve.annif", "Problem")}
runner = CliRunner()


def _exception_classes() -> list[tuple[str, str]]:
    """(module, class) of every class in src/ whose bases name an Error or Exception."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    ast.unparse(b).endswith(("Error", "Exception", "Mismatch"))
                    for b in node.bases):
                found.append((module, node.name))
    return found


def test_every_exception_class_is_a_tagalign_error():
    classes = _exception_classes()
    assert len(classes) > 20  # the scan is not vacuous
    strays = []
    for module, name in classes:
        if (module, name) in NOT_YET:
            continue
        cls = getattr(importlib.import_module(module), name)
        if not issubclass(cls, TagalignError):
            strays.append(f"{module}.{name}")
    assert not strays, strays


def test_the_not_trained_message_is_written_once():
    assert str(NotTrainedError("project p")) == \
        "project p is not trained yet; run `tagalign train`"
    hits = [p for p in SRC.rglob("*.py") if "not trained yet;" in p.read_text("utf-8")
            and "serve" not in p.parts and p.name != "hybrid.py"]
    assert [p.name for p in hits] == ["errors.py"]


def test_exit_codes():
    assert TagalignError.exit_code == 1 and NotTrainedError.exit_code == 1
    assert InputError.exit_code == 1 and UsageError.exit_code == 2


@pytest.fixture(scope="module")
def untrained(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("untrained")
    (root / "v.tsv").write_text("4015065-3\tEpos\n4123065-6\tHeldenepos\n", "utf-8")
    vocab: Vocabulary = load_vocabulary(root / "v.tsv")
    Project.create(root / "p", vocab, "lexical")
    return root / "p"


def test_cli_maps_not_trained_to_one_line_and_its_exit_code(untrained):
    res = runner.invoke(app, ["suggest", str(untrained), "--title", "Epos"])
    assert res.exit_code == NotTrainedError.exit_code
    assert res.stderr.strip() == f"error: project {untrained} is not trained yet; run " \
                                 "`tagalign train`"
    assert "Traceback" not in res.output and not isinstance(res.exception, NotTrainedError)


def test_cli_maps_a_usage_error_to_exit_2(untrained, tmp_path):
    train = tmp_path / "t.jsonl"
    train.write_text('{"id": "a", "title": "Epos", "subjects": ["4015065-3"]}\n', "utf-8")
    res = runner.invoke(app, ["train", str(tmp_path / "q"), "--vocab", str(tmp_path / "v"),
                              "--train", str(train), "--recipe", "hybrid",
                              "--param", "holdout_fraction=1.5"])
    assert res.exit_code == 2
    assert res.stderr.startswith("error: ") and "Traceback" not in res.output


def test_cli_maps_an_input_error_to_exit_1(tmp_path):
    res = runner.invoke(app, ["detect-language", "x", "-l", "de,en,fr,it,es,nl"])
    assert res.exit_code == InputError.exit_code == 1
    assert res.stderr.strip() == "error: give 1 to 5 candidate languages, not 6"


# -- errors at one depth (issue 45): loaders raise the package's errors, the CLI catches none


def _missing_and_path(exc_info, path) -> None:
    """A missing file: the package's `MissingFileError` (a `NotFoundError`, and the
    `FileNotFoundError` it was before), naming the path."""
    from tagalign.errors import MissingFileError, NotFoundError

    exc = exc_info.value
    assert isinstance(exc, MissingFileError | NotFoundError) and isinstance(exc, TagalignError)
    assert isinstance(exc, FileNotFoundError)
    assert str(path) in str(exc) and not str(exc).startswith("[Errno")  # not OSError's str


@pytest.mark.parametrize("load", ["records", "vocabulary", "examples", "label set", "ids",
                                  "classifier", "pairs", "batch input"])
def test_each_loader_raises_the_package_error_for_a_missing_file(load, tmp_path):
    from tagalign.batch.inputs import input_files
    from tagalign.classify import Classifier, read_examples, read_label_set
    from tagalign.pairs.data import load_pairs
    from tagalign.records import read_records
    from tagalign.vocab.rules import read_id_file

    path = tmp_path / "nope"
    loaders = {"records": lambda: list(read_records(path)),
               "vocabulary": lambda: load_vocabulary(path),
               "examples": lambda: read_examples(path),
               "label set": lambda: read_label_set(path),
               "ids": lambda: read_id_file(path),
               "classifier": lambda: Classifier.load(path),
               "pairs": lambda: load_pairs(path),
               "batch input": lambda: input_files(path)}
    with pytest.raises(TagalignError) as info:
        loaders[load]()
    _missing_and_path(info, path)


def test_an_unreadable_file_raises_the_package_error_naming_it(tmp_path, monkeypatch):
    """Root reads every file whatever its mode: `open` itself refuses here."""
    import tagalign.io.lines
    from tagalign.errors import UnreadableFileError
    from tagalign.records import read_records

    records = tmp_path / "r.jsonl"
    records.write_text('{"id": "a", "title": "Epos"}\n', "utf-8")
    vocab = tmp_path / "v.tsv"
    vocab.write_text("gnd_id\tlabel_de\n4015065-3\tEpos\n", "utf-8")

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(tagalign.io.lines, "open", refuse, raising=False)
    for load, path in ((lambda: list(read_records(records)), records),
                       (lambda: load_vocabulary(vocab), vocab)):
        with pytest.raises(UnreadableFileError) as info:
            load()
        assert isinstance(info.value, InputError) and isinstance(info.value, OSError)
        assert str(info.value).startswith(f"cannot read {path}: ") and info.value.path == path


def test_a_folder_where_a_file_belongs_is_unreadable_input(tmp_path):
    from tagalign.classify import Classifier
    from tagalign.errors import UnreadableFileError
    from tagalign.vocab.rules import read_id_file

    (tmp_path / "ids").mkdir()
    with pytest.raises(UnreadableFileError, match=f"cannot read --exclude {tmp_path / 'ids'}: "):
        read_id_file(tmp_path / "ids", "--exclude")
    (tmp_path / "clf" / "config.json").mkdir(parents=True)
    with pytest.raises(UnreadableFileError, match="config.json"):
        Classifier.load(tmp_path / "clf")


def test_the_cli_catches_no_os_error_to_print_it():
    """The CLI's one handler (`TagalignGroup`) prints every error; no command catches a
    built-in file error to word it (the library raises the package's error instead)."""
    import re

    pattern = re.compile(r"except\s*\(?[^:]*\b(FileNotFoundError|OSError)\b")
    hits = [f"{path.name}:{n}" for path in sorted((SRC / "cli").glob("*.py"))
            if path.name != "serve_app.py"  # the server's bootstrap, moving to serve/
            for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
            if pattern.search(line)]
    assert hits == []


def test_cli_file_errors_keep_their_one_line(tmp_path, untrained):
    missing = tmp_path / "nope.jsonl"
    res = runner.invoke(app, ["records", "stats", str(missing)])
    assert (res.exit_code, res.stderr.strip()) == (1, f"error: records not found: {missing}")
    (tmp_path / "ids").mkdir()
    res = runner.invoke(app, ["suggest", str(untrained), "--title", "Epos", "--exclude",
                              str(tmp_path / "ids")])
    assert res.exit_code == 1
    assert res.stderr.startswith(f"error: cannot read --exclude {tmp_path / 'ids'}: ")
    bad = tmp_path / "c.json"
    bad.write_text("{", "utf-8")
    res = runner.invoke(app, ["train", str(tmp_path / "p"), "--vocab", str(tmp_path / "v"),
                              "--train", str(missing.parent), "--config", str(bad)])
    assert res.exit_code == 1 and res.stderr.startswith(f"error: cannot read --config {bad}: ")
    assert "Traceback" not in res.output


def test_hyperopt_checks_its_inputs_once_in_the_library():
    from tagalign.evaluate.hyperopt import plan_study
    from tagalign.records import Record

    class Tunable:
        name = "t"

        def __init__(self, space):
            self.space = space

        def search_space(self):
            return self.space

    gold = [Record(id="a", title="Epos", subjects=["4015065-3"])]
    with pytest.raises(InputError, match="unknown metric 'f2'"):
        plan_study(Tunable({"w": (0.0, 1.0, "float")}), gold, "f2")
    with pytest.raises(InputError, match="recipe 't' has no tunable parameters"):
        plan_study(Tunable({}), gold)
    with pytest.raises(InputError, match="no record in dev.jsonl has gold subjects"):
        plan_study(Tunable({"w": (0.0, 1.0, "float")}), [Record(id="b", title="x")],
                   where="dev.jsonl")
    plan = plan_study(Tunable({"w": (0.0, 1.0, "float")}), gold + [Record(id="b", title="x")])
    assert [r.id for r in plan.records] == ["a"] and plan.metric == "avg_recall"


def test_an_untrained_dense_recipe_says_so():
    from tagalign.recipes import get_recipe
    from tagalign.suggest import SuggestRequest

    vocab = Vocabulary.__new__(Vocabulary)
    recipe = get_recipe("zero-shot")(vocab)
    with pytest.raises(NotTrainedError, match="recipe zero-shot is not trained yet"):
        recipe.suggest([], SuggestRequest(limit=5))


def test_a_read_only_project_is_a_conflict_on_both_statuses():
    """409 by class and on tagalign's API (a state the reload without --mmap resolves);
    Annif's /v1 answers the 403 its document declares for learn."""
    from tagalign.errors import ConflictError
    from tagalign.project import ReadOnlyError
    from tagalign.serve import annif, service

    exc = ReadOnlyError("project p was loaded with --mmap: read-only")
    assert isinstance(exc, ConflictError) and isinstance(exc, PermissionError)
    assert ReadOnlyError.http_status == service.http_status(exc) == 409
    assert annif.error_response(exc, "p").status_code == 403
    assert list(service.ERRORS) == [TagalignError]


# -- a full disk (issue 46): one helper tells it, one error says it, the CLI maps it once


def test_a_full_disk_is_told_through_the_chain_and_worded_once():
    import errno
    import pickle

    from tagalign.errors import NoSpaceError, is_no_space

    def raised(exc: BaseException, cause: BaseException | None, context: bool = False):
        try:
            try:
                raise cause
            except BaseException as inner:
                if context:
                    raise exc  # noqa: B904 - the implicit context is what is tested
                raise exc from inner
        except BaseException as outer:
            return outer

    full = OSError(errno.ENOSPC, "No space left on device")
    quota = OSError(errno.EDQUOT, "Disk quota exceeded", "/srv/q/pred.jsonl")
    assert is_no_space(full) and is_no_space(quota)
    assert is_no_space(raised(RuntimeError("write failed"), full))
    assert is_no_space(raised(ValueError("x"), raised(KeyError("y"), quota), context=True))
    assert not is_no_space(OSError(errno.EACCES, "Permission denied"))
    assert not is_no_space(raised(RuntimeError("x"), ValueError("y"))) and not is_no_space(None)

    err = NoSpaceError("/srv/p/work/ranker", "rerun with --resume")
    assert str(err) == ("no space left on device writing /srv/p/work/ranker: free space "
                        "and rerun with --resume")
    assert isinstance(err, TagalignError) and isinstance(err, OSError)
    assert (err.errno, err.exit_code, err.http_status) == (errno.ENOSPC, 1, 507)
    assert str(pickle.loads(pickle.dumps(err))) == str(err) and is_no_space(err)
    # the path an OSError names, a quota said as such; an inner error renamed by the outer
    assert str(NoSpaceError.of(raised(RuntimeError("x"), quota))) == (
        "no space left on device writing /srv/q/pred.jsonl (disk quota exceeded): free space "
        "and rerun")
    inner = raised(NoSpaceError("/p/.model.tmp/a.npy", "rerun later"), full)
    renamed = NoSpaceError.of(inner, "/p/model")
    assert (renamed.path, renamed.rerun) == ("/p/model", "rerun later")


def test_the_cli_words_a_full_disk_from_anywhere_in_one_line(tmp_path, monkeypatch):
    """A bare `OSError` of a full disk (a library's, a Ray worker's) deep in a chain."""
    import errno

    import tagalign.shipping

    def upload(*args, **kwargs):
        try:
            raise OSError(errno.EDQUOT, "Disk quota exceeded", "/srv/store/p.tar.gz")
        except OSError as exc:
            raise RuntimeError("the store failed") from exc

    monkeypatch.setattr(tagalign.shipping, "upload", upload)
    res = runner.invoke(app, ["upload", str(tmp_path), "file:///srv/store/"])
    assert (res.exit_code, res.stderr.strip()) == (
        1, "error: no space left on device writing /srv/store/p.tar.gz (disk quota "
        "exceeded): free space and rerun")
    assert "Traceback" not in res.output

    def unrelated(*args, **kwargs):
        raise RuntimeError("a bug, not the disk")

    monkeypatch.setattr(tagalign.shipping, "upload", unrelated)
    res = runner.invoke(app, ["upload", str(tmp_path), "file:///srv/store/"])
    assert isinstance(res.exception, RuntimeError)  # not worded as a full disk
