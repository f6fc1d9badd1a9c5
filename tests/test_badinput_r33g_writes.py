"""Bad input, round 33g: commands that write, on a disk that fills up mid-write."""

import errno

import pytest
from test_train import _sgd_trainer


def test_a_checkpoint_save_cut_short_by_a_full_disk_leaves_no_half_written_folder(
    sd3_dir, tmp_path, monkeypatch
):
    """`imgalign train` on a disk that filled during a checkpoint save said "free space and continue with --resume
    auto", and left checkpoints/.tmp-step-N behind: the half-written checkpoint (15 MB of a 15 MB disk in the trial),
    hidden by its dot name, held the very space the user was told to free. The run's earlier checkpoint is kept."""
    from imgalign.trainers import checkpoint as C

    tr = _sgd_trainer(sd3_dir, tmp_path)
    good = tr.save(1)
    real = C.torch_save

    def full(obj, path):
        if path.name == "scheduler.pt":
            raise C.unwritable(path, OSError(errno.ENOSPC, "No space left on device"))
        real(obj, path)

    monkeypatch.setattr(C, "torch_save", full)
    with pytest.raises(OSError, match="No space left on device"):
        tr.save(2)
    root = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["step-000001"]
    assert (good / "trainer_state" / "state.json").is_file()


def _full_disk_save_file(monkeypatch):
    """safetensors' save_file failing as it does on a full disk (its file is left behind, as a cut write leaves it)."""
    import safetensors.torch
    from safetensors import SafetensorError

    def full(tensors, filename, metadata=None):
        open(filename, "wb").write(b"half")
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", full)


def test_fid_stats_on_a_full_disk_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys):
    """`imgalign rewards fid-stats --out` on a disk that filled while the statistics were written gave a traceback
    ending in safetensors' SafetensorError; now one line that names the file and says what to do, and nothing is
    left under the name or beside it."""
    from conftest import noise_pngs

    from imgalign.cli import main

    images = noise_pngs(tmp_path / "imgs", 3)
    out = tmp_path / "out" / "fs.safetensors"
    _full_disk_save_file(monkeypatch)
    argv = ["rewards", "fid-stats", "--images", str(images), "--features", "stats", "--out", str(out)]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"imgalign rewards fid-stats: error: cannot write the FID statistics to {str(out)!r} (SafetensorError: Error "
        "while serializing: I/O error: No space left on device (os error 28)): is the disk full, or a file-size "
        "limit (ulimit -f) set? Nothing was written under that name; free space and run the same command again\n"
    )
    assert list(out.parent.iterdir()) == []


def test_a_reward_head_written_to_a_full_disk_names_the_file(tmp_path, monkeypatch):
    """`imgalign rewards fit-discriminator` / `fit-artifact` write their head with save_head: the same traceback."""
    from imgalign.rewards.heads import FeatureHead, save_head

    _full_disk_save_file(monkeypatch)
    out = tmp_path / "head.safetensors"
    with pytest.raises(
        OSError, match=r"cannot write the reward head to '.*head\.safetensors' \(SafetensorError"
    ):
        save_head(out, FeatureHead(4, 0), "stats", "discriminator", {})
    assert list(tmp_path.iterdir()) == []


def test_eval_images_copy_cut_by_a_full_disk_names_the_copy_and_what_to_do(
    tmp_path, two_prompts, monkeypatch, capsys
):
    """`imgalign eval --images DIR --out OUT` copies DIR into OUT/images; a disk that filled during the copy gave
    Python's own line, "[Errno 28] No space left on device: 'DIR/00000/samples/0000.png' -> 'OUT/images/...'": the
    file copied from first, and nothing to do. The line now names the file being written and says how to go on."""
    import shutil

    from imgalign.cli import main

    src = tmp_path / "imgs"
    assert (
        main(
            ["world", "render", "--prompts", str(two_prompts), "--images-per-prompt", "1", "--out", str(src)]
        )
        == 0
    )
    capsys.readouterr()

    def full(a, b, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(a), None, str(b))

    monkeypatch.setattr(shutil, "copy2", full)
    out = tmp_path / "ev"
    assert main(["eval", "--images", str(src), "--out", str(out), "--no-progress"]) == 2
    target = out / "images" / "00000" / "metadata.jsonl"
    assert capsys.readouterr().err == (
        f"imgalign eval: error: No space left on device while writing {str(target)!r}: free disk space (or raise the "
        "file-size limit, ulimit -f); the images and verdicts written so far are kept: run the same command again "
        "to continue\n"
    )


@pytest.mark.parametrize(
    ("entry", "folder", "said"),
    [
        ("config.yaml", True, "holds a folder named 'config.yaml', where a run writes its config.yaml file"),
        (
            "metrics.jsonl",
            True,
            "holds a folder named 'metrics.jsonl', where a run writes its metrics.jsonl file",
        ),
        ("samples", False, "holds a file named 'samples', where a run writes its samples/ folder"),
        (
            "checkpoints",
            False,
            "holds a file named 'checkpoints', where a run writes its checkpoints/ folder",
        ),
    ],
)
@pytest.mark.parametrize("resume", [[], ["--resume", "auto"]], ids=["new", "resume-auto"])
def test_a_run_folder_entry_of_the_wrong_kind_is_refused_before_anything_loads(
    entry, folder, said, resume, tmp_path, monkeypatch, capsys
):
    """A folder named config.yaml in --output-dir failed with "[Errno 21] Is a directory:
    'OUT/.config.yaml.PID-XXXX.tmp' -> 'OUT/config.yaml'" (the hidden temporary named first, nothing to do); a file
    named samples with "[Errno 17] File exists: 'OUT/samples'" after the first step was computed; a folder named
    metrics.jsonl was "a training run" to continue with --resume auto, which could not read it."""
    import imgalign.trainers.trainer as trainer
    from imgalign.cli import main

    def never(*a, **k):
        raise AssertionError("the run started")

    monkeypatch.setattr(trainer, "run", never)
    out = tmp_path / "run"
    out.mkdir()
    (out / entry).mkdir() if folder else (out / entry).write_text("x")
    assert main(["train", "--output-dir", str(out), *resume]) == 2
    assert capsys.readouterr().err == (
        f"imgalign train: error: --output-dir {str(out)!r} {said}: move that {'folder' if folder else 'file'} away "
        "(or give another --output-dir)\n"
    )


def test_a_folder_where_report_writes_a_file_is_named_with_what_to_do(tmp_path, capsys):
    """`imgalign report RUN --out OUT` with a folder OUT/report.md (or `score --out` with a folder at its partial
    file's name) failed with "[Errno 21] Is a directory: 'OUT/.report.md.PID-XXXX.tmp' -> 'OUT/report.md'": the
    hidden temporary named first, nothing to do. The temporary is gone either way."""
    import json

    from imgalign.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in (1, 2))
    )
    out = tmp_path / "rep"
    (out / "report.md").mkdir(parents=True)
    assert main(["report", str(run), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"imgalign report: error: {str(out / 'report.md')!r} is a folder, where a file is written: move that folder "
        "away (or write elsewhere)\n"
    )
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == []
