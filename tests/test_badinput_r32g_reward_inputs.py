"""Round 32 (helper g): a reward called from Python (a notebook) with the wrong kind of prompts, metadata or images
is refused naming what was wrong, not scored silently or failed with Python's words."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from imgalign.rewards.base import FunctionReward, Reward, RewardOutput


def _first_letter(images, prompts, metadata):
    """A score per image that shows the prompt it was given: its first letter's code."""
    return [float(ord(p[0])) if p else 0.0 for p in prompts]


class _PromptFree(Reward):
    name = "prompt_free"
    needs_prompt = False

    def score(self, images, prompts, metadata):
        return RewardOutput(images.mean((1, 2, 3)))


def test_one_prompt_string_is_refused_not_read_as_one_character_per_image() -> None:
    """5 images and the prompt "a cat" (5 characters) were scored against 'a', ' ', 'c', 'a', 't', silently."""
    r = FunctionReward(_first_letter, name="letters")
    with pytest.raises(
        ValueError, match=r"^reward 'letters': prompts is one string \('a cat'\), not a list of 5 "
    ):
        r(torch.rand(5, 3, 8, 8), "a cat")
    assert r(torch.rand(5, 3, 8, 8), ["a cat"] * 5).scores.tolist() == [97.0] * 5


@pytest.mark.parametrize(
    "prompts, text",
    [
        (
            None,
            r"prompts must be a list of 2 strings, one per image, got NoneType \(a reward that reads no prompt",
        ),
        (7, r"prompts must be a list of 2 strings, one per image, got int$"),
        ([1, 2], r"prompt 0 is of type int \(1\), not a string"),
        (["a", None], r"prompt 1 is of type NoneType \(None\), not a string"),
    ],
)
def test_prompts_that_are_not_strings_are_refused_naming_the_reward(prompts, text) -> None:
    """None or a number failed with "object of type 'int' has no len()" (or inside the reward's tokenizer)."""
    with pytest.raises(ValueError, match=rf"^reward 'letters': {text}"):
        FunctionReward(_first_letter, name="letters")(torch.rand(2, 3, 8, 8), prompts)


def test_a_prompt_free_reward_still_takes_prompts_that_are_not_strings() -> None:
    out = _PromptFree()(torch.full((2, 3, 4, 4), 0.5), [None, None])
    assert out.scores.tolist() == [0.5, 0.5]


def test_one_metadata_dict_is_refused_not_a_key_error() -> None:
    with pytest.raises(
        ValueError, match=r"^reward 'letters': metadata is one dict, not a list of 1: give one dict"
    ):
        FunctionReward(_first_letter, name="letters")(torch.rand(1, 3, 8, 8), ["a"], {"tag": "colors"})


def test_one_pil_image_is_refused_saying_to_give_a_list() -> None:
    """It failed with "'Image' object is not iterable"."""
    with pytest.raises(TypeError, match=r"got one PIL image, expected a list of them .*: give \[image\]"):
        FunctionReward(_first_letter, name="letters")(Image.new("RGB", (8, 8)), ["a"])


def test_a_uint8_tensor_is_refused_even_when_its_values_are_at_most_1() -> None:
    """A dark uint8 image (values 0 and 1 of 255) was read as a black-and-white image in [0, 1], silently."""
    x = torch.randint(0, 2, (2, 3, 8, 8), dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"images are a uint8 tensor: give float images in \[0, 1\] .*/ 255"):
        _PromptFree()(x, ["", ""])
    assert _PromptFree()(x.float() / 255, ["", ""]).scores.shape == (2,)
