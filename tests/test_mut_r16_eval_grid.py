"""``imgalign eval`` (imgalign/commands/evaluate.py) and ``imgalign grid`` (imgalign/commands/grid.py): behaviour
the earlier tests left unchecked (mutation round 16)."""

from __future__ import annotations

import json

import pytest
from test_mut_r15_eval_cmd import ground_truth_argv

from imgalign.cli import main


def test_the_summary_names_the_source_of_the_images_and_the_evaluations_arguments(tmp_path, two_prompts):
    """summary.json's "model" says where the judged images came from: "ground-truth" for the exact renders,
    "images:PATH" for a folder given with --images; its "eval_args" are the shapes suite's eval_args.json."""
    for name, argv in (
        ("gt", ground_truth_argv(two_prompts)),
        ("im", ["eval", "--images", str(tmp_path / "gt" / "images"), "--no-progress"]),
    ):
        assert main([*argv, "--out", str(tmp_path / name)]) == 0
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert summary["eval_args"] == json.loads((tmp_path / name / "eval_args.json").read_text())
        assert summary["eval_args"]["suite"] == "shapes"
    assert json.loads((tmp_path / "gt" / "summary.json").read_text())["model"] == "ground-truth"
    images = str(tmp_path / "gt" / "images")
    assert json.loads((tmp_path / "im" / "summary.json").read_text())["model"] == f"images:{images}"


def test_a_grid_size_below_one_is_refused_as_such_before_loading(tmp_path, monkeypatch, capsys):
    """--size 0 (or negative) is refused by the range check ("must be at least 1"), before any model loads, not
    only as a size the model's configs do not list."""
    import imgalign.pipelines as P

    def load_pipeline(spec, device="cpu", dtype=None):
        raise AssertionError("a model was loaded before the inputs were checked")

    monkeypatch.setattr(P, "load_pipeline", load_pipeline)
    argv = ["grid", "--model", "a=shapes", "--prompt", "x", "--out", str(tmp_path / "g.png")]
    for size in ("0", "-8"):
        assert main([*argv, "--size", size]) == 2
        err = capsys.readouterr().err
        assert f"--size must be at least 1 (got {size})" in err and "Traceback" not in err
    assert not (tmp_path / "g.png").exists()


def test_zero_images_per_prompt_or_seed_zero_with_images_are_refused_as_not_applying(tmp_path, capsys):
    """--images-per-prompt and --seed apply to --model and --ground-truth: with --images they are refused as such
    whatever their value, 0 included (not as a bad count, nor taken without a word)."""
    for extra in (["--images-per-prompt", "0"], ["--seed", "0"]):
        argv = ["eval", "--images", str(tmp_path / "none"), *extra, "--out", str(tmp_path / "o")]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "--prompts, --images-per-prompt and --seed apply to --model and --ground-truth" in err
        assert not (tmp_path / "o").exists()


def test_a_grid_label_used_twice_names_both_model_arguments(tmp_path, capsys):
    """Two columns with one LABEL are refused naming both --model arguments, so the user sees which to rename;
    before any model is looked up (the second path need not exist)."""
    argv = ["grid", "--model", "a=shapes", "--model", "a=/no/such/model", "--prompt", "x"]
    assert main([*argv, "--out", str(tmp_path / "g.png")]) == 2
    err = capsys.readouterr().err
    assert (
        "label 'a' is used twice (--model 'a=shapes' and --model 'a=/no/such/model'); give each model a distinct "
        "LABEL=" in err
    )


def test_an_out_folder_of_another_evaluation_names_each_setting_there_and_now(tmp_path, two_prompts, capsys):
    """Refusing an --out that holds another evaluation names what differs with both values, the recorded one and
    the one given now, so the user can tell which run the folder holds."""
    assert main([*ground_truth_argv(two_prompts), "--out", str(tmp_path / "ev")]) == 0
    assert main([*ground_truth_argv(two_prompts), "--seed", "1", "--out", str(tmp_path / "ev")]) == 2
    assert "holds another evaluation (seed: 0 there, 1 now); its images" in capsys.readouterr().err


def test_a_geneval_grid_reward_on_typed_prompts_says_to_give_a_geneval_file(tmp_path, capsys):
    """--reward geneval judges against GenEval metadata, which typed --prompt rows lack: the error says what to
    give instead."""
    argv = ["grid", "--model", "a=shapes", "--prompt", "a red circle", "--reward", "geneval"]
    assert main([*argv, "--out", str(tmp_path / "g.png")]) == 2
    assert (
        "--reward geneval needs GenEval metadata: give --prompts FILE.jsonl with GenEval lines"
        in capsys.readouterr().err
    )


def test_out_and_baseline_refusals_say_what_to_give_instead(tmp_path, two_prompts, capsys):
    """A non-empty --out without eval_args.json, and a --baseline that is the --out folder itself, are refused
    with the advice the user acts on."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert main([*ground_truth_argv(two_prompts), "--out", str(tmp_path / "mine")]) == 2
    assert (
        "is not empty and was not written by this evaluation (no eval_args.json); give a new or empty --out folder"
        in capsys.readouterr().err
    )
    out = str(tmp_path / "ev")
    assert main([*ground_truth_argv(two_prompts), "--out", out, "--baseline", out]) == 2
    assert (
        f"--baseline {out!r} is the --out folder: this evaluation would be compared with itself; give the --out "
        "folder of another, earlier evaluation" in capsys.readouterr().err
    )
    assert not (tmp_path / "ev").exists()


def test_an_unknown_grid_reward_lists_the_rewards_and_the_module_attr_form():
    from imgalign.commands.grid import check_reward_spec
    from imgalign.rewards.base import list_rewards

    with pytest.raises(ValueError) as info:
        check_reward_spec("nope:x=1")
    assert str(info.value) == (
        f"unknown reward 'nope'; valid rewards: {', '.join(list_rewards())} (or a 'module:attr' path)"
    )
