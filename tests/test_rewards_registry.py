"""Every registered reward: random images in, finite float32 [B] out, on the CPU with no network."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_rewards_tiny import make_tiny_open_clip, make_tiny_qwen2_vl

from imgalign.prompts.shapes import EVAL_SET_PATH
from imgalign.rewards.base import build_reward, list_rewards

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def options(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("models")
    clip = make_tiny_open_clip(d / "clip")
    vlm = make_tiny_qwen2_vl(d / "vlm")
    return {
        "clip": f"clip:model=local-dir:{clip}",
        "vlm_loglik": f"vlm_loglik:model={vlm}",
        "discriminator": "discriminator:features=stats,ref_size=32,hidden=8",
        "artifact": "artifact",  # the shipped shapes-artifact model
        "fid": "fid:features=stats,ref_size=64,set_size=16",
        "geneval": "geneval",
    }


def test_every_registered_reward_is_covered(options: dict[str, str]) -> None:
    assert set(list_rewards()) == set(options), "add the new reward to this test's options"
    assert all(list_rewards().values()), "every reward needs a one-line description"


@pytest.mark.parametrize("name", sorted(list_rewards()))
def test_random_images_give_finite_float32_scores(name: str, options: dict[str, str]) -> None:
    b = 3
    metas = [json.loads(line) for line in Path(EVAL_SET_PATH).read_text().splitlines()[:b]]
    prompts = [m["prompt"] for m in metas]
    reward = build_reward(options[name])
    torch.manual_seed(0)
    if hasattr(reward, "ready") and not reward.ready():  # fid: a generated set to score against
        reward.update(torch.rand(4, 3, 64, 64))
    out = reward(torch.rand(b, 3, 64, 64), prompts, metas)
    assert out.scores.dtype == torch.float32 and out.scores.shape == (b,)
    assert torch.isfinite(out.scores).all()
    assert out.details is None or len(out.details) == b
    for flag in ("higher_is_better", "differentiable", "stateful"):
        assert isinstance(getattr(reward, flag), bool)
    if reward.stateful:
        state = reward.state_dict()
        reward.update(torch.rand(2, 3, 64, 64), prompts[:2])
        reward.load_state_dict(state)


def test_unknown_reward_lists_valid_names() -> None:
    with pytest.raises(
        ValueError, match="valid rewards: .*artifact.*clip.*discriminator.*fid.*geneval.*vlm_loglik"
    ):
        build_reward("clipp")


def test_an_unknown_reward_option_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"reward 'geneval': unknown option\(s\) foo; its options: mode"):
        build_reward("geneval:foo=1")


def test_geneval_modes_on_ground_truth_and_a_blank_image() -> None:
    """strict, partial and soft give 1 on a rendered ground truth and 0 on a blank canvas; a bad mode is named."""
    from imgalign import shapes as W
    from imgalign.prompts.shapes import build_eval_set

    spec = build_eval_set()[0]
    img, _ = W.render(spec, 0)
    x = torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)[None].float() / 255.0
    blank = torch.zeros_like(x) + torch.tensor(W.BACKGROUND, dtype=torch.float32).view(1, 3, 1, 1) / 255.0
    meta = [spec.to_metadata()] * 2
    for mode in ("strict", "partial", "soft"):
        out = build_reward(f"geneval:mode={mode}")(torch.cat([x, blank]), [spec.prompt] * 2, meta)
        assert out.scores.tolist() == [1.0, 0.0], mode
    with pytest.raises(ValueError, match="strict, partial, soft"):
        build_reward("geneval:mode=dense")


def test_images_out_of_range_are_refused_and_nan_images_score_nan() -> None:
    reward = build_reward("clip")
    with pytest.raises(ValueError, match=r"images must be in \[0, 1\].*divide \[0, 255\] images by 255"):
        reward(torch.rand(1, 3, 64, 64) * 255, ["a circle"])
    x = torch.rand(3, 3, 64, 64)
    x[1, 0, 0, 0] = float("nan")
    for name in ("clip", "geneval", "artifact"):
        s = build_reward(name)(
            x,
            ["a photo of a circle"] * 3,
            [
                {
                    "tag": "single_object",
                    "include": [{"class": "circle", "count": 1}],
                    "prompt": "a photo of a circle",
                }
            ]
            * 3,
        ).scores
        assert torch.isnan(s[1]) and torch.isfinite(s[[0, 2]]).all(), name
