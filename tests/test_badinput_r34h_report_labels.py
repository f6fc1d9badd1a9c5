"""Bad-input round 34h: `imgalign report --compare` labels and keys holding '$' (matplotlib's math marker)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.figure
import pytest

from imgalign.cli import main


def _run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    rows = [{"step": i, "reward/clip/mean": 0.1 * i} for i in range(5)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_compare_draws_labels_holding_dollar_signs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A label with TeX between two '$' stopped the report with "error: \\n\\alpha_{x ... ParseSyntaxException:
    Expected end_group" (exit 2, naming no label); 'cost $5 and $10' was drawn as math, its '$' signs gone."""
    a, b = _run(tmp_path / "r1"), _run(tmp_path / "r2")
    drawn: list[str] = []
    save = matplotlib.figure.Figure.savefig

    def savefig(fig: matplotlib.figure.Figure, *args: object, **kw: object) -> None:
        for ax in fig.axes:
            for text in [ax.title, *ax.get_legend().get_texts()]:
                _, math = text._preprocess_math(text.get_text())
                drawn.append(text.get_text().replace(r"\$", "$") if not math else f"MATH {text.get_text()}")
        save(fig, *args, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    argv = [
        "report",
        "--compare",
        rf"a$\alpha_{{x$={a}",
        f"cost $5 and $10={b}",
        "--keys",
        "reward/clip/mean",
    ]
    assert main([*argv, "--out", str(tmp_path / "rep")]) == 0, capsys.readouterr().err
    assert (tmp_path / "rep" / "compare.png").is_file()
    assert drawn == ["reward/clip/mean", r"a$\alpha_{x$ (mean of 1)", "cost $5 and $10 (mean of 1)"]
