"""eval/suite.py edges: the warning about images the GenEval layout does not read, verdicts reused on a rerun."""

from __future__ import annotations

import json
from pathlib import Path

from imgalign.eval.suite import _unread_samples, judge_folder, write_prompt_folder


def test_unread_samples_counts_the_rest_only_past_three(tmp_path: Path) -> None:
    """Three skipped images are all named; a fourth is counted ('and 1 more'), not dropped from the warning."""
    (tmp_path / "s").mkdir()
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        (tmp_path / "s" / name).write_bytes(b"")
    tail = ", but the GenEval layout reads only <n>.png (lower-case): convert or rename them"
    assert _unread_samples(tmp_path / "s") == f"; it holds a.jpg, b.jpg, c.jpg{tail}"
    (tmp_path / "s" / "d.jpg").write_bytes(b"")
    assert _unread_samples(tmp_path / "s") == f"; it holds a.jpg, b.jpg, c.jpg and 1 more{tail}"


def test_a_prompt_folder_without_images_is_judged_again_with_its_new_metadata(tmp_path: Path) -> None:
    """A verdict is reused only for an image whose bytes were read: the stand-in row of a prompt folder without
    images ('' digest) is judged again on a rerun, so a changed prompt is not left with the old one's row."""
    from imgalign import shapes as W
    from imgalign.eval.shapes_detector import ShapesDetector

    imgs, ev = tmp_path / "imgs", tmp_path / "ev"
    write_prompt_folder(imgs, 0, W.single_object("circle").to_metadata(), [])
    judge_folder(imgs, ev, ShapesDetector(), progress=False)
    new = W.colors("red", "square").to_metadata()
    (imgs / "00000" / "metadata.jsonl").write_text(json.dumps(new) + "\n")
    s = judge_folder(imgs, ev, ShapesDetector(), progress=False)
    row = json.loads((ev / "results.jsonl").read_text())
    assert (row["tag"], row["prompt"]) == (new["tag"], new["prompt"]) and s["task_images"] == {new["tag"]: 1}


def test_a_metadata_line_whose_prompt_holds_a_raw_line_separator_is_read_whole(tmp_path: Path) -> None:
    """json.dumps(ensure_ascii=False) writes U+2028 and U+0085 raw; splitlines() cut the line there and the folder
    was refused as 'line 1 is not valid JSON'."""
    from imgalign.eval.suite import read_folder_index

    meta = {
        "tag": "single_object",
        "include": [{"class": "circle", "count": 1}],
        "prompt": "a circle\u2028\x85!",
    }
    write_prompt_folder(tmp_path, 0, meta, [])
    (tmp_path / "00000" / "metadata.jsonl").write_text(json.dumps(meta, ensure_ascii=False) + "\r\n")
    assert [f.metadata["prompt"] for f in read_folder_index(tmp_path)] == [meta["prompt"]]
