"""Mutation round 26 (helper D): behaviour of imgalign/commands/rewards_cmd.py, the pretraining encoders and the
shapes prompts that no earlier test pinned."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from imgalign.cli import main


def test_check_gives_a_verdict_while_a_single_pair_has_finite_scores(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rewards check` refuses a verdict only when every pair's score is non-finite; one finite pair out of 4 is
    still a verdict, with the other 3 counted as non-finite failures. A check that refused as soon as all pairs but
    one were non-finite (``n_nonfinite >= n - 1``) left such a reward without an answer."""

    def one_finite(images, prompts, metadata=None):
        s = torch.full((len(prompts),), float("nan"))
        s[0] = 1.0  # the first image of each call: pair 0 has a finite true and corrupted score
        return s

    mod = types.ModuleType("my_lab.check_one_finite")
    mod.one_finite = one_finite
    monkeypatch.setitem(sys.modules, "my_lab.check_one_finite", mod)
    assert main(["rewards", "check", "--reward", "my_lab.check_one_finite:one_finite", "--n", "4"]) == 0
    out = capsys.readouterr().out
    # pair 0 ties (1.0 vs 1.0): no win; the 3 others are non-finite failures
    assert "true > corrupted in 0.000 of 4 pairs" in out
    assert "mean true 1.0000, corrupted 1.0000; 3 of 4 pairs had a non-finite score" in out


def test_fd_of_shapes_reads_renders_even_beside_a_folder_shapes_of_one_image(
    tmp_path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'shapes' names renders, so the image count check that comes before the encoder loads is for real folders
    only: `fd shapes gen` in a folder holding ./shapes with one image compared gen with renders (after a warning).
    Counting the images of ./shapes for the 'shapes' argument refused it as "holds 1 image", a folder never read."""
    from tests.conftest import noise_pngs

    monkeypatch.chdir(tmp_path)
    noise_pngs(tmp_path / "shapes", 1)
    gen = noise_pngs(tmp_path / "gen", 2, seed=1)
    assert main(["rewards", "fd", "shapes", str(gen), "--features", "stats", "--n", "4"]) == 0
    captured = capsys.readouterr()
    assert f"FD(shapes, {gen}) in stats features: " in captured.out
    assert "holds" not in captured.err


def test_a_colour_corruption_recolours_the_second_clause_when_only_it_has_a_colour() -> None:
    """corrupt offers a colour change when any clause names a colour, not only the first: for "a circle and a red
    square" the colour kind must come up and recolour the square (the circle stays as it was). Offering it only
    when the first clause was coloured left such a spec with shape changes alone."""
    import random

    from imgalign import shapes as W
    from imgalign.pretrain import vlm as vlm_pt

    spec = W.Spec("two_object", (W.Clause("circle"), W.Clause("square", color="red")))
    rng, seen = random.Random(0), 0
    for _ in range(40):
        bad, kind = vlm_pt.corrupt(spec, rng)
        if kind == "colour":
            seen += 1
            assert bad.include[0] == spec.include[0]
            assert bad.include[1].shape == "square" and bad.include[1].color not in (None, "red")
    assert seen > 5


def test_fid_stats_of_shapes_warns_of_nothing_where_no_path_is_named_shapes(
    tmp_path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warning that 'shapes' means renders, not ./shapes, is for a working folder that holds a path named
    'shapes'; without one, `fid-stats --images shapes` says nothing. A warning on every 'shapes' told the user of
    a folder that is not there (and named it a file)."""
    import logging

    monkeypatch.chdir(tmp_path)
    out = str(tmp_path / "s.safetensors")
    with caplog.at_level(logging.WARNING, logger="imgalign.commands.rewards_cmd"):
        argv = ["rewards", "fid-stats", "--images", "shapes", "--out", out, "--features", "stats", "--n", "4"]
        assert main(argv) == 0
    assert [r.getMessage() for r in caplog.records if r.name == "imgalign.commands.rewards_cmd"] == []


def test_fd_names_a_missing_second_argument_before_the_encoder_loads(
    tmp_path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both fd arguments are checked before any encoder loads: `fd shapes nope` names 'nope' as neither a folder,
    a stats file nor 'shapes', without building the features. Checking the first argument only let the second
    reach the encoder and the renders' features, then fail as "path 'nope' is not a folder"."""
    import imgalign.rewards.features as features

    monkeypatch.setattr(features, "build_features", lambda *a, **k: pytest.fail("the encoder loaded"))
    nope = str(tmp_path / "nope")
    assert main(["rewards", "fd", "shapes", nope, "--features", "stats", "--n", "4"]) == 2
    assert f"{nope!r} is not a folder, a stats file or 'shapes'" in capsys.readouterr().err


def test_compare_splits_a_group_at_its_first_equals_sign_so_a_run_folder_may_hold_one(
    tmp_path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--compare LABEL=RUN,...`: the label ends at the first '=', so run folders named after a setting
    (``runs/lr=1e-3``) are read whole. Splitting at the last '=' made the label 'base=runs/lr' and the run '1e-3'."""
    import imgalign.eval.reports as reports

    calls = []

    def compare_runs(groups, keys, out, **kw):
        calls.append(groups)
        md = tmp_path / "compare.md"
        md.write_text("# compare\n")
        return md, tmp_path / "compare.png"

    monkeypatch.setattr(reports, "compare_runs", compare_runs)
    argv = ["report", "--compare", "base=runs/lr=1e-3,runs/lr=1e-4", "--keys", "k", "--out", "o"]
    assert main(argv) == 0
    assert calls == [{"base": ["runs/lr=1e-3", "runs/lr=1e-4"]}]


def test_clip_pretraining_quiets_only_open_clips_random_init_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While the model to pretrain is built, open_clip's root-logger "No pretrained weights loaded for model ..."
    is dropped (random weights are the point), but any other root record still reaches the log, and after the
    block that one passes again. Dropping every root record hid real warnings of the build."""
    import logging

    from imgalign.pretrain import clip as clip_pt

    root = logging.getLogger()
    with caplog.at_level(logging.WARNING):
        with clip_pt.quiet_random_init():
            root.warning(
                "No pretrained weights loaded for model 'shapes-clip-tiny'. Model initialized randomly."
            )
            root.warning("QuickGELU mismatch between final model config and pretrained tag")
        root.warning("No pretrained weights loaded for model 'other'")
    assert [r.getMessage() for r in caplog.records] == [
        "QuickGELU mismatch between final model config and pretrained tag",
        "No pretrained weights loaded for model 'other'",
    ]


def test_training_specs_draw_a_task_in_the_given_order_then_a_spec_of_it() -> None:
    """A seed's training specs (the encoders' render pool, the t2i training prompts) are, per draw, a task chosen
    from `tasks` in the order given, then a spec of that task's training split: a run repeats a published run of
    the same seed only while this order holds. Drawing the task from the sorted names gave other prompts for the
    same seed (W.TASKS is not sorted)."""
    import random

    from imgalign import shapes as W
    from imgalign.prompts.shapes import all_specs, sample_training_specs

    for tasks in (W.TASKS, ("position", "colors")):
        rng = random.Random(7)
        want = [rng.choice(all_specs(rng.choice(tasks), "train")) for _ in range(30)]
        assert sample_training_specs(30, seed=7, tasks=tasks) == want
