"""Mutation round 27 (eval/models.py): behaviour the earlier tests let a mutant change unseen."""

from __future__ import annotations

import pytest

from imgalign.eval.models import is_shapes_family, sampling_defaults
from imgalign.pipelines import ModelSpec


@pytest.mark.parametrize("name", ["shapes", "shapes-t2i"])
def test_the_shapes_models_embedded_names_are_of_its_family(name: str) -> None:
    """`shapes` and `shapes-t2i` name the shapes model itself (by name, without reading its folder): sampled with
    its trained settings, not the pipeline's defaults, though other embedded names are of no family."""
    assert is_shapes_family(ModelSpec("", name))
    assert sampling_defaults(ModelSpec("", name)).get("max_sequence_length") is not None
