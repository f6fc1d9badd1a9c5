"""Typed dataclass configs: YAML files plus ``--set key=value`` overrides, validated before anything heavy loads.

Every config is a (possibly nested) dataclass whose fields carry ``metadata={"help": ...}``. :func:`load_config`
merges a YAML mapping and dotted overrides into it; an unknown key raises :class:`ConfigError` listing the valid
keys at that level; values are coerced to the field's annotated type; then every dataclass's ``validate()`` (if it
defines one) runs, so invalid combinations fail with a message that says what to change.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import logging
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")
log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A config file or override that does not fit the schema."""


MAX_SEED = 2**63 - 1


def check_seed(name: str, value: int) -> None:
    """Raise a ConfigError naming seed `name` unless it is an integer from 0 to 2**63 - 1. A negative seed aliased
    another silently (Python's ``random`` takes its absolute value, torch wraps it modulo 2**64), and -1 does not
    mean "a random seed" here as it does in some tools."""
    if not 0 <= value <= MAX_SEED:
        random = "; -1 draws no random seed here" if value == -1 else ""
        raise ConfigError(
            f"{name} must be an integer from 0 to 2**63 - 1 (got {value}{random}): give one, e.g. 0"
        )


def import_user_module(module: str, what: str) -> types.ModuleType:
    """Import the module of a user's ``module:attr`` (`what` names it in messages: ``reward 'pkg.mod:fn'``).

    A module that does not import is a ValueError saying why and what to do: not found (put its folder on the import
    path), a package it imports that is not installed, or an error raised while it runs (a NameError, a
    SyntaxError, a file it opens that is missing), with the file and line of the user's code; ``-v`` shows the
    traceback. Without this a NameError was a traceback and an OSError read like imgalign's own missing file."""
    import importlib
    import sys
    import traceback

    loaded = sys.modules.get(module)
    # in one process (a notebook), a second command ran the plug-in as it was when first imported: a fix to its file
    # was silently not used
    stamp = _file_stamp(loaded) if loaded is not None else None
    changed = loaded is not None and _USER_MODULES.get(module, stamp) != stamp
    if changed and stamp is None:  # (it said "put the folder holding it on the import path")
        raise ValueError(
            f"cannot import {what}: {module}'s file {loaded.__file__} is gone since this process imported it "
            "(deleted or moved); put it back, or put the folder that now holds it on the import path"
        )
    try:
        if changed:
            log.info("reloading %s: its file changed since this process imported it", module)
            loaded = importlib.reload(loaded)
        else:
            loaded = importlib.import_module(module)
        file = getattr(loaded, "__file__", None)
        # (imgalign's own are never reloaded)
        if module in _USER_MODULES or (file and not _library_file(file)):
            _USER_MODULES[module] = _file_stamp(loaded)
        return loaded
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        if e.name == top:  # the `imgalign` command does not import from the working folder (`python -m` does)
            hint = (
                f"; put the folder holding {top!r} on the import path (PYTHONPATH=FOLDER imgalign ...) or pip "
                "install its package"
            )
        elif e.name and e.name.split(".")[0] == top and not module.startswith(e.name + "."):
            # a module of the user's own package: "pip install it" sent them looking for a package
            hint = f"; {module} imports {e.name!r}, which package {top!r} does not have: check that name"
        elif e.name and not (module == e.name or module.startswith(e.name + ".")):
            hint = f"; {module} imports {e.name!r}, which is not installed here: pip install it"
        else:
            hint = ""
        raise ValueError(f"cannot import {what}: {e}{hint}") from None
    except Exception as e:  # noqa: BLE001 - any error the user's module raises while it runs
        text = str(e)
        if isinstance(e, SyntaxError):  # its text already ends in (file, line N)
            text, where = e.msg, f" ({e.filename}, line {e.lineno})"
        else:
            frames = [
                f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<frozen")
            ]
            # the user's line, not the library's line their code called (torch's, numpy's, imgalign's)
            frames = [f for f in frames if not _library_file(f.filename)] or frames
            where = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
        raise ValueError(
            f"cannot import {what}: importing {module} raised {type(e).__name__}: {text}{where}; fix that module "
            f"(python -c 'import {module}' shows the traceback)"
        ) from e


# a user's plug-in module imported by import_user_module -> its file's (modification time, size) then
_USER_MODULES: dict[str, tuple[int, int] | None] = {}


def _file_stamp(module: types.ModuleType) -> tuple[int, int] | None:
    """(modification time in ns, size) of `module`'s file, or None when it has none (or it is gone)."""
    file = getattr(module, "__file__", None)
    try:
        st = os.stat(file) if file else None
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size) if st else None


def _library_file(filename: str) -> bool:
    """Whether `filename` is part of Python, an installed package or imgalign itself, not a user's own code."""
    import site
    import sys
    import sysconfig

    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    roots.update(
        str(Path(m.__file__).parent)
        for name, m in list(sys.modules.items())
        if name.split(".")[0] == "imgalign" and getattr(m, "__file__", None)
    )
    path = str(Path(filename).resolve())
    return any(path.startswith(str(Path(r).resolve()) + os.sep) for r in roots)


def field(  # noqa: A002 -- `help=` mirrors argparse and the dataclass metadata key
    default: Any = dataclasses.MISSING,
    *,
    help: str,  # noqa: A002
    default_factory: Any = dataclasses.MISSING,
    reward_specs: bool = False,
    also: tuple[str, ...] = (),
) -> Any:
    """A dataclass field with help text (shown by ``--print-config`` and in errors). ``reward_specs``: a list of
    reward specs, whose ``key=value`` options stay with their spec when the list is split at commas. ``also``: names
    other tools give this key, which an unknown-key error points from to this one."""
    metadata = {"help": help, "reward_specs": reward_specs, "also": also}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


class _Override(str):
    """The text of a ``--set`` value (or of an unquoted YAML scalar) as typed; ``parsed`` is what YAML made of it. A
    ``str`` field takes the text (``--set log.output_dir=1e-4`` is a folder named 1e-4, not 0.0001), other fields
    the parsed value."""

    parsed: Any

    def __repr__(self) -> str:  # in an error's list or mapping: the value as YAML read it ({'a': 1})
        return repr(self.parsed)


def _join_options(pieces: list[str]) -> list[str]:
    """Items of a list of strings split at commas, with a reward spec's options kept with it: a piece that looks
    like ``key=value`` continues the item before it (``clip:model=X`` and ``pretrained=openai`` are one item)."""
    items: list[str] = []
    for piece in (p.strip() for p in pieces):
        if not piece:
            continue
        head = piece.split("=", 1)[0]
        if items and "=" in piece and ":" not in head and " " not in head:
            items[-1] += "," + piece
        else:
            items.append(piece)
    return items


def split_top_level(text: str) -> list[str]:
    """``a=1,b="x, y",c=[1,2]`` -> ``['a=1', 'b="x, y"', 'c=[1,2]']``: commas inside quotes or brackets belong to
    the value. An unclosed quote or bracket (``e=[x``) closes nothing: every comma splits then."""
    items, cur, quote, depth = [], [], "", 0
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"" and (not cur or "".join(cur).rstrip().endswith("=")):  # a quote opening a value
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    items.append("".join(cur))
    return items if not (quote or depth) else text.split(",")


def _split_list_text(text: str) -> list[str]:
    """``a,b`` -> ["a", "b"], keeping a reward spec's options with it (:func:`_join_options`) and a comma inside
    an option's quotes or brackets with its option (``vlm_loglik:query="a, b"`` is one spec)."""
    return _join_options(split_top_level(text))


def _text_items(values: list[Any]) -> list[str]:
    """The items of a YAML list given for a list of strings, as the user wrote them: YAML reads an unquoted
    ``[geneval: mode=strict]`` as a one-key mapping and ``[clip:model=X,weight=3]`` as two items; both are one
    reward spec. A reward's options written as a block mapping under its name (``- geneval:`` then ``mode:
    strict``) are that spec too (``geneval:mode=strict``); they were refused as an option "{'mode': 'strict'}"."""

    def scalar(v: Any) -> str | None:
        if isinstance(v, bool) or v is None:
            return {True: "true", False: "false", None: "null"}[v]
        return str(v) if isinstance(v, (str, int, float)) else None

    def text(v: Any) -> Any:
        if isinstance(v, dict) and len(v) == 1:
            ((k, val),) = v.items()
            opts = {o: scalar(x) for o, x in val.items()} if isinstance(val, dict) and val else None
            if opts is not None and all(isinstance(o, str) and x is not None for o, x in opts.items()):
                # the block form `- geneval:` with `mode: strict` under it: geneval:mode=strict
                return f"{k}:" + ",".join(f"{o}={x}" for o, x in opts.items())
            return f"{k}:" if val is None else f"{k}: {val}"
        return v

    items = [text(v) for v in values]
    if not all(isinstance(v, str) for v in items):
        return items  # the item's own type error names it
    return _join_options(items)


# the words YAML 1.1 (PyYAML) reads as true and as false when unquoted, in any of its casings
_YAML_BOOL_WORDS = {True: ("yes", "on", "true"), False: ("no", "off", "false")}


def not_a_mapping(key: str, tp: type, value: Any) -> str:
    """Why `value` is no section `key` of the dataclass `tp`: its keys named, and for a list of words where the
    section has a list of reward specs (``rewards: [clip]``), that key (``rewards.names``)."""
    fields = dataclasses.fields(tp)
    specs = [f.name for f in fields if f.metadata.get("reward_specs")]
    words = isinstance(value, list) and value and all(isinstance(v, str) for v in value)
    hint = (
        f"; did you mean {key}.{specs[0]}: {value!r} (a list inside the section)?" if words and specs else ""
    )
    names = ", ".join(f.name for f in fields)
    return f"{key}: expected a mapping of {tp.__name__} fields, got {value!r} (its keys: {names}){hint}"


def _scalar_item(item: str, text: str, key: str) -> Any:
    """One comma-separated `item` of the list `text` given for `key` (``1,2``), as YAML reads it; an item YAML cannot
    read (``0,[3``: an unclosed bracket) is named, not PyYAML's traceback."""
    try:
        return yaml.load(item, Loader=_UniqueKeyLoader)  # its reading: 1,2024-13-45 names the item
    except yaml.YAMLError:
        raise ConfigError(
            f"{key}: item {item!r} of {text!r} is not a value; write the list as [1, 2] or 1,2 (numbers only)"
        ) from None


def _coerce(value: Any, tp: Any, key: str, specs: bool = False) -> Any:
    """Coerce a YAML value to the annotated type `tp` (dataclasses, Optional, list/tuple/dict, scalars, Literal).
    ``specs``: the field is a list of reward specs (:func:`field`'s ``reward_specs``)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    overridden = isinstance(value, _Override)
    if overridden:
        # YAML's reading when it is a string (it strips quotes: --set log.output_dir='runs/a b'), else the text as
        # typed (YAML made 1e-4 a float, 12:30 the integer 750, "q: x" a mapping)
        text = value.parsed if isinstance(value.parsed, str) else str(value).strip()
        if tp is str or (origin is typing.Literal and text in args):
            return text
        if origin in (list, tuple) and (args[0] if args else Any) is str:
            if text.startswith("["):
                if isinstance(value.parsed, list):
                    # each item as a file's list item reads (a null or mapping item is refused, not 'None')
                    items = _text_items(value.parsed) if specs else value.parsed
                    listed = [_coerce(v, str, f"{key}[{i}]") for i, v in enumerate(items)]
                    return listed if origin is list else tuple(listed)
                # a regular expression's backslash is an escape inside YAML's double quotes ("a\.b" is refused)
                quoting = (
                    f"in single quotes, which keep backslashes as typed: {key}=\"['a\\.b', 'c{{1,2}}']\""
                    if "\\" in text
                    else f'e.g. {key}=\'["a", "b"]\''
                )
                raise ConfigError(
                    f"{key}: {text!r} is not a valid YAML list; quote items with special characters, {quoting}"
                )
            split = _split_list_text(text) if specs else [p.strip() for p in text.split(",") if p.strip()]
            return split if origin is list else tuple(split)
        # a union's members each read the override themselves (a str member keeps the text)
        if origin not in (typing.Union, types.UnionType):
            value = value.parsed
        # YAML 1.1 reads a leading 0 as octal: `max_steps: 010` was 8
        if (
            tp in (int, float)
            and re.fullmatch(r"[-+]?0[0-7_]+", text)
            and int(text.replace("_", "")) != value
        ):
            raise ConfigError(
                f"{key}: YAML reads {text} as the octal number {value}; write {int(text.replace('_', ''))} "
                "without the leading 0"
            )
        # YAML 1.1 reads 1:30 as the base-60 number 90: `time_budget_min: 1:30` was 90 minutes, not 1.5
        if tp in (int, float) and ":" in text and isinstance(value, (int, float)):
            raise ConfigError(
                f"{key}: YAML reads {text} as the base-60 number {value}; write a plain number ({value} if that is "
                "what you meant)"
            )
    if tp in (int, float):
        _refuse_out_of_range(text if overridden else value, key)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if (value is None or (isinstance(value, _Override) and value.parsed is None)) and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, key, specs)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{key}: cannot be {value!r}")
    # YAML's empty value, ~ or null, for a field that cannot be None (a str field took it as "None")
    if value is None:
        # a section in a file whose keys are all commented out: its defaults (--set eval=null resets nothing)
        if dataclasses.is_dataclass(tp) and not overridden:
            return _build(tp, {}, prefix=key + ".")
        remove = "the item" if key.endswith("]") else f"{key} to keep its default"
        raise ConfigError(
            f"{key} has no value (YAML reads an empty value, ~ or null as null): give one, or remove {remove}"
        )
    if origin is typing.Literal:
        if isinstance(value, bool) and value not in args:
            # YAML 1.1 reads an unquoted yes/no, on/off, true/false as a bool (mixed_precision: no): take the field's
            # one choice that YAML reads as that bool (so `off` and `false` are "no" there too)
            words = [a for a in args if isinstance(a, str) and a.lower() in _YAML_BOOL_WORDS[value]]
            if len(words) > 1:
                raise ConfigError(
                    f"{key}: YAML reads an unquoted {' or '.join(words)} as {str(value).lower()}; quote the choice "
                    f"you mean, e.g. {key}: {words[0]!r}"
                )
            value = words[0] if words else value
        if value not in args:
            why = ""
            # `mixed_precision: yes` said only "True is not one of"
            if isinstance(value, bool) and overridden and text.lower() != str(value).lower():
                why = f" (YAML reads an unquoted {text} as {str(value).lower()}: write one of them)"
            raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(repr, args))}{why}")
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(not_a_mapping(key, tp, value))
        return _build(tp, value, prefix=key + ".")
    if origin in (list, tuple):
        item_t = args[0] if args else Any
        if isinstance(value, str) and specs:  # "a,b" in a YAML file, reward options kept with their spec
            value = _split_list_text(value)
        elif isinstance(value, str) and item_t is str:  # "a, b": the items as written (a regex is no YAML)
            value = [p.strip() for p in value.split(",") if p.strip()]
        elif isinstance(value, str):  # "1,2": each item parsed as a YAML scalar
            value = [_scalar_item(v.strip(), value, key) for v in value.split(",") if v.strip()]
        elif isinstance(value, list) and specs:
            value = _text_items(value)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}{_one_item_hint(value)}")
        items = [_coerce(v, item_t, f"{key}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        vt = args[1] if len(args) == 2 else Any
        return {k: _coerce(v, vt, f"{key}.{k}") for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        if type(value) is int and value in (0, 1):  # flag=1 as '1' (YAML reads an unquoted 1 as the integer)
            return bool(value)
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        # YAML 1.1 reads 1e3 and 1.0e3 (an exponent without its sign) as text; --set and float fields take them
        if isinstance(value, str) and re.fullmatch(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+", value.strip()):
            value = float(value)
        # YAML's .nan and .inf are floats int() refuses with its own words (a traceback for .inf)
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not whole:
            quoted = isinstance(value, str) and re.fullmatch(r"[-+]?[0-9]+", value.strip())
            hint = " (a quoted number is text in YAML: remove the quotes)" if quoted else ""
            raise ConfigError(f"{key}: expected an integer, got {value!r}{hint}")
        return int(value)
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        except OverflowError:  # an integer of 309 digits or more: float() raised it as a traceback
            number, digits = math.inf, str(abs(value))
        else:
            # a quoted one (a file's "1000…0", a str set in Python) float() reads as inf: it was reported as "must be
            # > 0 and finite (got inf)", a value not typed
            digits = value.strip().lstrip("+-") if isinstance(value, str) else ""
        if math.isinf(number) and digits.isdigit():
            raise ConfigError(
                f"{key}: expected a number, got an integer of {len(digits)} digits, larger than any float "
                "(at most about 1.8e308)"
            )
        if math.isnan(number):  # no setting means anything by NaN; it would pass every `x < 0` check
            raise ConfigError(f"{key}: expected a number, got {value!r} (not a number)")
        return number
    if tp is str:
        if isinstance(value, (dict, list)):
            # log.trackers: [tensorboard, wandb] is one text field that takes a comma list
            hint = f" (where it takes several, write them as one comma list: {','.join(map(str, value))})"
            raise ConfigError(
                f"{key}: expected a string, got {value!r}{hint if isinstance(value, list) else ''}"
            )
        return str(value)
    return value


def _refuse_out_of_range(written: Any, key: str) -> None:
    """A number written other than 0 that reads as 0 (``train.lr=1e-400``), or written with digits that reads as
    infinity (``train.lr=1e400``), is refused by name: they were reported as "train.lr must be > 0 and finite (got
    0.0)" for a value given > 0, and "(got inf)" (an integer field's "expected an integer, got inf") for a value
    typed without "inf"; an integer typed in digits alone is read as such, of any size."""
    if not isinstance(written, str):
        return
    try:
        number = float(written)
    except ValueError:
        return
    if number == 0 and re.search(r"[1-9]", re.split(r"[eE]", written)[0]):
        raise ConfigError(
            f"{key}: {written.strip()} is closer to 0 than the smallest float (about 5e-324) and would be read as 0; "
            "give one further from 0, or 0"
        )
    # (an integer of 309 digits or more has its own message in _coerce)
    if math.isinf(number) and re.search(r"[0-9]", written) and not written.strip().lstrip("+-").isdigit():
        raise ConfigError(
            f"{key}: {written.strip()} is further from 0 than the largest float (about 1.8e308) and would be read "
            "as infinity; give one closer to 0"
        )


def _one_item_hint(value: Any) -> str:
    """What to write for a list setting given one scalar (``--set rewards.weights=2`` for one reward): the error
    said "expected a list, got 2" and not how to write a list of one."""
    if isinstance(value, (dict, list, tuple)) or value is None:
        return ""
    text = value.parsed if isinstance(value, _Override) else value
    return f" (write a list of one as [{text}], several as [a, b] or a,b)"


class _UnknownKey(ConfigError):
    """An unknown key; ``name`` is its last part, which :func:`load_config` looks up elsewhere in the schema unless
    the message already names a ``close`` key at its level."""

    def __init__(self, message: str, name: str, close: bool = False, key: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.close = close
        self.key = key  # its dotted path, as the message names it


def _close_key(key: Any, names: list[str]) -> str | None:
    """The valid key `key` is most likely a misspelling of (``LR``, ``output-dir``, ``name`` for ``names``)."""
    close = difflib.get_close_matches(str(key).lower().replace("-", "_"), names, n=1, cutoff=0.75)
    return close[0] if close else None


def _key_paths(cls: type, name: str, prefix: str = "") -> list[str]:
    """Dotted paths of every field or section called `name` in the dataclass `cls` (nested sections included)."""
    hints = _type_hints(cls)
    paths = []
    for f in dataclasses.fields(cls):
        if f.name == name:
            paths.append(prefix + f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            paths += _key_paths(hints[f.name], name, prefix + f.name + ".")
    return paths


def _build(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    hints = _type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    names = list(fields)
    kwargs = {}
    for k, v in data.items():
        if k not in names:
            first, dot, rest = str(k).partition(".")
            if dot and first in names and dataclasses.is_dataclass(hints[first]):
                # `train.lr: 1e-3` in a file (--set's syntax) was "unknown config key 'train.lr'", which is a key
                nested = ", then ".join(f"{p}:" for p in str(k).split("."))
                raise ConfigError(
                    f"config key '{prefix}{k}' is written with dots, which only --set reads ({prefix}{k}=VALUE); in "
                    f"a YAML file nest each part under the one before it: {nested} (each indented under the last)"
                )
            # `prompts.path: p.txt` (another tool's name) was asked "did you mean model.path?"
            also = [f.name for f in fields.values() if str(k).lower() in f.metadata.get("also", ())]
            close = _close_key(k, names) or (also[0] if also else None)
            hint = f"; did you mean {prefix}{close}?" if close else ""
            raise _UnknownKey(
                f"unknown config key '{prefix}{k}'; valid keys here: {', '.join(names)}{hint}",
                k,
                close is not None,
                f"{prefix}{k}",
            )
        try:
            kwargs[k] = _coerce(v, hints[k], prefix + k, bool(fields[k].metadata.get("reward_specs")))
        except ConfigError as e:
            value = v.parsed if isinstance(v, _Override) else v
            if typing.get_origin(hints[k]) not in (list, tuple) or not isinstance(value, dict):
                raise
            # e.g. rewards.weights given by reward name: say what the list holds, in which order
            raise ConfigError(f"{e}; {prefix}{k} is a list: {fields[k].metadata.get('help', '')}") from None
    return cls(**kwargs)


def to_dict(cfg: Any) -> dict[str, Any]:
    """A plain nested dict (tuples as lists) for YAML dumping."""

    def conv(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        if isinstance(v, Path):
            return str(v)
        return v

    return conv(cfg)


def leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested dict's (a :func:`to_dict` config's) leaves by dotted key: ``{"train.lr": 1e-4, ...}``."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(leaves(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"a.b=1e-4"`` -> (["a", "b"], "1e-4" with ``.parsed`` 0.0001): the text as typed (for string fields) and
    what YAML makes of it (lists, booleans, numbers), chosen by the field's type in :func:`_coerce`."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key=value (e.g. train.lr=1e-4)")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override {item!r} has an empty key")
    parts = [p.strip() for p in key.split(".")]
    if "" in parts:  # train..lr, train.lr., .lr: read as a key named '' (or 'train.'), named as no key
        raise ConfigError(
            f"override {item!r}: the key {key!r} has an empty part between its dots; write each section and key "
            "once, separated by single dots (e.g. train.lr=1e-4)"
        )
    try:  # the file's loader: a str field inside a mapping or list keeps its text ({output_dir: 12:30})
        value = yaml.load(raw, Loader=_UniqueKeyLoader) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    except ConfigError as e:  # {lr: 1, lr: 2}
        raise ConfigError(f"override {item!r}: {e}") from None
    # YAML reads 1e-4 as a string; numbers are coerced by field type later, but help the common case
    if isinstance(value, str):
        try:
            value = (
                float(value)
                if any(c in value for c in ".eE") and value.lower() not in ("true", "false")
                else value
            )
        except ValueError:
            pass
    text = _Override(raw.strip())
    text.parsed = value
    return parts, text


def _merged(base: dict[Any, Any], update: dict[Any, Any]) -> dict[Any, Any]:
    """`base` with the keys of `update` set, nested mappings merged key by key."""
    out = dict(base)
    for k, v in update.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def merge_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`data` with each ``key=value`` override set; a mapping (``train={lr: 1e-3}``) sets those keys of the
    section, as ``train.lr=1e-3`` would, and leaves its other keys as the config file gives them."""

    def section(v: Any) -> Any:
        """An earlier override's mapping (``train={max_steps: 2}``) as the section it sets: a later ``train.lr``
        said "'train' is not a section", and a later ``train={lr: 1}`` dropped its keys, where the file had no
        such section."""
        return dict(v.parsed) if isinstance(v, _Override) and isinstance(v.parsed, dict) else v

    for item in overrides:
        path, value = parse_override(item)
        d = data
        for p in path[:-1]:
            nxt = d[p] = section(d.get(p))
            if nxt is None:
                nxt = d[p] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {item!r}: {p!r} is not a section")
            d = nxt
        if isinstance(value.parsed, dict) and isinstance(section(d.get(path[-1])), dict):
            value = _merged(section(d[path[-1]]), value.parsed)
        d[path[-1]] = value
    return data


def check_built(cfg: Any) -> None:
    """Read the values of a config dataclass built or changed in Python (``cfg.train.max_steps = "2"``, not read
    by :func:`load_config`) as a config file's are read, then validate it. A value of another type that means the
    same is converted in place (a Path for a string, a tuple for a list, 4.0 for 4, "1e-4" for a number, a reward
    spec string for a list of them, a dict for a section); any other is a ConfigError naming its key. A trainer
    given such values failed after the model loaded, in Python's words (``'str' object cannot be interpreted as an
    integer``, ``'PosixPath' object has no attribute 'partition'``), or named the wrong thing (rewards.names
    ``"clip"`` as the rewards 'c', 'l', 'i', 'p'; train.mixed_precision=False as an accelerate launch flag)."""
    _copy_fields(cfg, _build(type(cfg), to_dict(cfg)))
    validate(cfg)


def _copy_fields(dst: Any, src: Any) -> None:
    """Each field of dataclass `src` set on `dst`, sections that are already dataclasses kept (and filled) as the
    objects they are."""
    for f in dataclasses.fields(src):
        new, old = getattr(src, f.name), getattr(dst, f.name)
        if dataclasses.is_dataclass(new) and type(old) is type(new):
            _copy_fields(old, new)
        else:
            setattr(dst, f.name, new)


def validate(cfg: Any) -> None:
    """Run ``validate()`` on every nested dataclass, innermost first."""
    if not dataclasses.is_dataclass(cfg):
        return
    for f in dataclasses.fields(cfg):
        validate(getattr(cfg, f.name))
    if hasattr(cfg, "validate"):
        cfg.validate()


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping: it keeps the last silently, so a second
    ``train:`` section appended to a config dropped every setting of the first."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: its keys may be overridden here
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):  # a list or mapping as a key fails later
                continue
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(
                    f"key {key!r} appears twice in one mapping (lines {seen[key]} and {line}); YAML would keep only "
                    "the last and drop the first's settings: merge the two into one"
                )
            seen[key] = line
        super().construct_mapping(node, deep=deep)  # its checks, and the merged (<<) pairs put in node.value
        mapping: dict[Any, Any] = {}
        # merged (<<) pairs come first, as YAML takes them: the last one wins
        for key_node, value_node in node.value:
            mapping[self._key(key_node)] = self._plain(value_node, deep)
        return mapping

    def _key(self, node: yaml.Node) -> Any:
        """A key as written where YAML reads it as other than text: `null:` was named 'None' in the unknown-key
        message, `yes:` 'True'."""
        key = self.construct_object(node, deep=True)
        if isinstance(node, yaml.ScalarNode) and isinstance(key, (type(None), bool, int, float)):
            return node.value
        return key

    def construct_sequence(self, node: yaml.SequenceNode, deep: bool = False) -> list[Any]:
        return [self._plain(child, deep) for child in node.value]

    def _plain(self, node: yaml.Node, deep: bool) -> Any:
        """The value of `node`; an unquoted scalar YAML reads as other than a string (12:30 -> 750, 1.10 -> 1.1,
        0123 -> 83, yes -> True) as an :class:`_Override`, so a str field takes the text written, as with --set."""
        value = self.construct_object(node, deep=deep)
        if (
            isinstance(node, yaml.ScalarNode)
            and node.style is None
            and not isinstance(value, (str, type(None)))
        ):
            text = _Override(node.value)
            text.parsed = value
            return text
        return value

    def _text_unless_read(self, node: yaml.ScalarNode, construct: Any) -> Any:
        """`construct`'s value of `node`, or its text where YAML's reading fails: 2024-13-45 looks like a date and
        is none, an integer of over 4300 digits is beyond Python's int(). Either was a ValueError naming no key
        ("month must be in 1..12"), also for a str field (--set log.output_dir=2024-13-45) that takes the text."""
        try:
            return construct(self, node)
        except ValueError:
            return self.construct_scalar(node)


for _tag, _construct in (
    ("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_timestamp),
    ("tag:yaml.org,2002:int", yaml.SafeLoader.construct_yaml_int),
):
    _UniqueKeyLoader.add_constructor(
        _tag, lambda loader, node, c=_construct: loader._text_unless_read(node, c)
    )


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Build a `cls` config from a YAML file (optional) and ``key=value`` overrides, then validate it."""
    data: dict[str, Any] = {}
    if path is not None:
        from imgalign.prompts.io import read_text

        p = Path(path)
        if p.is_dir():
            raise ConfigError(
                f"config file {str(p)!r} is a folder; give a YAML config file (e.g. examples/shapes/flow_grpo.yaml)"
            )
        if not p.is_file():
            from imgalign.hub import tilde_hint

            raise ConfigError(f"config file {str(p)!r} does not exist{tilde_hint(str(path))}")
        text = read_text(p, "config file", ConfigError)  # its error names the file
        try:
            loaded = yaml.load(text, Loader=_UniqueKeyLoader)
        except yaml.YAMLError as e:
            # the message names the file, so not PyYAML's "<unicode string>"; a tab gets what to do
            why = str(e).replace('in "<unicode string>", line', "line")
            tab = "\\t" in str(getattr(e, "problem", ""))
            hint = "\nindent with spaces: YAML does not allow tabs" if tab else ""
            raise ConfigError(f"config file {str(p)!r} is not valid YAML: {why}{hint}") from None
        except ConfigError as e:
            raise ConfigError(f"config file {str(p)!r}: {e}") from None
        except RecursionError:  # PyYAML reads nesting recursively: its frames' traceback
            raise ConfigError(
                f"config file {str(p)!r} nests lists or mappings too deeply to read (a file cut or pasted "
                "wrongly?); its settings nest four levels at most (sampling.tree.branch_steps: [...]): give the "
                "config file you meant"
            ) from None
        if not loaded and isinstance(loaded, (dict, type(None))):
            # `imgalign train EMPTY.yaml` trained with every built-in default (not the recipe it runs without a
            # file) without a word: a file cut short, or the wrong one given
            log.warning(
                "config file %r holds no settings (it is empty or only comments): every key takes its built-in "
                "default; give the config file you meant",
                str(p),
            )
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {str(p)!r} must hold a mapping at the top level")
        data = loaded
    written = copy.deepcopy(data)  # the file's keys, before the overrides are set into `data`
    data = merge_overrides(data, overrides or [])
    try:
        cfg = _build(cls, data)
    except _UnknownKey as e:  # a section's key given at another level (nft.beta for objective.nft.beta)
        # a file's key and a --set's read alike: which to edit (and in which file) was left to the user
        source = _key_source(e.key, written, path, overrides or [])
        paths = _key_paths(cls, e.name)
        where = ", ".join(paths[:-1]) + " or " + paths[-1] if len(paths) > 1 else paths[0] if paths else ""
        # rewards.name is rewards.names misspelt, not objective.name
        hint = f"; did you mean {where}?" if paths and not e.close else ""
        raise _UnknownKey(f"{source}{e}{hint}", e.name, e.close, e.key) from None
    validate(cfg)
    return cfg


def _key_source(key: str, written: dict[str, Any], path: str | Path | None, overrides: list[str]) -> str:
    """``"config file 'c.yaml': "`` where the dotted config `key` was given in config file `path` and no override
    (``--set``, which the user has just typed) set it after, itself or in a section's mapping; else ``""``."""
    parts = key.split(".")
    for item in reversed(overrides):
        opath, value = parse_override(item)
        # the override names the key or a section above it (whose mapping holds it: train={lr.x: 1})
        if opath[: len(parts)] == parts[: len(opath)] and (
            len(opath) >= len(parts) or _holds(value.parsed, parts[len(opath) :])
        ):
            return ""
    return f"config file {str(path)!r}: " if path is not None and _holds(written, parts) else ""


def _holds(node: Any, parts: list[str]) -> bool:
    """Whether the nested mapping `node` holds the dotted key `parts`, one of its keys possibly holding dots itself
    (a file's ``lr.x:`` or ``1.10:``, which the key's parts split: such a key was not found in the file)."""
    if not parts:
        return True
    if not isinstance(node, dict):
        return False
    for k, v in node.items():
        kp = str(k).split(".")
        if parts[: len(kp)] == kp and _holds(v, parts[len(kp) :]):
            return True
    return False


def describe(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, default, help) for every leaf field, for ``--print-config`` and docs."""
    rows = []
    hints = _type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows += describe(tp, prefix + f.name + ".")
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "(required)"
        rows.append((prefix + f.name, repr(default), f.metadata.get("help", "")))
    return rows
