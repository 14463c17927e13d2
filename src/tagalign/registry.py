"""Named strategies of one kind (formats, recipes, encoders, engines …), selectable by name.

A `Registry` is a plain ``dict`` name → strategy (so ``name in R``, ``R[name]`` and
``sorted(R)`` work as before) with the three things every registry of the package repeated:
a decorator that adds an entry, `lookup` with a one-line error that lists the known names,
and `names`.

    ENGINES: Registry[type[Engine]] = Registry("engine")
    register_engine = ENGINES.register      # @register_engine class LocalEngine: name = "local"
    ENGINES.lookup("nope")                  # ValueError: unknown engine 'nope'; use one of [...]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from tagalign.errors import InputError

T = TypeVar("T")
S = TypeVar("S")


class Registry(dict[str, T]):
    """``what`` names the kind in errors (``unknown {what} 'x'; use one of [...]``);
    ``choose`` replaces "use one of" and ``hint`` is appended (e.g. the form of arguments)."""

    def __init__(self, what: str, *, choose: str = "use one of", hint: str = "") -> None:
        super().__init__()
        self.what, self.choose, self.hint = what, choose, hint

    def register(self, obj: S) -> S:
        """Decorator: add ``obj`` (a class or object with a ``name``) under that name."""
        name: Any = obj.name  # type: ignore[attr-defined]
        self[name] = obj  # type: ignore[assignment]
        return obj

    def register_as(self, name: str) -> Callable[[S], S]:
        """Decorator: add the decorated object (e.g. a loader function) under ``name``."""

        def deco(obj: S) -> S:
            self[name] = obj  # type: ignore[assignment]
            return obj

        return deco

    def names(self) -> list[str]:
        return sorted(self)

    def lookup(self, name: str, *, shown: str | None = None) -> T:
        """The entry called ``name``; unknown: a ValueError naming ``shown`` (default
        ``name``, e.g. the whole spec ``"nope:arg"`` when only its prefix was looked up)."""
        try:
            return self[name]
        except KeyError:
            raise InputError(f"unknown {self.what} {shown or name!r}; {self.choose} "
                             f"{self.names()}{self.hint}") from None
