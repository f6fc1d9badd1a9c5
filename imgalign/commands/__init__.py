"""CLI subcommands; each module exposes ``register(subparsers)``."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path


def check_output_file(path: Path, flag: str = "--out") -> None:
    """Fail before any work when output file `path` cannot be written: it is a folder, a part of its parent path
    is an existing file, or its nearest existing folder takes no new file."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a folder; give a file name")
    _check_nearest_folder(path, path.parents, flag)


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
