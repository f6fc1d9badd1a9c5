"""Writing result files whole or not at all.

Every file a command publishes (a checkpoint, statistics, a results table, an image) is written under a temporary
name beside it and moved into place with ``os.replace`` (atomic on one file system), so a reader never sees half a
file. :func:`replacing` also removes the temporary file when the write fails or is interrupted (a full disk, a
file-size limit, Ctrl-C): such writes used to leave ``.NAME.tmp`` files behind, each as large as the result."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def temporary_name(path: Path) -> Path:
    """The hidden temporary name beside `path` that :func:`replacing` writes to: ``DIR/.NAME.tmp``."""
    return path.with_name(f".{path.name}.tmp")


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write `path`'s new content to; when the block ends without an error, move it onto
    `path`. On any error (KeyboardInterrupt too) the temporary file is removed and the error propagates; `path`
    keeps its old content, or stays absent."""
    path = Path(path)
    tmp = temporary_name(path)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` whole or not at all (see :func:`replacing`)."""
    with replacing(path) as tmp:
        tmp.write_text(text)
