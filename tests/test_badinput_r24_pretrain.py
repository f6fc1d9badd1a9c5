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


def test_a_checkpoint_cut_where_torch_reads_it_as_an_os_error_is_named_as_damaged(tmp_path: Path) -> None:
    """A pretraining checkpoint cut short at some lengths (here 5000 bytes of 4 MB) reaches torch's zip reader as
    OSError "[Errno 22] Invalid argument", which was re-raised as the file system's error: the command printed that
    alone, naming no file. It is named as a damaged checkpoint, with what to do, as other cuts are."""
    import torch

    from imgalign.pretrain import cut_archive, load_state

    whole = tmp_path / "checkpoint.pt"
    torch.save({"config": {}, "model": torch.zeros(1_000_000)}, whole)
    cut = tmp_path / "cut" / "checkpoint.pt"
    cut.parent.mkdir()
    cut.write_bytes(whole.read_bytes()[:5000])
    with pytest.raises(ValueError) as e:
        load_state(cut, required=("config",))
    assert str(e.value) == (
        f"{cut}: damaged training checkpoint, cannot be read (cut short: OSError: [Errno 22] Invalid argument); "
        "delete it to start this stage over from step 0, or use another --out"
    )
    assert load_state(whole, required=("config",))["model"].shape == (1_000_000,)  # type: ignore[index]
    assert (
        cut_archive(cut) and not cut_archive(whole) and not cut_archive(tmp_path)
    )  # a folder: not its content
