"""Mutation round 23b: vlm_loglik's processor batch (rewards/vlm.py ``_encode``) holds one list of images per sample,
is padded on the right and adds no second BOS."""

from __future__ import annotations

from typing import Any

from imgalign.rewards.vlm import VLMLogLikReward


class Tokenizer:
    bos_token = "<s>"
    padding_side = "left"


class Processor:
    def __init__(self) -> None:
        self.tokenizer = Tokenizer()
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append({**kwargs, "side": self.tokenizer.padding_side})
        return {}


def test_each_sample_gets_its_own_list_of_one_image() -> None:
    """Gemma 3, Mllama and SmolVLM processors read a flat list of images as one sample's images: each sample's
    image is passed in a list of its own (a flat list only happened to work with Qwen2-VL)."""
    reward = VLMLogLikReward.__new__(VLMLogLikReward)
    reward.processor = Processor()
    reward._encode(["<s>user a", "user b"], ["img0", "img1"])
    (call,) = reward.processor.calls
    assert call["images"] == [["img0"], ["img1"]] and call["text"] == ["<s>user a", "user b"]
    assert call["side"] == "right" and call["add_special_tokens"] is True and call["padding"] is True
    assert reward.processor.tokenizer.padding_side == "left"  # restored
    reward._encode(["<s>a", "<s>b"], ["img0", "img1"])
    assert reward.processor.calls[1]["add_special_tokens"] is False  # the template rendered the BOS
