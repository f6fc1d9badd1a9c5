"""``geneval``: the GenEval-protocol judge as a reward (strict 0/1, partial or dense credit).

By default it judges with the shapes world's exact detector. For real images give a transformers detector and an
open_clip colour classifier, as ``imgalign eval --suite geneval`` uses them: ``geneval:detector=facebook/mask2former-
swin-small-coco-instance,clip=ViT-L-14:openai`` (the official evaluator's Mask2Former and CLIP ViT-L/14; any folder
or cached Hub id). The decision rules are the same (:mod:`imgalign.eval.geneval`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, get_args

import torch

from imgalign.eval.geneval import GENEVAL_CLIP, judge, soft_credit
from imgalign.rewards.base import Reward, RewardOutput, register_reward, to_pil

Mode = Literal["strict", "partial", "soft"]
MODES: tuple[str, ...] = get_args(Mode)


def check_shapes_vocabulary(meta: dict[str, Any]) -> None:
    """Raise ValueError when a prompt names a class or colour that the shapes detector never reports (it would score
    0 on every image, silently)."""
    from imgalign import shapes as W

    for side in ("include", "exclude"):
        for i, c in enumerate(meta.get(side) or []):
            if c["class"] not in W.SHAPES:
                raise ValueError(
                    f"{side}[{i}].class {c['class']!r} is not a shape the shapes detector finds ({', '.join(W.SHAPES)});"
                    " for real images give geneval:detector=...,clip=..."
                )
            # a "color": None (metadata built in Python; the prompt loaders refuse null) passed here, and the judge
            # then looked for objects of colour None and scored 0
            if "color" in c and c["color"] not in W.COLORS:
                raise ValueError(
                    f"{side}[{i}].color {c['color']!r} is not a shapes-world colour ({', '.join(W.COLORS)})"
                    + ("; leave the key out for an object of any colour" if c["color"] is None else "")
                )


@register_reward(
    "geneval",
    "GenEval judge on the shapes detector: partial credit (the default, mode=partial), strict 0/1 as `imgalign eval` "
    "judges (mode=strict) or dense credit (mode=soft)",
)
class GenEvalReward(Reward):
    name = "geneval"
    description = "GenEval-protocol judge (shapes detector); mode=strict|partial|soft"

    def __init__(
        self,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        mode: Mode = "partial",
        detector: str = "shapes",
        clip: str = GENEVAL_CLIP,
    ) -> None:
        super().__init__(device, dtype)
        if mode not in MODES:
            raise ValueError(f"geneval reward: mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        self.color: Any = None  # the shapes judge reads colours itself
        self.validate: Callable[[dict[str, Any]], None]
        if detector == "shapes":
            if clip != GENEVAL_CLIP:  # it was ignored silently: the shapes detector reads colours itself
                raise ValueError(
                    f"geneval reward: clip={clip} picks the colour classifier of a real detector, and the shapes "
                    "detector reads colours itself: remove clip=, or give detector=... with it"
                )
            from imgalign.eval.shapes_detector import ShapesDetector

            self.detector: Any = ShapesDetector()
            self.validate = check_shapes_vocabulary
        else:
            if mode == "soft":
                raise ValueError(
                    "geneval reward: mode=soft is defined for the shapes detector; use strict or partial"
                )
            from imgalign.eval.real import build_judge, check_judge_specs

            check_judge_specs(str(detector), str(clip))
            self.detector, self.color, self.validate = build_judge(
                str(detector), str(clip), None, device=self.device, dtype=dtype
            )

    def check_metadata(self, metadata: Sequence[dict[str, Any]]) -> None:
        """Every row has GenEval metadata whose classes and colours this judge can find."""
        for m in metadata:
            if not m or "include" not in m or "tag" not in m:
                raise ValueError(
                    f"geneval reward: prompt {(m or {}).get('prompt')!r} has no GenEval metadata ('tag' and 'include'); "
                    "train on a GenEval-format .jsonl, generate:SEED or the shapes generator"
                )
            try:
                self.validate(m)
            except ValueError as e:
                raise ValueError(f"geneval reward: prompt {m.get('prompt')!r}: {e}") from None

    def score(
        self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]] | None
    ) -> RewardOutput:
        if metadata is None or any(not m or "include" not in m or "tag" not in m for m in metadata):
            raise ValueError(
                "geneval reward needs GenEval metadata with 'tag' and 'include' for every image (the tag sets the "
                "detection threshold: counting's is 0.9, the others' 0.3)"
            )
        # a class the detector cannot find, a colour outside its vocabulary: named with its prompt
        self.check_metadata(metadata)
        scores, details = [], []
        for img, meta in zip(to_pil(images), metadata):
            raw = self.detector(img)
            j = judge(img, raw, meta) if self.color is None else judge(img, raw, meta, self.color)
            soft = soft_credit(img, raw, meta, passed=j.correct) if self.mode == "soft" else None
            scores.append({"strict": float(j.correct), "partial": j.partial, "soft": soft}[self.mode])
            details.append({"correct": j.correct, "partial": j.partial, "reason": j.reason})
        return RewardOutput(torch.tensor(scores, dtype=torch.float32), details)
