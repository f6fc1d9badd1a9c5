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


# ---- mutation round 18 ----------------------------------------------------------------------------------------
def test_describe_puts_an_before_a_vowel_and_falls_back_to_s_for_a_noun_without_a_plural():
    """The shapes world has no vowel-initial colour or shape, but describe is general: "an oval", "two ovals"."""
    oval = W.PlacedObject("oval", "orange", (0, 0, 1, 1), 0)
    assert C.describe([oval], with_colour=False) == "a photo of an oval"
    assert C.describe([oval]) == "a photo of an orange oval"
    assert C.describe([oval, oval], with_colour=False) == "a photo of two ovals"


def test_lr_stays_at_the_floor_after_the_last_step():
    """Past `total` the cosine is clamped at its end (it would climb back towards the peak otherwise)."""
    assert C.lr_at(100, 100, 1.0, 10) == pytest.approx(0.1)
    assert C.lr_at(150, 100, 1.0, 10) == pytest.approx(0.1)
    assert C.lr_at(190, 100, 1.0, 10) == pytest.approx(0.1)


def test_final_metrics_take_the_last_finite_logged_loss(tmp_path):
    """A rerun whose checkpoint has no running loss reports the latest logged loss, not the first, and passes
    over a NaN one."""
    import time

    history = [
        {"step": 2, "train/loss": 3.0},
        {"step": 4, "train/loss": 2.0},
        {"step": 6, "train/loss": float("nan")},
    ]
    assert C.final_metrics(lambda: {}, None, time.time(), 8, history, tmp_path)[0]["train/loss"] == 2.0


def test_final_metrics_report_minutes_and_a_rerun_replaces_the_final_row(tmp_path):
    """`train/minutes` is the elapsed time in minutes; a rerun of a finished run (its last row is the final step)
    replaces that row instead of adding a second one."""
    import json
    import time

    history = [{"step": 4, "train/loss": 2.0}, {"step": 8, "train/loss": 1.0, "acc": 0.1}]
    metrics, elapsed = C.final_metrics(lambda: {"acc": 0.5}, 1.5, time.time() - 120, 8, history, tmp_path)
    assert elapsed == pytest.approx(120, abs=5) and metrics["train/minutes"] == pytest.approx(2.0, abs=0.1)
    assert [h["step"] for h in history] == [4, 8] and history[-1]["acc"] == 0.5
    assert json.loads((tmp_path / "history.json").read_text()) == history


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"lr": 0.0}, r"lr must be > 0 and finite \(got 0.0\)"),
        ({"lr": float("inf")}, r"lr must be > 0 and finite \(got inf\)"),
        ({"weight_decay": -0.1}, r"weight_decay must be >= 0 and finite"),
        ({"weight_decay": float("inf")}, r"weight_decay must be >= 0 and finite"),
        ({"warmup": -1}, "warmup must be at least 0"),
        ({"eval_every": -2}, "eval_every must be at least 0"),
    ],
)
@pytest.mark.parametrize("module", ["clip", "vlm"])
def test_encoder_rates_decays_and_intervals_out_of_range_are_refused(module, bad, message):
    from test_encoders import TINY_VLM

    from imgalign.pretrain import vlm as vlm_pt

    cfg = clip_pt.Config(**{**TINY_CLIP, **bad}) if module == "clip" else vlm_pt.Config(**{**TINY_VLM, **bad})
    with pytest.raises(ValueError, match=message):
        cfg.validate()


def test_check_weights_refuses_0_only_when_positive():
    from types import SimpleNamespace

    C.check_weights(SimpleNamespace(w=0.0), "w")
    with pytest.raises(ValueError, match=r"w must be > 0 and finite \(got 0.0\)"):
        C.check_weights(SimpleNamespace(w=0.0), "w", positive=True)
    with pytest.raises(ValueError, match=r"w must be > 0 and finite \(got nan\)"):
        C.check_weights(SimpleNamespace(w=float("nan")), "w", positive=True)


def test_replace_dir_keeps_the_previous_model_when_moving_the_new_one_in_fails(tmp_path, monkeypatch):
    """The old folder is set aside (``m.old``), not deleted, until the new one is in place."""
    import os

    tmp, final = tmp_path / "m.tmp", tmp_path / "m"
    for d in (tmp, final):
        d.mkdir()
        (d / "weights").write_text(d.name)
    real = os.replace

    def replace(src, dst):
        if src == tmp:
            raise OSError("disk full")
        real(src, dst)

    monkeypatch.setattr(C.os, "replace", replace)
    with pytest.raises(OSError, match="disk full"):
        C.replace_dir(tmp, final)
    assert (tmp_path / "m.old" / "weights").read_text() == "m"


def test_replace_dir_gives_the_exported_files_the_mode_open_gives(tmp_path):
    """safetensors writes 0600 files: the folder moved in has them readable as ``open()`` makes them."""
    import os
    import stat

    tmp, final = tmp_path / "m.tmp", tmp_path / "m"
    tmp.mkdir()
    (tmp / "model.safetensors").write_bytes(b"w")
    os.chmod(tmp / "model.safetensors", 0o600)
    C.replace_dir(tmp, final)
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE((final / "model.safetensors").stat().st_mode) == 0o666 & ~mask


def test_clip_weights_are_initialised_from_the_configured_seed(tmp_path, monkeypatch):
    import open_clip

    seeds = []

    class Stop(Exception):
        pass

    def built(*a, **k):
        seeds.append(torch.initial_seed())
        raise Stop

    monkeypatch.setattr(open_clip, "create_model_and_transforms", built)
    for seed in (0, 5):
        with pytest.raises(Stop):
            clip_pt.pretrain(
                clip_pt.Config(**{**TINY_CLIP, "seed": seed}), tmp_path / str(seed), progress=False
            )
    assert seeds == [0, 5]


def test_clip_trains_in_train_mode_and_evaluates_in_eval_mode(tmp_path, monkeypatch):
    """BatchNorm: the zero-shot evaluation runs in eval mode and the steps after it in train mode again."""
    modes, real_loss = [], clip_pt.batch_loss

    def evaluate(model, preprocess, tokenizer, n, seed):
        modes.append(("eval", model.training))
        return {"acc": 0.5}

    def loss(model, x, tok, texts):
        modes.append(("step", model.training))
        return real_loss(model, x, tok, texts)

    monkeypatch.setattr(clip_pt, "zero_shot_accuracy", evaluate)
    monkeypatch.setattr(clip_pt, "batch_loss", loss)
    clip_pt.pretrain(clip_pt.Config(**{**TINY_CLIP, "steps": 3, "eval_every": 1}), tmp_path, progress=False)
    assert modes == [("step", True), ("eval", False)] * 2 + [("step", True), ("eval", False)]


@pytest.mark.parametrize("start, clamped", [(6.0, 4.6052), (-1.0, 0.0)])
def test_clip_pretraining_keeps_the_temperature_between_1_and_100(tmp_path, monkeypatch, start, clamped):
    """After each step the learnt log-scale is clamped to [0, ln 100] (CLIP's cap at 100)."""
    real_loss = clip_pt.batch_loss

    def loss(model, x, tok, texts):
        with torch.no_grad():
            model.logit_scale.fill_(start)
        return real_loss(model, x, tok, texts)

    monkeypatch.setattr(clip_pt, "batch_loss", loss)
    clip_pt.pretrain(clip_pt.Config(**{**TINY_CLIP, "steps": 1, "eval_every": 0}), tmp_path, progress=False)
    state = C.load_checkpoint(tmp_path / clip_pt.WORK / "checkpoint.pt")["model"]
    assert state["logit_scale"].item() == pytest.approx(clamped)


def test_final_metrics_create_the_work_folder_for_the_history(tmp_path):
    import json
    import time

    work = tmp_path / "new" / "clip.train"
    C.final_metrics(lambda: {"acc": 1.0}, 0.5, time.time(), 3, [], work)
    assert json.loads((work / "history.json").read_text())[0]["acc"] == 1.0


def test_clip_model_card_counts_the_models_parameters(tmp_path, monkeypatch):
    import open_clip

    counts = []

    def card(cfg, metrics, n_params, seconds, history=None):
        counts.append(n_params)
        return "card"

    monkeypatch.setattr(clip_pt, "model_card", card)
    cfg = clip_pt.Config(**{**TINY_CLIP, "steps": 1, "eval_every": 0})
    clip_pt.pretrain(cfg, tmp_path, progress=False)
    model = open_clip.create_model(clip_pt.MODEL_NAME)
    assert counts == [sum(p.numel() for p in model.parameters())] and counts[0] > 1000
