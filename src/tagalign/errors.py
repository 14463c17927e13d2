"""The one error base of tagalign (as Annif's single ``AnnifException``).

Every error the package raises on purpose is a `TagalignError`, subclassed by meaning, not
by module: the CLI maps them to one exit code and message each (`tagalign.cli.app`), both
REST APIs to one HTTP status each (`tagalign.serve`). A module defines its own subclass
only when callers need to tell it apart; the meaning (``exit_code``, ``http_status``) comes
from the base it picks here.

The bases also derive from the built-in exception a caller would expect (`ValueError` for
bad input, `PermissionError` for a refusal, ...), so code written against the built-ins
keeps working.

Exit codes stay the ones the CLI always had (tests and docs promise them): 1 for a failed
command whatever the reason, 2 for a usage error (an option or parameter value refused before
any work starts, as click's own usage errors), 130 for Ctrl-C. The meaning is in the class and
in ``http_status``; the message says what to do.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from typing import TypeVar


class TagalignError(Exception):
    """Base of every error tagalign raises on purpose; ``str(exc)`` is the message a user
    reads (what went wrong and what to do)."""

    #: the CLI's exit code for this kind of error (1: the command failed; 2: usage, see
    #: `UsageError`)
    exit_code: int = 1
    #: the HTTP status both REST APIs answer with
    http_status: int = 500


class InputError(TagalignError, ValueError):
    """Bad input from the user: a file, a record, an option or a parameter value."""

    http_status = 400


class UsageError(InputError):
    """An option or parameter value refused before any work starts (exit status 2, as
    click's usage errors and argparse's)."""

    exit_code = 2


class NotFoundError(TagalignError, LookupError):
    """Something named does not exist (a project, a file, a queue item)."""

    http_status = 404


class MissingFileError(NotFoundError, FileNotFoundError):
    """A file or folder the user named does not exist. The message names it; ``path`` is
    it. A `FileNotFoundError` too, as the loaders raised before."""

    def __init__(self, message: str, path: object = None):
        super().__init__(message)
        self.path = path

    def __str__(self) -> str:  # OSError's own would print ``[Errno None] …``
        return str(self.args[0]) if self.args else ""


class UnreadableFileError(InputError, OSError):
    """A file the user named exists but cannot be read (no permission, a folder where a
    file belongs, not UTF-8). The message names it; ``path`` is it. An `OSError` too, so
    code that caught the built-in's failure still does."""

    def __init__(self, message: str, path: object = None):
        super().__init__(message)
        self.path = path

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def file_error(path: object, exc: BaseException, what: str | None = None) -> TagalignError:
    """The package's error for reading ``path`` failing with ``exc`` (an `OSError` or a
    decoding error): `MissingFileError` when it does not exist, else `UnreadableFileError`.
    ``what`` names the file for the user (``--exclude``, ``predictions``): the message is
    ``cannot read WHAT PATH: REASON``."""
    name = f"{what} {path}" if what else str(path)
    cls = MissingFileError if isinstance(exc, FileNotFoundError) else UnreadableFileError
    return cls(f"cannot read {name}: {exc}", path)


#: the errnos of a full disk: no space left (ENOSPC), the user's quota used up (EDQUOT)
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc``, then what it was raised from (its ``__cause__``, else its ``__context__``),
    down the chain."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _no_space_cause(exc: BaseException | None) -> OSError | None:
    """The `OSError` of a full disk that ``exc`` is or was raised from, else None."""
    return next((e for e in _chain(exc)
                 if isinstance(e, OSError) and e.errno in NO_SPACE_ERRNOS), None)


def is_no_space(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was raised from, a full disk (ENOSPC) or a used-up quota
    (EDQUOT)."""
    return _no_space_cause(exc) is not None


class NoSpaceError(TagalignError, OSError):
    """A write failed because the disk (or the user's quota) is full. The message names the
    path and what to do: ``no space left on device writing PATH: free space and RERUN``
    (``rerun``: how the command continues, e.g. ``rerun with --resume``); ``detail`` says
    more (a quota, the bytes needed). An `OSError` with ``errno`` ENOSPC (or EDQUOT) too,
    so code that caught the built-in still does. HTTP 507 Insufficient Storage."""

    http_status = 507

    def __init__(self, path: object, rerun: str = "rerun", detail: str | None = None,
                 code: int | None = errno.ENOSPC):  # OSError.errno's type
        self.path, self.rerun, self.detail = path, rerun, detail
        more = f" ({detail})" if detail else ""
        super().__init__(f"no space left on device writing {path}{more}: free space and "
                         f"{rerun}")
        self.errno, self.strerror, self.filename = code, "No space left on device", str(path)

    def __str__(self) -> str:  # OSError's own would print ``[Errno 28] …``
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple:  # its fields, not the message (pickle, processes)
        return type(self), (self.path, self.rerun, self.detail, self.errno)

    @classmethod
    def of(cls, exc: BaseException, path: object = None, rerun: str | None = None
           ) -> NoSpaceError:
        """The `NoSpaceError` for ``exc`` (one of a full disk: `is_no_space`): the one it
        was raised from, with ``path`` and ``rerun`` when given, else one naming ``path``,
        else the file the `OSError` names."""
        seen = next((e for e in _chain(exc) if isinstance(e, NoSpaceError)), None)
        if seen is not None:
            return cls(seen.path if path is None else path, rerun or seen.rerun, seen.detail,
                       seen.errno)
        cause = _no_space_cause(exc)
        code = cause.errno if cause is not None else errno.ENOSPC
        if path is None and cause is not None:
            path = cause.filename
        return cls("a file" if path is None else path, rerun or "rerun",
                   "disk quota exceeded" if code == errno.EDQUOT else None, code)


class NotTrainedError(TagalignError):
    """A project or model was asked for predictions before it was trained."""

    http_status = 503

    def __init__(self, what: object = "the project", hint: str = "run `tagalign train`"):
        super().__init__(f"{what} is not trained yet; {hint}")


T = TypeVar("T")


def trained(part: T | None, what: object, hint: str = "fit or load it first") -> T:
    """``part``, what a model learns (set by its ``fit`` or ``load``), or `NotTrainedError`
    naming ``what`` while it is None: the model is used before it was trained."""
    if part is None:
        raise NotTrainedError(what, hint)
    return part


class ModelFormatError(TagalignError, ValueError):
    """A saved model was written by another, incompatible format version of tagalign (or
    is incomplete): the model must be retrained. Worded like scikit-learn's
    ``InconsistentVersionWarning``: which version saved it, which this one reads. A
    `ValueError` too, as the loaders raised before."""

    http_status = 503


class UnauthorizedError(TagalignError, PermissionError):
    """The request names nobody: it needs credentials (an API token) it did not send."""

    http_status = 401


class PermissionDeniedError(TagalignError, PermissionError):
    """The action is not allowed to whoever asks (learning switched off, a token)."""

    http_status = 403


class ConflictError(TagalignError):
    """The action clashes with what is there (an existing project or output, a lock, a
    model loaded read-only)."""

    http_status = 409


class MissingExtraError(TagalignError, ImportError):
    """A command needs an optional part of tagalign that is not installed: one of the
    package's extras (pyproject.toml, ``[project.optional-dependencies]``). The command
    fails (exit status 1) and says which extra to install; everything else works without
    it. An `ImportError` too, as the failed import it stands for."""

    def __init__(self, needed_by: str, package: str, extra: str):
        self.needed_by, self.package, self.extra = needed_by, package, extra
        super().__init__(f"{needed_by} needs {package}: pip install 'tagalign[{extra}]'",
                         name=package)

    def __reduce__(self) -> tuple:  # the three fields, not the message (pickle, processes)
        return type(self), (self.needed_by, self.package, self.extra)

    @classmethod
    def check(cls, module: str, needed_by: str, extra: str, package: str | None = None
              ) -> None:
        """Raise now, before any work starts, when ``module`` is not installed (found
        without importing it: a command that has not begun yet pays nothing for it)."""
        import importlib.util

        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:  # a dotted name whose parent package is missing
            found = False
        if not found:
            raise cls(needed_by, package or module.split(".")[0], extra)
