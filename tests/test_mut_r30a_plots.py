"""trainers/plots.py, mutation round 30a: behaviour the round's surviving mutants showed untested."""

from __future__ import annotations

import json

import matplotlib.axes

from imgalign.trainers.plots import main, plot_metrics


def test_a_folder_named_metrics_jsonl_is_named_a_folder_not_missing(tmp_path, capsys):
    """A run folder whose metrics.jsonl is a folder: the curves tool said the file 'does not exist'."""
    (tmp_path / "metrics.jsonl").mkdir()
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'metrics.jsonl'} is a folder, not the file a training run writes" in err
    assert "does not exist" not in err and "Traceback" not in err


def test_default_panels_are_the_reward_means_in_sorted_order_then_the_shapes_overall(tmp_path, monkeypatch):
    """The default panels do not depend on which key a row logs first: reward means sorted, eval/shapes/overall
    last, so two runs' curves line up panel for panel."""
    rows = [
        {"step": 1, "eval/shapes/overall": 0.2, "reward/zeta/mean": 0.1},
        {"step": 2, "reward/beta/mean": 0.3, "reward/alpha/mean": 0.4, "reward/zeta/mean": 0.2},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    titles = []
    real = matplotlib.axes.Axes.set_title

    def set_title(self, label, *args, **kwargs):
        titles.append(label)
        return real(self, label, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "set_title", set_title)
    plot_metrics(tmp_path, out=tmp_path / "c.png")
    assert titles == ["reward/alpha/mean", "reward/beta/mean", "reward/zeta/mean", "eval/shapes/overall"]
