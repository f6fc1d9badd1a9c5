"""CLI subcommands; each module exposes ``register(subparsers)``."""

from __future__ import annotations

from pathlib import Path


def check_output_file(path: Path, flag: str = "--out") -> None:
    """Fail before any work when output file `path` cannot be written: it is a folder, or a part of its parent
    path is an existing file."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a folder; give a file name")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{flag} {str(path)!r}: {str(parent)!r} is a file, not a folder")
            break
