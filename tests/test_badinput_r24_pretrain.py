"""Bad-input round 24: `imgalign world pretrain --out` given a component's work folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main


def _no_training(*args: object, **kwargs: object) -> None:
    raise AssertionError("pretraining started")


@pytest.mark.parametrize(("component", "work"), [("clip", "shapes-clip.train"), ("vlm", "shapes-vlm.train")])
def test_the_clip_or_vlm_work_folder_given_as_out_is_refused_not_trained_inside(
    component: str, work: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLIP's and the VLM's work folders hold a checkpoint.pt and no model file, so --out naming one (meant: the
    pretraining folder, to resume) started a new pretraining nested inside it (OUT/shapes-clip.train/shapes-clip.train/)
    from step 0. It is refused, naming the folder to give, as the t2i's work folder is; an empty folder of that name
    is not a work folder."""
    monkeypatch.setattr("imgalign.commands.world._pretrain_one", _no_training)
    folder = tmp_path / "pt" / work
    folder.mkdir(parents=True)
    (folder / "checkpoint.pt").write_bytes(b"x")
    assert main(["world", "pretrain", "--component", component, "--out", str(folder)]) == 2
    err = capsys.readouterr().err
    assert (
        f"--out {str(folder)!r} is the work folder of pretraining {component} (checkpoints and caches); give the "
        f"folder above it ('{folder.parent}')"
    ) in err, err
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint.pt"]
    empty = tmp_path / "new" / work
    empty.mkdir(parents=True)
    with pytest.raises(AssertionError, match="pretraining started"):
        main(["world", "pretrain", "--component", component, "--out", str(empty)])
