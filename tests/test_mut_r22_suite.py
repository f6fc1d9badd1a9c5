"""eval/suite.py: which images a GenEval-layout folder counts, how the summary and report count them, and when a
verdict is reused (mutation round 22)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imgalign import shapes as W
from imgalign.eval.shapes_detector import ShapesDetector
from imgalign.eval.suite import judge_folder, load_image, read_folder, render_report, write_prompt_folder

WHITE = (255, 255, 255)
CIRCLE = W.single_object("circle").to_metadata()
RED_SQUARE = W.colors("red", "square").to_metadata()


def _good(meta: dict) -> Image.Image:
    """An image the shapes detector judges correct for `meta` (the world's own render)."""
    spec = W.single_object("circle") if meta == CIRCLE else W.colors("red", "square")
    return W.render(spec, 0)[0]


def _rows(ev: Path) -> list[dict]:
    return [json.loads(x) for x in (ev / "results.jsonl").read_text().splitlines()]


class Counting:
    def __init__(self) -> None:
        self.det, self.calls = ShapesDetector(), 0

    def __call__(self, image: Image.Image):  # noqa: ANN204
        self.calls += 1
        return self.det(image)


def _two_prompts(imgs: Path) -> None:
    """Prompt 0 (circle): one correct image, one blank; prompt 1 (red square): one correct image."""
    write_prompt_folder(imgs, 0, CIRCLE, [_good(CIRCLE), Image.new("RGB", (64, 64), WHITE)])
    write_prompt_folder(imgs, 1, RED_SQUARE, [_good(RED_SQUARE)])


def test_the_summary_counts_prompts_images_and_errors_and_scores_each_task(tmp_path: Path) -> None:
    imgs, ev = tmp_path / "imgs", tmp_path / "ev"
    _two_prompts(imgs)
    s = judge_folder(imgs, ev, ShapesDetector(), progress=False, extra={"seed": 3})
    assert s["tasks"] == {CIRCLE["tag"]: 0.5, RED_SQUARE["tag"]: 1.0} and s["overall"] == 0.75
    assert (s["n_images"], s["n_prompts"], s["n_errors"]) == (3, 2, 0)
    assert s["task_images"] == {CIRCLE["tag"]: 2, RED_SQUARE["tag"]: 1}
    assert s["seed"] == 3 and "sampler" not in s
    report = (ev / "report.md").read_text()
    assert "Overall: **0.7500** over 3 images\n" in report and "could not be judged" not in report
    assert f"| {CIRCLE['tag']} | 0.5000 | 2 |" in report and f"| {RED_SQUARE['tag']} | 1.0000 | 1 |" in report
    assert report.count("00000/samples/0001.png") == 1 and "00000/samples/0000.png" not in report


def test_an_empty_sampler_is_recorded_and_reported_as_the_pipelines_defaults(tmp_path: Path) -> None:
    imgs, ev = tmp_path / "imgs", tmp_path / "ev"
    write_prompt_folder(imgs, 0, CIRCLE, [_good(CIRCLE)])
    s = judge_folder(imgs, ev, ShapesDetector(), progress=False, sampler={})
    assert s["sampler"] == {}
    assert "Sampler: the pipeline's defaults\n" in (ev / "report.md").read_text()


def test_a_prompt_folder_without_images_counts_as_one_incorrect_image(tmp_path: Path) -> None:
    imgs, ev = tmp_path / "imgs", tmp_path / "ev"
    write_prompt_folder(imgs, 0, CIRCLE, [_good(CIRCLE)])
    write_prompt_folder(imgs, 1, RED_SQUARE, [])
    s = judge_folder(imgs, ev, ShapesDetector(), progress=False)
    assert (s["n_images"], s["n_prompts"], s["n_errors"]) == (2, 2, 1)
    assert s["tasks"][RED_SQUARE["tag"]] == 0.0 and s["overall"] == 0.5
    assert "holds no image" in _rows(ev)[1]["error"]


def test_a_verdict_is_not_reused_once_the_prompt_of_its_image_changes(tmp_path: Path) -> None:
    """The same image bytes under another prompt are judged again, against the new prompt."""
    imgs, ev = tmp_path / "imgs", tmp_path / "ev"
    write_prompt_folder(imgs, 0, CIRCLE, [_good(CIRCLE)])
    det = Counting()
    assert judge_folder(imgs, ev, det, progress=False)["overall"] == 1.0
    (imgs / "00000" / "metadata.jsonl").write_text(json.dumps(RED_SQUARE) + "\n")
    s = judge_folder(imgs, ev, det, progress=False)
    assert det.calls == 2 and s["tasks"] == {RED_SQUARE["tag"]: 0.0}


def test_a_prompt_the_validator_now_refuses_is_not_given_its_earlier_verdict(tmp_path: Path) -> None:
    imgs, ev = tmp_path / "imgs", tmp_path / "ev"
    write_prompt_folder(imgs, 0, CIRCLE, [_good(CIRCLE)])
    assert judge_folder(imgs, ev, ShapesDetector(), progress=False)["overall"] == 1.0

    def refuse(meta: dict) -> None:
        raise ValueError("unknown class")

    s = judge_folder(imgs, ev, ShapesDetector(), progress=False, validate_metadata=refuse)
    assert (s["overall"], s["n_errors"]) == (0.0, 1)


def test_a_run_cut_short_after_a_verdict_changed_leaves_no_old_summary(tmp_path: Path) -> None:
    imgs, ev = tmp_path / "imgs", tmp_path / "ev"
    write_prompt_folder(imgs, 0, CIRCLE, [_good(CIRCLE)])
    judge_folder(imgs, ev, ShapesDetector(), progress=False)
    assert (ev / "summary.json").is_file()
    Image.new("RGB", (64, 64), WHITE).save(imgs / "00000" / "samples" / "0000.png")

    def crash(image: Image.Image):  # noqa: ANN202
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        judge_folder(imgs, ev, crash, progress=False)
    assert not (ev / "summary.json").exists() and not (ev / "report.md").exists()


def test_results_hold_exactly_the_images_of_this_run(tmp_path: Path) -> None:
    """A prompt folder removed since the last run leaves no row behind in results.jsonl."""
    imgs, ev = tmp_path / "imgs", tmp_path / "ev"
    _two_prompts(imgs)
    judge_folder(imgs, ev, ShapesDetector(), progress=False)
    for p in sorted((imgs / "00001").rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    (imgs / "00001").rmdir()
    s = judge_folder(imgs, ev, ShapesDetector(), progress=False)
    assert [r["file"] for r in _rows(ev)] == ["00000/samples/0000.png", "00000/samples/0001.png"]
    assert s["n_images"] == 2


def test_a_detector_that_refuses_an_image_gives_an_incorrect_row_naming_it(tmp_path: Path) -> None:
    imgs, ev = tmp_path / "imgs", tmp_path / "ev"
    write_prompt_folder(imgs, 0, CIRCLE, [_good(CIRCLE)])

    def refuse(image: Image.Image):  # noqa: ANN202
        raise ValueError("too small")

    s = judge_folder(imgs, ev, refuse, progress=False)
    (row,) = _rows(ev)
    assert row["correct"] is False and row["error"] == "judge error on 00000/samples/0000.png: too small"
    assert (s["overall"], s["n_errors"]) == (0.0, 1)


def test_an_unreadable_image_is_incorrect_and_named_by_the_users_file(tmp_path: Path) -> None:
    imgs, ev = tmp_path / "imgs", tmp_path / "ev"
    write_prompt_folder(imgs, 0, CIRCLE, [_good(CIRCLE)])
    (imgs / "00000" / "samples" / "0000.png").write_bytes(b"not a png")
    s = judge_folder(imgs, ev, ShapesDetector(), progress=False, source_dir=tmp_path / "mine")
    (row,) = _rows(ev)
    assert row["correct"] is False and s["overall"] == 0.0
    assert row["error"].startswith(
        f"cannot read image {tmp_path / 'mine' / '00000' / 'samples' / '0000.png'}: "
    )


def test_write_prompt_folder_numbers_images_from_start_and_refuses_another_prompts_folder(
    tmp_path: Path,
) -> None:
    white = Image.new("RGB", (8, 8), WHITE)
    write_prompt_folder(tmp_path, 0, CIRCLE, [white])
    write_prompt_folder(tmp_path, 0, CIRCLE, [white, white], start=1)
    assert sorted(p.name for p in (tmp_path / "00000" / "samples").iterdir()) == [
        "0000.png",
        "0001.png",
        "0002.png",
    ]
    with pytest.raises(ValueError, match="holds another prompt"):
        write_prompt_folder(tmp_path, 0, RED_SQUARE, [white])
    assert json.loads((tmp_path / "00000" / "metadata.jsonl").read_text()) == CIRCLE


def test_prompt_folders_and_samples_are_read_in_number_order_and_only_numbered_pngs_count(
    tmp_path: Path,
) -> None:
    white = Image.new("RGB", (8, 8), WHITE)
    for name in ("10", "9", "100000", "99999"):
        (tmp_path / name / "samples").mkdir(parents=True)
        (tmp_path / name / "metadata.jsonl").write_text(json.dumps(CIRCLE) + "\n")
    for name in ("10.png", "9.png", "grid.png"):
        white.save(tmp_path / "9" / "samples" / name)
    folders = list(read_folder(tmp_path))
    assert [f.index for f in folders] == [9, 10, 99999, 100000]
    assert [p.name for p in folders[0].samples] == ["9.png", "10.png"]


def test_read_folder_names_a_missing_or_incomplete_metadata_file_and_a_file_given_as_the_folder(
    tmp_path: Path,
) -> None:
    (tmp_path / "00000" / "samples").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="metadata.jsonl is missing"):
        list(read_folder(tmp_path))
    (tmp_path / "00000" / "metadata.jsonl").write_text(json.dumps({"tag": "single_object"}) + "\n")
    with pytest.raises(ValueError, match="'tag' and 'include'"):
        list(read_folder(tmp_path))
    (tmp_path / "f.png").write_bytes(b"")
    with pytest.raises(ValueError, match="is a file"):
        list(read_folder(tmp_path / "f.png"))


def test_a_16_bit_image_is_scaled_to_8_bits_not_clipped_to_white(tmp_path: Path) -> None:
    path = tmp_path / "grey16.png"
    Image.fromarray(np.full((4, 4), 32768, dtype=np.uint16)).save(path)
    with Image.open(path) as im:
        assert im.mode.startswith("I")
    grey = np.asarray(load_image(path))
    assert grey.shape == (4, 4, 3) and 120 <= int(grey.mean()) <= 135


def _summary(**kw: object) -> dict:
    s = {
        "suite": "shapes",
        "model": "m",
        "overall": 0.123456,
        "tasks": {"a": 0.5},
        "n_images": 3,
        "n_errors": 0,
    }
    s.update(kw)
    return s


def test_the_report_lists_failures_with_their_error_first_and_at_most_the_cap() -> None:
    rows = [
        {
            "file": f"f{i}",
            "prompt": "p",
            "tag": "a",
            "correct": False,
            "reason": f"r{i}",
            "error": "e" if i == 0 else None,
        }
        for i in range(4)
    ] + [{"file": "ok", "prompt": "p", "tag": "a", "correct": True, "reason": "fine", "error": None}]
    md = render_report(_summary(n_errors=1), rows, max_failures=3)
    assert "Overall: **0.1235** over 3 images (1 could not be judged)\n" in md
    assert "## First 3 failures" in md
    assert "| f0 | p | e |" in md and "| f1 | p | r1 |" in md and "| f2 | p | r2 |" in md
    assert "f3" not in md and "| ok |" not in md
    assert "| a | 0.5000 | 5 |" in md


def test_unread_samples_leave_out_the_images_read_and_hidden_files(tmp_path: Path) -> None:
    from imgalign.eval.suite import _unread_samples

    for name in ("0000.png", ".0001.png", "0002.PNG"):
        (tmp_path / name).write_bytes(b"")
    said = _unread_samples(tmp_path, frozenset({"0000.png"}))
    assert said.startswith("; it holds 0002.PNG, but the GenEval layout reads only")
    (tmp_path / "0002.PNG").unlink()
    assert _unread_samples(tmp_path, frozenset({"0000.png"})) == ""
