"""Bad-input round 23: `imgalign report --compare` over runs whose folders share a name."""

from __future__ import annotations

import json
from pathlib import Path

from imgalign.cli import main
from imgalign.eval.reports import run_names


def _run(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_runs_whose_folders_share_a_name_are_told_apart_in_compare_md(tmp_path: Path) -> None:
    """`--compare a=exp1/flow_grpo,exp2/flow_grpo` (the default --output-dir of two experiments): both rows of the
    first-last table said `flow_grpo`, and the --target cell "6, 5" named no run; each run is named by as many of
    its last path parts as tell it apart, and a group's --target cell names each run."""
    one = _run(tmp_path / "exp1" / "flow_grpo", [{"step": s, "reward/r/mean": 0.1 * s} for s in range(1, 9)])
    two = _run(tmp_path / "exp2" / "flow_grpo", [{"step": s, "reward/r/mean": 0.2 * s} for s in range(1, 9)])
    solo = _run(tmp_path / "solo", [{"step": s, "reward/r/mean": 0.1 * s} for s in range(1, 9)])
    out = tmp_path / "c"
    argv = [
        "report",
        "--compare",
        f"a={one},{two}",
        f"b={solo}",
        "--keys",
        "reward/r/mean",
        "--out",
        str(out),
    ]
    assert main([*argv, "--target", "reward/r/mean=0.5", "--window", "1"]) == 0
    md = (out / "compare.md").read_text().splitlines()
    assert "| a | `exp1/flow_grpo` | `reward/r/mean` | 0.1 | 0.8 |" in md
    assert "| a | `exp2/flow_grpo` | `reward/r/mean` | 0.2 | 1.6 |" in md
    assert "| b | `solo` | `reward/r/mean` | 0.1 | 0.8 |" in md
    assert "| a | `exp1/flow_grpo`: 5, `exp2/flow_grpo`: 3 | 4 (2/2) |" in md
    assert "| b | 5 | 5 (1/1) |" in md  # a group of one run: its cell as before


def test_run_names_take_only_the_parts_that_tell_runs_apart(tmp_path: Path) -> None:
    a, b, c = tmp_path / "x" / "s0" / "run", tmp_path / "y" / "s0" / "run", tmp_path / "x" / "s1" / "run"
    assert run_names([a, b, c]) == {a: "x/s0/run", b: "y/s0/run", c: "s1/run"}
    # the same run named twice (in two groups, one spelt absolute) keeps its folder name
    assert run_names([a, Path(str(a) + "/"), tmp_path / "other"]) == {a: "run", tmp_path / "other": "other"}
