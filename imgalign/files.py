"""Writing result files whole or not at all.

Every file a command publishes (a checkpoint, statistics, a results table, an image) is written under a temporary
name beside it and moved into place with ``os.replace`` (atomic on one file system), so a reader never sees half a
file. :func:`replacing` also removes the temporary file when the write fails or is interrupted (a full disk, a
file-size limit, Ctrl-C): such writes used to leave ``.NAME.tmp`` files behind, each as large as the result.
What is published gets the permissions a plain ``open()`` gives (:func:`open_mode`)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path


def _umask() -> int:
    """This process's umask: read from /proc on Linux (setting it to read it, the portable way, would give files
    created meanwhile by other threads the wrong mode)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0)
    os.umask(mask)
    return mask


def open_mode(path: str | Path) -> None:
    """Give the file `path`, or every file under the folder `path`, the mode ``open()`` gives a new file (0o666
    less the umask). safetensors 0.8 writes its files 0600 whatever the umask (its writer goes through a
    temporary file: safetensors issue #782), so checkpoints, exported models, reward heads and FID statistics were
    unreadable to the other users of a shared machine, while their config.json beside them was readable."""
    mask = _umask()
    path = Path(path)
    files = (
        [path] if not path.is_dir() else [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    )
    for f in files:
        os.chmod(f, 0o666 & ~mask)


NAME_MAX = 255
"""The longest file name, in bytes, most file systems take."""


def temporary_name(path: Path, tag: str = "") -> Path:
    """The hidden temporary name beside `path`: ``DIR/.NAME.tmp`` (``DIR/.NAME.TAG.tmp`` with a `tag`), or, where
    that is over :data:`NAME_MAX` bytes (a NAME of 251 to 255 bytes, which the file system takes),
    ``DIR/.HASH.tmp``: the result was computed and then refused as "a file name of 257 bytes", naming the hidden
    file."""
    tag = f".{tag}" if tag else ""
    name = f".{path.name}{tag}.tmp"
    # os.fsencode: the bytes the file system has (a name that is not UTF-8 failed here, --out too, with "'utf-8'
    # codec can't encode character '\\udce9'", after the work was done)
    if len(os.fsencode(name)) > NAME_MAX:
        name = f".{hashlib.sha256(os.fsencode(path.name)).hexdigest()[:32]}{tag}.tmp"
    return path.with_name(name)


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write `path`'s new content to; when the block ends without an error, move it onto
    `path`. On any error (KeyboardInterrupt too), in the block or in the move (`path` a folder), the temporary file
    is removed and the error propagates; `path` keeps its old content, or stays absent. Each write has a temporary
    name of its own (:func:`temporary_name` tagged with the process and a random part): two commands writing one
    --out at once shared ``.NAME.tmp``, so one moved into place the file the other was still writing (a reader saw it
    empty or mixed) and the other failed with FileNotFoundError."""
    path = Path(path)
    tmp = temporary_name(path, f"{os.getpid()}-{secrets.token_hex(4)}")
    try:
        yield tmp
        open_mode(tmp)  # a move that fails (onto a folder) left the finished temporary file behind
        try:
            os.replace(tmp, path)
        except IsADirectoryError:
            # Python's "[Errno 21] Is a directory: 'DIR/.NAME.PID-XXXX.tmp' -> 'DIR/NAME'" named the hidden
            # temporary first and said nothing to do (a folder named report.md in `imgalign report`'s --out)
            raise IsADirectoryError(
                f"{str(path)!r} is a folder, where a file is written: move that folder away (or write elsewhere)"
            ) from None
    except OSError as e:
        tmp.unlink(missing_ok=True)
        # a write cut short (a file-size limit, a full disk) raised "[Errno 27] File too large" naming no file, or
        # naming the hidden temporary: the command's line said "an output file under --out"; it names `path` now
        if e.errno is not None and e.filename in (None, str(tmp)):
            e.filename = str(path)
        if e.errno is not None and e.filename2 == str(tmp):
            e.filename2 = str(path)
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` as UTF-8, whole or not at all (see :func:`replacing`). A path in `text` whose name is
    not UTF-8 (os.fsdecode's surrogates) is written as the bytes the file system has: `imgalign eval --images` of
    such a folder judged every image, then failed on report.md with "'utf-8' codec can't encode character
    '\\udce9'"."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8", errors="surrogateescape")


def write_failure(e: Exception) -> str:
    """Why a write failed, in a few words: the OS's reason (a full disk, a file-size limit), else the first line of
    the library's (torch's zip writer: "unexpected pos ...", then a C++ stack)."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"


NO_ROOM = frozenset({errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)})
"""The OS's reasons for a write cut short for want of room: a full disk, a file-size limit, a quota."""


def write_advice(e: Exception) -> tuple[str, str]:
    """What to check after a failed write, and what to do before going on: room on the disk, unless the OS gave
    another reason (no permission, a read-only file system, a folder where the file goes), which freeing space
    would not mend; a write that failed inside a library without a reason (torch's "unexpected pos") is most
    often a full disk."""
    if isinstance(e, OSError) and e.errno is not None and e.errno not in NO_ROOM:
        return (
            "can the folder be written to (permissions, a read-only file system, a folder in the way)?",
            "mend that",
        )
    # EFBIG, or safetensors' "I/O error: File too large (os error 27)": the file-size limit, not a full disk
    if (e.errno == errno.EFBIG) if isinstance(e, OSError) else f"(os error {errno.EFBIG})" in str(e):
        return (
            "A file-size limit stopped it (the shell's ulimit -f, or the largest file the file system takes).",
            "raise it (ulimit -f unlimited)",
        )
    return "is the disk full, or a file-size limit (ulimit -f) set?", "free space"


@contextlib.contextmanager
def library_write(path: str | Path, what: str) -> Iterator[None]:
    """Around a library's write of `path` (safetensors' ``save_file``), inside :func:`replacing`: its error on a
    full disk or a file-size limit (``SafetensorError: Error while serializing: I/O error: No space left on device``)
    becomes an OSError naming `path` (`what`: "the FID statistics") and saying what to do, so the command prints
    one line; ``imgalign rewards fid-stats`` and the fit commands gave a traceback, after the work was done."""
    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as e:
        check, todo = write_advice(e)
        raise OSError(
            f"cannot write {what} to {str(path)!r} ({write_failure(e)}): {check} Nothing was written under that "
            f"name; {todo} and run the same command again"
        ) from e
