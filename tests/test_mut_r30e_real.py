"""Mutation round 30e, eval/real.py: what survived its tests (see /work/audit/s67/e/mutants.md)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize("count", [10, 8])
def test_a_detector_of_no_geneval_class_names_its_first_eight_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    """Up to eight labels are named; ', ...' stands for those past the eighth (round 32g: exactly eight end
    without it)."""
    import geneval_real_tiny as T

    from imgalign.eval.real import HFDetector

    labels = [f"widget{i}" for i in range(count)]
    monkeypatch.setattr(T, "TINY_DETR_LABELS", dict(enumerate(labels)))
    folder = T.build_tiny_detr(tmp_path / "other")
    with pytest.raises(ValueError) as e:
        HFDetector(str(folder))
    more = ", ..." if count > 8 else ""
    assert f"(its labels: {', '.join(labels[:8])}{more}); use a COCO detector" in str(e.value)


def test_an_nms_iou_of_zero_is_kept_not_taken_for_the_default(tmp_path: Path) -> None:
    """nms_iou=0.0 (suppress every overlapping box of a class) is a setting, not 'none given'."""
    import geneval_real_tiny as T

    from imgalign.eval.real import HFDetector

    folder = T.build_tiny_detr(tmp_path / "detr")
    assert HFDetector(str(folder)).nms_iou is None
    assert HFDetector(str(folder), nms_iou=0.0).nms_iou == 0.0


def test_a_detector_of_eight_labels_or_fewer_names_them_all_without_an_ellipsis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The list ended in ', ...' also when it named every label (round 30e's note)."""
    import geneval_real_tiny as T

    from imgalign.eval.real import HFDetector

    monkeypatch.setattr(T, "TINY_DETR_LABELS", {0: "widget", 1: "gadget"})
    folder = T.build_tiny_detr(tmp_path / "other")
    with pytest.raises(ValueError, match=r"\(its labels: widget, gadget\); use a COCO detector"):
        HFDetector(str(folder))
