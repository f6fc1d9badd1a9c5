"""Bad input, round 34g: a write stopped by the file-size limit (``ulimit -f``, EFBIG) is not called a full disk."""

import errno

from imgalign.cli import main


def test_a_file_size_limit_is_named_as_such_not_as_a_full_disk(tmp_path, monkeypatch, capsys):
    """`imgalign report RUN --out REP` under `ulimit -f 10` said "File too large while writing ...: free disk space
    (or raise the file-size limit, ulimit -f)": the OS had said which (EFBIG), and the user was first sent to free
    space on a disk with room to spare."""
    import imgalign.commands.report as report

    def too_large(args):
        raise OSError(errno.EFBIG, "File too large", str(tmp_path / "rep" / "summary.md"))

    monkeypatch.setattr(report, "run_report", too_large)
    assert main(["report", "run", "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"imgalign report: error: File too large while writing {str(tmp_path / 'rep' / 'summary.md')!r}: the "
        "file-size limit stopped it (the shell's ulimit -f, or the largest file the file system takes): raise it "
        "(ulimit -f unlimited) or write to another file system; then run the same command again\n"
    )


def test_a_checkpoint_file_stopped_by_the_file_size_limit_says_so(tmp_path):
    """`imgalign train` under `ulimit -f 100`: safetensors' "I/O error: File too large (os error 27)" got "is the disk
    full, or a file-size limit (ulimit -f) set? ... free space and continue with --resume auto"."""
    from safetensors import SafetensorError

    from imgalign.trainers.checkpoint import unwritable

    for e in (
        SafetensorError("Error while serializing: I/O error: File too large (os error 27)"),
        OSError(errno.EFBIG, "File too large"),
    ):
        msg = str(unwritable(tmp_path / "trainable.safetensors", e))
        assert "A file-size limit stopped it (the shell's ulimit -f" in msg, msg
        assert "disk full" not in msg and "free space" not in msg
        assert msg.endswith("raise it (ulimit -f unlimited) and continue with --resume auto")
    # a full disk keeps its advice
    full = str(unwritable(tmp_path / "t", OSError(errno.ENOSPC, "No space left on device")))
    assert (
        "is the disk full, or a file-size limit (ulimit -f) set?" in full
        and "free space and continue" in full
    )
