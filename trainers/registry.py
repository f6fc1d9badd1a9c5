"""Name -> implementation registries for the parts of training users pick in config: objectives ("grpo"; "nft"
later), rollout strategies ("flat"; "tree" later), reward balancers ("group_norm_weighted", "weighted_sum") and
velocity penalties. Any entry can also be given as a ``package.module:attr`` path to the user's own code."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from imgalign.config import import_user_module
from imgalign.plugins import refuse_taken_name

T = TypeVar("T")


def call_problem(obj: Any, n_args: int) -> str:
    """Why a user's `obj` cannot be called with `n_args` positional arguments (Python's own words), or "" when it
    can, or when its signature cannot be inspected (the call itself then says)."""
    if not callable(obj):
        return f"it is of type {type(obj).__name__}, not callable"
    try:
        inspect.signature(obj).bind(*[None] * n_args)
    except TypeError as e:
        return str(e)
    except ValueError:  # no inspectable signature (some builtins)
        pass
    return ""


class Registry(Generic[T]):
    def __init__(
        self, kind: str, builtin_modules: tuple[str, ...] = (), plural: str = "", call: str = ""
    ) -> None:
        self.kind = kind
        # how one is called, "name(a, b)": a user's `module:attr` that cannot take those arguments is refused when
        # the config is checked, before any model loads (was a TypeError traceback at the first training step)
        self.call = call
        self.plural = plural or kind + "s"  # "rollout strategies", not "strategys"
        self._items: dict[str, T] = {}
        self._builtin = builtin_modules

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: make `obj` selectable by `name`. A name another module registered is refused
        (:func:`imgalign.plugins.refuse_taken_name`); the same module registering it again replaces its own."""

        def deco(obj: T) -> T:
            # the built-ins first, so a plug-in cannot take one of their names
            if getattr(obj, "__module__", None) not in self._builtin:
                self._load_builtin()
            refuse_taken_name(self.kind, name, self._items.get(name), obj)
            self._items[name] = obj
            return obj

        return deco

    def _load_builtin(self) -> None:
        for m in self._builtin:
            try:
                importlib.import_module(m)
            except ModuleNotFoundError as e:  # an optional built-in not present in this checkout
                if e.name != m:
                    raise

    def names(self) -> list[str]:
        self._load_builtin()
        return sorted(self._items)

    def get(self, name: str) -> T:
        self._load_builtin()
        if name in self._items:
            return self._items[name]
        if ":" in name:
            mod, attr = name.split(":", 1)
            module = import_user_module(mod, f"{self.kind} {name!r}")
            try:
                obj = getattr(module, attr)
            except AttributeError as e:
                raise ValueError(f"cannot import {self.kind} {name!r}: {e}") from None
            self._check_call(name, obj)
            return obj
        raise ValueError(
            f"unknown {self.kind} {name!r}; valid {self.plural}: {', '.join(self.names())} "
            "(or a 'package.module:attr' path to your own)"
        )

    def _check_call(self, name: str, obj: Any) -> None:
        """Refuse a user's `obj` that cannot be called as ``self.call`` says, naming it and the call."""
        if not self.call:
            return
        n_args = len([a for a in self.call.split("(", 1)[1].rstrip(")").split(",") if a.strip()])
        problem = call_problem(obj, n_args)
        if problem:
            raise ValueError(f"{self.kind} {name!r} cannot be called as {self.call}: {problem}")

    def check(self, name: str) -> None:
        """Raise the `get` error without keeping the result (config validation)."""
        self.get(name)


OBJECTIVES: Registry[Any] = Registry("objective", ("imgalign.trainers.objectives", "imgalign.trainers.nft"))
ROLLOUTS: Registry[Any] = Registry(
    "rollout strategy",
    ("imgalign.trainers.rollout", "imgalign.trainers.tree"),
    "rollout strategies",
    "strategy(ctx, prompts, metadata, sample_ids, group_ids)",
)
BALANCERS: Registry[Any] = Registry(
    "reward balancer", ("imgalign.trainers.rewarding", "imgalign.trainers.balance")
)
# the penalties are registered in objectives.py (vnorm.py holds the inflation measurements)
PENALTIES: Registry[Any] = Registry(
    "velocity penalty",
    ("imgalign.trainers.objectives", "imgalign.trainers.vnorm"),
    "velocity penalties",
    "penalty(v_theta, v_ref)",
)
