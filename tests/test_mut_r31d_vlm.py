"""Mutation round 31 (helper d): rewards/vlm.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_rewards_tiny import make_tiny_qwen2_vl


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_qwen2_vl(tmp_path_factory.mktemp("vlm") / "qwen2vl")


def test_a_chat_template_on_the_tokenizer_alone_scores_as_the_processors_would(
    tiny_vlm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reward accepts a processor whose only chat template is its tokenizer's; scoring renders with it
    (transformers' processor does not fall back to its tokenizer's template by itself)."""
    import imgalign.rewards.vlm as vlm
    from imgalign.rewards.vlm import VLMLogLikReward, load_vlm

    model, proc = load_vlm(str(tiny_vlm), torch.device("cpu"), torch.float32)
    monkeypatch.setattr(vlm, "load_vlm", lambda *a, **k: (model, proc))
    x = torch.rand(2, 3, 64, 64)
    prompts = ["a cross", "two red squares"]
    expected = VLMLogLikReward(model="tiny")(x, prompts)
    proc.tokenizer.chat_template, proc.chat_template = proc.chat_template, None
    out = VLMLogLikReward(model="tiny")(x, prompts)
    assert torch.equal(out.scores, expected.scores)
    assert [d["tokens"] for d in out.details] == [d["tokens"] for d in expected.details]
