"""``geneval``: the GenEval-protocol judge as a reward (strict 0/1, partial or dense credit; shapes detector)."""

from __future__ import annotations

from typing import Any

import torch

from imgalign.eval.geneval import judge, soft_credit
from imgalign.rewards.base import Reward, RewardOutput, register_reward, to_pil

MODES = ("strict", "partial", "soft")


@register_reward(
    "geneval",
    "GenEval judge on the shapes detector: partial credit (the default, mode=partial), strict 0/1 as `imgalign eval` "
    "judges (mode=strict) or dense credit (mode=soft)",
)
class GenEvalReward(Reward):
    name = "geneval"
    description = "GenEval-protocol judge (shapes detector); mode=strict|partial|soft"

    def __init__(
        self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, mode: str = "partial"
    ) -> None:
        super().__init__(device, dtype)
        if mode not in MODES:
            raise ValueError(f"geneval reward: mode must be one of {', '.join(MODES)}, got {mode!r}")
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
            raw = self.detector(img)
            j = judge(img, raw, meta)
            soft = soft_credit(img, raw, meta, passed=j.correct) if self.mode == "soft" else None
            scores.append({"strict": float(j.correct), "partial": j.partial, "soft": soft}[self.mode])
            details.append({"correct": j.correct, "partial": j.partial, "reason": j.reason})
        return RewardOutput(torch.tensor(scores, dtype=torch.float32), details)
