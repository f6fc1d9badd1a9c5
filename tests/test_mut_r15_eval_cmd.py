"""``imgalign eval`` (imgalign/commands/evaluate.py): options that apply only to some sources, the --device warning
and the devices of the geneval suite, a prompt file literally named generate:SEED, --no-progress, --baseline of a
folder named summary.json (mutation round 15)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from imgalign.cli import main


def ground_truth_argv(prompts: Path) -> list[str]:
    """``imgalign eval`` of the exact renders of `prompts`, one image each (give --out)."""
    return ["eval", "--ground-truth", "--prompts", str(prompts), "--images-per-prompt", "1", "--no-progress"]


def test_sampler_options_are_refused_with_images_too(tmp_path, two_prompts, capsys):
    """--steps and --guidance-scale change how --model samples; with --images (nothing samples) they are refused,
    before --out is claimed, as with --ground-truth."""
    assert main([*ground_truth_argv(two_prompts), "--out", str(tmp_path / "gt")]) == 0
    capsys.readouterr()
    for extra in (["--steps", "3"], ["--guidance-scale", "2"]):
        argv = ["eval", "--images", str(tmp_path / "gt" / "images"), *extra, "--out", str(tmp_path / "o")]
        assert main(argv) == 2
        assert "--steps and --guidance-scale apply to --model" in capsys.readouterr().err
        assert not (tmp_path / "o").exists()


def test_a_device_is_not_called_unused_where_the_shapes_suite_samples_on_it(
    tmp_path, two_prompts, monkeypatch, caplog
):
    """--model samples on --device: no 'is unused' warning there (it is said only where nothing samples)."""
    import imgalign.sampling as S

    devices = []

    def load_pipeline(model, device="cpu"):
        devices.append(device)
        raise ValueError("stop here")

    monkeypatch.setattr(S, "load_pipeline", load_pipeline)
    monkeypatch.setattr("imgalign.commands.check_device", lambda device, flag="--device": None)  # no GPU here
    argv = ["eval", "--model", "shapes", "--prompts", str(two_prompts), "--images-per-prompt", "1"]
    with caplog.at_level(logging.WARNING):
        assert main([*argv, "--device", "cuda:1", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert devices == ["cuda:1"] and "is unused" not in caplog.text


def test_a_prompt_file_named_like_generate_seed_is_read_as_a_file(tmp_path, two_prompts, monkeypatch):
    """generate:SEED is refused by the shapes suite only when no such file exists: a file of that name is the user's
    prompt file and is judged."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "generate:1").write_text(two_prompts.read_text())
    argv = ["eval", "--ground-truth", "--prompts", "generate:1", "--images-per-prompt", "1", "--no-progress"]
    assert main([*argv, "--out", "o"]) == 0
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["n_images"] == 2


def test_the_geneval_suite_samples_and_judges_on_device(tmp_path, monkeypatch):
    """--suite geneval --device cuda:7: --model loads the pipeline there, builds the judge on the CPU first (only to
    fail early) and judges on the device, recording the evaluation's arguments; --images builds its judge on the
    device once and judges with it, naming the user's folder in errors."""
    import imgalign.commands as C
    import imgalign.eval.real as R
    import imgalign.pipelines as P
    import imgalign.sampling as S
    from imgalign.commands.world import render_folder

    seen: dict = {"built": []}
    monkeypatch.setattr(C, "check_device", lambda device: None)  # no GPU here
    monkeypatch.setattr(R, "check_judge_specs", lambda detector, clip: None)

    def build_judge(detector, clip, metas, device):
        seen["built"].append(device)
        return f"detector on {device}", "colours", lambda meta: None

    def evaluate_folder(images, out, detector, clip, **kw):
        seen["judged"] = kw
        raise ValueError("stop here")

    monkeypatch.setattr(R, "build_judge", build_judge)
    monkeypatch.setattr(R, "evaluate_folder", evaluate_folder)
    monkeypatch.setattr(P, "load_pipeline", lambda spec, device: seen.update(pipeline=device) or object())
    monkeypatch.setattr(S, "generate_folder", lambda *args, **kwargs: None)
    cat = {"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a photo of a cat"}
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps(cat) + "\n")
    argv = ["eval", "--suite", "geneval", "--device", "cuda:7", "--no-progress"]
    assert main([*argv, "--model", "shapes", "--prompts", str(prompts), "--out", str(tmp_path / "ev")]) == 2
    assert seen["pipeline"] == "cuda:7" and seen["built"] == ["cpu"]
    judged = seen["judged"]
    assert judged["device"] == "cuda:7" and judged["judge"] is None and judged["source_dir"] is None
    assert judged["extra"]["eval_args"] == json.loads((tmp_path / "ev" / "eval_args.json").read_text())
    assert judged["extra"]["eval_args"]["model"] == "shapes"
    images = tmp_path / "imgs"
    circle = {
        "tag": "single_object",
        "include": [{"class": "circle", "count": 1}],
        "prompt": "a photo of a circle",
    }
    render_folder([circle], images, 1, 0, progress=False)
    seen["built"].clear()
    assert main([*argv, "--images", str(images), "--out", str(tmp_path / "ev2")]) == 2
    judged = seen["judged"]
    assert seen["built"] == ["cuda:7"] and judged["judge"][0] == "detector on cuda:7"
    assert judged["device"] == "cuda:7" and judged["source_dir"] == images


def test_no_progress_reaches_the_render_and_the_judge(tmp_path, two_prompts, monkeypatch):
    """--no-progress turns off the bars of the shapes suite's render and of its judge (without it both show)."""
    from imgalign.commands import evaluate

    seen = []
    real_render, real_judge = evaluate.render_folder, evaluate.judge_folder

    def render_folder(*args, progress=True, **kw):
        seen.append(("render", progress))
        return real_render(*args, progress=False, **kw)

    def judge_folder(*args, progress=True, **kw):
        seen.append(("judge", progress))
        return real_judge(*args, progress=False, **kw)

    monkeypatch.setattr(evaluate, "render_folder", render_folder)
    monkeypatch.setattr(evaluate, "judge_folder", judge_folder)
    assert main([*ground_truth_argv(two_prompts), "--out", str(tmp_path / "a")]) == 0
    assert seen == [("render", False), ("judge", False)]
    seen.clear()
    argv = [a for a in ground_truth_argv(two_prompts) if a != "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    assert seen == [("render", True), ("judge", True)]


def test_only_a_file_named_summary_json_stands_for_its_folder(tmp_path, two_prompts, monkeypatch):
    """--baseline EVAL/summary.json reads EVAL; an evaluation folder that is itself named summary.json is read as
    that folder, not as its parent."""
    monkeypatch.chdir(tmp_path)
    argv = ground_truth_argv(two_prompts)
    assert main([*argv, "--out", "summary.json"]) == 0
    assert main([*argv, "--out", "ev", "--baseline", "summary.json"]) == 0
    assert "# Comparison with the baseline" in (tmp_path / "ev" / "comparison.md").read_text()


def test_claiming_a_file_as_the_out_folder_is_refused_by_name(tmp_path):
    """claim_out_folder on a file says it is a file (not mkdir's FileExistsError), and leaves it as it was."""
    from imgalign.commands.evaluate import claim_out_folder

    (tmp_path / "ev").write_text("mine")
    with pytest.raises(
        ValueError, match=r"^--out '.*ev' is a file; give a folder for the evaluation's outputs$"
    ):
        claim_out_folder(tmp_path / "ev", {"suite": "shapes"})
    assert (tmp_path / "ev").read_text() == "mine"
