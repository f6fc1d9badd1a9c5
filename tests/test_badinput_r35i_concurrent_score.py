"""Bad input, round 35i: two `imgalign score` runs with one --out at the same time (a job submitted twice, a script's
loop). They shared the hidden partial file beside --out: the first to end deleted it, and the other's scored images
went on into a new file without its first line ({"rewards": [...]}), so after a Ctrl-C its "kept in ...: run the same
command again" was not true, and the rerun logged "holds scores of None" and scored every image again."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
from conftest import noise_pngs

from imgalign.cli import CLIError, main
from imgalign.commands.score import claim_partial, partial_path, release_partial, rewrite_partial


def test_a_score_into_an_out_another_score_is_writing_is_refused_before_any_reward_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    images = noise_pngs(tmp_path / "imgs", 2)
    out = tmp_path / "s.jsonl"
    partial = partial_path(out)
    kept = json.dumps({"rewards": ["artifact"]}) + "\n"
    partial.write_text(kept)
    fd = os.open(partial, os.O_RDWR)  # the other run, scoring into the same --out
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        assert main(["score", str(images), "--reward", "artifact", "--no-progress", "--out", str(out)]) == 2
    finally:
        os.close(fd)
    err = capsys.readouterr().err
    assert "is being written by another `imgalign score`" in err and partial.name in err
    assert "wait for it to end, or give this run another --out" in err
    assert not out.exists() and partial.read_text() == kept  # the other run's file untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["imgs", partial.name])


def test_the_lock_stays_with_the_partial_file_through_its_rewrite_and_a_run_that_ended(
    tmp_path: Path,
) -> None:
    """The run rewrites its partial file (a new file moved into place): the lock is on the new file, so another run
    is still refused; once the holder ended (its file removed), the next run takes a file of its own."""
    out = tmp_path / "s.jsonl"
    partial = partial_path(out)
    held = claim_partial(partial, out)
    assert held is not None and partial.read_text() == ""
    rewrite_partial(partial, '{"rewards": ["clip"]}\n', held)
    assert partial.read_text() == '{"rewards": ["clip"]}\n'
    with pytest.raises(CLIError, match="is being written by another `imgalign score`"):
        claim_partial(partial, out)
    assert [p.name for p in tmp_path.iterdir()] == [partial.name]  # no temporary file left
    partial.unlink()  # the holder's run ended (its scores written to --out)
    other = claim_partial(partial, out)  # opened and locked after the holder removed its file
    release_partial(partial, held)
    try:
        assert other is not None and os.fstat(other).st_ino == os.stat(partial).st_ino
        with pytest.raises(CLIError, match="another `imgalign score`"):
            claim_partial(partial, out)
    finally:
        release_partial(partial, other)
    assert list(tmp_path.iterdir()) == []  # the empty file it created goes with it


def test_a_score_that_fails_before_it_scores_leaves_no_file_nor_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    out = tmp_path / "new" / "deeper" / "s.jsonl"
    assert main(["score", str(tmp_path / "empty"), "--reward", "artifact", "--out", str(out)]) == 2
    assert "no image files found" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["empty"]
