"""Mutation round 32g, eval/real.py: a detector of no GenEval class, with exactly eight labels."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_a_detector_of_exactly_eight_labels_names_them_all_without_an_ellipsis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight labels are all named, so the list ends without ', ...' (the ellipsis is for labels past the eighth)."""
    import geneval_real_tiny as T

    from imgalign.eval.real import HFDetector

    labels = [f"widget{i}" for i in range(8)]
    monkeypatch.setattr(T, "TINY_DETR_LABELS", dict(enumerate(labels)))
    folder = T.build_tiny_detr(tmp_path / "other")
    with pytest.raises(ValueError) as e:
        HFDetector(str(folder))
    assert f"(its labels: {', '.join(labels)}); use a COCO detector" in str(e.value)
