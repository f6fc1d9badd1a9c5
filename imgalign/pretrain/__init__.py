"""Pretraining of the embedded shapes-world models (``imgalign world pretrain``).

Each component module exposes a ``Config`` dataclass (fields built with :func:`imgalign.config.field`) and
``pretrain(cfg, out_dir: Path, progress: bool = True) -> dict[str, float]``, which trains (resuming from
``out_dir`` when a checkpoint is there), writes the model folder in its library's own format plus a model card,
and returns its final metrics.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

COMPONENTS = {
    "t2i": "imgalign.pretrain.t2i",
    "clip": "imgalign.pretrain.clip",
    "vlm": "imgalign.pretrain.vlm",
}


def restores_torch_threads(pretrain: F) -> F:
    """Decorator of each component's ``pretrain``: it sets ``torch.set_num_threads(cfg.threads)``, and the caller's
    thread count is back when it returns or raises (an in-process ``imgalign world pretrain`` left it changed)."""

    @functools.wraps(pretrain)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import torch

        before = torch.get_num_threads()
        try:
            return pretrain(*args, **kwargs)
        finally:
            torch.set_num_threads(before)

    return wrapper  # type: ignore[return-value]


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    """``key: OLD -> NEW`` for every setting whose value differs between the config a run folder recorded (`old`)
    and this run's (`new`), sorted by key, joined by ``; ``; a setting only one of them has shows as ``<unset>``
    on the other side. Values are written as JSON."""

    def show(d: dict[str, Any], k: str) -> str:
        return json.dumps(d[k]) if k in d else "<unset>"

    keys = sorted(k for k in set(old) | set(new) if k not in old or k not in new or old[k] != new[k])
    return "; ".join(f"{k}: {show(old, k)} -> {show(new, k)}" for k in keys)


def card_command(cfg: Any, component: str, note: str = "") -> str:
    """A model card's command line: `imgalign world pretrain --component COMPONENT` with each setting of `cfg` (a
    component's ``Config``) that differs from its default as a ``--set``, so the command reproduces the model (the
    cards said "defaults" for a model pretrained with overrides), quoted for a POSIX shell where it needs to be (an
    ``init_from`` folder with a space split in two; a list's brackets are a glob). `note` follows the word
    "defaults" or "settings as below" in the parentheses."""
    import dataclasses
    import shlex

    default = type(cfg)()
    sets = ""
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if v != getattr(default, f.name):
            value = "[" + ",".join(map(str, v)) + "]" if isinstance(v, (list, tuple)) else str(v)
            sets += f" --set {shlex.quote(f'{f.name}={value}')}"
    return (
        f"`imgalign world pretrain --component {component} --out DIR{sets}` "
        f"({'settings as below' if sets else 'defaults'}{note})"
    )


def read_failure(e: Exception) -> str:
    """Why torch.load could not read a file, in one line: the error's type and the first line of its message. A cut
    zip archive is a RuntimeError, an empty file an EOFError with no message, other bytes weights_only's multi-line
    UnpicklingError or, where they reach torch's legacy unpickler (a text file), a KeyError, IndexError or
    UnicodeDecodeError."""
    first = (str(e).splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def cut_archive(path: Path) -> bool:
    """Whether `path` (a file torch.save wrote: a zip archive) is not a whole zip archive, whose directory at its end
    is read first; False when it cannot be opened at all (the file system's error, not its content)."""
    import zipfile

    try:
        with zipfile.ZipFile(path):
            return False
    except zipfile.BadZipFile:
        return True
    except OSError:
        return False


def load_state(path: Path, required: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """The training checkpoint at `path` (``weights_only=True``: tensors and plain data), or None when there is
    none. Something other than a file there (a folder), a damaged one (truncated, overwritten, not a checkpoint) or
    one without the entries `required` (another component's, or any other torch file) raises a ValueError naming
    the path, instead of torch's zip-reader traceback or a bare KeyError."""
    import torch

    if not path.exists():
        return None
    # a folder read as "none": the stage trained up to its first checkpoint, then blamed the disk for the write
    if not path.is_file():
        raise ValueError(
            f"{path}: not a file (a folder?), where this stage keeps its training checkpoint; move or delete it, "
            "or use another --out"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as e:
        if not cut_archive(path):  # the file system's error (permissions, I/O), not the file's content
            raise
        # some cuts reach torch's zip reader as an OSError: a bare "[Errno 22] Invalid argument" named no file
        raise ValueError(
            f"{path}: damaged training checkpoint, cannot be read (cut short: {read_failure(e)}); delete it to start "
            "this stage over from step 0, or use another --out"
        ) from None
    except Exception as e:  # noqa: BLE001 - whatever bytes are there: see read_failure
        raise ValueError(
            f"{path}: damaged training checkpoint, cannot be read ({read_failure(e)}); delete it to start this "
            "stage over from step 0, or use another --out"
        ) from None
    missing = [k for k in required if not isinstance(state, dict) or k not in state]
    if missing:
        raise ValueError(
            f"{path}: not a training checkpoint of this stage (it lacks {', '.join(map(repr, missing))}); delete "
            "it to start this stage over from step 0, or use another --out"
        )
    return state


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Around the write of a checkpoint or model folder `path`: a write cut short (a full disk, a file-size limit)
    becomes an OSError naming `path` and saying what to do, so the command prints one line. torch.save raises
    RuntimeError ("unexpected pos ...") and safetensors SafetensorError, which gave a traceback. Every such write
    goes to a temp name first, so nothing half-written was published."""
    from safetensors import SafetensorError

    from imgalign.files import write_advice, write_failure

    try:
        yield
    except (OSError, RuntimeError, SafetensorError) as e:
        why = write_failure(e)
        check, todo = write_advice(e)
        raise OSError(
            f"cannot write {path} ({why}): {check} Nothing half-written was published and any earlier checkpoint "
            f"is whole; {todo} and run the same command again: it resumes from there"
        ) from e
