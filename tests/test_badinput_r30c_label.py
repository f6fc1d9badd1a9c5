"""Bad-input round 30c: a grid LABEL longer than a file name may be."""

from __future__ import annotations

import pytest

from imgalign.pipelines import ModelSpec, parse_model_arg


def test_a_label_of_over_255_bytes_is_a_label_not_a_path() -> None:
    """`--model LLL...=shapes` with a 300-character label was first stat()ed whole as a path, and the error said
    "path 'LLL...' is too long for the file system": the label was taken for a file name. It is now a label."""
    label = "L" * 300
    assert parse_model_arg(f"{label}=shapes") == ModelSpec(label, "shapes")
    assert parse_model_arg(f"{label}=shapes+/x/lora") == ModelSpec(label, "shapes", "/x/lora")


def test_a_path_too_long_still_fails_as_a_path() -> None:
    """Without a label, a path whose one name is over 255 bytes still reaches the file system's error."""
    with pytest.raises(OSError):
        parse_model_arg("/tmp/" + "d" * 300)
