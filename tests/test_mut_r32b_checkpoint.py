"""Mutation round 32b: trainers/checkpoint.read_state compares state.json's step with the folder's name only once the
file is a state object with a whole-number step: a step of the wrong kind is named as that, not as another step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.trainers import checkpoint as C


@pytest.mark.parametrize(
    "state, said",
    [
        ({"step": "1"}, "its 'step' is '1', not a whole number"),
        ({"step": -1}, "its 'step' is -1, not a whole number"),
        ("step 1", "it holds a JSON str, not an object"),
    ],
)
def test_a_state_json_of_the_wrong_kind_is_named_as_that_not_as_another_steps(
    tmp_path: Path, state: object, said: str
) -> None:
    ckpt = tmp_path / "run" / "checkpoints" / "step-000001"
    (ckpt / "trainer_state").mkdir(parents=True)
    path = ckpt / "trainer_state" / "state.json"
    path.write_text(json.dumps(state))
    with pytest.raises(C.CheckpointReadError) as e:
        C.read_state(ckpt)
    assert str(e.value).startswith(
        f"{path} cannot be read (ValueError: {said}): checkpoint {ckpt} is damaged."
    )
