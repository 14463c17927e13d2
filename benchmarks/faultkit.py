"""Faults to inject, for the fault tests and `benchmarks/faults.py`: a throwaway PostgreSQL
cluster that can be stopped and restarted, and a small filesystem that fills up.

Both are real: Debian's PostgreSQL binaries (`make postgres` installs them) run as the
``postgres`` user when we are root (PostgreSQL refuses to run as root), and the small
filesystem is a size-limited tmpfs, which only root may mount. Each helper raises
`Unavailable` with the reason where the machine cannot do it, so a test can skip saying why.
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
from collections.abc import Iterator
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
    ``postgresql://`` URL of its ``postgres`` database."""

    def __init__(self) -> None:
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
        self.root = Path(tempfile.mkdtemp(prefix="tagalign-pg-"))
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
    gives it back. Needs root (mount)."""

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
        """Take every free block (the filesystem is full afterwards)."""
        with open(self.filler, "ab", buffering=0) as fh, contextlib.suppress(OSError):
            while fh.write(b"\0" * 4096):  # until ENOSPC
                pass

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)

    def __enter__(self) -> SmallDisk:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def postgres() -> Iterator[PostgresCluster]:
    """A started `PostgresCluster`, closed afterwards."""
    with PostgresCluster() as cluster:
        yield cluster


__all__ = ["PostgresCluster", "SmallDisk", "Unavailable", "free_port", "postgres"]
