"""A projects file (projects.toml): errors that name file, table and key; train, list and
show through the CLI; and `tagalign serve --projects` — a real uvicorn server on
localhost — serving a hybrid and a zero-shot lexical project to the official
`annif-client`, with an untrained third project listed and answering 503."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest
import requests
from annif_client import AnnifClient
from typer.testing import CliRunner

from serving import free_port
from tagalign.cli import app
from tagalign.projects_file import ProjectsFileError, open_project, read_projects
from tagalign.serve.annif import GND_URI
from tiny_models import TINY_HYBRID, TOPICS, tiny_records

PILZE, EPOS, HOLZSCHUTZ, PHILO = "4046076-9", "4015065-3", "4025741-1", "4045791-6"
RUNNER = CliRunner()


def write_vocab(path, topics=TOPICS) -> None:
    lines = ["gnd_id\tlabel_de\tlabel_en"]
    lines += [f"{sid}\t{label}\t{words.split()[0]}" for sid, (label, words) in topics.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def projects_toml(root) -> str:
    params = ", ".join(f"{k} = {json.dumps(v)}" for k, v in TINY_HYBRID.items())
    return f"""
[hybrid]
name = "Tiny hybrid"
recipe = "hybrid"
vocab = "vocab.tsv"
path = "models/hybrid"
params = {{ {params} }}
allow_learn = true
exclude = ["{HOLZSCHUTZ}"]

[lexical]
recipe = "lexical"
vocab = "vocab.tsv"
language = "en"
limit = 3
exclude = "excluded.txt"

[later]
recipe = "lexical"
vocab = "vocab.tsv"
"""


def cli(*args: str) -> str:
    res = RUNNER.invoke(app, list(args), env={"COLUMNS": "250"})  # table rows on one line
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    root = tmp_path_factory.mktemp("deploy")
    write_vocab(root / "vocab.tsv")
    (root / "excluded.txt").write_text(f"# never suggested\n{GND_URI}{PHILO}\n", "utf-8")
    (root / "projects.toml").write_text(projects_toml(root), encoding="utf-8")
    with open(root / "train.jsonl", "w", encoding="utf-8") as fh:
        for r in tiny_records(120):
            fh.write(json.dumps(r.to_json()) + "\n")
    for pid in ("hybrid", "lexical"):
        cli("train", "--projects", str(root / "projects.toml"), pid,
            "--train", str(root / "train.jsonl"))
    return root


def test_errors_name_the_file_the_table_and_the_key(deployment, tmp_path):
    src = tmp_path / "projects.toml"

    def error(text: str, pid: str | None = None) -> str:
        src.write_text(text, encoding="utf-8")
        with pytest.raises(ProjectsFileError) as exc:
            specs = read_projects(src)
            open_project(specs[pid or next(iter(specs))])
        return str(exc.value)

    vocab = f'vocab = "{deployment / "vocab.tsv"}"'
    trained = f'path = "{deployment / "models/hybrid"}"'
    assert error('[a]\nrecipe = "lexical"\nallow_lern = true\n') == (
        f"{src} [a] allow_lern: unknown key (did you mean 'allow_learn'?); known keys: name, "
        "recipe, vocab, language, path, params, limit, threshold, allow_learn, exclude, "
        "include, feedback_db, domains")
    assert error("[a]\nlimit = true\n") == f"{src} [a] limit: expected a whole number, got True"
    assert f"{src} [a] recipe: unknown recipe 'hybird'" in error('[a]\nrecipe = "hybird"\n')
    assert error(f'[a]\n{trained}\nrecipe = "lexical"\n').startswith(
        f"{src} [a] recipe: 'lexical', but the project at {deployment / 'models/hybrid'} was "
        "created with 'hybrid'")
    write_vocab(tmp_path / "other.tsv", dict(list(TOPICS.items())[:5]))
    assert error(f'[a]\n{trained}\nvocab = "other.tsv"\n').startswith(
        f"{src} [a] vocab: {tmp_path / 'other.tsv'} does not match the saved project")
    assert error('[a]\npath = "nowhere"\n') == (
        f"{src} [a] path: no trained project at {tmp_path / 'nowhere'}, and no vocab key to "
        f"serve it untrained; run `tagalign train --projects {src} a`")
    assert error(f'[a]\n{vocab}\nexclude = ["4046076-9", "9999999-9"]\n') == (
        f"{src} [a] exclude/include: subject ids not in the vocabulary: 9999999-9")
    assert error(f'[a]\n{vocab}\nlanguage = "fi"\n') == (
        f"{src} [a] language: 'fi' is not a language of the vocabulary (de, en)")
    assert "[a] include: '*' only makes sense in exclude" in error('[a]\ninclude = "*"\n')
    assert "not a readable TOML file" in error("[a\n")


def test_list_and_show_projects(deployment):
    src = str(deployment / "projects.toml")
    listed = cli("list-projects", "--projects", src)
    rows = {line.split("│")[1].strip(): line for line in listed.splitlines()
            if line.count("│") > 5}
    assert set(rows) == {"hybrid", "lexical", "later"}
    assert "yes" in rows["hybrid"] and "allowed" in rows["hybrid"]
    assert "not trained" in rows["later"]
    shown = json.loads(cli("show-project", "lexical", "--projects", src))
    assert shown["rules"] == {"exclude": [PHILO], "include": []}
    assert shown["excluded"] == 1 and shown["limit"] == 3 and shown["language"] == "en"
    assert shown["trained"] is True and shown["allow_learn"] is False
    assert json.loads(cli("show-project", "later", "--projects", src))["trained"] is False
    res = RUNNER.invoke(app, ["show-project", "nope", "--projects", src])
    assert res.exit_code == 1 and "no project 'nope'; known: hybrid, lexical, later" in \
        res.output


@pytest.fixture(scope="module")
def server(deployment):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tagalign.cli.main", "serve", "--projects",
                             str(deployment / "projects.toml"), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    client = AnnifClient(api_base=f"http://127.0.0.1:{port}/v1/")
    deadline = time.time() + 120
    while True:
        try:
            client.api_info  # noqa: B018 - the first request that succeeds: server is up
            break
        except requests.ConnectionError:
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read()
            time.sleep(0.2)
    client.url = f"http://127.0.0.1:{port}"
    yield client
    proc.terminate()
    proc.wait(10)


def test_annif_client_lists_and_suggests_from_both_projects(server):
    projects = {p["project_id"]: p for p in server.projects}
    assert list(projects) == ["hybrid", "lexical", "later"]
    assert projects["hybrid"]["name"] == "Tiny hybrid"
    assert projects["hybrid"]["backend"] == {"backend_id": "hybrid"}
    assert projects["lexical"]["backend"] == {"backend_id": "lexical"}
    assert projects["lexical"]["language"] == "en"
    assert [p["is_trained"] for p in projects.values()] == [True, True, False]

    text = "Holzschutz gegen Pilze\nfungi mushroom wood rot timber protection coating"
    hybrid = server.suggest("hybrid", text, limit=5)
    assert hybrid and len(hybrid) == 5
    assert GND_URI + PILZE in [r["uri"] for r in hybrid]
    assert GND_URI + HOLZSCHUTZ not in [r["uri"] for r in hybrid]  # the table excludes it
    lexical = server.suggest("lexical", "Pilze und Philosophie\nfungi and philosophy")
    assert [r["uri"] for r in lexical] == [GND_URI + PILZE]  # Philosophie is excluded
    assert lexical[0]["label"] == "fungi"  # the table's language = "en"


def test_untrained_project_answers_503_and_learning_is_per_project(server):
    res = httpx.post(f"{server.url}/v1/projects/later/suggest", data={"text": "Pilze"})
    assert res.status_code == 503 and res.json()["title"] == "Service unavailable"
    ours = httpx.post(f"{server.url}/tagalign/v1/projects/later/suggest", json={"title": "x"})
    assert ours.status_code == 503

    doc = [{"text": "Epos\nsaga verse", "subjects": [{"uri": GND_URI + EPOS}]}]
    refused = httpx.post(f"{server.url}/v1/projects/lexical/learn", json=doc)
    assert refused.status_code == 403
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json() == {"type": "about:blank", "title": "Learning not allowed",
                              "status": 403, "detail": "Project 'lexical' is not configured "
                              "to allow learning via API"}
    own = httpx.post(f"{server.url}/tagalign/v1/projects/lexical/learn", json={"records": [
        {"id": "r1", "title": "Epos", "subjects": [EPOS]}]})
    assert own.status_code == 403 and "Learning not allowed" in own.json()["detail"]
    assert server.learn("hybrid", doc).status_code == 204  # allow_learn = true


def test_tagalign_api_excludes_per_request(server):
    url = f"{server.url}/tagalign/v1/projects/hybrid/suggest"
    body = {"title": "Holzschutz gegen Pilze", "abstract": "fungi wood rot timber", "limit": 4}
    first = [r["id"] for r in httpx.post(url, json=body).json()["results"]]
    again = httpx.post(url, json={**body, "exclude": [first[0], GND_URI + first[1]]}).json()
    ids = [r["id"] for r in again["results"]]
    assert len(ids) == 4 and not {first[0], first[1], HOLZSCHUTZ} & set(ids)
    assert ids[:2] == first[2:]  # the rest move up; the limit is filled from below
    batch = httpx.post(f"{server.url}/tagalign/v1/projects/hybrid/suggest-batch", json={
        "records": [{"title": body["title"], "abstract": body["abstract"]}, {"title": "Pilze"}],
        "exclude": [PILZE], "limit": 3}).json()
    assert [len(row) for row in batch["results"]] == [3, 3]
    assert all(PILZE not in [r["id"] for r in row] for row in batch["results"])
    # the project's own limit (3) when the request gives none
    lexical = httpx.post(f"{server.url}/tagalign/v1/projects/lexical/suggest", json={
        "title": "Pilze Epos Zukunft Denkmalpflege Holzschutz"}).json()["results"]
    assert len(lexical) == 3


def test_a_domain_model_that_is_not_there_names_the_key(tmp_path, tiny_hybrids):
    toml = tmp_path / "projects.toml"
    toml.write_text(f'[p]\npath = "{tiny_hybrids[0]}"\ndomains = "missing-model"\n', "utf-8")
    with pytest.raises(ProjectsFileError, match=r"\[p\] domains: .*missing-model"):
        open_project(read_projects(toml)["p"])
