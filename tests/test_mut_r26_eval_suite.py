"""eval/suite.py (mutation round 26): a verdict is reused when only the key order of its prompt's metadata changed
(the same prompt, e.g. its metadata.jsonl rewritten by a tool that orders keys otherwise)."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from imgalign import shapes as W
from imgalign.eval.geneval import Detections
from imgalign.eval.shapes_detector import ShapesDetector
from imgalign.eval.suite import image_digest, judge_folder, write_prompt_folder


class _Counting:
    def __init__(self) -> None:
        self.det, self.calls = ShapesDetector(), 0

    def __call__(self, image: Image.Image) -> Detections:
        self.calls += 1
        return self.det(image)


def test_a_verdict_is_reused_when_only_the_key_order_of_its_metadata_changed(tmp_path: Path) -> None:
    """The digest hashes the metadata with sorted keys: the same prompt written with its keys in another order is
    the same prompt, and its images keep their verdicts. Hashed in the file's key order, every image of such a
    folder was judged again (the detector called a second time) although nothing it is judged on changed."""
    imgs, ev = tmp_path / "imgs", tmp_path / "ev"
    meta = W.single_object("circle").to_metadata()
    write_prompt_folder(imgs, 0, meta, [W.render(W.single_object("circle"), 0)[0]])
    reordered = dict(reversed(list(meta.items())))
    assert list(reordered) != list(meta) and reordered == meta
    sample = imgs / "00000" / "samples" / "0000.png"
    assert image_digest(sample, reordered) == image_digest(sample, meta)

    det = _Counting()
    assert judge_folder(imgs, ev, det, progress=False)["overall"] == 1.0
    (imgs / "00000" / "metadata.jsonl").write_text(json.dumps(reordered) + "\n")
    s = judge_folder(imgs, ev, det, progress=False)
    assert det.calls == 1 and s["overall"] == 1.0 and s["n_images"] == 1
