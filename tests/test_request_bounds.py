"""A request's limit and threshold are bounded once (`tagalign.suggest.LIMIT`,
``THRESHOLD``): `tagalign suggest`, tagalign's REST API, Annif's ``/v1`` (a real server on
localhost, the toy project) and the Python API refuse the same values with the same
message, and accept the same ones. The one difference is Annif's: its document sets no
maximum on the limit, so a larger one is cut to `MAX_LIMIT` there (docs/serving.md)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from typer.testing import CliRunner

from serving import LiveServer, toy_app
from tagalign.cli import app as cli
from tagalign.suggest import LIMIT, MAX_LIMIT, THRESHOLD, SuggestRequest

BOUNDS = {"limit": LIMIT, "threshold": THRESHOLD}
OUT_OF_RANGE = [("limit", -1), ("limit", MAX_LIMIT + 1), ("threshold", -0.1),
                ("threshold", 1.5)]
PILZE = "4046076-9"
IN_RANGE = [("limit", 0), ("limit", MAX_LIMIT), ("threshold", 0.0), ("threshold", 1.0)]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("bounds")
    with LiveServer(toy_app(root)) as srv:
        srv.folder = root / "toy"
        yield srv


def python_api(_live, field: str, value: float) -> str | None:
    try:
        SuggestRequest(**{field: value})
    except ValueError as exc:
        assert str(exc).startswith(f"{field}: ")
        return str(exc).removeprefix(f"{field}: ")
    return None


def command_line(live, field: str, value: float) -> str | None:
    res = CliRunner().invoke(cli, ["suggest", str(live.folder), "--title", "Pilze im Holz",
                                   f"--{field}", str(value)])
    if res.exit_code == 0:
        return None
    assert res.exit_code == 2 and f"'--{field}'" in res.output, res.output
    return " ".join(res.output.split()).split(f"'--{field}'")[-1].split(": ", 1)[1].split(
        " │")[0].strip()


def own_rest(live, field: str, value: float) -> str | None:
    answers = [httpx.post(f"{live.url}/tagalign/v1/projects/toy/suggest",
                          json={"title": "Pilze im Holz", field: value}),
               httpx.post(f"{live.url}/tagalign/v1/projects/toy/suggest-batch",
                          json={"records": [{"title": "Pilze im Holz"}], field: value})]
    if all(r.status_code == 200 for r in answers):
        return None
    (one, batch) = [r.json() for r in answers]
    assert [r.status_code for r in answers] == [422, 422] and one == batch
    (error,) = one["errors"]
    assert error["field"] == field and one["detail"] == f"{field}: {error['msg']}"
    return error["msg"]


def annif_rest(live, field: str, value: float) -> str | None:
    res = httpx.post(f"{live.url}/v1/projects/toy/suggest",
                     data={"text": "Pilze im Holz", field: str(value)})
    if res.status_code == 200:
        return None
    body = res.json()
    assert res.status_code == 400 and body["status"] == 400
    assert body["detail"].startswith(f"{field}: ")
    return body["detail"].removeprefix(f"{field}: ")


CHANNELS: dict[str, Callable[..., str | None]] = {
    "python": python_api, "cli": command_line, "rest": own_rest, "annif": annif_rest}


@pytest.mark.parametrize("channel", CHANNELS)
@pytest.mark.parametrize("field, value", OUT_OF_RANGE)
def test_every_channel_refuses_alike(live, channel, field, value):
    said = CHANNELS[channel](live, field, value)
    if channel == "annif" and field == "limit" and value > MAX_LIMIT:
        assert said is None  # Annif's document: no maximum (cut below)
    else:
        assert said == BOUNDS[field].message == (
            "must be between 0 and 1000" if field == "limit" else "must be between 0 and 1")


@pytest.mark.parametrize("channel", CHANNELS)
@pytest.mark.parametrize("field, value", IN_RANGE)
def test_every_channel_accepts_the_bounds_ends(live, channel, field, value):
    assert CHANNELS[channel](live, field, value) is None


def test_annif_cuts_a_larger_limit_to_the_maximum(live, monkeypatch):
    """Annif's difference: no maximum in its document, so a limit over `MAX_LIMIT` asks
    for `MAX_LIMIT` subjects rather than failing."""
    from tagalign.project import Tagger

    asked: list[int | None] = []
    tag = Tagger.tag
    monkeypatch.setattr(Tagger, "tag", lambda self, recs, request: asked.append(
        request.limit) or tag(self, recs, request))
    for limit in (MAX_LIMIT + 1, 10**9, MAX_LIMIT, 3):
        res = httpx.post(f"{live.url}/v1/projects/toy/suggest",
                         data={"text": "Pilze\nfungi mushroom wood", "limit": str(limit)})
        assert res.status_code == 200 and res.json()["results"]
    assert asked == [MAX_LIMIT, MAX_LIMIT, MAX_LIMIT, 3]


def test_limit_zero_answers_nothing_everywhere(live):
    """0 is every channel's minimum (Annif's): no subjects, not an error."""
    assert httpx.post(f"{live.url}/tagalign/v1/projects/toy/suggest",
                      json={"title": "Pilze", "limit": 0}).json()["results"] == []
    assert httpx.post(f"{live.url}/v1/projects/toy/suggest",
                      data={"text": "Pilze", "limit": "0"}).json()["results"] == []
    assert SuggestRequest(limit=0).limit == 0
    shown = {limit: CliRunner().invoke(cli, ["suggest", str(live.folder), "--title", "Pilze",
                                             "--limit", str(limit)]) for limit in (0, 3)}
    assert [r.exit_code for r in shown.values()] == [0, 0]
    assert PILZE in shown[3].output and PILZE not in shown[0].output
