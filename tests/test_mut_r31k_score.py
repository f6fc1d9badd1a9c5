"""Mutation round 31k: `imgalign score`'s hold of its partial file (claim_partial, rewrite_partial, read_partial on
the file a run just took) and its --prompts rows indexed by file name."""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import pytest
from conftest import noise_pngs

from imgalign import shapes as W
from imgalign.cli import CLIError, Interrupted, main
from imgalign.commands.score import _lookup, claim_partial, name_index, partial_path, release_partial


def test_a_partial_file_removed_while_this_run_waited_for_its_lock_is_taken_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run holding the file ended (removed it) between this run's open and its lock: the open file is no longer
    the partial file, so this run opens it again and holds the file that is there."""
    import fcntl

    out = tmp_path / "s.jsonl"
    partial = partial_path(out)
    real, calls = fcntl.flock, []

    def flock_after_the_holder_ended(fd: int, op: int) -> None:
        if not calls:
            partial.unlink()
        calls.append(op)
        real(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock_after_the_holder_ended)
    held = claim_partial(partial, out)
    try:
        assert held is not None and len(calls) == 2
        assert os.fstat(held).st_ino == os.stat(partial).st_ino
    finally:
        release_partial(partial, held)
    assert not partial.exists()


def test_on_a_file_system_without_flock_score_runs_and_an_interrupted_run_keeps_its_scores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """flock fails (Lustre without -o flock, some NFS): the run is not refused but says it is not locked, and its
    partial file still starts with its rewards' line, so a rerun after Ctrl-C reuses what it kept."""
    import fcntl

    import imgalign.commands.score as S

    def no_flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    images = noise_pngs(tmp_path / "imgs", 3)
    out = tmp_path / "s.jsonl"
    argv = [
        "score",
        str(images),
        "--reward",
        "artifact",
        "--batch-size",
        "1",
        "--no-progress",
        "--out",
        str(out),
    ]
    real, scored = S._score_group, []

    def stop_after_one(reward, key, x, prompts, metas, rows):
        if scored:
            raise KeyboardInterrupt
        scored.extend(r["file"] for r in rows)
        return real(reward, key, x, prompts, metas, rows)

    monkeypatch.setattr(S, "_score_group", stop_after_one)
    with caplog.at_level(logging.WARNING), pytest.raises(Interrupted, match="the 1 of 3 images"):
        main(argv)
    assert f"cannot lock {partial_path(out)}" in caplog.text
    lines = partial_path(out).read_text().splitlines()
    assert json.loads(lines[0]) == {"rewards": ["artifact"]} and len(lines) == 2
    monkeypatch.setattr(S, "_score_group", real)
    assert main(argv) == 0
    assert len(out.read_text().splitlines()) == 3 and not partial_path(out).exists()


def test_a_first_run_does_not_log_that_it_set_aside_a_partial_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The empty file the run itself just took is no earlier run's partial file 'holding scores of None'."""
    images = noise_pngs(tmp_path / "imgs", 1)
    with caplog.at_level(logging.INFO):
        assert (
            main(
                [
                    "score",
                    str(images),
                    "--reward",
                    "artifact",
                    "--no-progress",
                    "--out",
                    str(tmp_path / "s.jsonl"),
                ]
            )
            == 0
        )
    assert "not reusing" not in caplog.text


def test_a_row_is_found_by_an_image_name_in_capitals(tmp_path: Path) -> None:
    """The index is by lower-case name: an image IMG_1.PNG finds its row 'other/IMG_1.PNG' by name, whether the
    run's index is given or made for the call."""
    mapping = {"other/IMG_1.PNG": {"prompt": "p"}, "other/img_2.png": {"prompt": "q"}}
    for names in (None, name_index(mapping)):
        assert _lookup(tmp_path / "IMG_1.PNG", mapping, None, names=names) == {"prompt": "p"}
        assert _lookup(tmp_path / "img_1.png", mapping, None, names=names) is None  # the name differs in case


def test_an_image_named_in_capitals_is_pointed_at_its_row_of_another_case(tmp_path: Path) -> None:
    images = tmp_path / "imgs"
    images.mkdir()
    W.render(W.single_object("circle"), 0)[0].save(images / "OK0.PNG")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"file": "ok0.png", "prompt": "a circle"}) + "\n")
    out = tmp_path / "s.jsonl"
    argv = ["score", str(images), "--reward", "geneval", "--prompts", str(prompts), "--no-progress"]
    assert main([*argv, "--out", str(out)]) == 1
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert row["error"].startswith(
        f"no prompt for {images / 'OK0.PNG'}: --prompts has 'ok0.png', which differs in letter case"
    )


def test_a_refused_claim_leaves_no_file_open(tmp_path: Path) -> None:
    """A second run refused in-process (a notebook's loop) closes the file it opened to try the lock."""
    out = tmp_path / "s.jsonl"
    partial = partial_path(out)
    held = claim_partial(partial, out)
    try:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(3):
            with pytest.raises(CLIError, match="is being written by another `imgalign score`"):
                claim_partial(partial, out)
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        release_partial(partial, held)


def test_on_a_file_system_without_flock_a_score_that_fails_before_it_scores_leaves_no_file_nor_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a lock there is no hold to release: the empty partial file claim_partial made was left behind, and
    with it the folder made for --out."""
    import fcntl

    def no_flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    (tmp_path / "empty").mkdir()
    out = tmp_path / "new" / "s.jsonl"
    assert main(["score", str(tmp_path / "empty"), "--reward", "artifact", "--out", str(out)]) == 2
    assert "no image files found" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["empty"]
    # a partial file an earlier run kept is not removed
    out.parent.mkdir()
    partial_path(out).write_text("")
    assert main(["score", str(tmp_path / "empty"), "--reward", "artifact", "--out", str(out)]) == 2
    assert partial_path(out).exists()
