"""Bad-input round 21: `imgalign report --compare` over a counter that restarts at a resume, and
`python -m imgalign.trainers.plots --out` naming a folder."""

from __future__ import annotations

import json
from pathlib import Path

from imgalign.cli import main
from imgalign.eval.reports import counter_drop


def _run(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_compare_refuses_an_x_counter_that_restarts_in_a_resumed_run(tmp_path: Path, capsys) -> None:
    """--x perf/sec_total (seconds since the process started: it restarts at a resume) of a run resumed at step 10
    drew a curve that ran back, averaged the group by np.interp over an x that is not increasing, and put the
    run's --target at "5" (seconds since its resume) beside an unbroken run's 15, with exit 0. Now it is refused
    naming the run, the step where the counter drops, and the counters to use; nothing is written."""
    resumed = _run(
        tmp_path / "resumed",
        [
            {"step": s, "reward/r/mean": 0.1 * s, "perf/sec_total": float(s if s <= 10 else s - 10)}
            for s in range(1, 21)
        ],
    )
    whole = _run(
        tmp_path / "whole",
        [{"step": s, "reward/r/mean": 0.1 * s, "perf/sec_total": float(s)} for s in range(1, 21)],
    )
    out = tmp_path / "cmp"
    argv = ["report", "--compare", f"a={resumed},{whole}", "--keys", "reward/r/mean", "--out", str(out)]
    x = ["--x", "perf/sec_total", "--target", "reward/r/mean=1.5", "--window", "1"]
    assert main([*argv, *x]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--x 'perf/sec_total' goes down in run {str(resumed)!r} (10 at step 10, then 1 at step 11)" in err
    assert "use --x perf/nfe_total or --x step" in err
    assert not out.exists()
    # the same runs against the step (or a counter that only grows) are compared as before
    assert main([*argv, "--target", "reward/r/mean=1.5", "--window", "1"]) == 0
    assert "| a | `resumed`: 15, `whole`: 15 | 15 (2/2) |" in (out / "compare.md").read_text()


def test_counter_drop_skips_rows_without_a_number() -> None:
    """Rows without the counter (or with NaN, null, a bool) are passed over; equal values are no drop."""
    rows = [
        {"step": 1, "c": 1.0},
        {"step": 2},
        {"step": 3, "c": float("nan")},
        {"step": 4, "c": None},
        {"step": 5, "c": True},
        {"step": 6, "c": 1.0},
        {"step": 7, "c": 3},
    ]
    assert counter_drop(rows, "c") is None
    assert counter_drop([*rows, {"step": 8, "c": 2.5}], "c") == (7, 3.0, 8, 2.5)


def test_plots_out_as_a_folder_or_without_a_suffix_names_the_file_written(tmp_path: Path, capsys) -> None:
    """`python -m imgalign.trainers.plots RUN --out DIR` (an existing folder, or `new/`) wrote DIR.png beside the
    folder and printed "DIR", a path that is no PNG; `--out curves` wrote curves.png and printed "curves". A folder
    now gets DIR/curves.png, a name without a suffix NAME.png, and the path printed is the file written."""
    from imgalign.trainers.plots import main as plots_main

    run = _run(tmp_path / "run", [{"step": s, "reward/r/mean": 0.1 * s} for s in (1, 2)])
    (tmp_path / "figs").mkdir()
    for out, written in (
        (tmp_path / "figs", tmp_path / "figs" / "curves.png"),
        (f"{tmp_path / 'new'}/", tmp_path / "new" / "curves.png"),
        (tmp_path / "curves", tmp_path / "curves.png"),
        (tmp_path / "c.pdf", tmp_path / "c.pdf"),
    ):
        assert plots_main([str(run), "--out", str(out)]) == 0
        assert capsys.readouterr().out.strip() == str(written) and written.is_file()
    assert not (tmp_path / "figs.png").exists() and not (tmp_path / "new.png").exists()


def test_an_unknown_compare_key_lists_the_logged_keys_of_its_kind_first(tmp_path: Path, capsys) -> None:
    """A misspelt reward key: the list of logged keys showed the first 25 in sorted order, which for a run that logs
    some 40 (eval/*, nft/*, perf/*, ...) never reached the reward/* keys the user meant. Keys of the same kind (the
    part before the first slash) now come first."""
    row = {f"eval/shapes/t{i}": 0.5 for i in range(20)} | {f"perf/p{i}": 1.0 for i in range(10)}
    run = _run(tmp_path / "run", [{"step": 1, **row, "reward/geneval/mean": 0.5}])
    argv = ["report", "--compare", f"a={run}", "--keys", "reward/genevl/mean", "--out", str(tmp_path / "c")]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "no run logs 'reward/genevl/mean'; keys these runs log include: reward/geneval/mean, eval/shapes/t0,"
        in err
    )
    assert err.endswith(" ...")


def test_a_compare_label_with_a_bar_keeps_its_table_rows_whole(tmp_path: Path) -> None:
    """`report --compare "lr 1e-4 | warm-up=RUN"`: the '|' in the label split compare.md's rows into more columns
    (the first-last table and the --target table); it is written as '/' in a cell, as eval's report.md does."""
    run = _run(tmp_path / "run", [{"step": s, "reward/r/mean": 0.1 * s} for s in (1, 2, 3)])
    out = tmp_path / "c"
    argv = ["report", "--compare", f"lr 1e-4 | warm-up={run}", "--keys", "reward/r/mean", "--out", str(out)]
    assert main([*argv, "--target", "reward/r/mean=0.2", "--window", "1"]) == 0
    rows = [line for line in (out / "compare.md").read_text().splitlines() if line.startswith("| lr 1e-4")]
    assert len(rows) == 2
    assert rows[0] == "| lr 1e-4 / warm-up | `run` | `reward/r/mean` | 0.1 | 0.3 |"
    assert rows[1].startswith("| lr 1e-4 / warm-up | ") and rows[1].count("|") == 4  # group, x per run, mean


def test_an_empty_report_out_is_refused(tmp_path: Path, capsys) -> None:
    """`report RUN --out "$OUT"` with OUT unset was read as no --out and wrote RUN/report without a word, where the
    other commands refuse an empty --out; it is refused by name, nothing written."""
    run = _run(tmp_path / "run", [{"step": s, "reward/r/mean": 0.1 * s} for s in (1, 2)])
    assert main(["report", str(run), "--out", ""]) == 2
    assert "--out is empty (an unset shell variable?): give an output folder" in capsys.readouterr().err
    assert not (run / "report").exists()
    assert main(["report", str(run)]) == 0 and (run / "report").is_dir()
