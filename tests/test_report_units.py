"""``imgalign report``'s argument handling (imgalign/commands/report.py), with the report writers stubbed: what
reaches them and what is printed; the trainer's own curves (trainers/plots.py) (mutation round 10)."""

from __future__ import annotations

import json

import pytest

from imgalign.cli import main


@pytest.fixture
def writers(tmp_path, monkeypatch) -> list[tuple]:
    """compare_runs and write_run_report record their arguments and write a small markdown file."""
    import imgalign.eval.reports as reports

    calls: list[tuple] = []

    def compare_runs(groups, keys, out, **kw):
        calls.append(("compare", groups, keys, out, kw))
        md = tmp_path / "compare.md"
        md.write_text("# compare\n")
        return md, tmp_path / "compare.png"

    def write_run_report(run_dir, out):
        calls.append(("run", run_dir, out))
        md = tmp_path / "report.md"
        md.write_text("# report\n")
        return md, []

    monkeypatch.setattr(reports, "compare_runs", compare_runs)
    monkeypatch.setattr(reports, "write_run_report", write_run_report)
    return calls


def test_compare_passes_each_option_on_and_prints_the_summary(writers, tmp_path, capsys):
    argv = [
        "report",
        "--compare",
        "a=r1,r2",
        "b=r3",
        "--keys",
        "k1",
        "k2",
        "--out",
        "o",
        "--x",
        "perf/nfe_total",
    ]
    assert main([*argv, "--target", "k1=0.5", "--window", "3"]) == 0
    assert writers == [
        (
            "compare",
            {"a": ["r1", "r2"], "b": ["r3"]},
            ["k1", "k2"],
            "o",
            {"x_key": "perf/nfe_total", "target": ("k1", 0.5), "window": 3},
        )
    ]
    out = capsys.readouterr().out
    assert out == f"# compare\nwrote {tmp_path / 'compare.md'} and {tmp_path / 'compare.png'}\n"
    writers.clear()
    assert main(["report", "--compare", "a=r1", "--keys", "k1", "--out", "o"]) == 0
    assert writers[0][4] == {"x_key": "step", "target": None, "window": 10}
    # a key given twice drew the same panel and table rows twice
    writers.clear()
    assert main(["report", "--compare", "a=r1", "--keys", "k1", "k2", "k1", "--out", "o"]) == 2
    assert "--keys names 'k1' twice; give each key once" in capsys.readouterr().err and writers == []


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        (["=r1"], "--compare takes LABEL=RUN[,RUN...], got '=r1'"),
        (["a="], "--compare takes LABEL=RUN[,RUN...], got 'a='"),
        (["a=r1,,r2"], "--compare takes LABEL=RUN[,RUN...], got 'a=r1,,r2'"),
        (["a=r1,r2,r1"], "--compare 'a=r1,r2,r1' names run 'r1' twice"),
    ],
)
def test_compare_refuses_a_group_without_a_label_a_run_or_with_a_run_twice(writers, groups, message, capsys):
    assert main(["report", "--compare", *groups, "--keys", "k", "--out", "o"]) == 2
    assert message in capsys.readouterr().err
    assert writers == []


def test_compare_takes_a_window_of_one_and_refuses_zero(writers, capsys):
    argv = ["report", "--compare", "a=r1", "--keys", "k", "--out", "o", "--target", "k=1", "--window"]
    assert main([*argv, "1"]) == 0 and writers[0][4]["window"] == 1
    assert main([*argv, "0"]) == 2
    assert "--window must be 1 or more (logged points in the trailing mean), got 0" in capsys.readouterr().err


def test_compare_refuses_a_window_without_a_target(writers, capsys):
    """Only --target reads the trailing mean: --window without it was ignored without a word."""
    argv = ["report", "--compare", "a=r1", "--keys", "k", "--out", "o"]
    assert main([*argv, "--window", "3"]) == 2
    assert (
        "--window 3 applies to --target only (the trailing mean that must reach the target): give --target "
        "KEY=VALUE, or leave --window out" in capsys.readouterr().err
    )
    assert writers == []
    assert main([*argv, "--window", "10"]) == 0  # the default, spelt out


def test_compare_refuses_a_label_of_spaces(writers, capsys):
    assert main(["report", "--compare", "  =r1", "--keys", "k", "--out", "o"]) == 2
    assert "--compare takes LABEL=RUN[,RUN...], got '  =r1'" in capsys.readouterr().err
    assert writers == []


def test_a_run_report_goes_to_its_out_and_names_its_plots(writers, tmp_path, capsys):
    """RUN_DIR --out reaches the writer; a report without a plot says so ('none')."""
    assert main(["report", "run", "--out", "elsewhere"]) == 0
    assert writers == [("run", "run", "elsewhere")]
    out = capsys.readouterr().out
    assert out == f"# report\nwrote {tmp_path / 'report.md'} and 0 plot(s): none\n"
    assert main(["report", "run"]) == 0 and writers[-1] == ("run", "run", None)


def test_the_compare_only_flags_at_their_defaults_are_not_given():
    from argparse import Namespace

    from imgalign.commands.report import compare_only_flags

    none = Namespace(keys=None, x="step", target=None, window=10)
    assert compare_only_flags(none) == dict.fromkeys(("--keys", "--x", "--target", "--window"), False)
    given = Namespace(keys=["k"], x="perf/nfe_total", target="k=1", window=3)
    assert all(compare_only_flags(given).values())


def test_trainer_curves_leave_out_null_and_non_finite_values(tmp_path, monkeypatch):
    """A null (or NaN/inf) value in metrics.jsonl is left out of the curve and its moving average, as `imgalign
    report` leaves it out: a null raised a TypeError in the moving average, a NaN blanked `smooth` points of it. A
    key with no finite value says so in its title."""
    import matplotlib.figure

    from imgalign.trainers.plots import plot_metrics

    bad = {5: None, 6: float("nan"), 7: float("inf")}
    rows = [{"step": s, "reward/a/mean": bad.get(s, float(s)), "reward/b/mean": None} for s in range(25)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    seen = []
    real = matplotlib.figure.Figure.savefig

    def savefig(self, *a, **kw):
        seen.extend((ax.get_title(), [list(ln.get_ydata()) for ln in ax.get_lines()]) for ax in self.axes)
        return real(self, *a, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    assert plot_metrics(tmp_path) == tmp_path / "curves.png"
    (title_a, (raw, avg)), (title_b, lines_b) = seen
    kept = [float(s) for s in range(25) if s not in bad]
    assert title_a == "reward/a/mean" and raw == kept and len(avg) == len(kept)
    assert avg[4] == 2.0 and avg[5] == (1 + 2 + 3 + 4 + 8) / 5  # steps 5-7 left out of the window too
    assert title_b == "reward/b/mean (no finite value)" and lines_b == []


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("", "--target takes KEY=VALUE, got ''"),
        ("0.5", "--target takes KEY=VALUE, got '0.5'"),
        ("k", "--target takes KEY=VALUE, got 'k'"),
        ("k=high", "--target takes KEY=VALUE with a number, got 'k=high'"),
    ],
)
def test_compare_refuses_an_empty_target_or_one_without_a_key(writers, target, message, capsys):
    """An empty --target (an unset shell variable) was ignored, silently: the comparison went on without its
    target column (`imgalign report RUN_DIR --target ''` refused it as a --compare option). A target without
    `KEY=` says KEY=VALUE rather than asking for a number."""
    assert main(["report", "--compare", "a=r1", "--keys", "k", "--out", "o", "--target", target]) == 2
    assert message in capsys.readouterr().err
    assert writers == []


def test_trainer_curves_of_a_folder_without_metrics_say_what_to_point_at(tmp_path):
    """The curves tool's own advice, not `imgalign report`'s (whose reader's message names imgalign report)."""
    from imgalign.trainers.plots import plot_metrics

    with pytest.raises(
        FileNotFoundError, match="metrics.jsonl does not exist: point at a run folder or its metrics"
    ):
        plot_metrics(tmp_path)


def test_the_curves_tool_prints_one_error_line_and_makes_the_out_folder(tmp_path, capsys):
    """`python -m imgalign.trainers.plots` with a folder without metrics.jsonl, or nothing to plot, printed a
    traceback; an --out in a folder not made yet failed inside savefig. Now one error line (exit 2), and the
    folder is made."""
    from imgalign.trainers.plots import main as plots_main

    assert plots_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "error: " in err and "metrics.jsonl does not exist" in err and "Traceback" not in err
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    assert plots_main([str(tmp_path)]) == 2
    assert "no metric keys to plot" in capsys.readouterr().err
    out = tmp_path / "new" / "deeper" / "c.png"
    assert plots_main([str(tmp_path), "loss", "--out", str(out)]) == 0 and out.is_file()


def test_trainer_curves_default_to_reward_means_and_the_shapes_overall_only(tmp_path, monkeypatch):
    """The default panels: each reward/<name>/mean and eval/shapes/overall, not a reward's std nor another
    evaluation key (eval/shapes/<task>, another suite's overall). A sparse curve is drawn with its points; a dense
    one (20 points or more) as a faint line under its moving average."""
    import matplotlib.figure

    from imgalign.trainers.plots import plot_metrics

    extra = {"reward/a/std": 0.1, "eval/shapes/colors": 0.2, "eval/geneval/overall": 0.3, "loss": 1.0}
    for n in (3, 20):
        rows = [{"step": s, "reward/a/mean": 0.1 * s, "eval/shapes/overall": 0.5, **extra} for s in range(n)]
        (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        seen = []
        real = matplotlib.figure.Figure.savefig

        def savefig(self, *a, _seen=seen, _real=real, **kw):
            _seen.extend(
                (ax.get_title(), [(ln.get_marker(), ln.get_alpha()) for ln in ax.get_lines()])
                for ax in self.axes
            )
            return _real(self, *a, **kw)

        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
        plot_metrics(tmp_path)
        monkeypatch.undo()
        assert [title for title, _ in seen] == ["reward/a/mean", "eval/shapes/overall"]
        raw = seen[0][1][0]
        assert raw == (("o", 1.0) if n < 20 else ("None", 0.4)), n


def test_compare_strips_the_spaces_around_each_run(writers, tmp_path, monkeypatch, capsys):
    """'a= r1, r2' named the folders ' r1' and ' r2' (the label was stripped, the runs were not); a folder whose
    name holds the space is taken as it is."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / " r3").mkdir()
    assert main(["report", "--compare", "a= r1, r2 ", "b= r3", "--keys", "k", "--out", "o"]) == 0
    assert writers[0][1] == {"a": ["r1", "r2"], "b": [" r3"]}
    assert main(["report", "--compare", "a=r1, ", "--keys", "k", "--out", "o"]) == 2
    assert "--compare takes LABEL=RUN[,RUN...], got 'a=r1, '" in capsys.readouterr().err
    # the same run, once with a space before it, is named twice (it was two folders, 'r1' and ' r1')
    assert main(["report", "--compare", "a=r1, r1", "--keys", "k", "--out", "o"]) == 2
    assert "--compare 'a=r1, r1' names run 'r1' twice" in capsys.readouterr().err
