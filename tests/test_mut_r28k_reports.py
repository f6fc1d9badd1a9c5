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
