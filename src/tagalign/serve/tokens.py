"""API tokens of a server: a TOML file of names and token hashes (`tagalign tokens …`).

The file never holds a token, only its hash (``tagalign tokens add`` shows the token once)::

    # tagalign API tokens: names and SHA-256 hashes, never the tokens themselves
    [tokens."catalogue-plugin"]
    hash = "sha256:9f86d08…"
    created = 2025-06-01T10:00:00Z

A token is ``tga_`` and 43 characters of `secrets.token_urlsafe` (256 random bits; the
prefix lets secret scanners and people recognise one). Its hash is a plain SHA-256: a salt
and a slow key-derivation function (scrypt, Argon2) protect guessable passwords from
dictionary and precomputed-table attacks, but nobody can guess among 2^256 random tokens,
salted or not, and a fast hash keeps the check of every request cheap (scrypt would cost
tens of milliseconds per request). `TokenStore.verify` compares the hash with every
entry's in constant time (`hmac.compare_digest`, no early exit).

A server re-reads the file when it changes (its size, modification time or inode), so
``tagalign tokens add``/``remove`` take effect with the next request, without a restart
(they rewrite the file atomically: a reader sees the old file or the new one whole). Only a
file that reads and parses changes the tokens: one that became unreadable — no
permission, not UTF-8, not TOML, a table with an error, or deleted — leaves the tokens
read before in force, and the log says so once (and once again when the file is readable
again), not per request. Failing closed instead, as before issue 64, turned a slip of an
editor into every client's writes refused. A deleted file counts as unreadable, not as "no
tokens": ``tokens remove`` never deletes it, the start refuses a missing file as it
refuses a broken one, and a file gone for a moment (a volume remounted, a deployment
replacing it by delete and copy) should not lock every client out; to revoke every token,
remove each (or write an empty file, which is valid and holds none). The server starts
only with a file that reads and parses (`TokenStore.read`, one clear line otherwise). A
process that starts after the server did (a worker in place of one that died) while the
file cannot be read knows no version that is sure to be current — the one the server
started with may hold tokens removed since — so it refuses every token until the file
reads again, and serves all the same (`TokenStore.for_server`). Each process re-reads on
its own when it checks a token; a worker that checked none since a ``tokens remove``
keeps the version before it if the file breaks before that worker's next check. This
module imports no web framework: the CLI uses it too.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import threading
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tagalign.errors import ConflictError, InputError, NotFoundError
from tagalign.io import atomic_path

log = logging.getLogger(__name__)

#: the environment variable `tagalign serve --tokens-file` and `tagalign tokens` read
TOKENS_ENV = "TAGALIGN_TOKENS_FILE"
PREFIX = "tga_"
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
#: names are written into the file as quoted TOML keys and into the server log: a charset
#: that needs no escaping in either
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
HEADER = ("# tagalign API tokens (`tagalign tokens add|list|remove`): names and SHA-256\n"
          "# hashes of the tokens, never the tokens themselves.\n")


class TokensFileError(InputError):
    """The tokens file is not one `tagalign tokens` wrote (or was edited wrongly)."""


@dataclass(frozen=True)
class TokenEntry:
    """One token of the file: its name, the hash of the token, when it was made."""

    name: str
    hash: str
    created: datetime | None = None


def token_hash(token: str) -> str:
    """``sha256:`` and the hex digest of the token's UTF-8 bytes (see the module for why a
    plain hash suffices)."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise InputError(f"token name {name!r}: use 1 to 64 letters, digits and . _ @ - "
                         "(starting with a letter or digit)")
    return name


def parse(text: str, source: Path | str) -> dict[str, TokenEntry]:
    """The entries of a tokens file's text; `TokensFileError` names what is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TokensFileError(f"{source}: not a readable TOML file ({exc})") from None
    extra = sorted(set(data) - {"tokens"})
    if extra:
        raise TokensFileError(f"{source}: unknown key {extra[0]!r}; a tokens file holds "
                              "only [tokens.NAME] tables (`tagalign tokens add`)")
    tables = data.get("tokens", {})
    if not isinstance(tables, dict):
        raise TokensFileError(f"{source}: 'tokens' must be tables [tokens.NAME]")
    out = {}
    for name, table in tables.items():
        where = f"{source} [tokens.{name}]"
        if not NAME.match(name):
            raise TokensFileError(f"{where}: not a valid token name")
        if not isinstance(table, dict):
            raise TokensFileError(f"{where}: not a table")
        unknown = sorted(set(table) - {"hash", "created"})
        if unknown:
            raise TokensFileError(f"{where}: unknown key {unknown[0]!r} (known: hash, "
                                  "created)")
        digest, created = table.get("hash"), table.get("created")
        if not isinstance(digest, str) or not _HASH.match(digest):
            raise TokensFileError(f"{where} hash: expected \"sha256:\" and 64 hex digits")
        if created is not None and not isinstance(created, datetime):
            raise TokensFileError(f"{where} created: expected a date and time")
        out[name] = TokenEntry(name, digest, created)
    return out


def dump(entries: Iterable[TokenEntry]) -> str:
    """The file's text. Written by hand: the standard library reads TOML but does not
    write it, and these few lines (names and hashes checked against a safe charset) need no
    TOML writer as a dependency."""
    lines = [HEADER]
    for e in entries:
        lines.append(f'[tokens."{check_name(e.name)}"]')
        if not _HASH.match(e.hash):
            raise ValueError(f"not a token hash: {e.hash!r}")
        lines.append(f'hash = "{e.hash}"')
        if e.created is not None:
            lines.append(f"created = {e.created.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}")
        lines.append("")
    return "\n".join(lines)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a changed file apart (an atomic rewrite changes the inode)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class TokenStore:
    """The tokens of one file: read, changed and written by the CLI, verified by a server.

    ``TokenStore.read(path)`` for a file that must exist; ``missing_ok=True`` starts an
    empty one (`add` creates the file, mode 0600)."""

    def __init__(self, path: Path | str, entries: dict[str, TokenEntry] | None = None):
        self.path = Path(path)
        self._entries: dict[str, TokenEntry] = dict(entries or {})
        self._stamp = _stamp(self.path)
        self._lock = threading.Lock()
        #: the file could not be read when it last changed: the entries are older
        self._failing = False

    @classmethod
    def read(cls, path: Path | str, missing_ok: bool = False) -> TokenStore:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            if missing_ok:
                return cls(path)
            raise NotFoundError(f"no tokens file at {path}; create one with `tagalign "
                                f"tokens add NAME --file {path}`") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise TokensFileError(f"{path}: cannot read the tokens file ({exc})") from None
        if os.name == "posix" and path.stat().st_mode & 0o077:
            log.warning("%s is readable by other users (chmod 600 it): it holds only "
                        "hashes, but the names of who may write", path)
        return cls(path, parse(text, path))

    @classmethod
    def for_server(cls, path: Path | str) -> TokenStore:
        """`read` for a serving process built after the server started (the module: why):
        a file that cannot be read now gives a store that refuses every token until the
        file reads again, and one log line, instead of an error."""
        try:
            return cls.read(path)
        except (NotFoundError, TokensFileError) as exc:
            log.error("%s; every token is refused by this process until the file can be "
                      "read", exc)
        store = cls(path)
        store._failing = True
        return store

    # -- the CLI's side ----------------------------------------------------------------
    @property
    def entries(self) -> list[TokenEntry]:
        return list(self._entries.values())

    def add(self, name: str, now: datetime | None = None) -> str:
        """A new random token named ``name``, its hash saved; the token itself is
        returned, once, and stored nowhere."""
        check_name(name)
        if name in self._entries:
            raise ConflictError(f"{self.path}: a token named {name!r} exists; remove it "
                                f"first (`tagalign tokens remove {name}`) or pick another name")
        token = new_token()
        created = (now or datetime.now(UTC)).replace(microsecond=0)
        self._entries[name] = TokenEntry(name, token_hash(token), created)
        self.save()
        return token

    def remove(self, name: str) -> None:
        if name not in self._entries:
            known = ", ".join(self._entries) or "none"
            raise NotFoundError(f"{self.path}: no token named {name!r}; known: {known}")
        del self._entries[name]
        self.save()

    def save(self) -> None:
        """Write the file atomically, readable and writable by its owner only."""
        with atomic_path(self.path) as tmp:
            os.chmod(tmp, 0o600)  # before the hashes are in it
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(dump(self._entries.values()))
        self._stamp = _stamp(self.path)

    # -- the server's side -------------------------------------------------------------
    def verify(self, token: str) -> str | None:
        """The name of the entry ``token`` belongs to, else None. Every entry's hash is
        compared, in constant time, whether one matched or not: how long this takes
        tells nothing about the token."""
        digest = token_hash(token)
        found = None
        for entry in self._current():
            if hmac.compare_digest(digest, entry.hash):
                found = entry.name
        return found

    def _current(self) -> list[TokenEntry]:
        """The entries, re-read when the file changed since they were read."""
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return list(self._entries.values())
        with self._lock:
            if stamp != self._stamp:
                self._entries = self._reread()
                self._stamp = stamp
            return list(self._entries.values())

    def _reread(self) -> dict[str, TokenEntry]:
        """The file's entries; when it cannot be read, decoded or parsed, the entries read
        before (the module: why), logged once until it reads again."""
        try:
            entries = parse(self.path.read_text(encoding="utf-8"), self.path)
        except (OSError, UnicodeDecodeError, InputError) as exc:
            if not self._failing:
                log.error("tokens file %s unreadable, the %d tokens read before still count "
                          "until it is fixed: %s", self.path, len(self._entries), exc)
            self._failing = True
            return self._entries
        if self._failing:
            log.info("tokens file %s readable again: %d tokens", self.path, len(entries))
        else:
            log.info("tokens file %s re-read: %d tokens", self.path, len(entries))
        self._failing = False
        return entries


__all__ = ["PREFIX", "TOKENS_ENV", "TokenEntry", "TokenStore", "TokensFileError", "dump",
           "new_token", "parse", "token_hash"]
