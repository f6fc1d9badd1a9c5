"""eval/reports.compare_runs draws a panel's title (the key), its x label (--x) and a group's "no mean" legend
entry as written, '$' and all, as it does a group's "mean of" entry (round 30j survivors R3-R6: plain_text
dropped from the "no mean" label's group name or x key, from the title, or from the x label)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.figure
import pytest

from imgalign.eval.reports import compare_runs

KEY, X = "cost/$a$", "spent/$b$"  # each read as TeX math ('a', 'b' in italics) were the '$' not escaped


def _run(folder: Path, start: int) -> Path:
    folder.mkdir(parents=True)
    rows = [{"step": i, X: float(start + i), KEY: 0.1 * i} for i in range(5)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_titles_x_labels_and_no_mean_entries_are_drawn_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[str] = []
    save = matplotlib.figure.Figure.savefig

    def savefig(fig: matplotlib.figure.Figure, *args: object, **kw: object) -> None:
        for ax in fig.axes:
            for text in [ax.title, ax.xaxis.label, *ax.get_legend().get_texts()]:
                _, math = text._preprocess_math(text.get_text())
                drawn.append(text.get_text().replace(r"\$", "$") if not math else f"MATH {text.get_text()}")
        save(fig, *args, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    # a run and its continuation (x 0-4, then 10-14) share no x span: that group has no mean line
    groups = {
        "g$1$": [_run(tmp_path / "r1", 0), _run(tmp_path / "r2", 10)],
        "h$2$": [_run(tmp_path / "r3", 0)],
    }
    compare_runs(groups, [KEY], tmp_path / "rep", x_key=X)
    assert drawn == [KEY, X, f"g$1$ (no mean: no common {X})", "h$2$ (mean of 1)"]
