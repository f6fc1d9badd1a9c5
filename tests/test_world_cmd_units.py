"""``imgalign world`` (imgalign/commands/world.py): the work-folder locks and the size of the worker pool
(mutation round 10)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from imgalign.cli import main
from imgalign.commands import world
from imgalign.trainers import checkpoint


def _held(folder: Path) -> bool:
    return str(folder.resolve()) in checkpoint._HELD_LOCKS


def test_component_locks_hold_each_work_folder_and_release_them_all(tmp_path: Path) -> None:
    """Each component's own work folder is locked (``WORK/.lock``) while the block runs, and every lock is released
    after it, also when the block raises."""
    works = {"t2i": "t2i-work", "clip": "shapes-clip.train"}
    with world.component_locks(tmp_path, works):
        assert all(_held(tmp_path / w) and (tmp_path / w / ".lock").is_file() for w in works.values())
        assert not _held(tmp_path)
    assert not any(_held(tmp_path / w) for w in works.values())
    with pytest.raises(RuntimeError, match="boom"), world.component_locks(tmp_path, works):
        raise RuntimeError("boom")
    assert not any(_held(tmp_path / w) for w in works.values())


def test_a_refused_run_leaves_no_work_folder_or_out_it_made_but_keeps_what_was_there(tmp_path: Path) -> None:
    """A pretraining refused before it wrote anything (a bad ``init_from``) left ``OUT/t2i-work/.lock`` behind, and
    a new --out with it; a work folder with other files, or one there before, keeps its lock file."""
    out = tmp_path / "new"
    with pytest.raises(ValueError, match="bad init_from"), world.component_locks(out, {"t2i": "t2i-work"}):
        raise ValueError("bad init_from")
    assert not out.exists()
    out.mkdir()
    (out / "old-work").mkdir()
    works = {"t2i": "t2i-work", "clip": "shapes-clip.train", "vlm": "old-work"}
    with world.component_locks(out, works):
        (out / "shapes-clip.train" / "ckpt.pt").write_text("x")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "old-work",
        "old-work/.lock",
        "shapes-clip.train",
        "shapes-clip.train/.lock",
        "shapes-clip.train/ckpt.pt",
    ]


def test_a_component_being_trained_elsewhere_releases_the_locks_taken_before_it(
    tmp_path, monkeypatch
) -> None:
    """The second component's folder is locked by another run: refused by name, and the first one's lock is let go
    (it would otherwise stay held by this process)."""
    real = checkpoint.lock_output_dir
    monkeypatch.setattr(
        checkpoint, "lock_output_dir", lambda out, command: out.name != "busy" and real(out, command=command)
    )
    with pytest.raises(ValueError, match="clip is being trained into it by another imgalign world pretrain"):
        with world.component_locks(tmp_path, {"t2i": "free", "clip": "busy"}):
            raise AssertionError("the block ran without the second lock")
    assert not _held(tmp_path / "free")


def test_more_jobs_than_components_starts_one_worker_per_component(
    tmp_path, inline_pretrain_pool, capsys
) -> None:
    """--jobs 5 with three components starts three worker processes, not five."""
    assert main(["world", "pretrain", "--component", "all", "--out", str(tmp_path), "--jobs", "5"]) == 0
    out = capsys.readouterr().out
    assert "training t2i, clip, vlm in 3 processes (one per component; --jobs 5 asked for more)" in out
    assert inline_pretrain_pool == [3]


def test_a_file_as_out_says_to_give_the_folder_a_run_resumes_from(tmp_path, capsys) -> None:
    """--out naming a file: the message says what folder to give (new, or an earlier run's, to resume), beyond the
    generic "give a folder"."""
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"x")
    assert main(["world", "pretrain", "--component", "clip", "--out", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"--out {str(f)!r} is a file; give a folder (new, or one from an earlier pretraining run" in err
    assert "each component trains in its own sub-folder" in err and f.read_bytes() == b"x"


def test_no_progress_turns_the_bars_off_in_every_pretraining_process(
    tmp_path, inline_pretrain_pool, capsys
) -> None:
    """world pretrain --no-progress (which it lacked, as render and grid did): no component shows a bar, in the pool
    or alone, and the pool's line names no bar."""
    argv = ["world", "pretrain", "--out", str(tmp_path), "--no-progress", "--component"]
    assert main([*argv, "all", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "training t2i, clip, vlm in 2 processes\n" in out and "'progress': True" not in out
    for jobs in ([], ["--jobs", "1"]):  # (--jobs 2 with one component is refused: it trains in one process)
        assert main([*argv, "clip", *jobs]) == 0
        assert "clip: {'progress': False}" in capsys.readouterr().out
    assert main([*argv, "all", "--jobs", "1"]) == 0
    assert "'progress': True" not in capsys.readouterr().out


def test_render_and_grid_take_no_progress(tmp_path, capsys) -> None:
    """world render --no-progress draws no 'rendering' bar; grid --no-progress turns diffusers' loading bar off."""
    import json

    from imgalign.prompts.io import load_geneval_metadata
    from imgalign.prompts.shapes import EVAL_SET_PATH

    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps(load_geneval_metadata(EVAL_SET_PATH)[0]) + "\n")
    for flag, shown in (([], True), (["--no-progress"], False)):
        out = tmp_path / f"r{len(flag)}"
        argv = [
            "world",
            "render",
            "--prompts",
            str(prompts),
            "--images-per-prompt",
            "2",
            "--out",
            str(out),
            *flag,
        ]
        assert main(argv) == 0
        assert ("rendering" in capsys.readouterr().err) is shown
    argv = [
        "grid",
        "--model",
        "a=shapes",
        "--prompt",
        "a red circle",
        "--steps",
        "1",
        "--out",
        str(tmp_path / "g.png"),
    ]
    for flag, shown in (([], True), (["--no-progress"], False)):
        assert main([*argv, *flag]) == 0
        assert ("Loading pipeline components" in capsys.readouterr().err) is shown


def test_an_empty_option_is_named_as_its_flag_is_written():
    """A dest with an underscore is named by its flag (--output-dir), and a value of spaces is empty too."""
    args = argparse.Namespace(output_dir="  ", out="o")
    with pytest.raises(
        ValueError, match=r"^--output-dir is empty \(an unset shell variable\?\): give a run folder$"
    ):
        world.refuse_empty_options(args, {"out": "a folder", "output_dir": "a run folder"})


def test_a_render_interrupted_before_its_first_folder_says_none_was_begun(tmp_path, two_prompts, monkeypatch):
    """Ctrl-C before the first prompt folder was written (--out not made yet) is told as such, not a
    FileNotFoundError of the missing --out."""
    from imgalign.cli import Interrupted

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(world, "render_folder", stop)
    out = tmp_path / "r"
    with pytest.raises(Interrupted, match=r"holds an incomplete render \(0 of 2 prompt folders begun"):
        main(["world", "render", "--prompts", str(two_prompts), "--out", str(out)])
    assert not out.exists()


def test_render_folder_checks_every_line_before_it_writes_anything(tmp_path, two_prompts):
    """A bad second line is refused before the first prompt's folder is written (eval --ground-truth renders
    through it too)."""
    from imgalign import shapes as W
    from imgalign.prompts.io import load_geneval_metadata

    metas = load_geneval_metadata(two_prompts)
    bad = {**metas[1], "include": [{"class": "circle", "count": 1, "color": "teal"}]}
    out = tmp_path / "r"
    with pytest.raises(W.SpecError, match="teal"):
        world.render_folder([metas[0], bad], out, 1, 0, progress=False)
    assert not out.exists()


def test_with_several_components_a_plain_key_whose_value_has_a_dot_asks_for_the_prefix():
    """steps=0.5 under --component all is a key without its component (not a component named 'steps=0')."""
    with pytest.raises(
        ValueError, match=r"--set 'lr=0.5': with --component all, prefix the key .*--set t2i\.lr="
    ):
        world.split_component_overrides(["t2i", "clip"], ["lr=0.5"])


def test_an_open_clip_model_folder_as_out_is_refused(tmp_path, capsys, monkeypatch):
    """--out holding open_clip_config.json (a saved CLIP) is a model folder, as one with config.json is."""
    monkeypatch.setattr(world, "_pretrain_one", lambda module, cfg, out, progress: {"trained": True})
    (tmp_path / "open_clip_config.json").write_text(json.dumps({}))
    assert main(["world", "pretrain", "--component", "clip", "--out", str(tmp_path)]) == 2
    assert "is a model folder (it holds open_clip_config.json)" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["open_clip_config.json"]


def test_a_refused_run_keeps_an_empty_out_that_was_there(tmp_path: Path) -> None:
    """An empty --out made by the user before the run is theirs: a refusal removes only what the run made."""
    out = tmp_path / "mine"
    out.mkdir()
    with pytest.raises(ValueError, match="bad init_from"), world.component_locks(out, {"t2i": "t2i-work"}):
        raise ValueError("bad init_from")
    assert out.is_dir() and not any(out.iterdir())


def test_jobs_with_one_component_is_refused_and_points_to_threads(tmp_path, monkeypatch, capsys) -> None:
    """--jobs is how many components train at once; with one component it was ignored without a word (own fixes,
    stop 57). It is refused before anything trains, naming --set threads; --jobs 1 stays accepted."""
    trained = []
    monkeypatch.setattr(
        world, "_pretrain_one", lambda module, cfg, out, progress: trained.append(module) or {}
    )
    argv = ["world", "pretrain", "--component", "clip", "--out", str(tmp_path / "p"), "--no-progress"]
    assert main([*argv, "--jobs", "3"]) == 2
    err = capsys.readouterr().err
    assert "--jobs 3 is how many components train at once (with --component all)" in err
    assert "--set threads=3" in err and trained == [] and not (tmp_path / "p").exists()
    assert main([*argv, "--jobs", "1"]) == 0 and len(trained) == 1
