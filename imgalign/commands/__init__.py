"""CLI subcommands; each module exposes ``register(subparsers)``."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path


def counted(n: int, noun: str) -> str:
    """``1 prompt``, ``2 prompts``: `n` and the (regular) `noun`, plural unless `n` is 1."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def seed_arg(text: str) -> int:
    """argparse type of a ``--seed``: an integer from 0 to 2**63 - 1 (see :func:`imgalign.config.check_seed`)."""
    from imgalign.config import ConfigError, check_seed

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer seed (e.g. 0)") from None
    try:
        check_seed("a seed", value)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def check_output_file(path: Path, flag: str = "--out") -> None:
    """Fail before any work when output file `path` cannot be written: it is a folder or another non-regular file (a
    device, a pipe), a part of its parent path is an existing file, or its nearest existing folder takes no new
    file."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a folder; give a file name")
    if path.exists() and not path.is_file():  # a device or a pipe: the result is moved onto it, replacing it
        raise ValueError(
            f"{flag} {str(path)!r} is not a regular file (a device or a pipe, such as /dev/null): the result is "
            "written beside it and moved onto it, which would replace it; give a file name"
        )
    _check_nearest_folder(path, path.parents, flag)


def check_device(device: str, flag: str = "--device") -> None:
    """Fail before any work on a device string torch does not parse, a CUDA device this machine lacks, or another kind
    of device (mps, xpu) its PyTorch cannot use (each failed with a traceback once the model had loaded, after the
    output folder was claimed)."""
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"{flag} {device!r} is not a torch device; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if dev.index is not None and dev.index >= count or count == 0:
            have = f"{count} CUDA device(s), cuda:0 to cuda:{count - 1}" if count else "no CUDA device"
            use = f"{flag} cpu or one of those" if count else f"{flag} cpu"
            raise ValueError(f"{flag} {device!r}: this machine has {have}; use {use}")
    elif dev.type != "cpu":
        # mps, xpu...: a model's .to() failed with a traceback, or with an error that blamed the model; hpu and
        # privateuseone import a torch module this PyTorch may lack (a ModuleNotFoundError traceback)
        try:
            torch.empty(1, device=dev).tolist()  # (a meta tensor, which holds no data, cannot be read)
        except (RuntimeError, AssertionError, NotImplementedError, ImportError):
            raise ValueError(
                f"{flag} {device!r}: this machine's PyTorch cannot compute on {dev.type} devices; use {flag} cpu"
            ) from None


def check_rewards_once(specs: Sequence[str]) -> None:
    """Refuse one reward given twice as ``--reward``, also spelt otherwise (``geneval`` and ``geneval: mode=partial``,
    a file option by another path): it was scored twice."""
    from imgalign.cli import CLIError
    from imgalign.trainers.rewarding import same_reward_twice

    if twice := same_reward_twice(list(specs)):
        first, spec = twice
        same = "twice" if first == spec else f"as {first!r} does (the same reward and options)"
        raise CLIError(f"--reward {spec!r} is given {same}; give each reward once")


def check_output_folder(path: Path, flag: str = "--out") -> None:
    """Fail before any work when output folder `path` cannot be made or written: it is a file, a part of its
    parent path is an existing file, or its nearest existing folder takes no new file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a file; give a folder")
    _check_nearest_folder(path, [path, *path.parents], flag)


def _check_nearest_folder(path: Path, candidates: Sequence[Path], flag: str) -> None:
    """The first of `candidates` that exists must be a folder that takes a new file."""
    for parent in candidates:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{flag} {str(path)!r}: {str(parent)!r} is a file, not a folder")
            try:  # the result is written there through a temporary file: probe that it can be
                tempfile.TemporaryFile(dir=parent).close()
            except OSError as e:
                raise ValueError(
                    f"{flag} {str(path)!r}: cannot write in {str(parent)!r} ({e.strerror})"
                ) from None
            break
