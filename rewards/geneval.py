"""``geneval``: the GenEval-protocol judge as a reward (strict 0/1 or partial credit), on the shapes detector."""

from __future__ import annotations

from typing import Any

import torch

from imgalign.eval.geneval import judge
from imgalign.rewards.base import Reward, RewardOutput, register_reward, to_pil


@register_reward(
    "geneval", "GenEval judge on the shapes detector: strict 0/1 or partial credit (mode=partial)"
)
class GenEvalReward(Reward):
    name = "geneval"
    description = "GenEval-protocol judge (shapes detector); mode=strict|partial"

    def __init__(
        self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, mode: str = "partial"
    ) -> None:
        super().__init__(device, dtype)
        if mode not in ("strict", "partial"):
            raise ValueError(f"geneval reward: mode must be 'strict' or 'partial', got {mode!r}")
        from imgalign.eval.shapes_detector import ShapesDetector

        self.mode = mode
        self.detector = ShapesDetector()

    def score(
        self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]] | None
    ) -> RewardOutput:
        if metadata is None or any(not m or "include" not in m for m in metadata):
            raise ValueError("geneval reward needs GenEval metadata (tag, include, ...) for every image")
        scores, details = [], []
        for img, meta in zip(to_pil(images), metadata):
            j = judge(img, self.detector(img), meta)
            scores.append(float(j.correct) if self.mode == "strict" else j.partial)
            details.append({"correct": j.correct, "partial": j.partial, "reason": j.reason})
        return RewardOutput(torch.tensor(scores, dtype=torch.float32), details)
