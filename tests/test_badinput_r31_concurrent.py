"""Bad-input round 31: two commands writing the same output file at once (`imgalign score --out`, `imgalign eval
--out DIR` run twice by mistake, or by two jobs of one script)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from imgalign.files import NAME_MAX, atomic_write_text, replacing


def test_a_write_that_finishes_while_another_is_writing_does_not_publish_the_other_half_written(
    tmp_path: Path,
) -> None:
    """Both writers used ``.NAME.tmp``: the second truncated the file the first was writing, moved it into place,
    and the first went on writing into the published file (a reader saw it empty or mixed), then failed with
    FileNotFoundError. Each write now has a temporary file of its own: the published file is always one writer's
    whole content, and the last to finish wins."""
    path = tmp_path / "scores.jsonl"
    with replacing(path) as tmp, open(tmp, "w") as fh:
        fh.write('{"w": "A", "half": 1}\n')
        fh.flush()
        atomic_write_text(path, '{"w": "B"}\n')  # the other command, start to end
        assert path.read_text() == '{"w": "B"}\n'
        fh.write('{"w": "A", "half": 2}\n')
        fh.flush()
        assert path.read_text() == '{"w": "B"}\n'  # not the file A is still writing
    assert path.read_text() == '{"w": "A", "half": 1}\n{"w": "A", "half": 2}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["scores.jsonl"]


def test_two_writes_at_once_of_a_name_near_the_limit_get_different_temporary_files(tmp_path: Path) -> None:
    """A name whose temporary name is hashed (over NAME_MAX bytes with '.tmp') still gets one per write."""
    path = tmp_path / ("a" * 250 + ".json")
    with replacing(path) as first, replacing(path) as second:
        assert first != second and first.parent == second.parent == tmp_path
        assert all(len(p.name.encode()) <= NAME_MAX and p.name.startswith(".") for p in (first, second))
        first.write_text("1")
        second.write_text("2")
    assert path.read_text() == "1" and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_an_eval_into_an_out_folder_another_eval_is_writing_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two `imgalign eval --model M --out DIR` started at once into an empty DIR (a script's loop, a job submitted
    twice, another --seed) both took it: the second took over while the first's model loaded, its images replaced
    the first's, and both ended with status 0. While one evaluates into DIR, another is refused before it writes
    anything; once it ended, DIR is taken as before."""
    from imgalign.cli import main
    from imgalign.commands.evaluate import claim_out_folder
    from imgalign.trainers.checkpoint import unlock_output_dir

    out = tmp_path / "ev"
    out.mkdir()
    holder = subprocess.Popen(  # another evaluation holding the folder
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(60)",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert (
            main(["eval", "--ground-truth", "--images-per-prompt", "1", "--out", str(out), "--seed", "1"])
            == 2
        )
        assert (
            f"--out {str(out)!r} is being written by another imgalign eval (the same command started twice?): wait "
            "for it to end, or give another --out folder"
        ) in capsys.readouterr().err
        assert list(out.iterdir()) == []
    finally:
        holder.kill()
        holder.wait()
    try:
        claim_out_folder(out, {"suite": "shapes", "seed": 1})  # (the lock went with the other process)
    finally:
        unlock_output_dir(out)  # (as run_eval does when it ends)
    assert json.loads((out / "eval_args.json").read_text()) == {"suite": "shapes", "seed": 1}


def test_an_eval_on_a_file_system_without_flock_runs_and_says_it_is_not_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Lustre without -o flock: the evaluation went on without a word, where train warns; it now warns the same way
    (the trainer's lock, on the folder itself), and writes its eval_args.json."""
    import errno
    import fcntl

    from imgalign.commands.evaluate import claim_out_folder
    from imgalign.trainers.checkpoint import unlock_output_dir

    def no_flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    out = tmp_path / "ev"
    with caplog.at_level("WARNING"):
        claim_out_folder(out, {"suite": "shapes"})
    assert f"cannot lock {out}" in caplog.text and "a second imgalign eval started into" in caplog.text
    assert [p.name for p in out.iterdir()] == ["eval_args.json"]
    unlock_output_dir(out)
