"""eval/reports.py, mutation round 28k: the eval.png link of a run that logged no plotted training metric."""

from __future__ import annotations

from imgalign.eval.reports import summarize_run

ROWS = [{"step": 1, "loss": 0.5}]  # no reward, KL, clip-fraction, ... metric: the short form of the report
EVALS = [{"step": 0, "eval/shapes/overall": 0.25}, {"step": 1, "eval/shapes/overall": 0.5}]


def test_a_run_without_training_plots_links_eval_png_only_when_it_was_drawn():
    assert "Plots: [eval](eval.png)" in summarize_run(
        ROWS, evals=EVALS
    )  # plots not known: every plot called for
    assert "Plots: [eval](eval.png)" in summarize_run(ROWS, evals=EVALS, plots=["eval"])
    text = summarize_run(ROWS, evals=EVALS, plots=[])  # matplotlib could not draw it
    assert "eval.png" not in text and "No reward, KL" in text
    assert "eval/shapes/overall" in text  # the evaluations are still listed


def _run(folder, rows):
    import json

    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_an_unknown_compare_key_lists_all_25_logged_keys_without_an_ellipsis(tmp_path):
    import pytest

    from imgalign.eval.reports import compare_runs

    keys = ["step"] + [f"perf/k{i:02d}" for i in range(24)]  # 25 logged keys: every one is listed
    run = _run(tmp_path / "a", [{k: 1 for k in keys}])
    with pytest.raises(ValueError, match="no run logs 'reward/x/mean'") as e:
        compare_runs({"a": [run]}, ["reward/x/mean"], tmp_path / "out")
    assert str(e.value).endswith("perf/k23, step") and "..." not in str(e.value)
    run2 = _run(tmp_path / "b", [{k: 1 for k in [*keys, "perf/k24"]}])  # 26: the 26th is left to "..."
    with pytest.raises(ValueError) as e:
        compare_runs({"b": [run2]}, ["reward/x/mean"], tmp_path / "out")
    assert str(e.value).endswith(" ...")


def test_runs_of_a_group_without_a_common_x_span_get_no_mean_and_are_named(tmp_path):
    from imgalign.eval.reports import compare_runs

    early = _run(tmp_path / "early", [{"step": s, "reward/a/mean": 0.1 * s} for s in range(1, 4)])
    late = _run(tmp_path / "late", [{"step": s, "reward/a/mean": 0.1 * s} for s in range(10, 13)])
    both = _run(tmp_path / "both", [{"step": s, "reward/a/mean": 0.1 * s} for s in range(1, 13)])
    md, _ = compare_runs({"split": [early, late], "whole": [both]}, ["reward/a/mean"], tmp_path / "out")
    text = md.read_text()
    assert "No group mean for split (`reward/a/mean`): the group's runs share no `step` span" in text
    assert "whole (`reward/a/mean`)" not in text


def test_runs_without_a_step_field_are_in_the_plot_of_steps_and_may_go_back_in_step(tmp_path):
    """`step` is the row index where a row has none, and a pasted file's steps are warned of by load_metrics:
    neither is a missing or falling x axis."""
    from imgalign.eval.reports import compare_runs

    plain = _run(tmp_path / "plain", [{"reward/a/mean": 0.1 * i} for i in range(5)])
    pasted = _run(tmp_path / "pasted", [{"step": s, "reward/a/mean": 0.1} for s in (1, 2, 3, 1, 2)])
    md, _ = compare_runs({"g": [plain], "h": [pasted]}, ["reward/a/mean"], tmp_path / "out")
    assert "Not in the plot" not in md.read_text()


def test_the_target_column_is_the_mean_over_the_runs_that_reached_it(tmp_path):
    from imgalign.eval.reports import compare_runs

    runs = [
        _run(tmp_path / f"r{slope}", [{"step": s, "reward/a/mean": slope * s} for s in range(1, 21)])
        for slope in (0.5, 0.25, 0.05)  # reach 1.0 at steps 2, 4 and 20: mean 26/3, median 4
    ]
    md, _ = compare_runs(
        {"g": runs}, ["reward/a/mean"], tmp_path / "out", target=("reward/a/mean", 1.0), window=1
    )
    assert "| 8.66667 (3/3) |" in md.read_text()


def test_a_last_line_that_is_no_json_but_ends_in_a_newline_and_blanks_is_not_called_incomplete(
    tmp_path, caplog
):
    import logging

    from imgalign.eval.reports import load_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\nnot json\n \t')
    with caplog.at_level(logging.WARNING):
        assert load_metrics(path) == [{"step": 1}]
    assert "metrics.jsonl:2: last line is not valid JSON" in caplog.text and "incomplete" not in caplog.text
