"""``imgalign report`` on a training run's metrics.jsonl, and the evaluation-vs-baseline comparison."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imgalign.cli import main

SHAPES_PROMPTS = Path(__file__).resolve().parents[1] / "prompts" / "shapes_geneval.jsonl"


def write_run(folder: Path, n: int = 40, inflation: bool = True, tail: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for s in range(n):
        row = {
            "step": s,
            "reward/geneval/mean": 0.2 + 0.01 * s,
            "reward/geneval/std": 0.1,
            "policy/kl": 0.001 * s,
            "policy/clipfrac": 0.05,
            "perf/step_time": 1.0,
        }
        if s % 2 == 0:
            row["reward/clip/mean"] = 0.3 - 0.001 * s  # logged every other step
        if inflation:
            row["vnorm/inflation/low"] = 1.0 + 0.01 * s
            row["vnorm/inflation/high"] = 1.1
        lines.append(json.dumps(row))
    lines.append(json.dumps({"step": n, "policy/kl": float("nan")}))  # json writes NaN; it is skipped
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n" + tail)
    return folder


def test_report_plots_and_summary(tmp_path, capsys):
    run = write_run(tmp_path / "run-a", tail='{"step": 41, "reward/geneval/me')  # killed mid-write
    assert main(["report", str(run)]) == 0
    out = run / "report"
    for name in ("rewards", "kl", "clipfrac", "inflation"):
        with Image.open(out / f"{name}.png") as im:
            assert im.format == "PNG" and im.size[0] > 200
    md = (out / "report.md").read_text()
    assert "41 logged rows, steps 0-40." in md
    # first / last / best / mean of the last 10% (4 of 40 values: steps 36-39), by hand
    assert "| `reward/geneval/mean` | 0.2 | 0.59 | 0.59 | 0.575 |" in md
    assert "| `reward/clip/mean` | 0.3 | 0.262 | 0.3 | 0.263 |" in md  # 20 values, last 2: 0.264, 0.262
    assert "| `policy/kl` | 0 | 0.039 | — | 0.0375 |" in md  # the NaN row is ignored
    # windows of 4 (10% of 40): means 0.215 and 0.575; each window's sample std 0.0129, se sqrt(2·0.0129²/4)
    assert "`reward/geneval/mean` moved +0.36 ± 0.0091 (standard error) from the mean of its first 4" in md
    assert "perf/step_time" not in md
    assert "report.md" in capsys.readouterr().out


def test_run_summary_lines_give_the_evaluations_and_windowed_reward_changes(tmp_path):
    from imgalign.eval.reports import run_summary_lines

    run = write_run(tmp_path / "run")
    evals = [
        {"step": 0, "eval/shapes/overall": 0.35, "eval/shapes/colors": 0.9},
        {"step": 20, "eval/shapes/overall": 0.5},  # the best, not the last
        {"step": 40, "eval/shapes/overall": 0.4},
    ]
    (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    lines = run_summary_lines(run)
    assert lines[0] == "`eval/shapes/overall` 0.35 at step 0 -> 0.4 at step 40"
    # clip is logged on the 20 even steps: windows of 2, (0.3, 0.298) and (0.264, 0.262); each sample variance 2e-6
    assert lines[1].startswith("`reward/clip/mean` moved -0.036 ± 0.0014 (standard error)")
    assert lines[2].startswith("`reward/geneval/mean` moved +0.36 ± 0.0091")
    assert len(lines) == 3
    assert run_summary_lines(tmp_path / "empty") == []
    (run / "eval.jsonl").write_text(json.dumps(evals[0]) + "\n")  # one evaluation: said once
    assert run_summary_lines(run)[0] == "`eval/shapes/overall` 0.35 at step 0"
    # a log that cannot be read is named in the summary of a finished run, not raised (`imgalign train` exited 2)
    (run / "eval.jsonl").write_text('{"step": 0, "eval/shapes/overall": 0.35}\nnot json\n{"step": 1}\n')
    lines = run_summary_lines(run)
    assert lines[0] == f"(not summarised: {run / 'eval.jsonl'}:2: not valid JSON (Expecting value))", lines
    assert lines[1].startswith("`reward/clip/mean` moved") and len(lines) == 3
    (run / "metrics.jsonl").write_text("")
    assert run_summary_lines(run)[-1].startswith(
        f"(not summarised: {run / 'metrics.jsonl'} holds no metrics rows"
    )


def test_report_gives_the_in_loop_evaluations_and_their_plot(tmp_path, capsys, caplog):
    run = write_run(tmp_path / "run")
    evals = [
        {
            "step": 0,
            "eval/shapes/overall": 0.35,
            "eval/shapes/colors": 0.9,
            "perf/sec_eval": 2.0,
            "eval/p/ratio": 1,
        },
        {"step": 20, "eval/shapes/overall": 0.5, "eval/shapes/colors": 0.8},
        {"step": 40, "eval/shapes/overall": 0.4, "eval/shapes/colors": float("nan")},  # NaN: not a value
    ]
    (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    assert main(["report", str(run)]) == 0
    md = (run / "report" / "report.md").read_text()
    # each suite's overall first, then its other metrics; perf/ keys are not evaluations
    table = md[md.index("In-loop evaluation (`eval.jsonl`):") :].splitlines()
    assert table[4:7] == [
        "| `eval/p/ratio` | 1 (step 0) | 1 (step 0) | +0 |",
        "| `eval/shapes/overall` | 0.35 (step 0) | 0.4 (step 40) | +0.05 |",
        "| `eval/shapes/colors` | 0.9 (step 0) | 0.8 (step 20) | -0.1 |",
    ]
    assert "perf/sec_eval" not in md and "[eval](eval.png)" in md
    with Image.open(run / "report" / "eval.png") as im:
        assert im.format == "PNG" and im.size[0] > 200
    assert "eval.png" in capsys.readouterr().out
    # a run without evaluations has no such section or plot; a damaged eval.jsonl leaves them out with a warning
    other = write_run(tmp_path / "other")
    assert main(["report", str(other)]) == 0
    assert "In-loop evaluation" not in (other / "report" / "report.md").read_text()
    assert not (other / "report" / "eval.png").exists()
    (other / "eval.jsonl").write_text('{"step": 0, "eval/shapes/overall": 0.3}\nnot json\n{"step": 1}\n')
    with caplog.at_level("WARNING"):
        assert main(["report", str(other)]) == 0
    assert (
        "eval.jsonl:2: not valid JSON" in caplog.text and "leaves the in-loop evaluation out" in caplog.text
    )
    # a run that logged no known training metric still shows its evaluations
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "metrics.jsonl").write_text('{"step": 1, "perf/step_time": 1.0}\n')
    (bare / "eval.jsonl").write_text(json.dumps(evals[0]) + "\n")
    assert main(["report", str(bare)]) == 0
    md = (bare / "report" / "report.md").read_text()
    assert "No reward, KL" in md and "| `eval/shapes/overall` | 0.35 (step 0) | 0.35 (step 0) | +0 |" in md


def test_eval_lines_take_eval_slash_keys_only_and_skip_a_metric_never_finite(tmp_path):
    """Only ``eval/`` keys are evaluations (not ``evaluation/...`` or ``eval_sec``); a metric with no finite value
    at any step has no row (and no crash), and run_summary_lines says nothing of such an overall."""
    from imgalign.eval.reports import eval_lines, run_summary_lines

    evals = [
        {"step": 0, "eval/shapes/overall": 0.2, "eval/shapes/colors": float("nan"), "eval_sec": 3.0},
        {"step": 5, "eval/shapes/overall": 0.3, "eval/shapes/colors": float("nan"), "evaluation/x": 1.0},
    ]
    assert eval_lines(evals)[4:] == ["| `eval/shapes/overall` | 0.2 (step 0) | 0.3 (step 5) | +0.1 |"]
    assert eval_lines([{"step": 0, "eval/shapes/overall": float("nan")}]) == []
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval.jsonl").write_text(json.dumps({"step": 0, "eval/shapes/overall": float("nan")}) + "\n")
    assert run_summary_lines(run) == []


def test_eval_png_is_linked_only_when_a_suite_overall_is_plotted(tmp_path):
    """The reward suite logs ``eval/reward/<name>/mean`` and no overall: its table is shown, but there is no
    eval.png to link (plot_evals draws none), with or without training metrics."""
    from imgalign.eval.reports import plot_evals, summarize_run

    evals = [{"step": 0, "eval/reward/clip/mean": 0.2}, {"step": 4, "eval/reward/clip/mean": 0.25}]
    assert plot_evals(evals, tmp_path) is None
    trained = [{"step": s, "reward/clip/mean": 0.1 * s} for s in range(4)]
    for rows in (trained, [{"step": 1, "perf/step_time": 1.0}]):
        md = summarize_run(rows, "r", evals)
        assert "| `eval/reward/clip/mean` | 0.2 (step 0) | 0.25 (step 4) | +0.05 |" in md
        assert "eval.png" not in md
    assert "[eval](eval.png)" in summarize_run(trained, "r", [{"step": 0, "eval/shapes/overall": 0.3}])


def test_eval_png_draws_every_suite_against_the_step(tmp_path):
    """Two suites' overall scores are two lines: the plot differs from the one of the first suite alone; an RGB
    image, with the step on x (not the evaluation's index)."""
    from imgalign.eval.reports import plot_evals

    one = [{"step": 0, "eval/a/overall": 0.1}, {"step": 10, "eval/a/overall": 0.2}]
    two = [{**r, "eval/b/overall": 0.9 - 0.5 * i} for i, r in enumerate(one)]
    pa, pb = plot_evals(one, tmp_path / "one"), plot_evals(two, tmp_path / "two")
    with Image.open(pa) as a, Image.open(pb) as b:
        assert a.mode == b.mode == "RGB"  # as every imgalign image, no alpha channel
        assert a.size == b.size and np.abs(np.asarray(a, float) - np.asarray(b, float)).sum() > 0
    # x is the step: evaluations at steps 0, 10, 40 and at 0, 30, 40 are two different lines on one x range
    ys = (0.1, 0.5, 0.2)
    p1 = plot_evals([{"step": s, "eval/a/overall": y} for s, y in zip((0, 10, 40), ys)], tmp_path / "s1")
    p2 = plot_evals([{"step": s, "eval/a/overall": y} for s, y in zip((0, 30, 40), ys)], tmp_path / "s2")
    with Image.open(p1) as a, Image.open(p2) as b:
        assert a.size == b.size and np.abs(np.asarray(a, float) - np.asarray(b, float)).sum() > 0


def test_report_without_run_dir_or_compare_says_what_to_give(capsys):
    assert main(["report"]) == 2
    assert "give RUN_DIR, or --compare LABEL=RUN[,RUN...] --keys ... --out DIR" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--keys", "reward/geneval/mean"], "--keys"),
        (["--x", "perf/nfe_total"], "--x"),
        (["--target", "reward/geneval/mean=0.5"], "--target"),
        (["--window", "3"], "--window"),
    ],
)
def test_report_of_one_run_refuses_the_compare_options_it_ignored(tmp_path, capsys, extra, named):
    """--keys, --x, --target and --window shape --compare only; with RUN_DIR they were ignored, silently."""
    run = write_run(tmp_path / "run", n=4)
    assert main(["report", str(run), *extra]) == 2
    assert f"{named} applies to --compare only" in capsys.readouterr().err
    assert not (run / "report").exists()
    assert main(["report", str(run), "--window", "10", "--x", "step"]) == 0  # their defaults, written out


def test_report_of_one_run_names_every_compare_option_it_was_given(tmp_path, capsys):
    """Two such options are named together, with the plural verb (one takes 'applies')."""
    run = write_run(tmp_path / "run", n=4)
    assert main(["report", str(run), "--window", "3", "--x", "perf/nfe_total"]) == 2
    assert "--x, --window apply to --compare only" in capsys.readouterr().err


def test_a_short_series_compares_windows_of_two():
    """6 logged steps: 10% is no step at all, so the windows are 2 steps each (one step has no sample variance).
    Hand-computed: head [1, 3] mean 2 variance 2, tail [4, 8] mean 6 variance 8; se = sqrt((2 + 8) / 2)."""
    from imgalign.eval.reports import window_change, window_change_line

    y = np.array([1.0, 3.0, 2.0, 6.0, 4.0, 8.0])
    change, se, m = window_change(y)
    assert m == 2 and change == pytest.approx(4.0) and se == pytest.approx(math.sqrt(5.0))
    assert window_change_line("reward/r/mean", y) == (
        "`reward/r/mean` moved +4 ± 2.2 (standard error) from the mean of its first 2 logged steps to the mean of "
        "its last 2."
    )


def test_masked_samples_and_skipped_updates_are_reported(tmp_path, capsys):
    """A run whose reward was NaN on every sample trained on nothing (every update empty) and exited 0; the end of
    `imgalign train` (run_summary_lines) and `imgalign report` say so, naming the reward. A clean run says nothing."""
    from imgalign.eval.reports import run_summary_lines

    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {"step": s, "reward/geneval/mean": 0.4, "reward/geneval/nonfinite": 0.0, "reward/allnan/mean": None,
         "reward/allnan/nonfinite": 8.0, "train/empty_updates": 2.0, "train/skipped_updates": float(s == 3)}
        for s in (1, 2, 3)
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = run_summary_lines(run)
    assert lines == [
        "WARNING: samples masked for a non-finite (NaN/inf) reward score, left out of the advantages and the loss "
        "(reward/<name>/nonfinite): allnan 24 in 3 of 3 steps",
        "WARNING: 6 optimizer update(s) in 3 of 3 steps were skipped (train/empty_updates): no valid sample (every "
        "group tied or masked), nothing to train on",
        "WARNING: 1 optimizer update(s) in 1 of 3 steps were skipped (train/skipped_updates): a non-finite gradient",
    ]
    assert main(["report", str(run)]) == 0
    md = (run / "report" / "report.md").read_text()
    assert all(line in md for line in lines)
    assert run_summary_lines(write_run(tmp_path / "clean", n=3)) == []


def test_report_names_metrics_logged_as_nan_or_inf(tmp_path):
    """A KL that diverged to inf on every step, or a reward that was NaN on some, is named with its count and keeps
    its table row: the table and plots take finite values only, and the KL row had vanished from the report."""
    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {"step": s, "reward/r/mean": float("nan") if s % 2 else 0.1 * s, "policy/kl": float("inf")}
        for s in range(1, 8)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["report", str(run)]) == 0
    md = (run / "report" / "report.md").read_text()
    assert (
        "WARNING: non-finite (NaN/inf) values logged, left out of the table and the plots: `reward/r/mean` 4 of 7 "
        "rows, `policy/kl` 7 of 7 rows\n" in md
    )
    assert "| `reward/r/mean` | 0.2 | 0.6 | 0.6 | 0.6 |" in md  # steps 2, 4, 6
    assert "| `policy/kl` | no finite value | — | — | — |" in md
    clean = write_run(tmp_path / "clean", n=3)
    (clean / "metrics.jsonl").write_text((clean / "metrics.jsonl").read_text().replace("NaN", "0.5"))
    assert main(["report", str(clean)]) == 0
    assert "non-finite" not in (clean / "report" / "report.md").read_text()


def test_a_null_value_is_not_counted_among_the_rows_that_log_a_metric():
    """The non-finite warning counts a key's NaN/inf values out of the rows that carry a value for it: a row with
    null (None) there, or without the key, carries none."""
    from imgalign.eval.reports import nonfinite_lines

    rows = [{"k": float("nan")}, {"k": None}, {"k": 1.0}, {"step": 3}, {"k": float("-inf")}]
    assert nonfinite_lines(rows, ["k"]) == [
        "WARNING: non-finite (NaN/inf) values logged, left out of the table and the plots: `k` 2 of 3 rows"
    ]
    assert nonfinite_lines([{"k": None}, {"k": 2.0}], ["k"]) == []


def test_report_without_norm_inflation_makes_no_inflation_plot(tmp_path):
    run = write_run(tmp_path / "run-b", inflation=False)
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0
    assert sorted(p.name for p in (tmp_path / "rep").glob("*.png")) == [
        "clipfrac.png",
        "kl.png",
        "rewards.png",
    ]


def test_report_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a --out ~/... folder was made
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    # a quoted ~ is not the home folder (a report --out made a folder named ~ in the working folder)
    home = str(Path("~/runs/a").expanduser())
    assert main(["report", "~/runs/a"]) == 2
    assert f"(a quoted ~ is not expanded: give the full path, {home!r})" in capsys.readouterr().err
    run = write_run(tmp_path / "run", n=4)
    assert main(["report", str(run), "--out", "~/runs/a"]) == 2
    assert f"would be a folder named '~' here (a quoted ~ is not expanded: give the full path, {home!r})" in (
        capsys.readouterr().err
    )
    assert not (run / "report").exists()
    (tmp_path / "some.png").write_bytes(b"png")
    assert main(["report", str(tmp_path / "some.png")]) == 2
    assert "some.png' is a file, not a run folder; give the training run's folder" in capsys.readouterr().err
    run = tmp_path / "bad"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0}\n{broken\n{"step": 2}\n')
    assert main(["report", str(run)]) == 2
    assert "metrics.jsonl:2: not valid JSON" in capsys.readouterr().err
    (run / "metrics.jsonl").write_text('{"step": 0}\n[1, 2]\n')  # valid JSON, not an object
    assert main(["report", str(run)]) == 2
    assert "metrics.jsonl:2: expected one flat JSON object per line" in capsys.readouterr().err
    for bad in ('"x"', "null", "true", "NaN", "Infinity"):  # json reads NaN and Infinity as floats
        (run / "metrics.jsonl").write_text(
            f'{{"step": 0, "reward/a/mean": 1}}\n{{"step": {bad}, "reward/a/mean": 2}}\n'
        )
        assert main(["report", str(run)]) == 2
        assert (
            f"metrics.jsonl:2: key 'step' is {json.loads(bad)!r}; it must be a number"
            in capsys.readouterr().err
        )


def test_report_of_a_checkpoint_or_an_evaluation_folder_points_at_the_right_one(tmp_path, capsys):
    """A run's checkpoint folder names its run folder, an evaluation folder its report.md (both said only that
    metrics.jsonl does not exist)."""
    ckpt = tmp_path / "run" / "checkpoints" / "step-000003"
    (ckpt / "trainer_state").mkdir(parents=True)
    assert main(["report", str(ckpt)]) == 2
    assert f"is a checkpoint: give its run folder, '{tmp_path / 'run'}'" in capsys.readouterr().err
    ev = tmp_path / "ev"
    ev.mkdir()
    (ev / "summary.json").write_text("{}")
    assert main(["report", "--compare", f"a={ev}", "--keys", "k", "--out", str(tmp_path / "o")]) == 2
    assert f"is an evaluation: its report is '{ev / 'report.md'}'" in capsys.readouterr().err


def test_a_checkpoint_copied_out_of_its_run_is_not_sent_to_a_run_folder_that_is_not_one(tmp_path, capsys):
    """Only a checkpoint inside its run's checkpoints/ names the folder two up as the run: a checkpoint folder copied
    elsewhere (``saved/best``) would have named ``tmp_path`` as its run folder."""
    ckpt = tmp_path / "saved" / "best"
    (ckpt / "trainer_state").mkdir(parents=True)
    assert main(["report", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert "needs a run folder with metrics.jsonl" in err and "is a checkpoint" not in err


def test_report_of_a_run_before_its_first_step_or_with_no_room_for_its_default_out_says_what_to_do(
    tmp_path, capsys
):
    """A run set up (config.yaml, the base model's eval.jsonl) but still in its first step was called a folder that
    is not a run; a run folder that takes no report/ blamed --out, which the user had not given."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("log: {}\n")
    (run / "eval.jsonl").write_text('{"step": 0, "eval/shapes/overall": 0.35}\n')
    assert main(["report", str(run)]) == 2
    assert f"{str(run)!r} is a training run that has not finished a step" in capsys.readouterr().err
    write_run(run)
    (run / "report").write_text("not a folder")  # as a read-only run folder: no report/ can be made there
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert (
        "is a file; give a folder; that is the default place: give --out DIR to write the report elsewhere"
        in err
    )
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0
    assert main(["report", str(run), "--out", str(run / "report")]) == 2
    assert "default place" not in capsys.readouterr().err  # a --out given is named as it is


def test_metrics_saved_with_a_bom_load(tmp_path):
    from imgalign.eval.reports import load_metrics

    p = tmp_path / "metrics.jsonl"
    p.write_text(
        '{"step": 0, "a": 1}\n{"step": 1, "a": 2}\n', encoding="utf-8-sig"
    )  # as some editors save it
    assert load_metrics(p) == [{"step": 0, "a": 1}, {"step": 1, "a": 2}]


def test_metric_groups():
    from imgalign.eval.reports import metric_groups

    keys = ["step", "reward/clip/mean", "reward/clip/std", "reward/running_mean/count", "policy/approx_kl"]
    keys += ["vnorm/norm_ratio/early", "vnorm/norm_ratio/all", "policy/vnorm_ratio", "perf/nfe"]
    assert metric_groups(keys) == {
        "rewards": ["reward/clip/mean"],
        "kl": ["policy/approx_kl"],
        "inflation": ["policy/vnorm_ratio", "vnorm/norm_ratio/all", "vnorm/norm_ratio/early"],
    }
    # the velocity penalty, the anchor's KL and MARBLE's balance (not alpha_star or coef: per-update internals)
    keys += ["policy/penalty", "policy/anchor_kl", "balance/alpha/clip", "balance/alpha_star/clip"]
    keys += ["balance/coef/clip", "balance/grad_cos/clip", "balance/grad_cos_min", "balance/neg_cos_share"]
    keys += ["balance/neg_cos_share_step", "perf/sec_balance"]
    groups = metric_groups(keys)
    assert groups["kl"] == ["policy/approx_kl", "policy/anchor_kl"]
    assert groups["penalty"] == ["policy/penalty"]
    assert groups["balance"] == [
        "balance/alpha/clip",
        "balance/grad_cos/clip",
        "balance/grad_cos_min",
        "balance/neg_cos_share",
    ]


def test_report_of_a_balanced_run_with_a_penalty_tables_and_plots_them(tmp_path):
    """A MARBLE run's alpha per reward and a velocity penalty were logged but missing from report.md and plots."""
    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {
            "step": s,
            "reward/a/mean": 0.1 * s,
            "policy/penalty": 0.5 - 0.1 * s,
            "balance/alpha/a": 0.25 + 0.05 * s,
        }
        for s in range(1, 5)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["report", str(run)]) == 0
    md = (run / "report" / "report.md").read_text()
    assert "| `policy/penalty` | 0.4 | 0.1 | — | 0.1 |" in md
    assert "| `balance/alpha/a` | 0.3 | 0.45 | — | 0.45 |" in md
    assert "Plots: [rewards](rewards.png), [penalty](penalty.png), [balance](balance.png)" in md
    for name in ("penalty", "balance"):
        with Image.open(run / "report" / f"{name}.png") as im:
            assert im.format == "PNG"


def test_ema_matches_the_normalised_weighted_mean():
    from imgalign.eval.reports import ema

    v = np.array([1.0, 3.0, 2.0])
    a = 0.5
    w = np.array([(1 - a) ** 2 * a, (1 - a) * a, a])  # weights of v0, v1, v2 at t = 2
    assert ema(v, a)[-1] == pytest.approx(float((w * v).sum() / w.sum()))
    assert ema(v, 1.0).tolist() == v.tolist()


# ---- baseline comparison --------------------------------------------------------------------------------------
def write_eval(folder: Path, model: str, tasks: dict[str, float], rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    overall = sum(tasks.values()) / len(tasks)
    summary = {"suite": "shapes", "model": model, "overall": overall, "tasks": tasks, "n_images": len(rows)}
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_delta_table_by_hand():
    from imgalign.eval.reports import delta_table

    base = {"model": "base", "overall": 0.375, "tasks": {"counting": 0.5, "colors": 0.25}}
    cur = {"model": "ft", "overall": 0.875, "tasks": {"counting": 0.75, "position": 1.0}}
    lines = delta_table(cur, base).splitlines()
    assert lines[0] == "| task | baseline (`base`) | current (`ft`) | delta |"
    assert "| colors | 0.2500 | — | — |" in lines
    assert "| counting | 0.5000 | 0.7500 | +0.2500 |" in lines
    assert "| position | — | 1.0000 | — |" in lines
    assert lines[-1] == "| **overall** | 0.3750 | 0.8750 | +0.5000 |"


def test_comparison_and_failure_gallery(tmp_path):
    from imgalign.eval.reports import write_comparison

    def row(i: int, tag: str, ok: bool) -> dict:
        return {"file": f"{i:05d}/samples/0000.png", "tag": tag, "prompt": f"p{i}", "correct": ok,
                "reason": "" if ok else f"expected square>={i}, found 0", "error": None}  # fmt: skip

    base = write_eval(tmp_path / "base", "base", {"counting": 0.5, "colors": 0.5},
                      [row(0, "counting", True), row(1, "counting", False), row(2, "colors", True),
                       row(3, "colors", False)])  # fmt: skip
    cur = write_eval(tmp_path / "cur", "ft", {"counting": 1.0, "colors": 0.0},
                     [row(0, "counting", True), row(1, "counting", True), row(2, "colors", False),
                      row(3, "colors", False)])  # fmt: skip
    for i in (2, 3):  # failed images; image 3 is missing on disk -> a grey placeholder
        if i == 2:
            p = cur / "images" / f"{i:05d}" / "samples" / "0000.png"
            p.parent.mkdir(parents=True)
            Image.new("RGB", (64, 64), (200, 30, 30)).save(p)
    md = write_comparison(cur, base)
    assert "| colors | 0.5000 | 0.0000 | -0.5000 |" in md and "| counting | 0.5000 | 1.0000 | +0.5000 |" in md
    assert "1 now correct that failed before, 1 now failing that were correct" in md
    assert (cur / "comparison.md").read_text() == md
    with Image.open(cur / "failures.png") as g:
        arr = np.asarray(g.convert("RGB"))
    assert (arr == (200, 30, 30)).all(-1).sum() > 100 and "2 failed images" in md
    assert "(1 failed images" in write_comparison(cur, base, max_failures=1)  # the gallery's cap
    with pytest.raises(FileNotFoundError, match="--baseline needs"):
        write_comparison(cur, tmp_path / "nothing")
    # compared again with nothing failing: the old failures.png is removed, not left beside the new comparison.md
    write_comparison(base, cur)
    (base / "failures.png").write_bytes(b"stale")
    for r in (rows := [json.loads(x) for x in (base / "results.jsonl").read_text().splitlines()]):
        r["correct"] = True
    (base / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    md = write_comparison(base, cur)
    assert not (base / "failures.png").exists() and "failures.png" not in md
    # images read from another folder (a run's own generated images) when given one
    from imgalign.eval.reports import failure_gallery

    (cur / "images").rename(tmp_path / "moved")
    assert failure_gallery(cur, tmp_path / "g.png", images_dir=tmp_path / "moved") == 2
    with Image.open(tmp_path / "g.png") as g:
        assert (np.asarray(g.convert("RGB")) == (200, 30, 30)).all(-1).sum() > 100


def test_comparison_on_shapes_evaluations(tmp_path):
    """Two real judge_folder outputs on the shapes world: exact renders vs renders with blanks."""
    from imgalign.commands.world import render_folder
    from imgalign.eval.reports import write_comparison
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import judge_folder
    from imgalign.prompts.io import load_geneval_metadata

    metas = load_geneval_metadata(SHAPES_PROMPTS)
    picked = []
    for tag in ("single_object", "counting", "position"):
        picked += [m for m in metas if m["tag"] == tag][:2]
    render_folder(picked, tmp_path / "gt" / "images", 1, seed=0, progress=False)
    render_folder(picked, tmp_path / "ft" / "images", 1, seed=0, progress=False)
    blank = tmp_path / "ft" / "images" / "00002" / "samples" / "0000.png"  # a counting prompt
    Image.new("RGB", Image.open(blank).size, (255, 255, 255)).save(blank)
    for name in ("gt", "ft"):
        judge_folder(
            tmp_path / name / "images", tmp_path / name, ShapesDetector(), model=name, progress=False
        )
    base = json.loads((tmp_path / "gt" / "summary.json").read_text())
    md = write_comparison(tmp_path / "ft", tmp_path / "gt")
    expected = base["tasks"]["counting"] - 0.5
    assert f"| counting | {base['tasks']['counting']:.4f} | {expected:.4f} | -0.5000 |" in md
    assert math.isclose(base["tasks"]["single_object"], 1.0)
    assert (tmp_path / "ft" / "failures.png").is_file()


def test_report_of_a_run_without_known_metrics(tmp_path, capsys):
    run = tmp_path / "run-c"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0, "perf/nfe": 10}\n{"step": 1, "perf/nfe": 10}\n')
    assert main(["report", str(run)]) == 0
    assert (
        "No reward, KL, clip-fraction, norm-inflation, penalty or balance metrics were logged."
        in (run / "report/report.md").read_text()
    )
    assert not list((run / "report").glob("*.png")) and "0 plot(s)" in capsys.readouterr().out


def test_first_reaching_by_hand():
    from imgalign.eval.reports import first_reaching

    x = np.array([0.0, 10, 20, 30, 40])
    y = np.array([0.0, 0.5, 0.2, 0.6, 0.9])
    assert first_reaching(x, y, 0.5) == 10.0  # first point at or above
    assert first_reaching(x, y, 0.5, window=2) == 40.0  # trailing means 0.25, 0.35, 0.4, 0.75
    assert first_reaching(x, y, 0.95) is None


def test_report_compare_groups_of_runs_and_nfe_to_target(tmp_path, capsys):
    def run(folder: Path, nfe_per_step: float, slope: float) -> Path:
        folder.mkdir()
        rows = [
            {"step": s, "reward/geneval/mean": slope * s, "perf/nfe_total": nfe_per_step * s}
            for s in range(1, 11)
        ]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (folder / "eval.jsonl").write_text(json.dumps({"step": 0, "eval/shapes/overall": 0.1}) + "\n")
        return folder

    flat = [run(tmp_path / f"flat{i}", 100.0, 0.1) for i in range(2)]
    tree = [run(tmp_path / f"tree{i}", 50.0, 0.1) for i in range(2)]
    args = ["report", "--compare", f"flat={flat[0]},{flat[1]}", f"tree={tree[0]},{tree[1]}"]
    args += ["--keys", "reward/geneval/mean", "eval/shapes/overall", "--x", "perf/nfe_total"]
    args += ["--target", "reward/geneval/mean=0.5", "--window", "1", "--out", str(tmp_path / "cmp")]
    assert main(args) == 0
    md = (tmp_path / "cmp" / "compare.md").read_text()
    # reward 0.1 * step reaches 0.5 at step 5: 500 NFEs flat, 250 tree
    assert "| flat | `flat0`: 500, `flat1`: 500 | 500 (2/2) |" in md
    assert "| tree | `tree0`: 250, `tree1`: 250 | 250 (2/2) |" in md
    assert "Ratio flat/tree of the mean perf/nfe_total to the target: **2.00**" in md
    assert "| flat | `flat0` | `eval/shapes/overall` | 0.1 | 0.1 |" in md
    with Image.open(tmp_path / "cmp" / "compare.png") as im:
        assert im.size[0] > 400
    assert "compare.md" in capsys.readouterr().out
    # 10 logged points against --window 20 are named as such, not "not reached"
    assert (
        main(
            [
                *args[:-6],
                "--target",
                "reward/geneval/mean=0.5",
                "--window",
                "20",
                "--out",
                str(tmp_path / "w"),
            ]
        )
        == 0
    )
    md = (tmp_path / "w" / "compare.md").read_text()
    assert (
        "| flat | `flat0`: 10 logged points, fewer than --window 20, `flat1`: 10 logged points, fewer than --window 20 "
        "| — |" in md
    )
    # a group that meets the target at x = 0 (the base model's evaluation) gives no ratio, and says why
    target = ["--target", "eval/shapes/overall=0.05", "--window", "1", "--out", str(tmp_path / "z")]
    assert main([*args[:-6], *target]) == 0
    assert "undefined (tree reached it at perf/nfe_total = 0)" in (tmp_path / "z" / "compare.md").read_text()
    # a group none of whose runs reach the target has no mean, so there is no ratio (not one "reached at 0")
    slow = [run(tmp_path / f"slow{i}", 50.0, 0.01) for i in range(2)]
    never = ["report", "--compare", f"flat={flat[0]},{flat[1]}", f"slow={slow[0]},{slow[1]}", *args[4:-1]]
    assert main([*never, str(tmp_path / "n")]) == 0
    md = (tmp_path / "n" / "compare.md").read_text()
    assert "| slow | `slow0`: not reached, `slow1`: not reached | — |" in md and "Ratio" not in md


def test_report_compare_table_gives_each_runs_first_and_last_value_not_its_best(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    rows = [{"step": i, "reward/r/mean": v} for i, v in enumerate((0.3, 0.5, 0.2), start=1)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert (
        main(["report", "--compare", f"a={run}", "--keys", "reward/r/mean", "--out", str(tmp_path / "c")])
        == 0
    )
    assert "| a | `r` | `reward/r/mean` | 0.3 | 0.2 |" in (tmp_path / "c" / "compare.md").read_text()


def test_report_compare_names_a_run_that_does_not_log_a_key(tmp_path):
    """A key one run of the comparison logs and another does not (balance/neg_cos_share of a marble run beside a
    tree run) left the second out of compare.md silently, as if it had not been given."""
    for name, row in (("marble", {"balance/neg_cos_share": 0.25}), ("tree", {})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text(
            json.dumps({"step": 1, "reward/r/mean": 0.5, **row}) + "\n"
        )
    argv = ["report", "--compare", f"m={tmp_path / 'marble'}", f"t={tmp_path / 'tree'}"]
    assert main([*argv, "--keys", "balance/neg_cos_share", "--out", str(tmp_path / "c")]) == 0
    md = (tmp_path / "c" / "compare.md").read_text()
    assert "| m | `marble` | `balance/neg_cos_share` | 0.25 | 0.25 |" in md
    assert "| t | `tree` | `balance/neg_cos_share` | not logged | — |" in md


def test_report_compare_names_the_non_finite_values_it_leaves_out(tmp_path):
    """A run whose KL was NaN/inf on some steps showed only its finite ones in compare.md, and one whose KL was inf on
    every step said 'not logged'; both are named, with their counts."""
    for name, kls in (("some", (0.1, float("nan"), 0.3)), ("all", (float("inf"),) * 3)):
        (tmp_path / name).mkdir()
        rows = [{"step": i, "policy/kl": v} for i, v in enumerate(kls, start=1)]
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["report", "--compare", f"s={tmp_path / 'some'}", f"a={tmp_path / 'all'}", "--keys", "policy/kl"]
    assert main([*argv, "--out", str(tmp_path / "c")]) == 0
    md = (tmp_path / "c" / "compare.md").read_text()
    assert "| s | `some` | `policy/kl` | 0.1 | 0.3 |" in md
    assert "| a | `all` | `policy/kl` | no finite value | — |" in md
    assert (
        "s `some`: WARNING: non-finite (NaN/inf) values logged, left out of the table and the plots: `policy/kl` 1 of 3 rows"
        in md
    )
    assert "a `all`: WARNING: non-finite (NaN/inf) values logged" in md and "`policy/kl` 3 of 3 rows" in md


def test_report_compare_names_a_run_that_does_not_log_the_x_axis(tmp_path):
    """--x perf/nfe_total with a run that does not log it: the run had no curve in compare.png while the table
    listed it as compared, and --target said "0 logged points, fewer than --window" for it (also for a run that
    does not log the --target key)."""
    for name, extra in (("new", True), ("old", False)):
        (tmp_path / name).mkdir()
        rows = [
            {"step": s, "reward/r/mean": 0.1 * s, **({"perf/nfe_total": 10 * s} if extra else {})}
            for s in (1, 2)
        ]
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = [f"n={tmp_path / 'new'}", f"o={tmp_path / 'old'}"]
    out = tmp_path / "c"
    x = ["--x", "perf/nfe_total", "--target", "reward/r/mean=0.1", "--window", "1"]
    assert main(["report", "--compare", *runs, "--keys", "reward/r/mean", *x, "--out", str(out)]) == 0
    md = (out / "compare.md").read_text()
    assert "Not in the plot (they do not log `perf/nfe_total`, the x axis): o `old`" in md
    assert "| o | does not log `perf/nfe_total` | — |" in md and "| n | 10 | 10 (1/1) |" in md
    # a run without the target key at all: not "0 logged points, fewer than --window"
    (tmp_path / "kl").mkdir()
    (tmp_path / "kl" / "metrics.jsonl").write_text(json.dumps({"step": 1, "policy/kl": 0.1}) + "\n")
    kl = [*runs, f"k={tmp_path / 'kl'}", "--keys", "reward/r/mean", *x[2:]]  # x: step
    assert main(["report", "--compare", *kl, "--out", str(out)]) == 0
    assert "| k | does not log `reward/r/mean` | — |" in (out / "compare.md").read_text()


def test_report_compare_rejects_bad_arguments(tmp_path, capsys):
    assert main(["report", "--compare", "nolabel", "--keys", "k", "--out", str(tmp_path)]) == 2
    assert "imgalign report: error: --compare takes LABEL=RUN" in capsys.readouterr().err
    assert main(["report", "--compare", f"a={tmp_path}"]) == 2
    assert "--keys" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": i, "reward/r/mean": 0.1 * i}) + "\n" for i in (1, 2))
    )
    out = tmp_path / "cmp"
    assert (
        main(["report", "--compare", f"a={run}", "--keys", "reward/r/mean", "nosuch/key", "--out", str(out)])
        == 2
    )
    err = capsys.readouterr().err
    assert "no run logs 'nosuch/key'" in err and "reward/r/mean" in err and not out.exists()
    assert (
        main(
            ["report", "--compare", f"a={run}", "--keys", "reward/r/mean", "--x", "nosuch", "--out", str(out)]
        )
        == 2
    )
    assert "'nosuch'" in capsys.readouterr().err
    assert (
        main(["report", str(run), "--compare", f"a={run}", "--keys", "reward/r/mean", "--out", str(out)]) == 2
    )
    assert "are exclusive" in capsys.readouterr().err
    k = ["--keys", "reward/r/mean", "--out", str(out)]
    for argv, message in (
        ([f"a={run}", f"a={run}", *k], "label 'a' is used twice"),
        ([f"a={run}", f" a ={run}", *k], "label 'a' is used twice"),  # was: a second group ' a '
        ([f"a={run},", *k], "--compare takes LABEL=RUN"),
        ([f"a={run},{run}", *k], "twice; give each run of a group once"),  # was: its curve counted twice
        ([f"a={run}", "--keys", "reward/r/mean"], "--compare needs --keys KEY [KEY ...] and --out DIR"),
        ([f"a={run}", *k, "--target", "reward/r/mean=0.1", "--window", "0"], "--window must be 1 or more"),
        (
            [f"a={run}", "--keys", "reward/r/mean", "--out", str(run / "metrics.jsonl")],
            "is a file; give a folder",
        ),
    ):
        assert main(["report", "--compare", *argv]) == 2
        assert message in capsys.readouterr().err, message
    assert not out.exists()
    assert main(["report", str(run), "--out", str(run / "metrics.jsonl" / "sub")]) == 2
    assert f"'{run / 'metrics.jsonl'}' is a file, not a folder" in capsys.readouterr().err
    for argv in (["report", str(run)], ["report", "--compare", f"a={run}", "--keys", "reward/r/mean"]):
        assert main([*argv, "--out", "/proc/imgalign-report"]) == 2  # a folder that takes no new file
        assert "--out '/proc/imgalign-report': cannot write in '/proc'" in capsys.readouterr().err


def test_series_vs_reads_x_at_the_same_step_and_drops_a_step_without_it():
    """x from a cumulative counter logged at the same step (0 at step 0, the base model's evaluation); a value at a
    step that logged no counter is left out, not plotted at x = 0."""
    from imgalign.eval.reports import series_vs

    rows = [
        {"step": 0, "r": 0.1},
        {"step": 1, "r": 0.2, "nfe": 10},
        {"step": 2, "r": 0.3},
        {"step": 3, "nfe": 30},
    ]
    x, y = series_vs(rows, "r", "nfe")
    assert x.tolist() == [0.0, 10.0] and y.tolist() == [0.1, 0.2]


def test_group_mean_interpolates_each_run_over_the_span_all_runs_cover():
    import numpy as np

    from imgalign.eval.reports import group_mean

    a = (np.array([1.0, 2, 3, 4, 5]), np.zeros(5))
    b = (np.array([1.0, 3, 4, 5]), np.array([1.0, 3, 4, 5]))  # skipped step 2 (a NaN): 2.0 there
    c = (
        np.array([1.0, 3, 4]),
        np.array([2.0, 6, 8]),
    )  # stopped early at 4: the span ends there; 4.0 at step 2
    x, y = group_mean([a, b, c])
    assert x.tolist() == [1, 2, 3, 4] and y.tolist() == [1.0, 2.0, 3.0, 4.0]
    x, y = group_mean(
        [(np.array([0.0, 10, 20]), np.array([0.0, 1, 2])), (np.array([5.0, 15]), np.array([4.0, 4]))]
    )
    # no shared x: each run interpolated onto the x values logged within the span all runs cover (5..15)
    assert x.tolist() == [5, 10, 15] and y.tolist() == [2.25, 2.5, 2.75]
    # runs that share only x = 0 (an evaluation at step 0, against cumulative NFEs of different rates): a curve over
    # the shared span, not a single point
    x, y = group_mean(
        [
            (np.array([0.0, 500, 1000]), np.array([0.0, 0.5, 1])),
            (np.array([0.0, 750, 1500]), np.array([0.0, 0.5, 1])),
        ]
    )
    assert x.tolist() == [0, 500, 750, 1000] and y == pytest.approx(
        [0, 0.5 * (0.5 + 1 / 3), 0.5 * (0.75 + 0.5), 0.5 * (1 + 2 / 3)]
    )


def test_comparison_pairs_images_only_for_the_same_seed_and_sampler():
    """Image-level flips are reported only when one file name is the same sample in both evaluations."""
    from imgalign.eval.reports import comparability_notes

    rows_a = [{"file": "00000/samples/0000.png", "prompt": "p", "correct": True}]
    rows_b = [{"file": "00000/samples/0000.png", "prompt": "p", "correct": False}]

    def summary(seed, steps=20):
        return {"suite": "shapes", "n_images": 1, "tasks": {"t": 1.0}, "eval_args": {"seed": seed},
                "sampler": {"num_inference_steps": steps}}  # fmt: skip

    same = comparability_notes(summary(0), summary(0), rows_b, rows_a)
    assert same == ["Same prompt and image index in both: 1 images; 0 now correct that failed before, 1 now "
                    "failing that were correct."]  # fmt: skip
    other = comparability_notes(summary(1), summary(0), rows_b, rows_a)
    assert len(other) == 1 and other[0].startswith("Different seed:") and "not paired" in other[0]
    steps = comparability_notes(summary(0, 40), summary(0), rows_b, rows_a)
    assert steps[0].startswith("Different sampler:")
    # a baseline written before the size and context length were recorded pairs on the settings it has
    now = summary(0)
    now["sampler"].update(height=64, width=64, max_sequence_length=1)
    assert comparability_notes(now, summary(0), rows_b, rows_a) == same
    # a setting only one records is a difference: --guidance on one run, --steps on the other (pipeline defaults)
    g = {**summary(0), "sampler": {"guidance_scale": 5.0}}
    assert comparability_notes(g, summary(0, 30), rows_b, rows_a)[0].startswith("Different sampler:")
    # an evaluation of images (--images) records no sampler: re-judging a run's own images pairs them with it
    judged = {k: v for k, v in summary(0).items() if k != "sampler"}
    assert comparability_notes(judged, summary(0), rows_b, rows_a) == same


def test_summary_table_edges_by_hand(tmp_path):
    """The steps span is min-max whatever the row order (a resumed run logs again from its checkpoint), the mean of
    the last 10% of fewer than 20 values is the last value alone, an empty file is an error, and a boolean is not
    a metric value."""
    from imgalign.eval.reports import load_metrics, series, summarize_run

    rows = [{"step": s, "reward/a/mean": v} for s, v in ((3, 0.1), (4, 0.5), (1, 0.2), (2, 0.4), (5, 0.3))]
    md = summarize_run(rows)
    assert "5 logged rows, steps 1-5." in md
    assert "| `reward/a/mean` | 0.1 | 0.3 | 0.5 | 0.3 |" in md  # 5 values: the last 10% is the last one
    (tmp_path / "metrics.jsonl").write_text("\n\n")
    with pytest.raises(
        ValueError, match=r"holds no metrics rows \(it is empty\): a training run writes one per"
    ):
        load_metrics(tmp_path / "metrics.jsonl")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/a/me')
    with pytest.raises(ValueError, match=r"no metrics rows \(its only line is incomplete\)"):
        load_metrics(tmp_path / "metrics.jsonl")
    x, y = series([{"step": 0, "k": True}, {"step": 1, "k": 2}], "k")
    assert x.tolist() == [1.0] and y.tolist() == [2.0]


def test_masked_samples_count_only_the_steps_that_masked_some(tmp_path):
    from imgalign.eval.reports import masking_lines

    rows = [{"step": s, "reward/r/nonfinite": v} for s, v in ((1, 0.0), (2, 3.0), (3, 0.0), (4, 1.0))]
    (line,) = masking_lines(rows)
    assert line.endswith("(reward/<name>/nonfinite): r 4 in 2 of 4 steps")
    # a run that logs its skipped-update counters as 0 on every step skipped nothing
    clean = [{"step": s, "train/empty_updates": 0, "train/skipped_updates": 0} for s in (1, 2)]
    assert masking_lines(clean) == []


def test_a_baseline_summary_without_its_scores_is_named(tmp_path):
    from imgalign.eval.reports import load_summary

    for summary in (
        {"suite": "shapes", "overall": 0.5},
        {"overall": 0.5, "tasks": [0.5]},
        {"overall": "x", "tasks": {}},
    ):
        # (tasks as a list raised AttributeError in the comparison)
        (tmp_path / "summary.json").write_text(json.dumps(summary))
        with pytest.raises(
            ValueError,
            match="summary.json: expected an evaluation summary with 'overall' .a number. and 'tasks'",
        ):
            load_summary(tmp_path)
    (tmp_path / "summary.json").write_bytes(b'{"overall": 0.5, "tasks": {"caf\xe9": 1}}')
    with pytest.raises(
        ValueError, match=r"summary.json: not UTF-8 text \(invalid continuation byte at byte 31\)"
    ):
        load_summary(tmp_path)


def test_series_default_steps_to_the_row_index_and_evaluations_merge_in_step_order(tmp_path):
    from imgalign.eval.reports import load_run_rows, series

    xs, ys = series([{"a": 1.0}, {"b": 0.0}, {"a": 3.0}], "a")
    assert xs.tolist() == [0.0, 2.0] and ys.tolist() == [1.0, 3.0]
    metrics = [{"step": s, "reward/a/mean": float(s)} for s in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    evals = [{"step": 0, "eval/shapes/overall": 0.1}, {"step": 2, "eval/shapes/overall": 0.3}]
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    rows = load_run_rows(tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2, 2, 3]
    assert series(rows, "eval/shapes/overall")[0].tolist() == [0.0, 2.0]


def test_a_reward_band_is_drawn_from_its_own_std(tmp_path, monkeypatch):
    """rewards.png shades mean ± the same reward's std (``reward/<name>/std``)."""
    import matplotlib.axes

    from imgalign.eval.reports import plot_run

    bands = []
    real = matplotlib.axes.Axes.fill_between
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "fill_between",
        lambda self, x, lo, hi, **kw: (
            bands.append((list(x), list(lo), list(hi))),
            real(self, x, lo, hi, **kw),
        )[1],
    )
    rows = [{"step": s, "reward/a/mean": 0.5 * s, "reward/a/std": 0.25} for s in range(3)]
    plot_run(rows, tmp_path)
    assert bands == [([0, 1, 2], [-0.25, 0.25, 0.75], [0.25, 0.75, 1.25])]
    # a std logged as often but on other steps (a NaN std at step 0, a std-only row after) is not paired by position
    bands.clear()
    rows = [{**r, "reward/a/std": float("nan") if r["step"] == 0 else 0.25} for r in rows]
    plot_run([*rows, {"step": 3, "reward/a/std": 0.25}], tmp_path)
    assert bands == []


def test_a_dense_curve_is_drawn_raw_and_thin_under_its_moving_average(tmp_path, monkeypatch):
    """More than 10 points: the raw values thin and faint, unlabelled, under their EMA (alpha 10/n) thick and
    labelled; up to 10 points: the raw values alone, labelled."""
    import matplotlib.axes

    from imgalign.eval.reports import ema, plot_run

    drawn = []
    real = matplotlib.axes.Axes.plot
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "plot",
        lambda self, x, y, *a, **kw: (
            drawn.append((list(y), kw.get("lw"), kw.get("label"))),
            real(self, x, y, *a, **kw),
        )[1],
    )
    y = [float(s % 3) for s in range(20)]
    plot_run([{"step": s, "reward/a/mean": v} for s, v in enumerate(y)], tmp_path)
    smooth = list(ema(np.asarray(y), 0.5))
    assert drawn == [(y, 0.8, None), (smooth, 2, "reward/a/mean")] and smooth != y
    drawn.clear()
    plot_run([{"step": s, "reward/a/mean": v} for s, v in enumerate(y[:10])], tmp_path)
    assert drawn == [(y[:10], 0.8, "reward/a/mean")]


def test_compare_runs_with_eval_keys_in_metrics_and_runs_that_miss_the_target(tmp_path):
    """eval/ keys come from eval.jsonl only (metrics.jsonl rows of a run may repeat them), a group's mean x to the
    target is over the runs that reached it, and a run with exactly --window points that never reaches it is
    'not reached'."""
    from imgalign.eval.reports import compare_runs, load_run_rows

    def run(name: str, slope: float) -> Path:
        d = tmp_path / name
        d.mkdir()
        rows = [{"step": s, "reward/r/mean": slope * s} for s in range(1, 5)]
        rows[-1]["eval/shapes/overall"] = 0.9  # the same evaluation, logged in both files
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        evals = [{"step": 0, "eval/shapes/overall": 0.1}, {"step": 4, "eval/shapes/overall": 0.9}]
        (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
        return d

    fast, slow = run("fast", 0.25), run("slow", 0.1)
    rows = load_run_rows(fast)
    assert [(r["step"], r["eval/shapes/overall"]) for r in rows if "eval/shapes/overall" in r] == [
        (0, 0.1),
        (4, 0.9),
    ]
    md, _ = compare_runs(
        {"g": [fast, slow]}, ["reward/r/mean"], tmp_path / "out", target=("reward/r/mean", 0.5), window=1
    )
    assert (
        "| g | `fast`: 2, `slow`: not reached | 2 (1/2) |" in md.read_text()
    )  # fast: 0.5 at step 2; slow: at most 0.4
    # trailing 4-point means: fast (0.25+0.5+0.75+1)/4 = 0.625 at step 4; slow 0.25, with just the 4 points needed
    md, _ = compare_runs(
        {"g": [fast, slow]}, ["reward/r/mean"], tmp_path / "o2", target=("reward/r/mean", 0.5), window=4
    )
    assert "| g | `fast`: 4, `slow`: not reached | 4 (1/2) |" in md.read_text()


def test_comparison_notes_name_what_is_not_like_for_like():
    from imgalign.eval.reports import comparability_notes

    base = {"suite": "shapes", "n_images": 4, "tasks": {"counting": 0.5, "colors": 1.0}}
    cur = {"suite": "geneval", "n_images": 6, "tasks": {"counting": 0.5, "position": 0.0}}
    notes = comparability_notes(cur, base, [], [])
    assert notes == [
        "Different suites: baseline `shapes`, current `geneval`.",
        "Different image counts: baseline 4, current 6.",
        "Tasks in only one of the two: colors, position (the overall scores average different tasks).",
    ]
    # another prompt set (the train prompts against the test prompts) is named; the same set in another order is not
    rows = [{"file": f"{i:05d}/samples/0000.png", "prompt": p, "correct": True} for i, p in enumerate("abc")]
    other = [{**r, "prompt": p} for r, p in zip(rows, "abd")]
    assert comparability_notes(base, base, rows, other)[0] == (
        "Different prompts: 1 of the current 3 are not in the baseline and 1 of its 3 not in the current (the task "
        "scores average different prompts)."
    )
    assert not any("prompts" in n for n in comparability_notes(base, base, rows, rows[::-1]))
    # unequal sets: each side's count of prompts the other lacks (current b, c; baseline d)
    assert comparability_notes(base, base, rows, [other[0], other[2]])[0].startswith(
        "Different prompts: 2 of the current 3 are not in the baseline and 1 of its 2 not in the current"
    )


def test_an_evaluation_without_results_rows_is_not_said_to_have_other_prompts():
    """The prompt sets are compared only when both evaluations have results.jsonl rows: a folder without them (a
    summary.json copied alone) has no prompts to compare, not a set that shares none of the other's."""
    from imgalign.eval.reports import comparability_notes

    summary = {"suite": "shapes", "n_images": 2, "tasks": {"counting": 0.5}}
    rows = [{"file": f"{i:05d}/samples/0000.png", "prompt": p, "correct": i == 0} for i, p in enumerate("ab")]
    for cur_rows, base_rows in ((rows, []), ([], rows)):
        notes = comparability_notes(summary, summary, cur_rows, base_rows)
        assert not any("prompts" in n for n in notes) and not any("Same prompt" in n for n in notes)


def test_results_rows_skip_a_line_cut_short_by_a_crash(tmp_path):
    """load_results (the comparison's image pairs and failure gallery) skips a results.jsonl line cut short, and a
    row without its image or verdict, as the evaluation's own resume does, instead of failing the comparison."""
    from imgalign.eval.reports import load_results

    rows = [{"file": f"{i:05d}/samples/0000.png", "prompt": "p", "correct": False} for i in range(2)]
    ev = write_eval(tmp_path / "ev", "m", {"counting": 0.0}, rows)
    with open(ev / "results.jsonl", "a") as f:
        # a hand-edited row without its verdict, one without its image, a list: KeyError in --baseline before
        f.write('{"file": "00003/samples/0000.png"}\n{"correct": true}\n[1, 2]\n')
        # a file that is no string (TypeError in the failure gallery), a line of bytes that are not UTF-8
        f.write('{"file": 3, "correct": true}\n')
    with open(ev / "results.jsonl", "ab") as fb:
        fb.write(b'{"file": "00004/samples/0000.png", "prompt": "caf\xe9", "correct": true}\n')
    with open(ev / "results.jsonl", "a") as f:
        f.write('{"file": "00002/samples/0000.png", "pro')
    assert load_results(ev) == rows + [
        {"file": "00004/samples/0000.png", "prompt": "caf\ufffd", "correct": True}
    ]
    assert load_results(tmp_path / "none") == []


def test_the_failure_gallery_takes_the_tasks_in_turn(tmp_path, monkeypatch):
    """Round-robin over the tasks (sorted), each task's failures in file order, so one bad task does not fill it."""
    import imgalign.eval.gallery as gallery
    from imgalign.eval.reports import failure_gallery

    rows = [{"file": f"{i:05d}/samples/0000.png", "tag": t, "prompt": f"p{i}", "correct": False, "reason": "r"}
            for i, t in enumerate(["counting", "counting", "counting", "colors", "position"])]  # fmt: skip
    rows.insert(1, {**rows[0], "file": "x.png", "tag": "colors", "correct": True})
    write_eval(tmp_path / "ev", "m", {"counting": 0.0}, rows)
    shown = []
    monkeypatch.setattr(
        gallery, "caption_grid", lambda images, captions, **kw: shown.extend(captions) or images[0]
    )
    assert failure_gallery(tmp_path / "ev", tmp_path / "f.png", max_images=4) == 4
    assert [c.split("\n")[0] for c in shown] == [
        "[colors] p3",
        "[counting] p0",
        "[position] p4",
        "[counting] p1",
    ]
    # the caption's second line is the judge's reason, marked when the image could not be read
    assert (
        shown[0].split("\n")[1] == "(image missing) r"
        and not (tmp_path / "ev" / "images" / rows[4]["file"]).exists()
    )


def test_the_failure_gallery_stops_at_its_size_mid_round_and_shows_an_error_before_a_reason(
    tmp_path, monkeypatch
):
    """max_images is a cap inside a round of the tasks too (3 tasks, 2 images: 2 captions); an image that could not
    be judged is captioned with its error, not with the reason beside it."""
    import imgalign.eval.gallery as gallery
    from imgalign.eval.reports import failure_gallery

    rows = [{"file": f"{i:05d}/samples/0000.png", "tag": t, "prompt": f"p{i}", "correct": False, "reason": "r"}
            for i, t in enumerate(["colors", "counting", "position", "colors", "counting", "position"])]  # fmt: skip
    rows[0].update(reason="partly judged", error="cannot identify image file")
    write_eval(tmp_path / "ev", "m", {"colors": 0.0}, rows)
    shown = []
    monkeypatch.setattr(
        gallery, "caption_grid", lambda images, captions, **kw: shown.extend(captions) or images[0]
    )
    assert failure_gallery(tmp_path / "ev", tmp_path / "f.png", max_images=2) == 2
    assert [c.split("\n")[0] for c in shown] == ["[colors] p0", "[counting] p1"]
    assert shown[0].split("\n")[1] == "(image missing) cannot identify image file"


def test_trainer_curves_merge_the_evaluations_and_smooth_over_the_last_steps(tmp_path, monkeypatch):
    """``python -m imgalign.trainers.plots RUN``: the reward means and eval/shapes/overall by default; evaluations
    come from eval.jsonl once each (metrics.jsonl may repeat them in a step's row, whose reward is still plotted);
    the moving average is over the last `smooth` steps."""
    import matplotlib.axes

    from imgalign.trainers.plots import main as plots_main

    rows = [{"step": s, "reward/a/mean": float(s), "reward/a/std": 1.0} for s in range(20)]  # no std panel
    rows[10]["eval/shapes/overall"] = 0.3  # as the trainer logs it: in the step's own row
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = [{"step": 0, "eval/shapes/overall": 0.1}, {"step": 10, "eval/shapes/overall": 0.3}]
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    lines = []
    real = matplotlib.axes.Axes.plot
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "plot",
        lambda self, *a, **kw: (lines.append((list(a[0]), list(a[1]))), real(self, *a, **kw))[1],
    )
    assert plots_main([str(tmp_path)]) == 0
    assert (tmp_path / "curves.png").is_file()
    raw, avg, ev = lines
    assert raw == (list(range(20)), [float(s) for s in range(20)])
    assert avg[1][:3] == [0.0, 0.5, 1.0] and avg[1][10] == 8.0  # mean of steps 6..10
    assert ev == ([0, 10], [0.1, 0.3])


def test_report_compare_target_key_may_hold_an_equals_sign(tmp_path, capsys):
    """A reward's canonical key carries its options (`geneval:mode=strict`), so --target splits at the last '='."""
    run = tmp_path / "run"
    run.mkdir()
    key = "reward/geneval:mode=strict/mean"
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": i, key: 0.25 * i}) + "\n" for i in (1, 2, 3))
    )
    args = ["report", "--compare", f"a={run}", "--keys", key, "--window", "1"]
    assert main([*args, "--target", f"{key}=0.5", "--out", str(tmp_path / "o")]) == 0
    assert "| a | 2 | 2 (1/1) |" in (tmp_path / "o" / "compare.md").read_text()
    assert main([*args, "--target", "=0.5", "--out", str(tmp_path / "p")]) == 2
    assert "--target takes KEY=VALUE, got '=0.5'" in capsys.readouterr().err
    for value in ("nan", "inf", "-inf"):  # 'not reached' for every run, whatever the runs did
        assert main([*args, "--target", f"{key}={value}", "--out", str(tmp_path / "n")]) == 2
        assert f"--target takes a finite VALUE, got '{key}={value}'" in capsys.readouterr().err
    assert not (tmp_path / "n").exists()
    # the trailing mean is over 10 logged points unless --window says otherwise: 3 points never reach it
    assert main([*args[:-2], "--target", f"{key}=0.5", "--out", str(tmp_path / "q")]) == 0
    md = (tmp_path / "q" / "compare.md").read_text()
    assert "(trailing mean of 10 logged points)" in md
    assert "| a | 3 logged points, fewer than --window 10 |" in md


def test_trainer_curves_of_a_run_still_writing(tmp_path):
    """A cut-off last line of metrics.jsonl or eval.jsonl (the trainer mid-write) is skipped, as `imgalign report`
    skips it; a malformed line before the last is still an error naming its line."""
    from imgalign.trainers.plots import plot_metrics

    rows = "".join(json.dumps({"step": s, "reward/a/mean": 0.1 * s}) + "\n" for s in range(3))
    (tmp_path / "metrics.jsonl").write_text(rows + '{"step": 3, "reward/a/me')
    (tmp_path / "eval.jsonl").write_text(json.dumps({"step": 0, "eval/shapes/overall": 0.1}) + '\n{"step": 2')
    assert plot_metrics(tmp_path) == tmp_path / "curves.png" and (tmp_path / "curves.png").is_file()
    # the metrics file itself names its run
    assert plot_metrics(tmp_path / "metrics.jsonl") == tmp_path / "curves.png"
    with pytest.raises(FileNotFoundError, match="eval.jsonl is a file, not a run's metrics.jsonl"):
        plot_metrics(tmp_path / "eval.jsonl")  # another file of the run is not read as its metrics
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n{broken\n{"step": 2}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not valid JSON"):
        plot_metrics(tmp_path)


def test_trainer_curves_write_to_out_name_an_absent_key_and_refuse_a_run_without_keys(tmp_path, monkeypatch):
    """`out` is where the PNG goes; a key asked for but never logged gets an "(absent)" panel, not a crash; a row
    without a step is plotted at step 0; a run with no reward means and no keys given is an error."""
    import matplotlib.figure

    from imgalign.trainers.plots import plot_metrics

    rows = [{"reward/a/mean": 0.5}] + [{"step": s, "reward/a/mean": 0.1 * s} for s in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    titles = []
    real = matplotlib.figure.Figure.savefig

    def savefig(self, *a, **kw):
        titles.extend(ax.get_title() for ax in self.axes)
        xs = [list(line.get_xdata()) for ax in self.axes for line in ax.get_lines()]
        titles.append(xs)
        return real(self, *a, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    out = tmp_path / "sub.png"
    assert plot_metrics(tmp_path, ["reward/a/mean", "reward/b/mean"], out=out) == out
    assert out.is_file() and not (tmp_path / "curves.png").exists()
    assert titles == ["reward/a/mean", "reward/b/mean (absent)", [[0, 1, 2]]]
    # the default keys: every reward mean in name order, then eval/shapes/overall
    names = ["e", "c", "a", "d", "b"]
    row = {"step": 1, "eval/shapes/overall": 0.5, **{f"reward/{k}/mean": 0.1 for k in names}}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    titles.clear()
    plot_metrics(tmp_path)
    assert titles[:-1] == [f"reward/{k}/mean" for k in sorted(names)] + ["eval/shapes/overall"]
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n")
    with pytest.raises(ValueError, match="no metric keys to plot"):
        plot_metrics(tmp_path)


def test_masked_samples_are_read_from_masked_when_logged_and_a_reward_of_weight_0_masks_none():
    """reward/<name>/masked (0 for a logged-only reward of weight 0) is read in place of /nonfinite when a row has
    it; logs written before it still warn from /nonfinite."""
    from imgalign.eval.reports import masking_lines

    rows = [
        {"step": s, "reward/w0/nonfinite": 3.0, "reward/w0/masked": 0.0, "reward/w1/nonfinite": v, "reward/w1/masked": v}
        for s, v in ((1, 0.0), (2, 2.0))
    ]  # fmt: skip
    (line,) = masking_lines(rows)
    assert line.endswith("(reward/<name>/masked): w1 2 in 1 of 2 steps")
    assert masking_lines([{k: v for k, v in r.items() if k != "reward/w1/masked"} for r in rows[:1]]) == []
    old = [{k: v for k, v in r.items() if not k.endswith("/masked")} for r in rows]
    (line,) = masking_lines(old)
    assert line.endswith("(reward/<name>/nonfinite): w0 6 in 2 of 2 steps, w1 2 in 1 of 2 steps")
