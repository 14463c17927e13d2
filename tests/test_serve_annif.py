"""Annif's REST API at /v1: the official `annif-client` and Schemathesis with Annif's own
OpenAPI document, both against a real uvicorn server on localhost (toy project, no data)."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import requests
import schemathesis
from annif_client import AnnifClient
from schemathesis.checks import not_a_server_error, positive_data_acceptance

from serving import LiveServer, annif_openapi, free_port, fuzz, toy_app
from tagalign.serve.annif import ANNIF_API_VERSION, GND_URI, MAX_BATCH

PILZE, EPOS, HOLZSCHUTZ = "4046076-9", "4015065-3", "4025741-1"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("annif")
    with LiveServer(toy_app(root)) as srv:
        srv.db = root / "toy" / "feedback.sqlite"
        srv.client = AnnifClient(api_base=f"{srv.url}/v1/")
        yield srv


def test_api_info_projects_and_vocabs(live):
    info = live.client.api_info
    assert info["version"] == ANNIF_API_VERSION and info["title"].startswith("Annif REST API")
    (proj,) = live.client.projects
    assert proj["project_id"] == "toy" and proj["backend"] == {"backend_id": "test-overlap"}
    assert proj["language"] == "de" and proj["is_trained"] is True
    assert proj["vocab"] == {"vocab_id": "gnd", "languages": ["de", "en"], "size": 8,
                             "loaded": True}
    assert live.client.get_project("toy") == proj
    with pytest.raises(ValueError, match="Project 'nope' not found"):
        live.client.get_project("nope")
    assert httpx.get(f"{live.url}/v1/vocabs").json() == {"vocabs": [proj["vocab"]]}


def test_suggest_form_text_first_line_is_the_title(live):
    results = live.client.suggest("toy", "Pilze\nfungi mushroom wood rot decay", limit=5)
    assert 0 < len(results) <= 5
    assert results[0] == {"uri": GND_URI + PILZE, "label": "Pilze", "notation": None,
                          "score": results[0]["score"]}
    assert all(r["uri"].startswith(GND_URI) for r in results)
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    high = live.client.suggest("toy", "Pilze\nfungi mushroom wood rot decay", threshold=0.9)
    assert high and all(r["score"] >= 0.9 for r in high)
    assert live.client.suggest("toy", "", limit=5) == []  # no text, no noise
    assert live.client.suggest("toy", "Pilze", limit=0) == []
    # `language` picks the label language, as in Annif
    res = httpx.post(f"{live.url}/v1/projects/toy/suggest",
                     data={"text": "Pilze fungi", "language": "en", "limit": "1"}).json()
    assert res["results"][0]["label"] == "fungi"
    bad = httpx.post(f"{live.url}/v1/projects/toy/suggest", data={"text": "x", "language": "fi"})
    assert bad.status_code == 400 and bad.headers["content-type"] == "application/problem+json"
    assert bad.json()["detail"] == 'language "fi" not supported by vocabulary'


def test_suggest_batch_keeps_document_ids_and_order(live):
    docs = [{"document_id": "a", "text": "Holzschutz\ntimber wood protection"},
            {"text": "Pilze\nfungi mushroom"},
            {"document_id": "c", "text": ""}]
    out = live.client.suggest_batch("toy", docs, limit=3)
    assert [d["document_id"] for d in out] == ["a", None, "c"]
    assert out[0]["results"][0]["uri"] == GND_URI + HOLZSCHUTZ
    assert out[1]["results"][0]["uri"] == GND_URI + PILZE
    assert out[2]["results"] == [] and all(len(d["results"]) <= 3 for d in out)
    too_many = [{"text": "Pilze"}] * (MAX_BATCH + 1)
    res = httpx.post(f"{live.url}/v1/projects/toy/suggest-batch", json={"documents": too_many})
    assert res.status_code == 400 and "documents" in res.json()["detail"]


def test_learn_returns_204_stores_feedback_and_is_used_at_once(live):
    text = "Heldenlied im Holz\nsaga verse heroic song timber"
    res = live.client.learn("toy", [
        {"text": text, "subjects": [{"uri": GND_URI + EPOS, "label": "Epos"},
                                    {"uri": "http://example.org/not-gnd"}]},
        {"text": "no subjects here"},
    ])
    assert res.status_code == 204 and res.content == b""
    rid = "annif:" + hashlib.sha256(text.encode()).hexdigest()[:16]
    with sqlite3.connect(live.db) as db:
        rows = db.execute("select project, record_id, subject_id, decision, title, abstract "
                          "from decisions where record_id=?", (rid,)).fetchall()
    assert rows == [("toy", rid, EPOS, "accept", "Heldenlied im Holz",
                     "saga verse heroic song timber")]
    # the toy recipe learns online: the learned record is now a neighbour of itself
    own = httpx.post(f"{live.url}/tagalign/v1/projects/toy/suggest",
                     json={"title": "Heldenlied im Holz", "abstract": "saga verse heroic song "
                           "timber"}).json()["results"]
    epos = next(r for r in own if r["id"] == EPOS)
    assert any(n["id"] == rid for n in epos["reasons"]["neighbours"])
    with pytest.raises(ValueError, match="not found"):
        live.client.learn("nope", [{"text": text, "subjects": [{"uri": GND_URI + EPOS}]}])


def test_detect_language(live):
    res = live.client.detect_language("Schäden durch Pilze an Fachwerkgebäuden", ["de", "en"])
    assert res["results"][0] == {"language": "de", "score": 1.0}
    res = live.client.detect_language("The quick brown fox jumped over the lazy dog",
                                      ["en", "fi", "sv"])
    assert res["results"][0]["language"] == "en"
    assert live.client.detect_language("", ["de", "en"]) == {
        "results": [{"language": None, "score": 1.0}]}
    for languages in (["de", "xx"], ["de"] * 6 + ["en"], []):
        bad = httpx.post(f"{live.url}/v1/detect-language",
                         json={"text": "x", "languages": languages})
        assert bad.status_code == 400, languages


def test_errors_have_annifs_status_and_shape(live):
    url = f"{live.url}/v1/projects/toy/suggest"
    assert httpx.post(url, data={"limit": "3"}).status_code == 400  # no text
    assert httpx.post(url, data={"text": "x", "limit": "-1"}).status_code == 400
    assert httpx.post(url, data={"text": "x", "threshold": "nan"}).status_code == 400
    assert httpx.post(url, json={"text": "x"}).status_code == 400  # JSON, not a form
    big = httpx.post(url, data={"text": "a" * 1_100_000})
    assert big.status_code == 413 and big.headers["content-type"].startswith("text/plain")
    learn = httpx.post(f"{live.url}/v1/projects/toy/learn", json={"text": "not a list"})
    assert learn.status_code == 400
    missing = httpx.post(f"{live.url}/v1/projects/nope/suggest", data={"text": "x"})
    assert missing.status_code == 404 and missing.json()["title"] == "Project not found"


# -- Schemathesis with Annif's own OpenAPI document -------------------------------------
EXAMPLES = 25  # per operation


def test_responses_conform_to_annifs_schema(live):
    schema = schemathesis.openapi.from_path(annif_openapi())
    # all default checks (no 500, status codes, content types, response schemas, headers)
    # except "positive data accepted": data valid for the document can still be refused
    # with a documented 400 — unknown label languages, unsupported candidate languages —
    # exactly as Annif refuses it. Every project id is ours, so suggest/learn really run.
    counts = fuzz(schema, f"{live.url}/v1", examples=EXAMPLES,
                  path_parameters={"project_id": "toy"},
                  excluded_checks=[positive_data_acceptance])
    assert len(counts) == 8  # every operation of Annif's document
    assert all(n >= 1 for n in counts.values()), counts
    # invalid inputs: never a server error
    negative = fuzz(schema, f"{live.url}/v1", examples=EXAMPLES, modes=("negative",),
                    path_parameters={"project_id": "toy"}, checks=[not_a_server_error])
    assert sum(negative.values()) >= 4 * EXAMPLES, negative
    print("schemathesis examples (Annif's document):", counts, negative)


def test_multipart_form_and_cors_as_annif_serves_them(live):
    url = f"{live.url}/v1/projects/toy/suggest"
    multi = httpx.post(url, files={"text": (None, "Pilze\nfungi mushroom"), "limit": (None, "2")})
    assert multi.status_code == 200, multi.text
    assert multi.json()["results"][0]["uri"] == GND_URI + PILZE
    assert len(multi.json()["results"]) <= 2
    as_file = httpx.post(url, files={"text": ("doc.txt", b"Holzschutz\ntimber")})
    assert as_file.json()["results"][0]["uri"] == GND_URI + HOLZSCHUTZ
    origin = {"Origin": "https://catalogue.example.org"}
    res = httpx.post(url, data={"text": "Pilze"}, headers=origin)
    assert res.headers["access-control-allow-origin"] == "*"
    # as Annif: any origin may GET (and send simple requests), not preflight a POST
    pre = httpx.options(url, headers={**origin, "Access-Control-Request-Method": "POST"})
    assert pre.status_code == 400 and "POST" not in pre.headers["access-control-allow-methods"]
    own = httpx.get(f"{live.url}/tagalign/v1/projects", headers=origin)
    assert "access-control-allow-origin" not in own.headers


def test_the_client_table_against_the_tagalign_serve_command(tmp_path):
    """The issue's table, unchanged client, against `tagalign serve` run as a command."""
    toy_app(tmp_path)  # trains and saves the toy project
    port = free_port()
    boot = ("import sys; sys.path.insert(0, sys.argv.pop(1)); import serve_recipe; "
            "from tagalign.cli import app; app()")
    server = subprocess.Popen([sys.executable, "-c", boot, str(Path(__file__).parent), "serve",
                               str(tmp_path / "toy"), "--port", str(port), "--allow-learn"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    client = AnnifClient(api_base=f"http://127.0.0.1:{port}/v1/")
    try:
        deadline = time.time() + 60
        while True:
            try:
                info = client.api_info
                break
            except requests.ConnectionError:
                assert server.poll() is None and time.time() < deadline, server.stdout.read()
                time.sleep(0.2)
        assert info["version"] == ANNIF_API_VERSION
        assert [p["project_id"] for p in client.projects] == ["toy"]
        assert client.get_project("toy")["backend"]["backend_id"] == "test-overlap"
        assert client.suggest("toy", "Pilze\nfungi", limit=5)[0]["uri"] == GND_URI + PILZE
        batch = client.suggest_batch("toy", [{"document_id": "1", "text": "Holzschutz"}],
                                     limit=3)
        assert batch[0]["document_id"] == "1" and len(batch[0]["results"]) <= 3
        assert client.learn("toy", [{"text": "Epos\nsaga", "subjects": [
            {"uri": GND_URI + EPOS, "label": "Epos"}]}]).status_code == 204
        assert client.detect_language("Pilze im Holz", ["de", "en"])["results"][0][
            "language"] == "de"
    finally:
        server.terminate()
        server.wait(10)
