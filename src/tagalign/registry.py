"""Named strategies of one kind (formats, recipes, encoders, engines …), selectable by name.

A `Registry` is a plain ``dict`` name → strategy (so ``R[name]`` and ``sorted(R)`` work as
before) with the things every registry of the package repeated: a decorator that adds an
entry, `lookup` with a one-line error that lists the known names, `names`, and lazy
entries: a name whose module registers it when first looked up, so that listing the
choices (``tagalign --help``) does not import torch.

    ENGINES: Registry[type[Engine]] = Registry("engine", lazy={"ray": "tagalign.batch.ray"})
    register_engine = ENGINES.register      # @register_engine class LocalEngine: name = "local"
    ENGINES.lookup("ray")                   # imports tagalign.batch.ray, which registers "ray"
    ENGINES.lookup("nope")                  # ValueError: unknown engine 'nope'; use one of [...]
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from tagalign.errors import InputError

T = TypeVar("T")
S = TypeVar("S")


class Registry(dict[str, T]):
    """``what`` names the kind in errors (``unknown {what} 'x'; use one of [...]``);
    ``choose`` replaces "use one of" and ``hint`` is appended (e.g. the form of arguments).
    ``lazy``: name → the module that registers it, imported on first lookup.

    A lazy name counts as known (``name in R``, `names`) before its module is imported;
    iterating the dict itself (``set(R)``, ``R.items()``) gives the loaded entries only.
    """

    def __init__(self, what: str, *, choose: str = "use one of", hint: str = "",
                 lazy: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.what, self.choose, self.hint = what, choose, hint
        self.lazy: dict[str, str] = dict(lazy or {})

    def register(self, obj: S) -> S:
        """Decorator: add ``obj`` (a class or object with a ``name``) under that name."""
        # S is the decorated object's own type (a T, a subclass of T): a TypeVar cannot be
        # bound to another, so mypy knows neither its ``name`` nor that it is a T
        name: Any = obj.name  # type: ignore[attr-defined]
        self[name] = obj  # type: ignore[assignment]
        return obj

    def register_as(self, name: str) -> Callable[[S], S]:
        """Decorator: add the decorated object (e.g. a loader function) under ``name``."""

        def deco(obj: S) -> S:
            self[name] = obj  # type: ignore[assignment]  # a T (see register)
            return obj

        return deco

    def add_lazy(self, name: str, module: str) -> None:
        """``name`` is registered by importing ``module``, which happens on first lookup."""
        self.lazy[name] = module

    def __missing__(self, name: str) -> T:
        module = self.lazy.get(name)
        if module is None:
            raise KeyError(name)
        importlib.import_module(module)
        if not dict.__contains__(self, name):
            raise KeyError(f"{module} did not register {self.what} {name!r}")
        return dict.__getitem__(self, name)

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in self.lazy

    def get(self, name: str, default: Any = None) -> Any:
        # not dict.get: that skips __missing__, so a lazy name would read as absent
        return self[name] if name in self else default  # noqa: SIM401

    def names(self) -> list[str]:
        """Every selectable name, loaded or lazy, sorted."""
        return sorted(set(self) | set(self.lazy))

    def lookup(self, name: str, *, shown: str | None = None) -> T:
        """The entry called ``name`` (importing its module if it is lazy); unknown: an
        `InputError` naming ``shown`` (default ``name``, e.g. the whole spec ``"nope:arg"``
        when only its prefix was looked up) and every known name."""
        if name not in self:
            raise InputError(f"unknown {self.what} {shown or name!r}; {self.choose} "
                             f"{self.names()}{self.hint}")
        return self[name]
