"""``imgalign eval --suite geneval`` and ``--baseline``: needs patches/evaluate-real-suite.patch applied to the
lead's imgalign/commands/evaluate.py (skipped until then)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from imgalign.cli import main
from imgalign.commands import evaluate

torch.set_num_threads(1)
pytestmark = pytest.mark.skipif(
    "geneval" not in evaluate.SUITES,
    reason="apply patches/evaluate-real-suite.patch to imgalign/commands/evaluate.py",
)
SHAPES_PROMPTS = Path(__file__).resolve().parents[1] / "prompts" / "shapes_geneval.jsonl"


def subset(path: Path, tags: dict[str, int]) -> Path:
    out = []
    for line in SHAPES_PROMPTS.read_text().splitlines():
        tag = json.loads(line)["tag"]
        if tags.get(tag, 0) > 0:
            tags[tag] -= 1
            out.append(line)
    path.write_text("\n".join(out) + "\n")
    return path


def test_eval_baseline_prints_the_delta_table(tmp_path, capsys):
    prompts = subset(tmp_path / "p.jsonl", {"single_object": 2, "counting": 2, "position": 2})
    common = ["eval", "--suite", "shapes", "--prompts", str(prompts), "--no-progress"]
    common += ["--images-per-prompt", "1"]
    assert main(common + ["--ground-truth", "--out", str(tmp_path / "base")]) == 0
    # a "fine-tuned" folder: the same renders with one counting image blanked
    images = tmp_path / "ft-images"
    from imgalign.eval.suite import copy_folder

    copy_folder(tmp_path / "base" / "images", images)
    from PIL import Image

    blank = images / "00002" / "samples" / "0000.png"
    Image.new("RGB", Image.open(blank).size, (255, 255, 255)).save(blank)
    capsys.readouterr()
    argv = [
        "eval",
        "--suite",
        "shapes",
        "--no-progress",
        "--images",
        str(images),
        "--out",
        str(tmp_path / "ft"),
    ]
    argv += ["--baseline", str(tmp_path / "base")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| task | baseline" in out and "| counting |" in out and "-0.5000 |" in out
    assert (tmp_path / "ft" / "comparison.md").is_file() and (tmp_path / "ft" / "failures.png").is_file()


def test_eval_baseline_missing_fails_before_work(tmp_path, capsys):
    argv = ["eval", "--ground-truth", "--out", str(tmp_path / "x"), "--baseline", str(tmp_path / "none")]
    assert main(argv) == 2
    assert "--baseline needs" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_eval_geneval_suite_with_tiny_models(tmp_path, capsys, monkeypatch):
    import geneval_real_tiny as T

    sd3 = T.build_tiny_sd3(tmp_path / "sd3")
    detr = T.build_tiny_detr(tmp_path / "detr")
    clip = T.build_tiny_open_clip(tmp_path / "clip")
    prompts = tmp_path / "p.jsonl"
    metas = [
        {"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a photo of a cat"},
        {
            "tag": "colors",
            "include": [{"class": "dog", "count": 1, "color": "red"}],
            "prompt": "a photo of a red dog",
        },
    ]
    prompts.write_text("".join(json.dumps(m) + "\n" for m in metas))
    argv = ["eval", "--suite", "geneval", "--model", str(sd3), "--prompts", str(prompts)]
    argv += ["--detector", str(detr), "--steps", "3", "--guidance-scale", "1.5"]
    argv += ["--clip", str(clip), "--images-per-prompt", "2", "--no-progress", "--out", str(tmp_path / "ev")]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
    assert summary["n_images"] == 4 and set(summary["tasks"]) == {"single_object", "colors"}
    assert (tmp_path / "ev" / "images" / "00001" / "samples" / "0001.png").is_file()
    assert summary["detector"] == str(detr) and summary["clip"] == str(clip) and summary["n_prompts"] == 2
    assert summary["task_images"] == {"single_object": 2, "colors": 2} and summary["eval_args"]["seed"] == 0
    # --steps and --guidance-scale over the pipeline's own settings
    assert summary["sampler"] == {"steps": 3, "guidance": 1.5}
    # the same images judged again into that folder with another detector: refused (its verdicts would be reused)
    other = T.build_tiny_detr(tmp_path / "detr2")
    again = [
        "eval",
        "--suite",
        "geneval",
        "--images",
        str(tmp_path / "ev" / "images"),
        "--detector",
        str(other),
    ]
    assert main(again + ["--clip", str(clip), "--no-progress", "--out", str(tmp_path / "ev2")]) == 0
    judged = json.loads((tmp_path / "ev2" / "summary.json").read_text())["model"]
    assert judged == f"images:{tmp_path / 'ev' / 'images'}"  # as the shapes suite names judged images
    assert (
        main(again[:-1] + [str(detr), "--clip", str(clip), "--no-progress", "--out", str(tmp_path / "ev2")])
        == 2
    )
    assert "holds another evaluation" in capsys.readouterr().err
    # an unreadable image is named by its path in the user's folder, not by the copy judged in --out
    from imgalign.eval.suite import copy_folder

    copy_folder(tmp_path / "ev" / "images", tmp_path / "mine")
    (tmp_path / "mine" / "00000" / "samples" / "0000.png").write_bytes(b"not a png")
    mine = ["eval", "--suite", "geneval", "--images", str(tmp_path / "mine"), "--detector", str(detr)]
    assert main(mine + ["--clip", str(clip), "--no-progress", "--out", str(tmp_path / "ev3")]) == 1
    rows = [json.loads(line) for line in (tmp_path / "ev3" / "results.jsonl").read_text().splitlines()]
    assert [r["error"] for r in rows if r["error"]] == [
        f"cannot read image {tmp_path / 'mine' / '00000' / 'samples' / '0000.png'}: not an image file PIL can read"
    ]
    assert main(["eval", "--suite", "geneval", "--ground-truth", "--out", str(tmp_path / "gt")]) == 2
    assert "only for the shapes suite" in capsys.readouterr().err
    # a judge that cannot load fails before any image is generated and before --out is claimed (a detector folder
    # without weights; a CLIP folder without weights, which open_clip would initialise at random)
    for flag, src, config in (("--detector", detr, "config.json"), ("--clip", clip, "open_clip_config.json")):
        bare = tmp_path / f"{src.name}_without_weights"
        bare.mkdir()
        (bare / config).write_bytes((src / config).read_bytes())
        out = tmp_path / f"ev_{src.name}"
        assert main(argv[:-5] + [flag, str(bare), "--out", str(out)]) == 2
        assert f"{src.name}_without_weights" in capsys.readouterr().err
        assert not out.exists()
    # the judge loads on the CPU before generation (the pipeline needs the device), on the device for --images
    import imgalign.eval.real as R

    devices = []

    def build_judge(detector, clip, metas, device):
        devices.append(device)
        raise ValueError("stop here")

    monkeypatch.setattr(R, "build_judge", build_judge)
    monkeypatch.setattr("imgalign.commands.check_device", lambda device, flag="--device": None)  # no GPU here
    assert main(argv[:-1] + [str(tmp_path / "d1"), "--device", "cuda:7"]) == 2
    assert main(mine + ["--clip", str(clip), "--device", "cuda:7", "--out", str(tmp_path / "d2")]) == 2
    assert devices == ["cpu", "cuda:7"] and "stop here" in capsys.readouterr().err


def test_eval_geneval_prompt_set_errors(tmp_path, capsys):
    import geneval_real_tiny as T

    detr = T.build_tiny_detr(tmp_path / "detr")
    argv = ["eval", "--suite", "geneval", "--model", str(tmp_path), "--out", str(tmp_path / "o")]
    # (the detector is checked after the prompts and the model: a valid pair, and a detector that is no folder)
    no_detector = ["--detector", str(tmp_path / "none"), "--prompts", "generate:0"]
    assert (
        main(["eval", "--suite", "geneval", "--model", "shapes", "--out", str(tmp_path / "o"), *no_detector])
        == 2
    )
    assert "cannot load detector" in capsys.readouterr().err
    argv += ["--detector", str(detr)]
    assert main(argv) == 2
    assert "needs --prompts" in capsys.readouterr().err
    assert main(argv + ["--prompts", "generate:x"]) == 2
    assert "integer seed" in capsys.readouterr().err
    typo = ["eval", "--suite", "geneval", "--model", str(tmp_path / "sd3_typo"), "--detector", str(detr)]
    assert main(typo + ["--prompts", "generate:0", "--out", str(tmp_path / "o4")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "o4" / "eval_args.json").exists()  # the corrected command may use the same --out


def test_eval_geneval_prompts_the_judge_cannot_judge_fail_before_generation(tmp_path, capsys):
    """A prompt naming a class the detector does not know or a colour outside GenEval's 10 fails with its prompt
    number before any image is generated (it was only an unjudged image after sampling); a prompt set whose classes
    the detector knows none of says so, not that it knows none of GenEval's classes."""
    import geneval_real_tiny as T

    sd3 = T.build_tiny_sd3(tmp_path / "sd3")
    detr = T.build_tiny_detr(tmp_path / "detr")
    clip = T.build_tiny_open_clip(tmp_path / "clip")
    cat = {"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a photo of a cat"}
    bad_colour = {
        "tag": "colors",
        "include": [{"class": "cat", "count": 1, "color": "chartreuse"}],
        "prompt": "c",
    }
    unicorn = {"tag": "single_object", "include": [{"class": "unicorn", "count": 1}], "prompt": "u"}
    argv = ["eval", "--suite", "geneval", "--model", str(sd3), "--detector", str(detr), "--clip", str(clip)]
    argv += ["--steps", "2", "--images-per-prompt", "1", "--no-progress"]
    for name, metas, expected in (
        ("colour", [cat, bad_colour], "prompt 2 ('c'): colour 'chartreuse' is not one of GenEval's"),
        ("class", [cat, unicorn], "prompt 2 ('u'): class 'unicorn' is not one the detector can find"),
        ("none", [unicorn], "knows none of the classes ['unicorn']"),
    ):
        prompts = tmp_path / f"{name}.jsonl"
        prompts.write_text("".join(json.dumps(m) + "\n" for m in metas))
        out = tmp_path / f"ev_{name}"
        assert main(argv + ["--prompts", str(prompts), "--out", str(out)]) == 2
        assert expected in capsys.readouterr().err
        assert not out.exists()


def test_a_device_this_machine_lacks_fails_before_anything_loads(tmp_path, capsys, monkeypatch):
    """eval --device cuda (a command copied from a GPU machine) failed with torch's traceback once the model had
    loaded, after --out was claimed; grid likewise. A string torch does not parse is named too."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = ["eval", "--suite", "geneval", "--model", "shapes", "--prompts", "generate:0", "--detector", "x"]
    for device, message in (
        ("cuda", "this machine has no CUDA device; use --device cpu"),
        ("gpu", "not a torch"),
    ):
        out = tmp_path / f"ev_{device}"
        assert main(argv + ["--device", device, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"--device {device!r}" in err and message in err and not out.exists()
    grid = [
        "grid",
        "--model",
        "shapes",
        "--prompt",
        "x",
        "--device",
        "cuda:1",
        "--out",
        str(tmp_path / "g.png"),
    ]
    assert main(grid) == 2
    assert "--device 'cuda:1': this machine has no CUDA device" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    from imgalign.commands import check_device

    check_device("cuda:1")
    with pytest.raises(
        ValueError, match="has 2 CUDA device.*cuda:0 to cuda:1; use --device cpu or one of those"
    ):
        check_device("cuda:2")


def test_the_judge_built_on_the_cpu_before_generation_does_not_judge(tmp_path, capsys, monkeypatch):
    """With --model the judge is built on the CPU only to fail early and let go: evaluate_folder gets judge=None and
    builds its own on the device once the pipeline is gone."""
    import imgalign.eval.real as R
    import imgalign.pipelines as P
    import imgalign.sampling as S

    seen = []

    def evaluate_folder(*args, judge, **kwargs):
        seen.append(judge)
        raise ValueError("stop here")

    import imgalign.commands as C

    monkeypatch.setattr(C, "check_device", lambda device: None)  # cuda:7 on this machine
    monkeypatch.setattr(R, "check_judge_specs", lambda detector, clip: None)

    def build_judge(detector, clip, metas, device):
        return f"detector on {device}", f"colours on {device}", lambda meta: None

    monkeypatch.setattr(R, "build_judge", build_judge)
    monkeypatch.setattr(R, "evaluate_folder", evaluate_folder)
    monkeypatch.setattr(P, "load_pipeline", lambda spec, device: object())
    monkeypatch.setattr(S, "generate_folder", lambda *args, **kwargs: None)
    cat = {"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a photo of a cat"}
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps(cat) + "\n")
    argv = [
        "eval",
        "--suite",
        "geneval",
        "--model",
        "shapes",
        "--prompts",
        str(prompts),
        "--device",
        "cuda:7",
    ]
    assert main(argv + ["--no-progress", "--out", str(tmp_path / "ev")]) == 2
    assert seen == [None] and "stop here" in capsys.readouterr().err


def test_a_shapes_model_on_the_geneval_suite_samples_with_its_trained_settings_and_the_given_seed(
    tmp_path, monkeypatch
):
    """With --model the geneval suite samples with the shapes family's trained settings (not the pipeline's own
    defaults), --steps on top, from --seed; summary.json records those settings."""
    import imgalign.commands as C
    import imgalign.eval.real as R
    import imgalign.pipelines as P
    import imgalign.sampling as S

    monkeypatch.setattr(C, "check_device", lambda device: None)
    monkeypatch.setattr(R, "check_judge_specs", lambda detector, clip: None)
    monkeypatch.setattr(
        R, "build_judge", lambda detector, clip, metas, device: (None, None, lambda meta: None)
    )
    monkeypatch.setattr(P, "load_pipeline", lambda spec, device: object())
    generated, judged = [], []

    def generate_folder(pipe, metas, out_dir, images_per_prompt, seed, **kw):
        generated.append(
            (images_per_prompt, seed, {k: v for k, v in kw.items() if k not in ("progress", "sample")})
        )

    def evaluate_folder(*args, sampler, **kwargs):
        judged.append(sampler)
        raise ValueError("stop here")

    monkeypatch.setattr(S, "generate_folder", generate_folder)
    monkeypatch.setattr(R, "evaluate_folder", evaluate_folder)
    cat = {"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a photo of a cat"}
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps(cat) + "\n")
    argv = ["eval", "--suite", "geneval", "--model", "shapes", "--prompts", str(prompts), "--seed", "3"]
    assert main(argv + ["--steps", "2", "--images-per-prompt", "2", "--out", str(tmp_path / "ev")]) == 2
    settings = {"steps": 2, "guidance": S.GUIDANCE_SCALE, "max_sequence_length": S.MAX_SEQUENCE_LENGTH}
    assert generated == [(2, 3, {"batch_size": 8, **settings})]
    assert judged == [settings]
