"""eval/suite.py, mutation round 19: the tests that killed its surviving mutants."""

from __future__ import annotations

import json
from pathlib import Path

from imgalign.eval.suite import PromptFolder, short_prompt_folders


def _folders(counts: list[int]) -> list[PromptFolder]:
    return [
        PromptFolder(i, Path(f"{i:05d}"), {}, [Path(f"{j:04d}.png") for j in range(n)])
        for i, n in enumerate(counts)
    ]


def test_short_prompt_folders_names_three_and_counts_the_rest() -> None:
    """Folders holding as many images as the fullest one are not short; up to three short ones are named, more are
    counted ('and 1 more'), and exactly three get no 'and 0 more'."""
    assert short_prompt_folders(_folders([2, 2, 2])) == ""
    assert short_prompt_folders([]) == ""
    head = short_prompt_folders(_folders([4, 1, 4, 2, 0])).split(";")[0]
    assert (
        head
        == "3 of 5 prompt folders hold fewer images than the 4 of the others: 00001 (1), 00003 (2), 00004 (0)"
    )
    head = short_prompt_folders(_folders([4, 1, 3, 2, 0])).split(";")[0]
    assert head.endswith(": 00001 (1), 00002 (3), 00003 (2) and 1 more")
    assert head.startswith("4 of 5 prompt folders hold fewer images than the 4 of the others")


def test_a_rerun_reuses_every_verdict_past_a_damaged_or_foreign_line_of_results(tmp_path: Path) -> None:
    """results.jsonl with a line cut short or a JSON line that is no verdict object ('[1]', 'null', a hand edit)
    before its rows: the rows after it are still reused (not judged again), and such a line is dropped. A line that
    was JSON but no object stopped the rerun with a TypeError traceback."""
    from PIL import Image

    from imgalign import shapes as W
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import judge_folder, write_prompt_folder

    imgs, ev = tmp_path / "imgs", tmp_path / "ev"
    for i, meta in enumerate(
        [W.single_object("circle").to_metadata(), W.colors("red", "square").to_metadata()]
    ):
        write_prompt_folder(imgs, i, meta, [Image.new("RGB", (64, 64), (255, 255, 255))])
    calls = []
    detector = ShapesDetector()

    def counting(image: Image.Image):  # noqa: ANN202
        calls.append(1)
        return detector(image)

    first = judge_folder(imgs, ev, counting, progress=False)
    assert len(calls) == 2
    results = ev / "results.jsonl"
    rows = results.read_text()
    results.write_text('{"file": "00000/samp\n[1]\nnull\n{"file": ["a"], "sha256": ""}\n' + rows)
    again = judge_folder(imgs, ev, counting, progress=False)
    assert len(calls) == 2 and again == first
    assert results.read_text() == rows


def test_a_prompt_its_validator_refuses_counts_as_one_incorrect_image_per_image(tmp_path: Path) -> None:
    """validate_metadata refusing a prompt gives each of its images a failure row (incorrect, partial 0, the
    error naming the user's metadata file through source_dir) and counts them as incorrect in the scores."""
    from PIL import Image

    from imgalign import shapes as W
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import judge_folder, write_prompt_folder

    imgs = tmp_path / "imgs"
    meta = W.single_object("circle").to_metadata()
    blank = Image.new("RGB", (64, 64), (255, 255, 255))
    write_prompt_folder(imgs, 0, meta, [blank, blank])

    def refuse(m: dict) -> None:
        raise ValueError("no such class")

    s = judge_folder(imgs, tmp_path / "ev", ShapesDetector(), validate_metadata=refuse, progress=False,
                     source_dir=tmp_path / "mine")  # fmt: skip
    rows = [json.loads(x) for x in (tmp_path / "ev" / "results.jsonl").read_text().splitlines()]
    error = f"{tmp_path / 'mine' / '00000' / 'metadata.jsonl'}: no such class"
    assert [(r["correct"], r["partial"], r["error"]) for r in rows] == [(False, 0.0, error)] * 2
    assert (s["overall"], s["tasks"], s["n_errors"], s["n_images"]) == (0.0, {meta["tag"]: 0.0}, 2, 2)
