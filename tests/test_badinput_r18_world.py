"""Bad-input round 18: `imgalign world render` / `pretrain` and `imgalign eval --suite shapes` with odd counts, empty
options, interrupted runs and output folders of other commands."""

from __future__ import annotations

import json

import pytest

from imgalign import shapes as W
from imgalign.cli import main
from imgalign.commands import world
from imgalign.prompts.io import load_geneval_metadata


def test_render_writes_each_image_as_it_is_drawn(tmp_path, two_prompts, monkeypatch, capsys):
    """world render (and eval --ground-truth) kept every image of a prompt in memory until its last one was drawn:
    1 prompt x 20,000 images held 340 MB more (about 17 KB an image), so a huge --images-per-prompt ran out of memory. The
    bar counted prompts: 0/1 for the whole of a one-prompt render."""
    out = tmp_path / "r"
    drawn = []
    real = W.render

    def render(spec, rng):
        # every image drawn before this one is on disk already
        assert len(list(out.glob("*/samples/*.png"))) == len(drawn)
        drawn.append(spec)
        return real(spec, rng)

    monkeypatch.setattr(W, "render", render)
    metas = load_geneval_metadata(two_prompts)
    world.render_folder(metas, out, 3, 0, progress=True)
    assert len(drawn) == 6 and len(list(out.glob("*/samples/*.png"))) == 6
    assert "6/6" in capsys.readouterr().err  # the bar counts images


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["eval", "--images", ""], "--images"),
        (["eval", "--model", ""], "--model"),
        (["eval", "--ground-truth", "--prompts", ""], "--prompts"),
        (["eval", "--ground-truth", "--baseline", ""], "--baseline"),
        (["eval", "--ground-truth", "--suite", ""], "--suite"),
        (["eval", "--images", "imgs", "--suite", "geneval", "--detector", ""], "--detector"),
        (["eval", "--model", "shapes", "--device", " "], "--device"),
        (["world", "render", "--prompts", ""], "--prompts"),
        (["world", "render", "--prompts", "few.jsonl"], "--out"),
        (["world", "pretrain", "--component", "t2i"], "--out"),
    ],
)
def test_an_empty_option_is_refused_naming_it(tmp_path, two_prompts, monkeypatch, capsys, argv, flag):
    """An option given as "" ("$VAR" with VAR unset) was read as no value or as the current folder: eval --images ""
    sampled from no model (AttributeError: 'NoneType' object has no attribute 'vae_scale_factor'), eval --prompts ""
    judged the suite's own 360 prompts and --baseline "" wrote no comparison, both silently; --out "" wrote into the
    current folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "few.jsonl").write_text(two_prompts.read_text())
    out = ["--out", ""] if flag == "--out" else ["--out", "o"]
    extra = []  # the rest of a command that would run (and write) if the empty option were dropped
    if argv[0] == "eval" and flag not in ("--prompts", "--images", "--detector"):
        extra = ["--prompts", "few.jsonl", "--images-per-prompt", "1", "--no-progress"]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main([*argv, *out, *extra]) == 2
    assert f"{flag} is empty (an unset shell variable?): give " in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_an_interrupted_render_says_its_folder_is_incomplete(tmp_path, two_prompts, monkeypatch):
    """Ctrl-C in world render said only "interrupted": the folder left behind (the last prompt short of images) is
    judged by eval --images as if whole, and the same command again is refused as "not empty"."""
    from imgalign.cli import Interrupted

    calls = []
    real = W.render

    def render(spec, rng):
        calls.append(spec)
        if len(calls) == 3:  # image 0 of the second prompt
            raise KeyboardInterrupt
        return real(spec, rng)

    monkeypatch.setattr(W, "render", render)
    out = tmp_path / "r"
    argv = ["world", "render", "--prompts", str(two_prompts), "--images-per-prompt", "2", "--out", str(out)]
    with pytest.raises(Interrupted) as e:
        main(argv)
    assert str(e.value) == (
        f"imgalign world render: interrupted; --out {str(out)!r} holds an incomplete render (2 of 2 prompt folders "
        "begun, the last may lack images): delete it and run the same command again"
    )
    assert len(list(out.glob("*/samples/*.png"))) == 2


def test_init_from_a_lora_checkpoint_is_named_as_one(tmp_path):
    """world pretrain --set init_from=RUN/checkpoints/step-N of a LoRA run said the checkpoint "is incomplete: it
    holds neither its LoRA weights (pytorch_lora_weights.safetensors) nor a model_index.json" while it held them."""
    from imgalign.pretrain import t2i

    ckpt = tmp_path / "step-000001"
    (ckpt / "trainer_state").mkdir(parents=True)
    (ckpt / "pytorch_lora_weights.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError) as e:
        t2i.check_init_from(t2i.Config(init_from=str(ckpt)))
    assert str(e.value) == (
        f"init_from={str(ckpt)!r}: a LoRA checkpoint (LoRA weights over a base model), not a whole pipeline to "
        "continue pretraining from: give its base model, or a checkpoint of a full fine-tune (model.lora_rank: 0)"
    )


def ground_truth_argv(prompts) -> list[str]:
    """``imgalign eval`` of the exact renders of `prompts`, one image each (give --out)."""
    return ["eval", "--ground-truth", "--prompts", str(prompts), "--images-per-prompt", "1", "--no-progress"]


def test_a_baseline_that_is_the_out_folder_is_refused(tmp_path, two_prompts, capsys, monkeypatch):
    """eval --baseline naming its own --out compared the evaluation with itself (every delta +0.0000, "0 now
    correct that failed before") without a word."""
    monkeypatch.chdir(tmp_path)
    argv = ground_truth_argv(two_prompts)
    assert main([*argv, "--out", "ev"]) == 0
    before = (tmp_path / "ev" / "summary.json").read_text()
    capsys.readouterr()
    assert main([*argv, "--out", "ev", "--baseline", str(tmp_path / "ev") + "/"]) == 2
    assert "--baseline" in (err := capsys.readouterr().err) and "is the --out folder" in err
    assert not (tmp_path / "ev" / "comparison.md").exists()
    assert (tmp_path / "ev" / "summary.json").read_text() == before


def test_eval_images_warns_of_prompt_folders_short_of_images(tmp_path, two_prompts, caplog):
    """eval --images of a folder whose last prompt has fewer images (a render or generation interrupted) judged it
    as if whole, without a word; a folder where every prompt holds as many images gets no warning."""
    import logging

    metas = load_geneval_metadata(two_prompts)
    world.render_folder(metas, tmp_path / "r", 3, 0, progress=False)
    argv = ["eval", "--images", str(tmp_path / "r"), "--no-progress"]
    with caplog.at_level(logging.WARNING):
        assert main([*argv, "--out", str(tmp_path / "whole")]) == 0
    assert "fewer images" not in caplog.text
    (tmp_path / "r" / "00001" / "samples" / "0002.png").unlink()
    (tmp_path / "r" / "00001" / "samples" / "0001.png").unlink()
    with caplog.at_level(logging.WARNING):
        assert main([*argv, "--out", str(tmp_path / "short")]) == 0
    assert "1 of 2 prompt folders hold fewer images than the 3 of the others: 00001 (1);" in caplog.text


@pytest.mark.parametrize("name", ["config.json", "timing.json"])
def test_a_damaged_json_file_of_the_t2i_work_folder_is_named(tmp_path, name):
    """world pretrain --component t2i with a cut-short t2i-work/config.json or timing.json said only "error:
    Expecting value: line 1 column 1 (char 0)", naming no file."""
    import dataclasses

    from imgalign.pretrain import t2i

    cfg = t2i.Config(steps=1)
    work = tmp_path / t2i.WORK
    work.mkdir()
    (work / "config.json").write_text(json.dumps(dataclasses.asdict(cfg)))
    (work / name).write_text('{"steps": ')
    with pytest.raises(
        ValueError, match=rf"^{work / name} is damaged \(not valid JSON: Expecting value.*\); "
    ):
        t2i.pretrain(cfg, tmp_path, progress=False)


def test_a_baseline_given_as_its_summary_json_is_read_as_its_folder(
    tmp_path, two_prompts, capsys, monkeypatch
):
    """--baseline EVAL/summary.json said "EVAL/summary.json/summary.json does not exist"; it compares with EVAL (and
    EVAL/summary.json as the --out folder's own is still refused)."""
    monkeypatch.chdir(tmp_path)
    argv = ground_truth_argv(two_prompts)
    assert main([*argv, "--out", "base"]) == 0
    assert main([*argv, "--out", "ev", "--baseline", "base/summary.json"]) == 0
    assert (tmp_path / "ev" / "comparison.md").is_file()
    capsys.readouterr()
    assert main([*argv, "--out", "ev", "--baseline", "ev/summary.json"]) == 2
    assert "is the --out folder" in capsys.readouterr().err
    # another file of the folder (it said "base/results.jsonl/summary.json does not exist"), or a file elsewhere
    assert main([*argv, "--out", "ev2", "--baseline", "base/results.jsonl"]) == 0
    assert (tmp_path / "ev2" / "comparison.md").is_file()
    (tmp_path / "scores.jsonl").write_text("{}\n")
    capsys.readouterr()
    assert main([*argv, "--out", "ev3", "--baseline", "scores.jsonl"]) == 2
    assert (
        "--baseline 'scores.jsonl' is a file; give the --out folder of an earlier" in capsys.readouterr().err
    )


def test_a_device_is_said_to_be_unused_where_the_shapes_suite_samples_nothing(tmp_path, two_prompts, caplog):
    """--device with --ground-truth (or --images) was ignored without a word: the exact shapes judge runs on the
    CPU and nothing is sampled."""
    argv = ground_truth_argv(two_prompts)
    assert main([*argv, "--out", str(tmp_path / "a"), "--device", "cuda"]) == 0
    assert "--device cuda is unused: the shapes suite only samples with --model" in caplog.text
    caplog.clear()
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    assert "is unused" not in caplog.text
