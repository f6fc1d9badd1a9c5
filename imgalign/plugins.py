"""The user's own code (a ``package.module:attr`` reward, balancer, objective or penalty): an error it raises of a
kind `imgalign` prints as one line without a traceback (:mod:`imgalign.cli`) is raised naming it; that
line said only the error's text (``imgalign train: error: difficulty`` for a KeyError). And the one rule of the
registries (rewards' and the trainers'): a name another module registered is not taken."""

from __future__ import annotations

from typing import Any

# the errors imgalign.cli prints as one line, without a traceback
ONE_LINE_ERRORS = (ValueError, KeyError, OSError)


def raised_by_plugin(what: str, e: Exception, hint: str = "") -> ValueError:
    """`e`, raised inside the user's plug-in `what` (``reward 'judge'``), as a ValueError naming the plug-in and the
    error's type (the original stays its cause: ``imgalign -v`` shows its traceback)."""
    # a bare KeyError() or ValueError() has no text: "raised KeyError: ; fix it there" read as a cut message
    text = (repr(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)) or "(no message)"
    return ValueError(
        f"{what} raised {type(e).__name__}: {text}{hint}; fix it there (imgalign -v ... shows its traceback)"
    )


def call_plugin(what: str, name: str, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, where `fn` is what the setting `name` stands for (described as `what`, e.g. ``reward balancer
    'pkg.mod:fn'``); a one-line error of a ``module:attr`` plug-in is raised naming it (a built-in's message is its
    own)."""
    try:
        return fn(*args, **kwargs)
    except ONE_LINE_ERRORS as e:
        if ":" not in name:
            raise
        raise raised_by_plugin(what, e) from e


def refuse_taken_name(kind: str, name: str, old: Any, new: Any, described: str = "") -> None:
    """Raise when `new` would take `name` from `old` (None: the name is free), registered by another module: a
    plug-in module registering ``clip`` or ``grpo`` replaced the built-in for the rest of the process, silently (a
    later ``imgalign score --reward clip`` in a notebook scored with the plug-in, in a column named ``clip``). The
    same module registering it again (imported again, a notebook cell run twice) replaces its own. `described` is
    the old one's description, shown after its module."""
    if old is None:
        return
    where, module = getattr(old, "__module__", None), getattr(new, "__module__", None)
    if where != module:
        raise ValueError(
            f"{kind} name {name!r} is already registered by {where}{f' ({described})' if described else ''}; "
            f"register this one ({getattr(new, '__qualname__', new)!r} of {module}) under another name, "
            f"e.g. 'my_{name}'"
        )
