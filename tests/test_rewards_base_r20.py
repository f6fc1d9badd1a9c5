"""Round 20 (stop 57) tests of rewards/base.py: the reward contract, image conversion and the registry helpers."""

import pytest
import torch

from imgalign.rewards.base import Reward, RewardOutput

torch.set_num_threads(1)


class Fixed(Reward):
    """Returns the scores it is given, whatever the batch."""

    name = "fixed"

    def __init__(self, scores) -> None:
        super().__init__()
        self.scores = scores

    def score(self, images, prompts, metadata):
        return self.scores


@pytest.mark.parametrize("n_scores", [1, 3])
def test_a_reward_returning_more_or_fewer_scores_than_images_is_refused(n_scores: int) -> None:
    """Two images, 1 or 3 scores: refused by name with the count (extra scores were kept as a longer row)."""
    r = Fixed(torch.arange(float(n_scores)))
    with pytest.raises(ValueError, match=rf"'fixed' returned {n_scores} scores .* for 2 images"):
        r(torch.full((2, 3, 2, 2), 0.5), ["a", "b"])


def test_scores_of_three_dimensions_are_refused_even_with_one_per_image() -> None:
    """[B, 1] is one score per image; [B, 1, 1] (a reward returning a map) is refused, not flattened."""
    x = torch.full((2, 3, 2, 2), 0.5)
    assert Fixed(torch.tensor([[1.0], [2.0]]))(x, ["a", "b"]).scores.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match=r"shape \(2, 1, 1\)"):
        Fixed(torch.ones(2, 1, 1))(x, ["a", "b"])


def test_each_details_row_stays_with_its_image_when_a_leading_image_is_not_finite() -> None:
    """Images 0 and 2 are NaN: score() sees images 1 and 3, and their details land on rows 1 and 3 (were rows 0 and
    1 when scattered by position)."""

    class Tagged(Reward):
        name = "tagged"

        def score(self, images, prompts, metadata):
            return RewardOutput(images.mean(dim=(1, 2, 3)), [{"prompt": p} for p in prompts])

    x = torch.full((4, 3, 2, 2), 0.25)
    x[3] = 0.75
    x[0, 0, 0, 0] = x[2, 1, 1, 1] = float("nan")
    out = Tagged()(x, ["a", "b", "c", "d"])
    bad = {"error": "non-finite image"}
    assert out.details == [bad, {"prompt": "b"}, bad, {"prompt": "d"}]
    assert out.scores[[1, 3]].tolist() == [0.25, 0.75] and out.scores[[0, 2]].isnan().all()


def test_an_exponent_that_overflows_is_text_and_a_number_option_refuses_it() -> None:
    """1e999 was read as inf and taken by a number option (discriminator:clip=1e999); it is now left as written,
    as .inf is, so the option is refused by name before anything loads. 1e-3 stays a number."""
    from imgalign.rewards.base import check_reward_options, parse_reward_spec

    assert parse_reward_spec("discriminator:clip=1e999,lr=1e-3")[1] == {"clip": "1e999", "lr": 0.001}
    with pytest.raises(ValueError, match=r"option clip must be a number .*got '1e999'"):
        check_reward_options("discriminator:clip=1e999")
