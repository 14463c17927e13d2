"""The deployment files (Containerfile, deploy/*, docs/deploy.md) against the code: every
`tagalign serve` option they give exists, the docs show the files as they are, the image's
HEALTHCHECK command tells a live server from a dead one, and the build context lets in
what the Containerfile copies. (The image itself is built and checked by
scripts/test-image.sh, which takes minutes and is not part of the suite.)"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml

from serving import LiveServer, free_port, toy_app
from tagalign.cli import app

ROOT = Path(__file__).resolve().parents[1]
CONTAINERFILE = (ROOT / "Containerfile").read_text(encoding="utf-8")
DEPLOY_DOC = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")


def instruction(name: str) -> str:
    """The Containerfile's last NAME instruction with its continuation lines joined."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE)
    found = re.findall(rf"^{name} (.+)$", text, flags=re.M)
    assert found, f"Containerfile has no {name}"
    return found[-1]


def serve_options() -> set[str]:
    serve = typer.main.get_command(app).commands["serve"]
    return {opt for param in serve.params for opt in (*param.opts, *param.secondary_opts)}


def options(args: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def compose_command() -> list[str]:
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text(encoding="utf-8"))
    return compose["services"]["tagalign"]["command"]


def unit_serve_args() -> list[str]:
    unit = (ROOT / "deploy" / "tagalign.service").read_text(encoding="utf-8")
    exec_start = re.search(r"^ExecStart=(.+?)(?<!\\)$", unit, flags=re.M | re.S).group(1)
    args = shlex.split(exec_start.replace("\\\n", " "))
    assert args[:2] == ["/opt/tagalign/bin/tagalign", "serve"], args
    return args[2:]


def test_the_image_serves_the_mounted_projects_file_as_non_root() -> None:
    assert json.loads(instruction("ENTRYPOINT")) == ["tagalign", "serve"]
    cmd = json.loads(instruction("CMD"))
    assert cmd == ["--projects", "/projects/projects.toml", "--host", "0.0.0.0", "--port", "8000"]
    assert instruction("USER") == "10001:10001"
    assert instruction("EXPOSE") == "8000"
    assert "TAGALIGN_HEALTH_URL=http://127.0.0.1:8000/tagalign/v1/health/ready" in CONTAINERFILE


@pytest.mark.parametrize("where", ["Containerfile CMD", "deploy/compose.yaml",
                                   "deploy/tagalign.service"])
def test_every_serve_option_given_exists(where: str) -> None:
    args = {"Containerfile CMD": lambda: json.loads(instruction("CMD")),
            "deploy/compose.yaml": compose_command,
            "deploy/tagalign.service": unit_serve_args}[where]()
    given = options(args)
    assert "--projects" in given
    unknown = sorted(set(given) - serve_options())
    assert not unknown, f"{where}: `tagalign serve` has no {unknown}"


def test_the_serve_options_in_the_docs_exist() -> None:
    """Each `… localhost/tagalign:latest --opt …` run in docs/deploy.md passes serve options."""
    runs = re.findall(r"localhost/tagalign:latest \\\n((?:.*\\\n)*.*)", DEPLOY_DOC)
    args = [a for run in runs for a in shlex.split(run.replace("\\\n", " "))]
    given = options(args)
    assert "--allowed-host" in given
    assert not sorted(set(given) - serve_options())


@pytest.mark.parametrize("name", ["compose.yaml", "tagalign.service", "nginx.conf"])
def test_the_docs_show_the_deploy_files_as_they_are(name: str) -> None:
    text = (ROOT / "deploy" / name).read_text(encoding="utf-8")
    blocks = re.findall(r"^```\w*\n(.*?)^```$", DEPLOY_DOC, flags=re.M | re.S)
    assert text in blocks, f"docs/deploy.md does not show deploy/{name} as it is"


def test_the_build_context_lets_in_what_the_containerfile_copies() -> None:
    lines = (ROOT / ".containerignore").read_text(encoding="utf-8").splitlines()
    rules = [line for line in lines if line and not line.startswith("#")]
    assert rules[0] == "*"  # everything out but what the rules after it let in
    allowed = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    copied = re.findall(r"^COPY (?!--from)(.+)$", CONTAINERFILE, flags=re.M)
    assert copied == [". /src/"]  # the context, which is only what pip installs from
    assert allowed == {"Containerfile", "pyproject.toml", "requirements.lock", "README.md",
                       "src"}
    # docker reads .dockerignore, podman .containerignore first: the same rules (a copy,
    # not a symbolic link, which some builders and checkouts do not follow)
    assert (ROOT / ".dockerignore").read_bytes() == (ROOT / ".containerignore").read_bytes()


def healthcheck(url: str) -> int:
    """Run the image's HEALTHCHECK command, as the container would, against URL."""
    cmd = json.loads(re.search(r"HEALTHCHECK .*?CMD (\[.+\])$", re.sub(r"\\\n", " ",
                                                                    CONTAINERFILE),
                                 flags=re.M).group(1))
    assert cmd[0] == "python3"
    env = {**os.environ, "TAGALIGN_HEALTH_URL": url}
    return subprocess.run([sys.executable, *cmd[1:]], env=env, capture_output=True,
                          timeout=60).returncode


def test_the_healthcheck_tells_a_live_server_from_a_dead_one(tmp_path: Path) -> None:
    with LiveServer(toy_app(tmp_path)) as live:
        assert healthcheck(f"{live.url}/tagalign/v1/health/ready") == 0
        assert healthcheck(f"{live.url}/tagalign/v1/no-such-route") == 1  # 404
    assert healthcheck(f"http://127.0.0.1:{free_port()}/tagalign/v1/health/ready") == 1  # refused
