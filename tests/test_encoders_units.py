"""Pieces of the shapes CLIP pretraining (:mod:`imgalign.pretrain.clip`) and of the code it shares with the VLM's
(:mod:`imgalign.pretrain.encoder_common`) that the end-to-end runs of tests/test_encoders.py do not pin down: each
step's batch and its normalisation, the optimizer and gradient settings, the evaluations' count and seed, the
card's settings and the validation boundaries (mutation round 10)."""

from __future__ import annotations

import pytest
import torch
from test_encoders import TINY_CLIP

from imgalign import shapes as W
from imgalign.pretrain import clip as clip_pt
from imgalign.pretrain import encoder_common as C


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    """One torch thread per test (the offline environment is conftest's `_offline`)."""
    torch.set_num_threads(1)


def test_clip_refuses_zero_steps_or_threads_an_unknown_tower_and_checks_the_patch_size_only_for_a_vit():
    for bad, message in (
        ({"steps": 0}, r"steps must be >= 1 and batch_size >= 2 .*; got steps=0"),
        ({"threads": 0}, r"threads must be at least 1 \(got 0\)"),
        ({"vision_arch": "ViT"}, r"vision_arch must be resnet or vit, got 'ViT'"),
    ):
        with pytest.raises(ValueError, match=message):
            clip_pt.Config(**{**TINY_CLIP, **bad}).validate()
    # the ResNet tower has no patches: a patch size that does not divide 64 is no error there
    clip_pt.Config(**{**TINY_CLIP, "vision_arch": "resnet", "patch_size": 12}).validate()


def test_clip_context_length_20_holds_the_longest_caption_and_19_does_not():
    """The longest caption is the full one of four objects of four colours: 18 words, 20 tokens with start and
    end. context_length=20 is allowed; 19 would cut it and is refused."""
    import open_clip

    objs = [W.PlacedObject("circle", c, (0, 0, 1, 1), 0) for c in list(W.COLORS)[:4]]
    longest = C.describe(objs)
    tok = open_clip.get_tokenizer("ViT-B-32")  # open_clip's BPE, the tokenizer of the shapes CLIP
    assert len(tok.encode(longest)) + 2 == 20
    clip_pt.Config(**{**TINY_CLIP, "context_length": 20}).validate()
    with pytest.raises(ValueError, match="context_length must be at least 20"):
        clip_pt.Config(**{**TINY_CLIP, "context_length": 19}).validate()


def test_clip_zero_shot_accuracy_prompts_each_shape_and_colour_and_feeds_images_in_the_models_dtype():
    """The prompts are "a photo of a {shape}" and "a photo of a {colour} object" (the card's), one per name in the
    world's order; a float64 (or float16) model gets its images in its own dtype, not float32."""
    seen, texts = [], []

    class Fake(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))

        def encode_image(self, x, normalize):
            seen.append(x.dtype)
            return torch.ones(len(x), 2, dtype=x.dtype)

        def encode_text(self, tok, normalize):
            return torch.ones(len(tok), 2, dtype=torch.float64)

    def tokenizer(batch):
        texts.append(batch)
        return torch.arange(len(batch))

    clip_pt.zero_shot_accuracy(Fake(), lambda img: torch.zeros(3, 64, 64), tokenizer, n=2, seed=0)
    assert seen == [torch.float64]
    assert texts == [[f"a photo of a {s}" for s in W.SHAPES], [f"a photo of a {c} object" for c in W.COLORS]]


def test_clip_pretraining_steps_on_each_steps_normalised_batch_with_clipped_gradients(tmp_path, monkeypatch):
    """Step s trains on C.training_batch(pool, seed, s) with the caption weights, its images normalised as the
    shipped preprocess does; the gradient norm is clipped to 1 and AdamW runs with CLIP's betas (0.9, 0.98) and
    eps 1e-6."""
    seen, clips, real_loss, real_clip = [], [], clip_pt.batch_loss, torch.nn.utils.clip_grad_norm_

    def spy_loss(model, x, tok, texts):
        seen.append((x, texts))
        return real_loss(model, x, tok, texts)

    def spy_clip(params, max_norm, *a, **k):
        clips.append(max_norm)
        return real_clip(params, max_norm, *a, **k)

    monkeypatch.setattr(clip_pt, "batch_loss", spy_loss)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy_clip)
    weights = (0.0, 1.0, 1.0, 0.0)
    cfg = clip_pt.Config(**{**TINY_CLIP, "steps": 2, "eval_every": 0, "seed": 3, "caption_weights": weights})
    clip_pt.pretrain(cfg, tmp_path, progress=False)
    pool = C.render_pool(3, cfg.pool_size)
    assert len(seen) == 2 and clips == [1.0, 1.0]
    for step, (x, texts) in enumerate(seen):
        images, want, _ = C.training_batch(pool, 3, step, cfg.batch_size, weights=weights)
        assert texts == want
        assert torch.equal(x, clip_pt.normalize(images))
    groups = C.load_checkpoint(tmp_path / clip_pt.WORK / "checkpoint.pt")["optimizer"]["param_groups"]
    assert {(tuple(g["betas"]), g["eps"]) for g in groups} == {((0.9, 0.98), 1e-6)}


def test_clip_pretraining_trains_with_cfg_threads_torch_threads(tmp_path, monkeypatch):
    class Stop(Exception):
        pass

    seen = []

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        raise Stop

    monkeypatch.setattr(C, "training_batch", spy)
    with pytest.raises(Stop):
        clip_pt.pretrain(clip_pt.Config(**{**TINY_CLIP, "threads": 2}), tmp_path, progress=False)
    assert seen == [2]


def test_clip_pretraining_evaluates_every_eval_every_steps_and_once_at_the_end_on_the_runs_seed(
    tmp_path, monkeypatch
):
    """steps=4, eval_every=2: one evaluation at step 2 and the final one (not a second one at step 4), each on
    eval_images renders of the run's own held-out stream (its seed)."""
    calls = []

    def evaluate(model, preprocess, tokenizer, n, seed):
        calls.append((n, seed))
        return {"acc": 0.5}

    monkeypatch.setattr(clip_pt, "zero_shot_accuracy", evaluate)
    clip_pt.pretrain(clip_pt.Config(**{**TINY_CLIP, "seed": 5, "eval_images": 7}), tmp_path, progress=False)
    assert calls == [(7, 5), (7, 5)]


def test_clip_model_card_states_the_dtype_threads_and_number_of_evaluation_renders():
    for dtype in ("float16", "float32"):
        card = clip_pt.model_card(clip_pt.Config(save_dtype=dtype, threads=3, eval_images=48), {}, 10, 60.0)
        assert f"(weights stored as {dtype})" in card and "(3 torch thread(s), shared machine)" in card
        assert "Zero-shot over 48 single-object renders" in card
        assert "During training" not in card  # no history: no table


def test_describe_refuses_a_caption_without_shape_and_colour():
    with pytest.raises(ValueError, match="with_shape or with_colour"):
        C.describe([W.PlacedObject("circle", "red", (0, 0, 1, 1), 0)], with_shape=False, with_colour=False)


def test_history_table_leaves_out_the_minutes_and_is_empty_without_history():
    rows = [{"step": 2, "train/loss": 1.5}, {"step": 4, "train/loss": 1.0, "train/minutes": 3.0}]
    assert C.history_table(rows)[2] == "| step | train/loss |"
    assert C.history_table([]) == []


def test_final_metrics_skip_a_row_without_a_loss_and_report_nan_when_none_was_logged(tmp_path):
    """A rerun of a finished run whose checkpoint predates the running loss takes the last logged loss, passing
    over a row that has none; with no loss logged at all it reports NaN, not a perfect-looking 0."""
    import math
    import time

    history = [{"step": 5, "train/loss": 1.2}, {"step": 8, "acc": 0.5}]
    assert C.final_metrics(lambda: {}, None, time.time(), 10, history, tmp_path)[0]["train/loss"] == 1.2
    assert math.isnan(C.final_metrics(lambda: {}, None, time.time(), 10, [], tmp_path)[0]["train/loss"])


def test_a_checkpoint_of_another_config_says_how_to_start_over(tmp_path):
    import json
    from dataclasses import asdict

    ckpt = tmp_path / "clip.train" / "checkpoint.pt"
    C.save_checkpoint(ckpt, {"config": json.dumps(asdict(clip_pt.Config(steps=5)), sort_keys=True)})
    with pytest.raises(ValueError) as e:
        C.resume_state(ckpt, clip_pt.Config(steps=6), "clip")
    assert str(e.value) == (
        f"clip: the checkpoint in {ckpt.parent} was written with a different config (steps: 5 -> 6); use another "
        "--out or delete that folder to start over"
    )
