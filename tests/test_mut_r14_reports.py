"""imgalign.eval.reports: behaviour no other test pinned down (mutation round 14): the plots' labels, the report's
title and edges of its summary, the readers' messages, and the baseline comparison's page and failure gallery."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image


def _rows(n: int, **keys: float) -> list[dict[str, Any]]:
    return [{"step": s, **{k.replace("__", "/"): v * s for k, v in keys.items()}} for s in range(1, n + 1)]


@pytest.fixture
def figures(monkeypatch) -> list[dict[str, Any]]:
    """Each figure plot_run would save, as its title and its panels' (y label, x label), not written."""
    import imgalign.eval.reports as reports

    seen: list[dict[str, Any]] = []

    def save(fig: Any, path: Path) -> Path:
        labels = [(ax.get_ylabel(), ax.get_xlabel()) for ax in fig.axes]
        seen.append({"name": Path(path).name, "title": fig._suptitle.get_text(), "axes": labels})
        import matplotlib.pyplot as plt

        plt.close(fig)
        return path

    monkeypatch.setattr(reports, "_save_figure", save)
    return seen


def test_reward_panels_are_named_by_the_reward_and_the_step_axis_is_under_the_last(figures, tmp_path):
    """rewards.png: one panel per reward, its y label the reward's name, 'step' under the bottom panel only (the
    panels share x); each figure is titled with its group's title; another group's panel is labelled by it."""
    from imgalign.eval.reports import GROUP_TITLES, plot_run

    rows = [{**r, "policy/kl": 0.1} for r in _rows(3, reward__a__mean=0.1, reward__b__mean=0.2)]
    plot_run(rows, tmp_path)
    assert figures == [
        {"name": "rewards.png", "title": GROUP_TITLES["rewards"], "axes": [("a", ""), ("b", "step")]},
        {"name": "kl.png", "title": "KL to the reference policy", "axes": [("kl", "step")]},
    ]


def test_a_reward_logged_on_exactly_four_steps_gets_its_change_line():
    """Four logged steps are enough for two windows of 2 (three are not)."""
    from imgalign.eval.reports import metric_groups, reward_change_lines

    rows = _rows(4, reward__a__mean=0.25)
    (line,) = reward_change_lines(rows, metric_groups(list(rows[0])))
    assert line.startswith("`reward/a/mean` moved +0.5 ± ")
    assert reward_change_lines(rows[:3], metric_groups(list(rows[0]))) == []


def test_a_summary_of_rows_without_steps_says_so_and_the_report_is_titled_by_its_run_folder(tmp_path):
    from imgalign.eval.reports import summarize_run, write_run_report

    md = summarize_run([{"reward/a/mean": 0.5}, {"reward/a/mean": 0.7}], "r")
    assert md.startswith("# Training report: r\n\n2 logged rows, no `step` field.\n")
    run = tmp_path / "lr-1e-4"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(2, policy__kl=0.1)))
    md_path, _ = write_run_report(run)
    assert md_path.read_text().startswith("# Training report: lr-1e-4\n")


def test_an_out_folder_named_a_bare_tilde_is_refused_and_not_made(tmp_path, monkeypatch):
    """`--out ~` (quoted, or from a script) is a folder named '~' in the working folder, as `--out ~/x` is."""
    from imgalign.eval.reports import write_run_report

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "policy/kl": 0.1}) + "\n")
    with pytest.raises(ValueError, match=r"--out '~' would be a folder named '~' here \(a quoted ~"):
        write_run_report(run, Path("~"))
    assert not (tmp_path / "~").exists() and not (run / "report").exists()


def test_a_metrics_file_that_is_not_utf8_is_named_as_unreadable(tmp_path):
    from imgalign.eval.reports import load_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1, "a": "\xff\xfe"}\n')
    with pytest.raises(ValueError, match=rf"^cannot read {path}: 'utf-8' codec can't decode"):
        load_metrics(path)


def test_x_from_a_counter_skips_a_row_that_logs_it_without_a_step():
    """A row with the x counter but no step (a hand-merged log) is left out, not a KeyError."""
    from imgalign.eval.reports import series_vs

    rows = [{"nfe": 5.0}, {"step": 1, "nfe": 10.0, "r": 0.5}, {"step": 2, "r": 0.7}]
    x, y = series_vs(rows, "r", "nfe")
    assert x.tolist() == [10.0] and y.tolist() == [0.5]


def test_compare_without_a_key_or_a_group_is_refused_by_name(tmp_path):
    from imgalign.eval.reports import compare_runs

    for groups, keys in (({"a": [tmp_path]}, []), ({}, ["k"])):
        with pytest.raises(ValueError, match="compare needs at least one LABEL=RUN group and one metric key"):
            compare_runs(groups, keys, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_unknown_compare_key_lists_the_first_25_keys_the_runs_log_and_marks_the_rest(tmp_path):
    from imgalign.eval.reports import compare_runs

    run = tmp_path / "run"
    run.mkdir()
    row = {"step": 1, **{f"k{i:02d}": 0.0 for i in range(30)}}
    (run / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError) as info:
        compare_runs({"a": [run]}, ["nope"], tmp_path / "out")
    listed = ", ".join(sorted(row)[:25])
    assert str(info.value) == f"no run logs 'nope'; keys these runs log include: {listed} ..."
    assert "k24" in listed and "k25" not in listed  # sorted: k00 ... k29, step


def test_a_baseline_summary_that_is_not_json_is_named(tmp_path):
    from imgalign.eval.reports import load_summary

    (tmp_path / "summary.json").write_text('{"overall": 0.5,')
    with pytest.raises(ValueError, match=r"summary.json: not valid JSON \(Expecting property name"):
        load_summary(tmp_path)


def test_a_seed_recorded_by_one_evaluation_only_still_pairs_the_images():
    """eval_args with a seed on one side only (a summary written before seeds were recorded) is no difference."""
    from imgalign.eval.reports import comparability_notes

    rows = [{"file": "00000/samples/0000.png", "prompt": "p", "correct": True}]
    base = {"suite": "shapes", "n_images": 1, "tasks": {"t": 1.0}, "eval_args": {}}
    cur = {**base, "eval_args": {"seed": 3}}
    for a, b in ((cur, base), (base, cur)):
        assert comparability_notes(a, b, rows, rows) == [
            "Same prompt and image index in both: 1 images; 0 now correct that failed before, 0 now failing "
            "that were correct."
        ]


def test_the_delta_table_names_a_model_a_summary_does_not_record_as_a_question_mark():
    from imgalign.eval.reports import delta_table

    s = {"overall": 0.5, "tasks": {"t": 0.5}}
    assert (
        delta_table(s, {**s, "model": "b"}).splitlines()[0]
        == "| task | baseline (`b`) | current (`?`) | delta |"
    )
    assert (
        delta_table({**s, "model": "c"}, s).splitlines()[0]
        == "| task | baseline (`?`) | current (`c`) | delta |"
    )


def _eval_folder(folder: Path, rows: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True)
    summary = {
        "suite": "shapes",
        "model": folder.name,
        "overall": 0.0,
        "tasks": {"t": 0.0},
        "n_images": len(rows),
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_the_failure_gallery_captions_a_bare_failure_incorrect_and_passes_its_layout_on(
    tmp_path, monkeypatch
):
    """A failed row without a reason or an error is captioned 'incorrect'; a missing image is a grey cell-sized
    square; ncols and cell reach the grid."""
    import imgalign.eval.gallery as gallery
    from imgalign.eval.reports import failure_gallery

    rows = [{"file": "a.png", "tag": "t", "prompt": "p", "correct": False}]
    ev = _eval_folder(tmp_path / "ev", rows)
    shown: list[tuple] = []
    monkeypatch.setattr(
        gallery,
        "caption_grid",
        lambda images, captions, **kw: shown.append((images, captions, kw)) or images[0],
    )
    assert failure_gallery(ev, tmp_path / "f.png", ncols=3, cell=40) == 1
    ((img,), (caption,), kw) = shown[0]
    assert caption == "[t] p\n(image missing) incorrect" and kw == {"ncols": 3, "cell": 40}
    assert img.size == (40, 40) and np.asarray(img).reshape(-1, 3).tolist() == [[200, 200, 200]] * 1600
    (ev / "images").mkdir()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(ev / "images" / "a.png")
    shown.clear()
    failure_gallery(ev, tmp_path / "f.png")
    assert shown[0][1] == ["[t] p\nincorrect"] and shown[0][2] == {"ncols": 6, "cell": 192}


def test_the_comparison_page_names_its_baseline_and_lists_its_notes(tmp_path):
    from imgalign.eval.reports import write_comparison

    rows = [{"file": "a.png", "tag": "t", "prompt": "p", "correct": True}]
    base, cur = _eval_folder(tmp_path / "base", rows), _eval_folder(tmp_path / "cur", rows)
    md = write_comparison(cur, base)
    assert md.startswith(f"# Comparison with the baseline `{base}`\n\n| task |")
    assert md.endswith(
        "\n\n- Same prompt and image index in both: 1 images; 0 now correct that failed before, 0 now failing "
        "that were correct.\n"
    )
