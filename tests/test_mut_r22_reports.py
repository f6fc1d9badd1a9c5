"""eval/reports.py: the numbers a training report, a run comparison and a baseline comparison print (mutation
round 22)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest

from imgalign.eval import reports as R


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ---- reading a run -------------------------------------------------------------------------------------------
def test_a_cut_off_last_line_is_skipped_and_a_bad_line_before_it_is_an_error(tmp_path: Path, caplog) -> None:
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "rew')
    with caplog.at_level(logging.WARNING):
        assert R.load_metrics(p) == [{"step": 1}, {"step": 2}]
    assert "incomplete last line skipped" in caplog.text
    p.write_text('{"step": 1}\n{"step": 2, "rew\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not valid JSON"):
        R.load_metrics(p)


def test_a_whole_last_line_that_is_no_json_is_skipped_as_not_valid_json_not_as_incomplete(
    tmp_path: Path, caplog
) -> None:
    """A last line ending in its newline was written whole (a run cut mid-write leaves none): it was called an
    "incomplete last line"; it is skipped as a line that is not valid JSON, with the parser's reason."""
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1}\nnot json\n\n')
    with caplog.at_level(logging.WARNING):
        assert R.load_metrics(p) == [{"step": 1}]
    assert "metrics.jsonl:2: last line is not valid JSON (Expecting value); skipped" in caplog.text
    assert "incomplete" not in caplog.text


@pytest.mark.parametrize("step", ["NaN", "Infinity", "true"])
def test_a_step_that_is_not_a_finite_number_is_refused(tmp_path: Path, step: str) -> None:
    p = tmp_path / "metrics.jsonl"
    p.write_text(f'{{"step": 0}}\n{{"step": {step}, "reward/a/mean": 1}}\n{{"step": 2}}\n')
    with pytest.raises(ValueError, match="key 'step' is"):
        R.load_metrics(p)


def test_a_step_logged_twice_is_warned_of(tmp_path: Path, caplog) -> None:
    p = _write(tmp_path / "metrics.jsonl", [{"step": 1}, {"step": 2}, {"step": 2}])
    with caplog.at_level(logging.WARNING):
        R.load_metrics(p)
    assert "step 2 comes after step 2" in caplog.text


def test_series_counts_rows_without_a_step_by_their_index_and_leaves_out_booleans() -> None:
    x, y = R.series([{"k": 1.0}, {"k": True}, {"k": 3}, {"k": float("nan")}, {"k": 5}], "k")
    assert x.tolist() == [0, 2, 4] and y.tolist() == [1.0, 3.0, 5.0]


def test_ema_is_bias_corrected_from_the_first_value() -> None:
    assert R.ema(np.array([2.0, 2.0, 2.0]), 0.1).tolist() == pytest.approx([2.0, 2.0, 2.0])
    assert R.ema(np.array([0.0, 1.0]), 0.5).tolist() == pytest.approx([0.0, 0.5 / 0.75])


def test_the_velocity_norm_ratio_of_the_policy_is_an_inflation_metric() -> None:
    assert R.metric_groups(["policy/vnorm_ratio", "step"]) == {"inflation": ["policy/vnorm_ratio"]}


# ---- in-loop evaluations -------------------------------------------------------------------------------------
EVALS = [
    {"step": 0, "eval/shapes/overall": 0.2, "eval/shapes/counting": 0.1},
    {"step": 10, "eval/shapes/overall": 0.5, "eval/shapes/counting": 0.4},
]


def test_eval_lines_show_first_and_last_with_their_steps_and_the_change_overall_first() -> None:
    lines = R.eval_lines(EVALS)
    assert lines[4] == "| `eval/shapes/overall` | 0.2 (step 0) | 0.5 (step 10) | +0.3 |"
    assert lines[5] == "| `eval/shapes/counting` | 0.1 (step 0) | 0.4 (step 10) | +0.3 |"
    assert R.eval_overall_keys(EVALS) == ["eval/shapes/overall"]


def test_run_summary_lines_give_one_evaluation_alone_and_two_as_first_to_last(tmp_path: Path) -> None:
    _write(tmp_path / "eval.jsonl", EVALS[:1])
    assert R.run_summary_lines(tmp_path) == ["`eval/shapes/overall` 0.2 at step 0"]
    _write(tmp_path / "eval.jsonl", EVALS)
    assert R.run_summary_lines(tmp_path) == ["`eval/shapes/overall` 0.2 at step 0 -> 0.5 at step 10"]


def test_a_runs_rows_take_their_evaluations_from_eval_jsonl_once_in_step_order(tmp_path: Path) -> None:
    _write(
        tmp_path / "metrics.jsonl",
        [{"step": 5, "reward/a/mean": 1.0, "eval/shapes/overall": 0.9}, {"step": 10}],
    )
    _write(
        tmp_path / "eval.jsonl",
        [{"step": 0, "eval/shapes/overall": 0.1}, {"step": 5, "eval/shapes/overall": 0.3}],
    )
    rows = R.load_run_rows(tmp_path)
    assert [r.get("step") for r in rows] == [0, 5, 5, 10]
    assert R.series(rows, "eval/shapes/overall")[1].tolist() == [0.1, 0.3]


# ---- change over a run ---------------------------------------------------------------------------------------
def test_window_change_uses_windows_of_at_least_two_and_the_sample_variance() -> None:
    change, se, m = R.window_change(np.array([1.0, 3.0, 5.0, 7.0, 9.0, 11.0]))
    assert m == 2 and change == pytest.approx(8.0)
    assert se == pytest.approx(math.sqrt((2.0 + 2.0) / 2))


def test_masking_lines_count_masked_samples_steps_and_skipped_updates_once() -> None:
    rows = [
        {"reward/a/masked": 2, "reward/a/nonfinite": 2, "train/empty_updates": 0, "train/skipped_updates": 0},
        {"reward/a/masked": 0, "reward/a/nonfinite": 0, "train/empty_updates": 0, "train/skipped_updates": 1},
        {"reward/a/masked": 3, "reward/a/nonfinite": 3, "reward/b/masked": 0},
    ]
    lines = R.masking_lines(rows)
    assert len(lines) == 2
    assert lines[0].endswith("(reward/<name>/masked): a 5 in 2 of 3 steps")
    assert lines[1].startswith(
        "WARNING: 1 optimizer update(s) in 1 of 3 steps were skipped (train/skipped_updates)"
    )
    assert R.masking_lines([{"reward/a/masked": 0, "train/empty_updates": 0}]) == []


def test_nonfinite_lines_count_against_the_rows_that_log_the_key() -> None:
    rows = [{"policy/kl": float("nan")}, {"policy/kl": 0.1}, {"step": 3}]
    assert R.nonfinite_lines(rows, ["policy/kl"])[0].endswith("`policy/kl` 1 of 2 rows")


def test_the_summary_table_gives_first_last_best_and_the_mean_of_the_last_tenth() -> None:
    ys = [float(v) for v in range(20)]
    ys[3] = 100.0
    rows = [{"step": s, "reward/a/mean": v} for s, v in zip(range(20, 0, -1), ys)]
    md = R.summarize_run(rows, "r")
    assert "20 logged rows, steps 1-20." in md
    assert "| `reward/a/mean` | 0 | 19 | 100 | 18.5 |" in md
    assert "Plots: [rewards](rewards.png)\n" in md and "eval.png" not in md


def test_the_eval_plot_is_linked_only_when_an_overall_score_was_evaluated() -> None:
    only_tasks = [{"step": 0, "eval/shapes/counting": 0.1}]
    assert "eval.png" not in R.summarize_run([{"step": 1}], "r", only_tasks)
    assert "[eval](eval.png)" in R.summarize_run([{"step": 1}], "r", EVALS)


# ---- several runs --------------------------------------------------------------------------------------------
def test_series_vs_puts_the_base_models_step_0_at_counter_0() -> None:
    rows = [{"step": 0, "eval/x": 0.1}, {"step": 1, "perf/nfe": 10, "eval/x": 0.2}]
    x, y = R.series_vs(rows, "eval/x", "perf/nfe")
    assert x.tolist() == [0.0, 10.0] and y.tolist() == [0.1, 0.2]


def test_a_counter_that_stays_level_has_not_dropped() -> None:
    assert R.counter_drop([{"step": 1, "c": 5}, {"step": 2, "c": 5}, {"step": 3, "c": 6}], "c") is None
    assert R.counter_drop([{"step": 1, "c": 5}, {"step": 2, "c": 4}], "c") == (1, 5.0, 2, 4.0)


def test_first_reaching_counts_the_first_full_window_and_reaching_the_value_exactly() -> None:
    x, y = np.array([10.0, 20.0, 30.0]), np.array([1.0, 3.0, 0.0])
    assert R.first_reaching(x, y, 2.0, window=2) == 20.0
    assert R.first_reaching(x, y, 3.0) == 20.0


def test_group_mean_averages_over_the_span_every_run_covers() -> None:
    a = (np.array([0.0, 1.0, 2.0, 3.0]), np.array([0.0, 1.0, 2.0, 3.0]))
    b = (np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    gx, gy = R.group_mean([a, b])
    assert gx.tolist() == [1.0, 2.0] and gy.tolist() == [2.0, 3.0]


def test_run_names_are_as_short_as_tells_them_apart() -> None:
    names = R.run_names([Path("/x/exp1/run"), Path("/x/exp2/run"), Path("/x/exp2/other")])
    assert list(names.values()) == ["exp1/run", "exp2/run", "other"]


def test_compare_md_gives_each_runs_first_and_last_and_the_target_means_and_ratio(tmp_path: Path) -> None:
    def run(name: str, ys: list[float]) -> Path:
        d = tmp_path / name
        _write(d / "metrics.jsonl", [{"step": s + 1, "reward/a/mean": v} for s, v in enumerate(ys)])
        return d

    groups = {
        "A": [run("a1", [0.0, 1.0, 2.0]), run("a2", [0.0, 0.0, 1.0])],
        "B": [run("b1", [1.0, 1.0, 1.0]), run("b2", [0.0, 0.0, 0.0])],
    }
    md_path, _ = R.compare_runs(
        groups, ["reward/a/mean"], tmp_path / "out", target=("reward/a/mean", 1.0), window=1
    )
    md = md_path.read_text()
    assert "| A | `a1` | `reward/a/mean` | 0 | 2 |" in md
    assert "| A | `a1`: 2, `a2`: 3 | 2.5 (2/2) |" in md
    assert "| B | `b1`: 1, `b2`: not reached | 1 (1/2) |" in md
    assert "Ratio A/B of the mean step to the target: **2.50**" in md


def test_compare_refuses_a_key_no_run_logs_and_an_x_counter_that_drops(tmp_path: Path) -> None:
    d = tmp_path / "r"
    _write(
        d / "metrics.jsonl",
        [{"step": 1, "reward/a/mean": 1, "perf/sec": 5}, {"step": 2, "reward/a/mean": 2, "perf/sec": 1}],
    )
    with pytest.raises(ValueError, match="no run logs 'reward/b/mean'"):
        R.compare_runs({"A": [d]}, ["reward/b/mean"], tmp_path / "o1")
    with pytest.raises(ValueError, match="goes down in run"):
        R.compare_runs({"A": [d]}, ["reward/a/mean"], tmp_path / "o2", x_key="perf/sec")


# ---- against a baseline --------------------------------------------------------------------------------------
def _summary(**kw: object) -> dict:
    s = {"suite": "shapes", "model": "m", "overall": 0.5, "tasks": {"a": 0.5}, "n_images": 4}
    s.update(kw)
    return s


def test_a_baseline_summary_whose_overall_is_not_a_number_is_refused(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps(_summary(overall="0.5")))
    with pytest.raises(ValueError, match="'overall' \\(a number\\)"):
        R.load_summary(tmp_path)


def test_results_rows_without_a_verdict_are_skipped(tmp_path: Path) -> None:
    _write(tmp_path / "results.jsonl", [{"file": "a.png", "correct": True}, {"file": "b.png"}])
    assert R.load_results(tmp_path) == [{"file": "a.png", "correct": True}]


def test_the_delta_table_lists_every_task_of_either_side_with_current_minus_baseline() -> None:
    md = R.delta_table(
        _summary(overall=0.75, tasks={"a": 1.0, "c": 0.5}), _summary(tasks={"a": 0.25, "b": 0.5})
    )
    assert "| a | 0.2500 | 1.0000 | +0.7500 |" in md
    assert "| b | 0.5000 | — | — |" in md and "| c | — | 0.5000 | — |" in md
    assert "| **overall** | 0.5000 | 0.7500 | +0.2500 |" in md


def _rows(*spec: tuple[str, str, bool]) -> list[dict]:
    return [{"file": f, "prompt": p, "correct": c} for f, p, c in spec]


def test_comparability_notes_name_counts_one_sided_tasks_and_prompts() -> None:
    cur = _summary(n_images=3, n_prompts=2, tasks={"a": 1.0, "c": 1.0})
    base = _summary(n_images=4, n_prompts=2, tasks={"a": 1.0, "b": 1.0})
    notes = R.comparability_notes(
        cur,
        base,
        _rows(("1", "p", True), ("2", "q", True), ("3", "r", True)),
        _rows(("1", "p", True), ("2", "s", True)),
    )
    assert "Different image counts: baseline 4, current 3." in notes
    assert "Tasks in only one of the two: b, c (the overall scores average different tasks)." in notes
    assert any(
        n.startswith("Different prompts: 2 of the current 3 are not in the baseline and 1 of its 2")
        for n in notes
    )


def test_flips_are_counted_per_image_of_the_same_prompt_and_not_across_different_samplers() -> None:
    cur_rows = _rows(("0.png", "p", True), ("1.png", "p", False), ("2.png", "p", True), ("0.png", "q", True))
    base_rows = _rows(
        ("0.png", "p", False), ("1.png", "p", True), ("2.png", "p", False), ("0.png", "x", False)
    )
    notes = R.comparability_notes(_summary(), _summary(), cur_rows, base_rows)
    assert notes[-1] == (
        "Same prompt and image index in both: 3 images; 2 now correct that failed before, 1 now failing that were "
        "correct."
    )
    new = {"steps": 10, "height": 64}
    notes = R.comparability_notes(_summary(sampler=new), _summary(sampler={"steps": 10}), cur_rows, base_rows)
    assert not any(n.startswith("Different sampler") for n in notes) and notes[-1].startswith("Same prompt")
    notes = R.comparability_notes(
        _summary(sampler={"steps": 20}), _summary(sampler={"steps": 10}), cur_rows, base_rows
    )
    assert notes[-1].startswith("Different sampler") and not any(n.startswith("Same prompt") for n in notes)


def test_the_failure_gallery_takes_failures_round_robin_in_file_order_up_to_the_cap(
    tmp_path: Path, monkeypatch
) -> None:
    from PIL import Image

    from imgalign.eval import gallery

    rows = [
        {"file": f"{t}{i}.png", "tag": t, "prompt": "p", "correct": False, "reason": "r"}
        for t in "ab"
        for i in range(3)
    ]
    rows.append({"file": "ok.png", "tag": "a", "prompt": "p", "correct": True})
    _write(tmp_path / "results.jsonl", rows)
    (tmp_path / "images").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "images" / "a0.png")
    shown: list[str] = []
    monkeypatch.setattr(
        gallery, "caption_grid", lambda images, captions, **kw: shown.extend(captions) or images[0]
    )
    assert R.failure_gallery(tmp_path, tmp_path / "f.png", max_images=3) == 3
    assert shown == ["[a] p\nr", "[b] p\n(image missing) r", "[a] p\n(image missing) r"]
    (tmp_path / "results.jsonl").write_text(json.dumps(rows[-1]) + "\n")
    assert R.failure_gallery(tmp_path, tmp_path / "f.png") == 0 and not (tmp_path / "f.png").exists()


def _capture_axes(monkeypatch) -> dict[str, list]:
    import matplotlib.axes

    seen: dict[str, list] = {"plot": [], "fill_between": []}
    for name in seen:
        real = getattr(matplotlib.axes.Axes, name)
        monkeypatch.setattr(
            matplotlib.axes.Axes,
            name,
            lambda ax, *a, _n=name, _r=real, **k: (seen[_n].append((a, k)), _r(ax, *a, **k))[1],
        )
    return seen


def test_a_dense_reward_curve_is_smoothed_with_an_ema_of_ten_points_weight(
    tmp_path: Path, monkeypatch
) -> None:
    seen = _capture_axes(monkeypatch)
    ys = [float(i % 3) for i in range(20)]
    R.plot_run([{"step": i, "reward/a/mean": y} for i, y in enumerate(ys)], tmp_path)
    (raw, _), (smooth, kw) = seen["plot"]
    assert kw["lw"] == 2 and kw["label"] == "reward/a/mean"
    assert np.allclose(smooth[1], R.ema(np.array(ys), 0.5))


def test_the_std_band_is_drawn_only_where_the_std_is_logged_at_the_same_steps(
    tmp_path: Path, monkeypatch
) -> None:
    seen = _capture_axes(monkeypatch)
    same = [{"step": i, "reward/a/mean": 1.0, "reward/a/std": 0.5} for i in range(3)]
    R.plot_run(same, tmp_path)
    assert len(seen["fill_between"]) == 1
    seen["fill_between"].clear()
    shifted = [{"step": 0, "reward/a/mean": 1.0}, {"step": 1, "reward/a/mean": 1.0, "reward/a/std": 0.5}]
    shifted += [{"step": 2, "reward/a/std": 0.5}]
    R.plot_run(shifted, tmp_path)
    assert seen["fill_between"] == []
