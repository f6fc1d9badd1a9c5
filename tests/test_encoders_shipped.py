"""The shipped shapes CLIP and VLM (imgalign/assets/models): loaded exactly as a user would (local folder, the
libraries' own loaders), one encoding / scoring pass, and the held-out checks on a small sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from imgalign import shapes as W
from imgalign.hub import embedded_path
from imgalign.pretrain import clip as clip_pt
from imgalign.pretrain import vlm as vlm_pt
from imgalign.shapes_models import SHAPES_CLIP_NAME, load_shapes_clip, load_shapes_vlm


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    torch.set_num_threads(1)


# ---- the shipped CLIP ----------------------------------------------------------------------------------------
def test_shapes_clip_loads_through_open_clip_both_ways():
    import open_clip

    folder = embedded_path("shapes-clip")
    m1, _, pre1 = open_clip.create_model_and_transforms("local-dir:" + str(folder))
    tok1 = open_clip.get_tokenizer("local-dir:" + str(folder))
    m2, pre2, tok2 = load_shapes_clip()
    assert not m2.training  # BatchNorm in train mode would use batch statistics
    assert SHAPES_CLIP_NAME in open_clip.list_models()
    m1.eval()
    img = W.render(W.colors("blue", "square"), 3)[0]
    x1, x2 = pre1(img)[None], pre2(img)[None]
    assert x1.shape == (1, 3, 64, 64) and torch.equal(x1, x2)
    # the training-time normalisation equals the shipped preprocess on 64x64 renders
    u8 = torch.from_numpy(np.array(img)).permute(2, 0, 1)[None]
    assert torch.allclose(clip_pt.normalize(u8), x1, atol=1e-6)
    with torch.no_grad():
        f1 = m1.encode_image(x1, normalize=True)
        f2 = m2.encode_image(x2, normalize=True)
        t = m2.encode_text(tok2(["a photo of a blue square", "a photo of a red circle"]), normalize=True)
    assert torch.allclose(f1, f2, atol=1e-6)
    assert torch.equal(tok1(["a photo of a circle"]), tok2(["a photo of a circle"]))
    assert (f2 @ t.t()).argmax().item() == 0


def test_shapes_clip_zero_shot_on_heldout_sample():
    model, pre, tok = load_shapes_clip()
    acc = clip_pt.zero_shot_accuracy(model, pre, tok, n=48, seed=0)
    assert acc["zero_shot/shape_acc"] >= 0.9, acc
    assert acc["zero_shot/colour_acc"] >= 0.9, acc


# ---- the shipped VLM -----------------------------------------------------------------------------------------
def test_shapes_vlm_loads_with_auto_classes_and_scores():
    from transformers import AutoModelForImageTextToText, AutoProcessor

    folder = embedded_path("shapes-vlm")
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    proc = AutoProcessor.from_pretrained(folder)
    spec = W.position("circle", "left of", "square")
    img = W.render(spec, 5)[0]
    ll = vlm_pt.caption_loglik(
        model, proc, [img, img], [spec.prompt(), "a photo of a circle right of a square"]
    )
    assert ll.shape == (2,) and torch.isfinite(ll).all()
    m2, p2 = load_shapes_vlm()
    assert not m2.training  # the ResNet tower uses BatchNorm
    ll2 = vlm_pt.caption_loglik(m2, p2, [img], [spec.prompt()])
    assert ll2[0].item() == pytest.approx(ll[0].item(), abs=1e-5)


def test_shapes_vlm_true_beats_corrupted_on_heldout_sample():
    model, proc = load_shapes_vlm()
    acc = vlm_pt.pair_accuracy(model, proc, n=48, seed=0)
    # regression floor for the shipped model (its card has the 360-pair figure; the target is 0.95)
    assert acc["pairs/accuracy"] >= 0.9, acc


@pytest.mark.parametrize("module", ["clip", "vlm"])
def test_the_shipped_encoders_were_trained_with_the_current_defaults(module):
    """Each card's command is `imgalign world pretrain --component X` "(defaults; ...)": its Config block must
    equal today's defaults, or rerunning the command would not rebuild the shipped model."""
    from dataclasses import asdict

    mod = clip_pt if module == "clip" else vlm_pt
    card = (embedded_path(f"shapes-{module}") / "README.md").read_text().splitlines()
    start = card.index("Config:") + 2  # after "Config:" and the opening fence
    block = card[start : card.index("```", start)]
    assert dict(line.split(": ", 1) for line in block) == {k: str(v) for k, v in asdict(mod.Config()).items()}
