"""Mutation round 31 (helper e): eval/models.py gives the shapes family every sampler setting it was trained for."""

from __future__ import annotations

import imgalign.sampling as S
from imgalign.eval.models import sampling_defaults
from imgalign.pipelines import ModelSpec


def test_the_shapes_model_samples_with_its_steps_guidance_and_context_length() -> None:
    assert sampling_defaults(ModelSpec("", "shapes")) == {
        "steps": S.NUM_INFERENCE_STEPS,
        "guidance": S.GUIDANCE_SCALE,
        "max_sequence_length": S.MAX_SEQUENCE_LENGTH,
    }
