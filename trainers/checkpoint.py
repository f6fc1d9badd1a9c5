"""Checkpoints: everything a bitwise-exact resume needs, written atomically, loadable by diffusers.

Layout of ``<run>/checkpoints/step-000040/``::

    model_index.json, transformer/, ...     full fine-tune: the pipeline, loaded as its base is (the base's
                                            model_index.json: ``from_pretrained(dir)``; the shapes model, without
                                            T5, adds ``text_encoder_3=None, tokenizer_3=None``), or
    pytorch_lora_weights.safetensors        LoRA: ``pipe.load_lora_weights(dir)`` on the base model
    imgalign_model.json                     family, base model, LoRA settings
    trainer_state/
        state.json                          step, prompt-sampler position, config hash, what was exported,
                                            the updates optimizer.pt and scheduler.pt hold
        trainable.safetensors               the raw trainable weights (the export above holds the EMA if enabled)
        ema.safetensors                     EMA shadow weights (if enabled)
        optimizer.pt, scheduler.pt          torch state dicts (loaded with weights_only=True)
        rewards.pt                          state of stateful rewards
        rng_<rank>.json, rng_<rank>.safetensors   every process's Python / NumPy / torch RNG state

The folder is first written as ``.tmp-step-000040`` and renamed when complete, so a crash mid-save leaves the last
good checkpoint untouched; ``state.json`` is written last inside it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from imgalign.files import write_advice, write_failure

log = logging.getLogger(__name__)

STEP_RE = re.compile(r"^step-(\d{6,})$")
# a branch set aside by supersede_after: superseded-step-000040, superseded-step-000040-1, ...
SUPERSEDED_RE = re.compile(r"^superseded-step-(\d{6,})(?:-\d+)?$")


def checkpoint_name(step: int) -> str:
    return f"step-{step:06d}"


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    d = Path(run_dir) / "checkpoints"
    if not d.is_dir():
        return []
    found = [
        p for p in d.iterdir() if STEP_RE.match(p.name) and (p / "trainer_state" / "state.json").is_file()
    ]
    return sorted(found, key=lambda p: int(STEP_RE.match(p.name).group(1)))  # type: ignore[union-attr]


def inside_run(path: str | Path) -> str | None:
    """Why folder `path` is a part of a training run rather than a run folder, or None: a checkpoint
    (``trainer_state/`` inside, or ``checkpoints/step-N``), or a run's ``checkpoints/`` folder. A run given one of
    them as its output folder started a new run from the base model inside it, next to the weights."""
    path = Path(path)
    if not path.is_dir():
        return None
    if (path / "trainer_state").is_dir() or (
        path.parent.name == "checkpoints" and (STEP_RE.match(path.name) or SUPERSEDED_RE.match(path.name))
    ):
        return "a checkpoint folder"
    if path.name == "checkpoints" and list_checkpoints(path.parent):
        return "the checkpoints folder of a run"
    return None


def incomplete_after(run_dir: str | Path, ckpt: Path | None) -> list[Path]:
    """The ``step-N`` folders of a run later than checkpoint `ckpt` (all of them when None) that are not complete
    checkpoints (no ``trainer_state/state.json``), oldest first: what :func:`list_checkpoints` passes over."""
    d = Path(run_dir) / "checkpoints"
    if not d.is_dir():
        return []
    after = step_of(ckpt) if ckpt is not None else -1
    found = [p for p in d.iterdir() if STEP_RE.match(p.name) and p.is_dir() and step_of(p) > after]
    return sorted((p for p in found if not (p / "trainer_state" / "state.json").is_file()), key=step_of)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def rng_state() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """This process's RNG states: JSON-able Python/NumPy parts and tensors for torch."""
    py = random.getstate()
    np_state = np.random.get_state()
    js = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
    }
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = s
    return js, tensors


def set_rng_state(js: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    """Set this process's RNG states to :func:`rng_state`'s (`js` read back from JSON)."""
    _set_host_rng_state(js)
    _set_torch_rng_state(tensors)


def _set_host_rng_state(js: dict[str, Any]) -> None:
    py = js["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = js["numpy"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), n[2], n[3], n[4]))


def _set_torch_rng_state(tensors: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(tensors["torch_cpu"])
    if torch.cuda.is_available():
        cuda = [k for k in tensors if k.startswith("torch_cuda_")]
        states = [tensors[k] for k in sorted(cuda, key=lambda k: int(k.rsplit("_", 1)[1]))]  # 2 before 10
        if states:
            torch.cuda.set_rng_state_all(states)


def restore_rng_state(js_path: Path, tensors_path: Path) -> None:
    """:func:`set_rng_state` from the two files of a checkpoint; a file that reads but holds something else (another
    file of the checkpoint copied over it by hand) is named (:func:`loading`)."""
    js, tensors = read_json(js_path), load_tensors(tensors_path)
    with loading(js_path, "Python and NumPy RNG state"):
        _set_host_rng_state(js)
    with loading(tensors_path, "torch RNG state"):
        _set_torch_rng_state(tensors)


def save_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    try:
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(path))
    except (OSError, SafetensorError) as e:  # safetensors' error on a full disk or a file-size limit
        raise unwritable(path, e) from e


def torch_save(obj: Any, path: Path) -> None:
    try:
        torch.save(obj, str(path))
    # torch's zip writer: a failed write is RuntimeError("unexpected pos")
    except (OSError, RuntimeError) as e:
        raise unwritable(path, e) from e


def write_text(path: Path, text: str) -> None:
    """A text file of a checkpoint (RNG state, config, state.json); a failed write is :func:`unwritable`'s error."""
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise unwritable(path, e) from e


class CheckpointWriteError(OSError):
    """A file of a checkpoint being written that could not be written (a full disk, a file-size limit)."""


def unwritable(path: Path, e: Exception) -> CheckpointWriteError:
    """The error for a failed checkpoint write: names the file, and says that nothing was published and what to do
    (an OSError, so the command prints it as one line, not a traceback)."""
    why = write_failure(e)
    check, todo = write_advice(e)
    return CheckpointWriteError(
        f"cannot write {path} ({why}): {check} The checkpoint was not published (the run's earlier checkpoints are "
        f"whole); {todo} and continue with --resume auto"
    )


_HELD_LOCKS: dict[str, int] = {}  # output folders this process trains into: the open lock file of each


def lock_output_dir(out: Path, command: str = "imgalign train", *, lock_file: str | None = ".lock") -> bool:
    """Take the exclusive lock of output folder `out` (``out/.lock``, flock) for this process; False when another
    process holds it (a second start of the same job would append to its metrics and overwrite its checkpoints).
    The lock goes with the process, so a killed run leaves none; this process may take it again (a resume in-process).
    `command` names the job in the warning where the file system takes no lock. With `lock_file` None the folder
    itself is locked, so no file is added to it (``imgalign eval``, whose --out holds only its results)."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no lock (a double start is not caught there)
        return True
    key = str(Path(out).resolve())
    if key in _HELD_LOCKS:
        return True
    target = Path(out) / lock_file if lock_file else Path(out)
    fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o644) if lock_file else os.open(target, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    # a file system without flock (Lustre mounted without -o flock: ENOSYS; some NFS: ENOLCK)
    except OSError as e:
        os.close(fd)
        log.warning(
            "cannot lock %s (%s): running without the output-folder lock, so a second %s started into this "
            "folder is not refused",
            target,
            e.strerror or e,
            command,
        )
        return True
    _HELD_LOCKS[key] = fd
    return True


def unlock_output_dir(out: Path) -> None:
    fd = _HELD_LOCKS.pop(str(Path(out).resolve()), None)
    if fd is not None:
        os.close(fd)


class CheckpointReadError(ValueError):
    """A file of a checkpoint that cannot be read (damaged or deleted after it was published)."""


def _unreadable(path: Path, e: Exception) -> CheckpointReadError:
    path = Path(path)
    ckpt = path.parent.parent if path.parent.name == "trainer_state" else path.parent
    why = "missing" if isinstance(e, FileNotFoundError) else f"{type(e).__name__}: {e}"
    m = STEP_RE.match(ckpt.name) or SUPERSEDED_RE.match(ckpt.name)
    run_ckpts = list_checkpoints(ckpt.parent.parent) if ckpt.parent.name == "checkpoints" else []
    earlier = [c for c in run_ckpts if m and step_of(c) < int(m.group(1))]
    # the newest earlier one whose files look whole: advising one that is damaged too sent the user round again
    whole = [c for c in earlier if not damaged_files(c)]
    if whole:  # "step-…" left the user to find one, if any existed
        todo = (
            f"Resume from an earlier checkpoint of the run (--resume {whole[-1]}), or move this one away so "
            "that --resume auto takes the one before it"
        )
    elif earlier:
        todo = (
            f"The run's earlier checkpoints in {ckpt.parent} are damaged too (e.g. {damaged_files(earlier[-1])[0]}):"
            " restore the files from a copy, or train again from the start with another --output-dir"
        )
    else:
        todo = (
            f"The run has no earlier checkpoint in {ckpt.parent}: restore the file from a copy, or train again "
            "from the start with another --output-dir"
        )
    return CheckpointReadError(f"{path} cannot be read ({why}): checkpoint {ckpt} is damaged. {todo}")


def damaged_files(ckpt: Path) -> list[Path]:
    """The files of checkpoint folder `ckpt` that are plainly damaged, found cheaply (no tensor is read): a
    .safetensors file whose header safetensors refuses (a cut file, or one of another size than its header gives), a
    .pt file that is not a whole zip archive (torch.save's format; the central directory at its end is read), a .json
    file that does not parse, or a trainer_state/ folder missing. A cut copy or an interrupted sync fails these; a
    flipped byte inside the tensor data does not."""
    import zipfile

    from imgalign.hub import safetensors_error

    if not (ckpt / "trainer_state").is_dir():
        return [ckpt / "trainer_state"]
    bad = []
    for f in sorted(ckpt.rglob("*")):
        if not f.is_file():
            continue
        try:
            if f.suffix == ".safetensors":
                if safetensors_error(f) is not None:
                    bad.append(f)
            elif f.suffix == ".pt":
                with zipfile.ZipFile(f):
                    pass
            elif f.suffix == ".json":
                json.loads(f.read_text())
        except (OSError, ValueError, zipfile.BadZipFile):
            bad.append(f)
    return bad


def check_plain_state(what: str, state: Any) -> None:
    """Raise a ValueError naming `what` (``reward 'pkg.mod:Cls'``) when its ``state_dict()`` could not go into a
    checkpoint and come back: checkpoints load with ``weights_only=True``, which takes tensors and plain Python values
    only. A lambda failed the save with a pickling traceback, and a numpy array or an object of the user's saved but
    made the checkpoint fail to resume; the trainer checks at set-up (before any model loads) and at each save."""
    import io

    buf = io.BytesIO()
    try:
        torch.save(state, buf)
        buf.seek(0)
        torch.load(buf, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickling errors, weights_only's UnpicklingError
        raise ValueError(
            f"{what}: its state_dict() cannot be checkpointed ({type(e).__name__}: "
            f"{(str(e).splitlines() or [''])[0][:200]}); it must hold only tensors and plain Python values (numbers, "
            "strings, None, lists and dicts of them): checkpoints are loaded with torch.load(weights_only=True)"
        ) from e


@contextlib.contextmanager
def loading(path: Path, what: str) -> Iterator[None]:
    """Put the state read from checkpoint file `path` (a `what`: "an optimizer state") into the trainer: a file that
    reads but holds something else (another file of the checkpoint copied over it by hand) failed with a bare key
    name, ``imgalign train: error: lr_lambdas``, that named neither the file nor what to do."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, CheckpointReadError):
            raise
        raise _unreadable(
            path, ValueError(f"it holds no {what} ({type(e).__name__}: {e}); another file copied over it?")
        ) from e


def torch_load(path: Path) -> Any:
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # a cut zip archive, a bad pickle, a missing file: all say the same to the user
        raise _unreadable(path, e) from e


def read_json(path: Path) -> Any:
    """A JSON file of a checkpoint; a damaged one raises :class:`CheckpointReadError` naming it."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _unreadable(path, e) from e


def step_of(ckpt: Path) -> int:
    m = STEP_RE.match(ckpt.name)
    if m is None:
        raise ValueError(f"{ckpt} is not a checkpoint folder (expected a name like step-000040)")
    return int(m.group(1))


def supersede_after(run_dir: str | Path, step: int) -> list[Path]:
    """Rename the checkpoints of steps after `step` to ``superseded-step-…``: a run resumed from `step` branches
    off them, so ``--resume auto`` must continue the branch, not them (they are kept for an explicit --resume).
    Returns the new paths."""
    moved = []
    for p in list_checkpoints(run_dir):
        if step_of(p) <= step:
            continue
        dest = p.with_name(f"superseded-{p.name}")
        n = 1
        while dest.exists():
            dest, n = p.with_name(f"superseded-{p.name}-{n}"), n + 1
        os.replace(p, dest)
        log.warning(
            "checkpoint %s is later than step %d, which this run resumed from; renamed to %s so that --resume auto "
            "continues this run",
            p.name,
            step,
            dest.name,
        )
        moved.append(dest)
    return moved


def prune(run_dir: str | Path, keep_last: int, newest: Path | None = None) -> None:
    """Keep the last `keep_last` checkpoints. `newest` is the one just written: checkpoints of later steps are left
    from an earlier run of the folder that this run resumed before (a branch), so they are set aside
    (:func:`supersede_after`) instead of outliving the new ones. A deleted checkpoint is renamed away first, so a
    crash during the deletion cannot leave a partial one listed; what such a crash (or one during a save) left
    behind is removed here (:func:`remove_leftovers`)."""
    remove_leftovers(run_dir)
    if newest is not None:
        supersede_after(run_dir, step_of(newest))
    ckpts = list_checkpoints(run_dir)
    for p in ckpts[:-keep_last]:
        trash = p.with_name(f".trash-{p.name}")
        shutil.rmtree(trash, ignore_errors=True)
        os.replace(p, trash)
        shutil.rmtree(trash, ignore_errors=True)


def remove_leftovers(run_dir: str | Path) -> None:
    """Remove what a process killed while saving or pruning left in ``checkpoints/``: ``.trash-*`` (a checkpoint
    being deleted), ``.tmp-*`` (one being written) and ``step-N.old`` once ``step-N`` is complete (one being
    replaced). A ``step-N.old`` without a complete ``step-N`` is the only copy of that step: it is put back.
    Only the main process calls this, after its own save was published or before a run resolves ``--resume auto``,
    so nothing here is in use."""
    d = Path(run_dir) / "checkpoints"
    if not d.is_dir():
        return
    for p in sorted(d.iterdir()):
        if not p.is_dir():
            continue
        if p.name.startswith((".trash-", ".tmp-")):
            shutil.rmtree(p, ignore_errors=True)
        elif p.name.endswith(".old") and STEP_RE.match(p.name[: -len(".old")]):
            final = p.with_name(p.name[: -len(".old")])
            if (final / "trainer_state" / "state.json").is_file():
                shutil.rmtree(p, ignore_errors=True)
            elif (p / "trainer_state" / "state.json").is_file():
                shutil.rmtree(final, ignore_errors=True)
                os.replace(p, final)


# the keys of trainer_state/state.json a resume reads, each with its type; the others are read with defaults
STATE_KEYS: dict[str, type] = {
    "step": int,
    "num_processes": int,
    "config_hash": str,
    "nfe_total": int,
    "prompt_position": int,
    "optimizer_updates": int,
    "scheduler_steps": int,
}


def state_problem(state: Any, needs: tuple[str, ...] = ("step",)) -> str | None:
    """What makes a parsed state.json other than the object the trainer writes (a hand edit, a file of another
    program), or None: it must hold the keys `needs`, and the keys of :data:`STATE_KEYS` it holds must have their
    types. A resume read ``state["num_processes"]`` and ``int(state["step"])`` from it unchecked and failed with a
    bare key name, an int() message or a TypeError traceback."""
    if not isinstance(state, dict):
        return f"it holds a JSON {type(state).__name__}, not an object"
    for key in needs:
        if key not in state:
            return f"it has no {key!r}"
    for key, kind in STATE_KEYS.items():
        value = state.get(key, kind())
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 0):
            return f"its {key!r} is {value!r}, not {'a whole number' if kind is int else 'a string'}"
    return None


def read_state(ckpt: Path, needs: tuple[str, ...] = ("step",)) -> dict[str, Any]:
    """A checkpoint's trainer_state/state.json, holding the keys `needs`; a damaged one, or one without them, raises
    :class:`CheckpointReadError` naming it and the checkpoint to resume from instead."""
    path = ckpt / "trainer_state" / "state.json"
    state = read_json(path)
    why = state_problem(state, needs)
    named = STEP_RE.match(ckpt.name) or SUPERSEDED_RE.match(ckpt.name)
    if why is None and named and "step" in state and state["step"] != int(named.group(1)):
        # a hand edit or a file copied from another checkpoint: resumed, the run restarted at the file's step and
        # set aside its own later checkpoints, this one among them (supersede_after)
        why = f"its 'step' is {state['step']}, but the folder {ckpt.name} is step {int(named.group(1))}"
    if why is not None:
        raise _unreadable(path, ValueError(why))
    return state


def optimizer_updates(state: dict[str, Any]) -> int:
    """The number of updates an optimizer's `state` (``optimizer.state_dict()``) records: the largest per-parameter
    ``step`` (Adam's and AdamW's counter; 0 before the first update or for an optimizer that keeps none)."""
    steps = [s["step"] for s in state.get("state", {}).values() if isinstance(s, dict) and "step" in s]
    return int(max((float(x) for x in steps), default=0))


def check_update_count(path: Path, what: str, loaded: int, recorded: int | None) -> None:
    """Raise :class:`CheckpointReadError` naming checkpoint file `path` (a `what`: "optimizer state") when the count
    of updates it holds (`loaded`) is not the one its ``state.json`` recorded: a file copied from another
    checkpoint (``optimizer.pt`` of step 20 into step 40) resumed silently with another step's moments or learning
    rate. A checkpoint that recorded none (written before the count was kept) is not checked."""
    if recorded is not None and loaded != recorded:
        raise _unreadable(
            path,
            ValueError(
                f"it holds the {what} after {loaded} update(s), but the checkpoint's state.json records {recorded}: "
                "a file copied from another checkpoint?"
            ),
        )


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    # safetensors' own error type for a cut or garbled header, OSError for a missing file
    except Exception as e:
        raise _unreadable(path, e) from e


def finalize(tmp: Path, final: Path) -> None:
    """Atomically publish a fully written checkpoint folder (replacing an older one of the same step), its files
    readable as ``open()`` makes them (:func:`imgalign.files.open_mode`)."""
    from imgalign.files import open_mode

    open_mode(tmp)
    if final.exists():
        old = final.with_name(final.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
