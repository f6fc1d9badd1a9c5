"""clip: CLIPScore math by hand, a tiny random open_clip model through every accepted model string."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_rewards_tiny import make_tiny_open_clip

from imgalign.rewards.base import build_reward
from imgalign.rewards.clip import CLIPSCORE_W, clipscore

torch.set_num_threads(1)


def test_clipscore_hand_computed() -> None:
    img = torch.tensor([[1.0, 0.0], [1.0, 0.0], [3.0, 4.0]])
    txt = torch.tensor([[1.0, 1.0], [-1.0, 0.0], [3.0, 4.0]])
    s = clipscore(img, txt)
    assert s.tolist() == pytest.approx([2.5 / 2**0.5, 0.0, 2.5])  # negative cosine clipped to 0
    assert clipscore(img, txt, w=1.0)[2].item() == pytest.approx(1.0)
    assert clipscore(img, txt, clamp=False)[1].item() == pytest.approx(-2.5)


def test_tiny_open_clip_reward_matches_manual(tmp_path: Path) -> None:
    d = make_tiny_open_clip(tmp_path / "clip")
    r = build_reward(f"clip:model=local-dir:{d},batch_size=2")
    x = torch.rand(3, 3, 32, 32)  # at the model's size: preprocessing is only the normalisation
    prompts = ["a photo of a circle", "a red square", "two crosses"]
    out = r(x, prompts)
    with torch.no_grad():
        img = r.model.encode_image((x - 0.5) / 0.25)
        txt = r.model.encode_text(r.tokenizer(prompts))
    cos = torch.nn.functional.cosine_similarity(img, txt, dim=-1)
    assert torch.allclose(out.scores, CLIPSCORE_W * cos.clamp(min=0), atol=1e-5)
    assert [d["cosine"] for d in out.details] == pytest.approx(cos.tolist(), abs=1e-5)
    plain = build_reward(f"clip:model={d}")  # a bare folder path works too
    assert torch.allclose(plain(x, prompts).scores, out.scores, atol=1e-5)
    big = torch.nn.functional.interpolate(x, size=64)  # other sizes are resized inside
    assert torch.isfinite(r(big, prompts).scores).all()


def test_bad_model_names_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot load open_clip model"):
        build_reward("clip:model=NotAModel-1")
