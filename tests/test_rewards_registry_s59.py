"""Stop 59 fixes: registered factories, the sanity check, premultiplied alpha, one folder as both classes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import imgalign.rewards.base as base


@pytest.fixture(autouse=True)
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the registry with the built-in rewards in it: registering into a copy made before they were
    imported would leave them registered in the copy only, and missing from every later test."""
    base._import_builtin()
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))


def test_a_registered_factory_that_returns_no_reward_is_refused_by_name() -> None:
    @base.register_reward("my_plain", "returns a tensor, not a Reward")
    def my_plain(device: str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(1)

    with pytest.raises(
        ValueError, match=r"reward 'my_plain' is registered with .*my_plain.* returned a Tensor"
    ):
        base.build_reward("my_plain")


def test_a_registered_factory_that_returns_a_reward_is_built() -> None:
    def brightness(images: torch.Tensor, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        return images.mean(dim=(1, 2, 3))

    @base.register_reward("my_bright", "mean pixel value")
    def my_bright(device: str = "cpu", dtype: torch.dtype = torch.float32) -> base.Reward:
        return base.FunctionReward(brightness, name="my_bright")

    reward = base.build_reward("my_bright")
    assert isinstance(reward, base.Reward)
    out = reward(torch.full((2, 3, 8, 8), 0.25), ["a", "b"], [{}, {}])
    assert torch.allclose(out.scores, torch.full((2,), 0.25))


@pytest.mark.parametrize(("opts", "label"), [({"n": 0}, "n"), ({"n": 4, "batch_size": 0}, "batch_size")])
def test_true_vs_corrupted_refuses_an_empty_check_by_name(opts: dict[str, int], label: str) -> None:
    """n=0 failed inside torch.cat and batch_size=0 inside range(), naming neither (left alone since stop 55)."""
    from imgalign.rewards.sanity import true_vs_corrupted

    def never_called(images: torch.Tensor, prompts: list[str], metadata: list[dict]) -> base.RewardOutput:
        raise AssertionError("the reward must not be called")

    with pytest.raises(ValueError, match=rf"true_vs_corrupted: {label} must be a whole number of at least 1"):
        true_vs_corrupted(never_called, **opts)


@pytest.mark.parametrize(
    ("premultiplied", "straight"),
    [
        (Image.new("RGBa", (2, 2), (100, 50, 20, 128)), Image.new("RGBA", (2, 2), (199, 100, 40, 128))),
        (Image.new("La", (2, 2), (100, 128)), Image.new("LA", (2, 2), (199, 128))),
    ],
    ids=["RGBa", "La"],
)
def test_premultiplied_alpha_is_composited_on_black_as_straight_alpha_is(
    premultiplied: Image.Image, straight: Image.Image
) -> None:
    """An in-memory image with premultiplied alpha scores as the same image with straight alpha: 'La' failed in
    PIL's convert ("conversion from La to L not supported"), 'RGBa' was un-premultiplied and lost its transparency
    (199, not 100)."""
    got = base.pil_to_rgb(premultiplied)
    assert got.mode == "RGB"
    assert np.asarray(got).tolist() == np.asarray(base.pil_to_rgb(straight)).tolist()
    assert got.getpixel((0, 0))[0] == 100


def test_one_folder_as_both_classes_names_both_spellings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--fake LINK (a symlink to the --real folder) is refused naming both names and the folder they lead to; it
    named the --real folder only, and the user could not see why. One name given twice is named once."""
    from imgalign.cli import main

    real = tmp_path / "a"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    out = str(tmp_path / "head.safetensors")
    argv = [
        "rewards",
        "fit-discriminator",
        "--real",
        str(real),
        "--fake",
        str(tmp_path / "link"),
        "--out",
        out,
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        f"--real and --fake are the same folder ({str(real)!r} and {str(tmp_path / 'link')!r}, both " in err
    )
    assert main(["rewards", "fit-artifact", "--clean", str(real), "--artifact", str(real), "--out", out]) == 2
    assert (
        f"--clean and --artifact are the same folder ({str(real)!r}): the head learns"
        in capsys.readouterr().err
    )
