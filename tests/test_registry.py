"""The one `Registry` behind every named-strategy registry of the package."""

from __future__ import annotations

import pytest

from tagalign.registry import Registry


def test_register_lookup_names_and_error():
    reg: Registry[type] = Registry("engine")

    @reg.register
    class Local:
        name = "local"

    @reg.register_as("fast")
    def fast() -> str:
        return "f"

    assert reg.lookup("local") is Local and reg["fast"] is fast and fast() == "f"
    assert reg.names() == ["fast", "local"] and "local" in reg and isinstance(reg, dict)
    with pytest.raises(ValueError) as exc:
        reg.lookup("nope")
    assert str(exc.value) == "unknown engine 'nope'; use one of ['fast', 'local']"
    hinted = Registry("encoder", choose="known:", hint=" (st:<model>)")
    with pytest.raises(ValueError) as exc:
        hinted.lookup("x", shown="x:arg")
    assert str(exc.value) == "unknown encoder 'x:arg'; known: [] (st:<model>)"


def test_package_registries_keep_their_names_and_messages(tmp_path):
    from tagalign.batch.engines import ENGINES, get_engine
    from tagalign.batch.inputs import get_input
    from tagalign.batch.tasks import TASKS
    from tagalign.classify import CLASSIFIERS
    from tagalign.encode import get_encoder
    from tagalign.pairs.losses import get_loss
    from tagalign.records import RECORD_FORMATS, read_records
    from tagalign.suggest.sources import SOURCES
    from tagalign.vocab import VOCAB_FORMATS, load_vocabulary

    assert {"local", "ray"} <= set(ENGINES) and {"suggest", "encode"} <= set(TASKS)
    assert {"linear", "label-contrastive"} <= set(CLASSIFIERS)
    assert {"lexical", "labels"} <= set(SOURCES) and "gnd-json" in VOCAB_FORMATS
    assert set(RECORD_FORMATS.names()) >= {"jsonl", "jsonld", "annif-tsv", "marc"}
    assert get_loss("angle").name == "angle"
    cases = [
        (lambda: get_engine("x"), "unknown engine 'x'; use one of ['local', 'ray']"),
        (lambda: get_input("nope:de"), "unknown input 'nope:de'; use one of "),
        (lambda: get_loss("x"), "unknown loss 'x'; use one of ['angle', "),
        (lambda: get_encoder("nope:x"), "unknown encoder 'nope:x'; use one of ['e5-small', "),
    ]
    path = tmp_path / "f.txt"
    path.write_text("x\n")
    cases += [
        (lambda: load_vocabulary(path, format="x"), "unknown vocabulary format 'x'; known: ['"),
        (lambda: list(read_records(path, format="x")), "unknown record format 'x'; known: ['"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as exc:
            call()
        assert str(exc.value).startswith(message), str(exc.value)
    with pytest.raises(ValueError, match=r"take an argument\)$"):
        get_encoder("nope")


def test_lazy_entries_import_their_module_on_first_lookup(tmp_path, monkeypatch):
    import sys

    (tmp_path / "lazy_plugin_mod.py").write_text(
        "from test_registry_lazy_target import REG\n"
        "@REG.register_as('late')\n"
        "def late():\n"
        "    return 'loaded'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry = Registry("widget", choose="known:", lazy={"late": "lazy_plugin_mod"})
    target = type(sys)("test_registry_lazy_target")
    target.REG = reg
    monkeypatch.setitem(sys.modules, "test_registry_lazy_target", target)
    monkeypatch.delitem(sys.modules, "lazy_plugin_mod", raising=False)

    reg.register_as("now")(str)
    assert "late" in reg and reg.names() == ["late", "now"]
    assert "lazy_plugin_mod" not in sys.modules  # listing or testing a name imports nothing
    assert set(reg) == {"now"}  # the dict itself holds loaded entries only
    with pytest.raises(ValueError) as exc:
        reg.lookup("nope")
    assert str(exc.value) == "unknown widget 'nope'; known: ['late', 'now']"
    assert reg.lookup("late")() == "loaded" and "lazy_plugin_mod" in sys.modules
    assert reg["late"] is reg.get("late") and set(reg) == {"late", "now"}

    reg.add_lazy("broken", "lazy_plugin_mod")  # a module that does not register the name
    with pytest.raises(KeyError, match="did not register widget 'broken'"):
        reg.lookup("broken")
    assert reg.get("missing", 3) == 3


def test_recipes_are_a_lazy_registry():
    from tagalign.recipes import RECIPES, get_recipe, recipe_names

    assert set(RECIPES.lazy) <= set(recipe_names()) and "hybrid" in RECIPES
    assert get_recipe("lexical").name == "lexical"
    with pytest.raises(ValueError) as exc:
        get_recipe("hybird")
    assert str(exc.value).startswith("unknown recipe 'hybird'; known: ['focused-transform', ")


FORMAT_MODULES = {
    "RECORD_FORMATS": ("tagalign.records", {
        "annif-tsv": "tagalign.records.annif", "jsonld": "tagalign.records.jsonld",
        "marc": "tagalign.records.marc.reader"}),
    "VOCAB_FORMATS": ("tagalign.vocab", {
        "annif-tsv": "tagalign.vocab.annif", "gnd-json": "tagalign.vocab.gnd_json",
        "gnd-marc": "tagalign.vocab.gnd_marc", "invenio-yaml": "tagalign.vocab.invenio",
        "skos": "tagalign.vocab.skos"}),
}


def test_formats_are_lazy_registries_without_import_cycles():
    """Each format module imported first in a fresh interpreter (the old cycle: loaders
    imported the formats at its bottom, the formats imported loaders' `register`), then
    every format of both registries is listed before and found on lookup."""
    import subprocess
    import sys

    for registry, (package, modules) in FORMAT_MODULES.items():
        for name, module in modules.items():
            code = (
                "import sys\n"
                f"import {module}\n"
                f"from {package} import {registry} as R\n"
                f"assert {name!r} in dict.keys(R), 'importing {module} registers {name}'\n"
                f"others = {sorted(set(modules.values()) - {module})!r}\n"
                "assert not [m for m in others if m in sys.modules], 'imported eagerly'\n"
                f"assert set(R.names()) >= set({sorted(modules)!r})\n"
                f"assert all(callable(R.lookup(n)) for n in {sorted(modules)!r})\n"
                f"assert all(m in sys.modules for m in {sorted(modules.values())!r})\n")
            run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            assert run.returncode == 0, (module, run.stderr)


def test_format_lists_name_every_format_before_any_is_loaded():
    from tagalign.records import RECORD_FORMATS
    from tagalign.vocab import VOCAB_FORMATS

    assert RECORD_FORMATS.names() == ["annif-tsv", "jsonl", "jsonld", "marc"]
    assert VOCAB_FORMATS.names() == ["annif-tsv", "gnd-json", "gnd-marc", "gnd-tsv",
                                     "invenio-yaml", "skos"]
    for registry, (_, modules) in FORMAT_MODULES.items():
        reg = RECORD_FORMATS if registry == "RECORD_FORMATS" else VOCAB_FORMATS
        assert reg.lazy == modules
