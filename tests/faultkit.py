"""Faults to inject, for the fault tests and `benchmarks/faults/`: a throwaway PostgreSQL
cluster that can be stopped and restarted, a small filesystem that fills up, and the learn
+ suggest load to inject them under (`MixedLoad`, every answer kept).

Both are real: Debian's PostgreSQL binaries (`make postgres` installs them) run as the
``postgres`` user when we are root (PostgreSQL refuses to run as root), and the small
filesystem is a size-limited tmpfs, which only root may mount (and remount read-only). Each
helper raises `Unavailable` with the reason where the machine cannot do it, so a test can
skip saying why.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path


class Unavailable(RuntimeError):
    """This machine cannot inject the fault (the message says why)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name) or sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found if isinstance(found, str) else (found[-1] if found else None)


class PostgresCluster:
    """A PostgreSQL cluster of its own in a temporary folder, on a free localhost port, with
    trust authentication and fsync off (it is thrown away). `start` it (again after `stop`);
    `restart` it; `close` stops it for good and removes its folder. ``url`` is the
    ``postgresql://`` URL of its ``postgres`` database; its folder in ``under`` (a small disk
    to fill, say) when given, else in the system's temporary folder."""

    def __init__(self, under: Path | None = None) -> None:
        try:
            import psycopg  # noqa: F401 - the driver tagalign's store uses
        except ImportError as exc:
            raise Unavailable("psycopg not installed (pip install '.[postgres]')") from exc
        self.initdb, self.pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
        if not (self.initdb and self.pg_ctl):
            raise Unavailable("PostgreSQL server binaries (initdb, pg_ctl) not found: "
                              "make postgres")
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # postgres refuses to run as root
            if not shutil.which("runuser"):
                raise Unavailable("running as root without runuser: cannot start PostgreSQL")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.root = Path(tempfile.mkdtemp(prefix="tagalign-pg-", dir=under))
        self.root.chmod(0o755)
        if self.as_user:
            shutil.chown(self.root, "postgres")
        self.data, self.port = self.root / "data", free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._run([self.initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres",
                   "-E", "UTF8", "--no-sync"])

    def database(self, name: str) -> str:
        """The URL of an empty database ``name`` (dropped first if it was there)."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"{self.url.rsplit('/', 1)[0]}/{name}"

    def _run(self, args: list[str], check: bool = True) -> subprocess.CompletedProcess:
        run = functools.partial(subprocess.run, capture_output=True, timeout=60)
        return run([*self.as_user, *args], check=check)

    def _ctl(self, action: str, *args: str, check: bool = True) -> None:
        self._run([self.pg_ctl, "-D", str(self.data), "-w", "-l", str(self.root / "log"),
                   "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off", *args, action], check=check)

    def running(self) -> bool:
        return self._run([self.pg_ctl, "-D", str(self.data), "status"], check=False
                         ).returncode == 0

    def start(self) -> PostgresCluster:
        self._ctl("start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop it: ``fast`` ends the open sessions (the clients see their connections
        close), ``immediate`` as a crash would."""
        self._ctl("stop", "-m", mode)

    def restart(self, mode: str = "fast") -> None:
        self._ctl("restart", "-m", mode)

    def close(self) -> None:
        self._ctl("stop", "-m", "immediate", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


class SmallDisk:
    """A size-limited tmpfs mounted at ``path`` (``size`` bytes, rounded up to pages) that
    fills up on purpose: `fill` takes all the space left with a file of its own, `free`
    gives it back; `read_only` remounts it so. Needs root (mount)."""

    def __init__(self, path: Path, size: int):
        if os.geteuid() != 0:
            raise Unavailable("mounting a small tmpfs needs root")
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs",
                              str(self.path)], capture_output=True, text=True)
        if res.returncode != 0:
            raise Unavailable(f"the kernel refused a tmpfs mount: {res.stderr.strip()}")
        self.filler = self.path / ".filler"

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self) -> None:
        """Take every free block (the filesystem is full afterwards): MiBs, then pages."""
        with open(self.filler, "ab", buffering=0) as fh:
            for block in (b"\0" * (1 << 20), b"\0" * 4096):
                with contextlib.suppress(OSError):
                    while fh.write(block):  # until ENOSPC
                        pass

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def read_only(self, read_only: bool = True) -> None:
        """Remount it read-only (writes fail with EROFS), or writable again."""
        subprocess.run(["mount", "-o", f"remount,{'ro' if read_only else 'rw'}",
                        str(self.path)], check=True, capture_output=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)

    def __enter__(self) -> SmallDisk:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class Answer:
    """One request of a `MixedLoad`: when it was answered (``time.time()``), its kind
    (``learn``, ``suggest``), status, ``Retry-After`` header and body."""

    at: float
    kind: str
    status: int
    retry_after: str | None
    body: str


class MixedLoad:
    """Threads sending learns and suggests to one served project (``url``: its
    ``…/projects/ID``) until `halt`: ``learners`` send `learn_body(record_id)` for a new
    record id each time (``TAG-CLIENT-N``), kept in ``acked`` once answered 200;
    ``suggesters`` send `suggest_body(n)`. Every answer is kept (`Answer`); a request
    without one (the server killed) is retried after a pause, as is one answered with an
    error."""

    def __init__(self, url: str, learn_body: Callable[[str], dict],
                 suggest_body: Callable[[int], dict], *, learners: int = 2,
                 suggesters: int = 1, tag: str = "load", timeout: float = 60):
        self.url, self.tag, self.timeout = url, tag, timeout
        self.learn_body, self.suggest_body = learn_body, suggest_body
        self.answers: list[Answer] = []
        self.acked: list[str] = []
        self.stop = threading.Event()
        kinds = ["learn"] * learners + ["suggest"] * suggesters
        self.threads = [threading.Thread(target=self._run, args=(kind, n), daemon=True)
                        for n, kind in enumerate(kinds)]
        for t in self.threads:
            t.start()

    def _run(self, kind: str, n: int) -> None:
        import httpx

        with httpx.Client(timeout=self.timeout) as client:
            k = 0
            while not self.stop.is_set():
                rid = f"{self.tag}-{n}-{k}"
                k += 1
                try:
                    if kind == "learn":
                        res = client.post(f"{self.url}/learn", json=self.learn_body(rid))
                    else:
                        res = client.post(f"{self.url}/suggest", json=self.suggest_body(k))
                except httpx.HTTPError:
                    time.sleep(0.05)
                    continue
                if kind == "learn" and res.status_code == 200:
                    self.acked.append(rid)
                self.answers.append(Answer(time.time(), kind, res.status_code,
                                           res.headers.get("retry-after"), res.text))
                if res.status_code != 200:
                    time.sleep(0.05)

    def count(self, kind: str, status: int | None = None, since: float = 0.0) -> int:
        """Answers of a kind (and status) since a time."""
        return sum(1 for a in list(self.answers) if a.kind == kind and a.at >= since
                   and (status is None or a.status == status))

    def statuses(self) -> dict[str, dict[int, int]]:
        """Kind → status → answers: what the users saw."""
        out: dict[str, dict[int, int]] = {}
        for a in list(self.answers):
            out.setdefault(a.kind, {}).setdefault(a.status, 0)
            out[a.kind][a.status] += 1
        return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}

    def halt(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(self.timeout)


@contextlib.contextmanager
def postgres() -> Iterator[PostgresCluster]:
    """A started `PostgresCluster`, closed afterwards."""
    with PostgresCluster() as cluster:
        yield cluster


__all__ = ["Answer", "MixedLoad", "PostgresCluster", "SmallDisk", "Unavailable", "free_port",
           "postgres"]
