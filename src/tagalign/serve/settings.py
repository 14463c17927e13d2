"""The settings of one `tagalign serve` server process (`ServerSettings`): what it serves,
where, and how.

They are plain values, checked by the command before anything starts, and the only input
of the app factory (`tagalign.serve.factory`): with ``--workers N`` every worker builds its
app from them, handed over as JSON in `SETTINGS_ENV` (uvicorn builds a worker's app by
calling a factory named by an import string and passes nothing else to it).

Each served project's own settings (limit, threshold, rules, learning, …) are
`tagalign.project.ServingSettings`: a projects file's tables give them, or for project
folders given as arguments, ``allow_learn`` and ``domains`` here (`folder_serving`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from tagalign.errors import InputError
from tagalign.project import Project, ServingSettings, feedback_location
from tagalign.projects_file import ProjectSpec, read_projects, read_text, select
from tagalign.serve import MAX_BODY
from tagalign.serve.accesslog import LogFormat

#: the environment variable that carries `ServerSettings` to the workers
SETTINGS_ENV = "TAGALIGN_SERVE_SETTINGS"


@dataclass(frozen=True)
class ServerSettings:
    """`tagalign serve`'s options as plain values (JSON for the workers); paths as text."""

    projects: list[str] = field(default_factory=list)
    projects_file: str | None = None
    #: the projects file's text, read once at start (`read_at_start`): what every later
    #: load parses (a worker started after start, a reload), whatever the file is now
    projects_text: str | None = None
    only: str | None = None
    feedback_db: str | None = None
    records: str | None = None
    queue: str | None = None
    release_above: float | None = None
    threads: int = 0
    compile_ranker: bool = True
    mmap: bool = False
    #: project folders given as arguments: their `ServingSettings` (`folder_serving`)
    allow_learn: bool = False
    domains: str | None = None
    max_body: int = MAX_BODY
    allowed_hosts: list[str] = field(default_factory=list)
    cors_origins: list[str] = field(default_factory=list)
    workers: int = 1
    tokens_file: str | None = None
    require_token_for_suggest: bool = False
    metrics: bool = True
    log_format: LogFormat = "auto"
    preload: bool = True
    # set by the supervisor for its workers (`tagalign.serve.workers.Workers`)
    state_dir: str | None = None
    supervisor: int | None = None
    learned_after: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServerSettings:
        return cls(**json.loads(text))

    def folder_serving(self) -> ServingSettings:
        """How each project folder given as an argument is served (``--allow-learn``,
        ``--domains``; a projects file's tables give their own)."""
        return ServingSettings(allow_learn=self.allow_learn,
                               domain_model=Path(self.domains) if self.domains else None)

    def only_ids(self) -> list[str] | None:
        """``only`` as a list of project ids (None: every project of the file)."""
        return [x.strip() for x in self.only.split(",") if x.strip()] if self.only else None

    def worker_threads(self) -> int:
        """Threads each process's models use: ``--threads``, else the machine's cores
        shared out among the workers (N workers each using every core would make the
        cores' thread pools wait for each other)."""
        if self.threads or self.workers == 1:
            return self.threads
        return max(1, (os.cpu_count() or 1) // self.workers)

    def read_at_start(self) -> ServerSettings:
        """These settings with the projects file's text (`projects_text`), read now: the
        file is read once, when the server starts. A file that cannot be read or does not
        parse stops the start (`ProjectsFileError`); one broken later changes nothing a
        server serves, as it would otherwise fail every worker started after it (one
        replacing a worker that died) and every reload."""
        if not self.projects_file or self.projects_text is not None:
            return self
        text = read_text(Path(self.projects_file))
        read_projects(self.projects_file, text)  # checked here: a bad file stops the start
        return dataclasses.replace(self, projects_text=text)

    def project_specs(self) -> dict[str, ProjectSpec]:
        """The tables of the projects file the server serves (``only``: these ids), from
        the text read at start (`read_at_start`; else from the file now)."""
        assert self.projects_file is not None
        return select(read_projects(self.projects_file, self.projects_text), self.only_ids(),
                      Path(self.projects_file))

    def served(self) -> dict[str, tuple[Path, str | None]]:
        """Project id → (folder, projects file's feedback_db), read without loading a
        model: checks what can be checked before workers start (a missing or untrained
        folder, a projects file's errors) and tells where each one's feedback is."""
        if self.projects_file:
            return {pid: (spec.path, spec.serving.feedback_db)
                    for pid, spec in self.project_specs().items()}
        out: dict[str, tuple[Path, str | None]] = {}
        for folder in map(Path, self.projects):
            Project.check_trained_folder(folder)
            if folder.name in out:  # the folder name is the project id in every URL
                raise InputError(f"two projects are named {folder.name!r}; rename one folder")
            out[folder.name] = (folder, None)
        return out

    def start_rows(self) -> dict[str, int]:
        """Per project id, the last row of its feedback store now: what was stored after
        it reaches every worker (`tagalign.serve.learning`). Opens each store once,
        creating its tables before the workers open it; a store that is wrong stops the
        start here (`WrongStoreError`), one that is away is left out (its workers agree
        on the row once it answers: `tagalign.serve.workers.Workers.start_row`)."""
        from tagalign.feedback import prepare

        urls = {pid: feedback_location(path, db, self.feedback_db)[0]
                for pid, (path, db) in self.served().items()}
        rows = {url: prepare(url) for url in dict.fromkeys(urls.values())}  # each store once
        return {pid: row for pid, url in urls.items() if (row := rows[url]) is not None}


__all__ = ["SETTINGS_ENV", "ServerSettings"]
