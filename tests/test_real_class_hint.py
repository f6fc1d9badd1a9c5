"""A GenEval class or colour spelt with a capital or a plural is refused with the name meant (own fixes, stop 57)."""

from __future__ import annotations

import pytest

from imgalign.eval.real import COCO_CLASSES, validate_real_metadata


def meta(clause: dict) -> dict:
    return {"tag": "single_object", "include": [{"count": 1, **clause}], "prompt": "a photo"}


@pytest.mark.parametrize(("clause", "meant"), [({"class": "Cat"}, "'cat'"), ({"class": "zebras"}, "'zebra'")])
def test_a_class_spelt_otherwise_is_refused_naming_the_class_meant(clause: dict, meant: str) -> None:
    with pytest.raises(ValueError, match=rf"not one the detector can find \(did you mean {meant}\?\)"):
        validate_real_metadata(meta(clause), COCO_CLASSES)


def test_a_colour_with_a_capital_is_refused_naming_the_colour_meant() -> None:
    with pytest.raises(ValueError, match=r"\(did you mean 'red'\?\)"):
        validate_real_metadata(meta({"class": "cat", "color": "Red"}), COCO_CLASSES)


def test_a_class_like_none_gets_no_guess() -> None:
    with pytest.raises(ValueError) as e:
        validate_real_metadata(meta({"class": "spaceship"}), COCO_CLASSES)
    assert "did you mean" not in str(e.value)
