"""The reward contract (`Reward.__call__`) and option checks at edges the registry tests leave open."""

from __future__ import annotations

import pytest
import torch

from imgalign.rewards.base import Reward, RewardOutput

torch.set_num_threads(1)


class _Column(Reward):
    """A differentiable reward returning its scores as a column [B, 1] (the mean of each image)."""

    name = "column"
    differentiable = True

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict] | None) -> RewardOutput:
        return RewardOutput(images.mean(dim=(1, 2, 3)).unsqueeze(1))


def test_a_differentiable_rewards_scores_are_one_per_image_and_keep_their_graph() -> None:
    """A differentiable reward's [B, 1] comes back [B] like any reward's (it came back [B, 1], which broadcasts
    against a [B] advantage into [B, B]); a one-image batch scored as a 0-d tensor is [1]; the graph is kept."""
    x = torch.full((3, 3, 2, 2), 0.5, requires_grad=True)
    scores = _Column()(x, ["a", "b", "c"]).scores
    assert scores.shape == (3,)
    scores.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3, 3, 2, 2), 1 / 12))

    class Scalar(_Column):
        def score(
            self, images: torch.Tensor, prompts: list[str], metadata: list[dict] | None
        ) -> torch.Tensor:
            return images.mean()

    assert Scalar()(torch.full((1, 3, 2, 2), 0.25, requires_grad=True), ["a"]).scores.shape == (1,)


def test_a_nan_option_is_below_any_minimum() -> None:
    """check_at_least refuses NaN (every comparison with it is false, so `value < minimum` would let it through),
    as given by a keyword argument or a config's `.nan`."""
    from imgalign.rewards.base import check_at_least

    with pytest.raises(ValueError, match="batch_size must be a number >= 1, got nan"):
        check_at_least(float("nan"), 1, "batch_size")


def test_pil_images_of_two_sizes_are_refused_naming_both() -> None:
    """A list of PIL images in two sizes is refused naming the sizes (numpy's stack error named none)."""
    from PIL import Image

    from imgalign.rewards.base import to_tensor

    with pytest.raises(ValueError, match=r"must share a size, got \[\(2, 2, 3\), \(3, 3, 3\)\]"):
        to_tensor([Image.new("RGB", (2, 2)), Image.new("L", (3, 3)), Image.new("RGB", (2, 2))])


def test_a_missing_dotted_module_is_not_called_a_misspelt_reward() -> None:
    """`pkg.mod:attr` that does not import is no misspelt registered reward: the error does not list them (a
    dotless `mod:attr` may be one, and does)."""
    from imgalign.rewards.base import build_reward

    with pytest.raises(ValueError) as e:
        build_reward("no_such_pkg_q.rewards:f")
    assert "no_such_pkg_q" in str(e.value) and "nor a registered reward" not in str(e.value)


def test_a_reward_subclass_taking_any_keyword_is_built_with_its_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Reward subclass whose __init__ takes **kwargs (handing device/dtype on) is built, its options passed."""
    import sys
    import types

    from imgalign.rewards.base import build_reward

    class Open(Reward):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(kwargs.pop("device"), kwargs.pop("dtype"))
            self.opts = kwargs

        def score(
            self, images: torch.Tensor, prompts: list[str], metadata: list[dict] | None
        ) -> torch.Tensor:
            return images.mean(dim=(1, 2, 3))

    mod = types.ModuleType("my_lab.open_kw")
    mod.Open = Open
    monkeypatch.setitem(sys.modules, "my_lab.open_kw", mod)
    r = build_reward("my_lab.open_kw:Open:gain=2")
    assert isinstance(r, Open) and r.opts == {"gain": 2}


def test_scores_shaped_as_anything_but_one_per_image_are_refused() -> None:
    """[2, 2] scores for 4 images were flattened and accepted (a reward scoring per crop or per pair, paired with
    the wrong images); [B], [B, 1] and a one-image 0-d score pass, for a plain reward as for a differentiable one."""

    class Square(Reward):
        name = "square"

        def score(
            self, images: torch.Tensor, prompts: list[str], metadata: list[dict] | None
        ) -> torch.Tensor:
            return images.mean(dim=(1, 2, 3)).reshape(2, 2)

    x = torch.rand(4, 3, 2, 2)
    with pytest.raises(
        ValueError, match=r"'square' returned 4 scores \(shape \(2, 2\)\) for 4 images.*\[4\]"
    ):
        Square()(x, ["a"] * 4)

    class Row(Square):
        def score(
            self, images: torch.Tensor, prompts: list[str], metadata: list[dict] | None
        ) -> torch.Tensor:
            return images.mean(dim=(1, 2, 3)).unsqueeze(0)  # [1, B]

    with pytest.raises(ValueError, match=r"shape \(1, 4\)"):
        Row()(x, ["a"] * 4)
    assert _Column()(x, ["a"] * 4).scores.shape == (4,)
