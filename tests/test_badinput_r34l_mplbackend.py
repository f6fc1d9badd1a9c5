"""Bad-input round 34l: an MPLBACKEND in the user's environment that matplotlib does not know."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_report_names_a_bad_mplbackend(tmp_path: Path) -> None:
    """`MPLBACKEND=nosuch imgalign report RUN` (a typo, or a backend left from another tool) failed with
    matplotlib's "Key backend: 'nosuch' is not a valid value for backend; supported values are [...]", which named
    no variable and said nothing to do, and left an empty RUN/report/ folder. A fresh process: matplotlib reads MPLBACKEND once, when imported."""
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "reward/mean": 0.1 * s, "kl": 0.01} for s in range(1, 4)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "MPLBACKEND": "nosuch"}
    done = subprocess.run(
        [sys.executable, "-m", "imgalign", "report", str(run)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert (
        "imgalign report: error: the environment's MPLBACKEND='nosuch' is not a matplotlib backend"
        in done.stderr
    )
    assert "unset MPLBACKEND" in done.stderr and "Traceback" not in done.stderr
    # matplotlib is loaded before the report folder is made: an empty RUN/report/ was left behind
    assert not (run / "report").exists()


def test_a_known_mplbackend_still_draws_with_agg(tmp_path: Path) -> None:
    from imgalign.eval.reports import agg_pyplot

    plt = agg_pyplot()
    assert plt.get_backend().lower() == "agg"
