"""Round 24 mutation kills: the CLIP and VLM pretraining loops start each step from zero gradients, and the CLIP
loss sees each image's own caption tokens (the tokens of `texts`, in their order)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.pretrain import clip as clip_pt
from imgalign.pretrain import vlm as vlm_pt

TINY_CLIP = dict(
    steps=3, batch_size=6, pool_size=12, warmup=1, embed_dim=16, vision_width=16, vision_layers=1,
    vision_head_width=16, patch_size=16, text_width=16, text_layers=1, text_heads=2, eval_every=0,
    eval_images=8, checkpoint_every=10, save_dtype="float32",
)  # fmt: skip
TINY_VLM = dict(
    steps=3, batch_size=4, pool_size=8, warmup=1, vision_width=16, vision_layers=1, vision_heads=2,
    patch_size=16, text_width=16, text_layers=1, text_heads=2, text_kv_heads=1, text_ffn=32, eval_every=0,
    eval_pairs=6, checkpoint_every=10,
)  # fmt: skip


@pytest.mark.parametrize("module", ["clip", "vlm"])
def test_each_pretraining_step_starts_from_zero_gradients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    """The loss is the sum of one weight's entries (plus the real graph times 0): its gradient is all ones at every
    step, not the sum over the steps so far (gradients left from the step before)."""
    mod, tiny, name = (
        (clip_pt, TINY_CLIP, "batch_loss") if module == "clip" else (vlm_pt, TINY_VLM, "caption_nll")
    )
    real, grads = getattr(mod, name), []
    weight: list[torch.nn.Parameter] = []

    def ones_loss(model, *a):
        weight[:] = [next(model.parameters())]
        return real(model, *a) * 0 + weight[0].sum()

    def record(params, max_norm, *a, **k):  # called after backward, before the optimizer step
        grads.append(weight[0].grad.clone())
        return torch.tensor(0.0)

    monkeypatch.setattr(mod, name, ones_loss)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", record)
    mod.pretrain(mod.Config(**tiny), tmp_path, progress=False)
    assert len(grads) == 3
    assert all(torch.equal(g, torch.ones_like(g)) for g in grads), [g.flatten()[:3] for g in grads]


def test_the_clip_loss_gets_the_tokens_of_each_images_own_caption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """batch_loss(model, x, tok, texts): row i of tok is texts[i] tokenised, the caption drawn for image i."""
    import open_clip

    seen: list[tuple[torch.Tensor, list[str]]] = []
    real = clip_pt.batch_loss

    def spy(model, x, tok, texts):
        seen.append((tok.clone(), list(texts)))
        return real(model, x, tok, texts)

    monkeypatch.setattr(clip_pt, "batch_loss", spy)
    # full captions name every object: the six captions of a batch differ, so any reordering shows
    clip_pt.pretrain(
        clip_pt.Config(**{**TINY_CLIP, "caption_weights": (0.0, 1.0, 0.0, 0.0)}), tmp_path, progress=False
    )
    tokenizer = open_clip.get_tokenizer(clip_pt.MODEL_NAME)
    assert len(seen) == 3
    assert any(texts != sorted(texts) for _, texts in seen)  # so a reordering of the tokens would show
    for tok, texts in seen:
        assert torch.equal(tok, tokenizer(texts))
