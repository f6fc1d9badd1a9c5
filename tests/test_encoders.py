"""The embedded shapes CLIP and VLM: loading as a user would, held-out checks on a small sample, the training
pieces (captions, loss, corruptions, masks) and a tiny resumable pretraining run of each."""

from __future__ import annotations

import dataclasses
import logging
import math
import random

import pytest
import torch

from imgalign import shapes as W
from imgalign.hub import ModelNotFoundError
from imgalign.pretrain import clip as clip_pt
from imgalign.pretrain import encoder_common as C
from imgalign.pretrain import vlm as vlm_pt
from imgalign.shapes_models import load_shapes_clip


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    torch.set_num_threads(1)


# ---- captions and data ---------------------------------------------------------------------------------------
def _obj(shape: str, color: str) -> W.PlacedObject:
    return W.PlacedObject(shape, color, (0, 0, 1, 1), 0)


def test_describe_groups_and_counts():
    objs = [_obj("circle", "red"), _obj("square", "blue"), _obj("circle", "red"), _obj("cross", "white")]
    assert C.describe(objs) == "a photo of two red circles and a blue square and a white cross"
    assert (
        C.describe(objs, with_shape=False)
        == "a photo of two red objects and a blue object and a white object"
    )
    assert C.describe([_obj("triangle", "green")], with_colour=False) == "a photo of a triangle"
    assert C.describe([_obj("cross", "red")] * 2) == "a photo of two red crosses"  # W.PLURALS, not + "s"


def test_training_batch_is_a_function_of_seed_and_step():
    pool = C.render_pool(0, 24)
    a = C.training_batch(pool, 0, 5, 8)
    b = C.training_batch(pool, 0, 5, 8)
    c = C.training_batch(pool, 0, 6, 8)
    assert torch.equal(a[0], b[0]) and a[1] == b[1] and a[2] == b[2]
    assert a[2] != c[2]
    assert C.training_batch(pool, 1, 5, 8)[2] != a[2]  # another seed, another stream at the same step
    assert a[0].shape == (8, 3, 64, 64) and a[0].dtype == torch.uint8


def test_training_batch_pairs_each_image_with_one_of_its_own_captions():
    n = 12
    pool = C.Pool(
        images=torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 3, 2, 2),
        captions=[{k: f"{k} of render {i}" for k in C.CAPTION_KINDS} for i in range(n)],
        specs=[None] * n,
    )
    images, texts, idx = C.training_batch(pool, 0, 3, 8)
    assert len(set(idx)) == 8
    for img, text, i in zip(images, texts, idx):
        assert int(img[0, 0, 0]) == i and text.endswith(f" of render {i}")


def test_captions_name_colour_and_shape_per_kind():
    spec = W.counting("circle", 2)
    objs = [_obj("circle", "red"), _obj("circle", "blue")]
    assert C.captions(spec, objs) == {
        "prompt": spec.prompt(),
        "full": "a photo of a red circle and a blue circle",
        "shapes": "a photo of two circles",
        "colours": "a photo of a red object and a blue object",
    }


def test_training_batch_draws_caption_kinds_with_the_given_weights():
    n = 12
    pool = C.Pool(
        images=torch.zeros(n, 3, 2, 2, dtype=torch.uint8),
        captions=[{k: f"{k} {i}" for k in C.CAPTION_KINDS} for i in range(n)],
        specs=[None] * n,
    )
    for step in range(3):
        _, texts, _ = C.training_batch(pool, 0, step, 8, weights=(0.0, 0.0, 0.0, 1.0))
        assert all(t.startswith("colours ") for t in texts)


def test_a_pool_as_large_as_the_batch_is_allowed_and_each_batch_is_the_whole_pool():
    """pool_size == batch_size is valid (the checks refuse only a smaller pool): every step draws every render."""
    clip_pt.Config(**{**TINY_CLIP, "pool_size": 6, "batch_size": 6}).validate()
    vlm_pt.Config(**{**TINY_VLM, "pool_size": 4, "batch_size": 4}).validate()
    for step in range(3):
        idx, _ = C.batch_indices(0, step, 5, 5)
        assert sorted(idx) == [0, 1, 2, 3, 4]


class _SpyClip:
    """Features are the inputs themselves; logit scale 10."""

    logit_scale = torch.tensor(10.0).log()

    def encode_image(self, x, normalize):
        return torch.nn.functional.normalize(x, dim=-1) if normalize else x

    encode_text = encode_image


def test_clip_batch_loss_scales_the_cosine_similarities_by_the_learnt_temperature():
    f = torch.eye(3)  # image i matches text i only: cosine 1 on the diagonal, 0 elsewhere
    texts = ["a", "b", "c"]
    loss = clip_pt.batch_loss(_SpyClip(), f, f, texts)
    expected = -torch.log_softmax(torch.tensor([10.0, 0.0, 0.0]), 0)[0]  # = log(1 + 2 e^-10), about 1e-4
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4)
    swapped = clip_pt.batch_loss(_SpyClip(), f, f[[1, 0, 2]], texts)  # two images paired with the wrong text
    assert swapped.item() > 5


def test_vlm_caption_nll_is_the_positive_mean_negative_log_likelihood_of_the_target_tokens():
    vocab, ids = 5, torch.tensor([[0, 1, 2, 3], [0, 4, 4, 1]])
    logits = torch.zeros(2, 4, vocab)
    logits[0, 0, 1] = 3.0  # the first row's token 1 is likely; everything else is uniform

    class Spy(torch.nn.Module):
        def forward(self, input_ids, attention_mask, pixel_values):
            return type("Out", (), {"logits": logits})()

    mask = torch.tensor([[False, True, True, False], [False, False, True, False]])
    enc = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "pixel_values": None,
        "target_mask": mask,
    }
    lp1 = torch.log_softmax(logits[0, 0], 0)[1].item()
    expected = -(lp1 - 2 * math.log(vocab)) / 3  # mean over the three masked tokens
    assert vlm_pt.caption_nll(Spy(), enc).item() == pytest.approx(expected) and expected > 0


def test_vlm_token_logprobs_and_caption_loglik_against_hand_values():
    """token_logprobs: column t holds log p(token t | tokens < t), column 0 is 0; caption_loglik is the mean over
    each caption's own tokens, so a padded shorter caption is not penalised for its length."""
    from PIL import Image

    tok = vlm_pt.build_tokenizer()
    proc = vlm_pt.build_processor(tok, 16)
    im = Image.new("RGB", (64, 64))
    caps = ["a photo of a red circle", "a cross"]
    enc = vlm_pt.encode(proc, [im, im], caps)
    ids = enc["input_ids"]  # (B, T)
    b, t = ids.shape
    vocab = len(tok)
    bonus = 0.1 * torch.arange(t, dtype=torch.float32)  # the logit of the true next token grows with position
    logits = torch.zeros(b, t, vocab)
    logits[:, :-1].scatter_(-1, ids[:, 1:, None], bonus[:-1].expand(b, -1)[..., None])

    class Spy(torch.nn.Module):
        def forward(self, input_ids, attention_mask, pixel_values):
            return type("Out", (), {"logits": logits})()

    def hand(p: int) -> float:  # log p(token p | < p): its logit is bonus[p - 1], the other vocab - 1 are 0
        a = bonus[p - 1].item()
        return a - math.log(math.exp(a) + vocab - 1)

    lp = vlm_pt.token_logprobs(Spy(), enc)
    assert lp.shape == (b, t) and (lp[:, 0] == 0).all()
    for p in (1, t // 2, t - 1):
        assert lp[0, p].item() == pytest.approx(hand(p), abs=1e-5)
    ll = vlm_pt.caption_loglik(Spy(), proc, [im, im], caps)  # encodes the same batch again
    for r, cap in enumerate(caps):
        pos = enc["caption_mask"][r].nonzero().squeeze(-1).tolist()
        assert len(pos) == len(cap.split())
        assert ll[r].item() == pytest.approx(sum(hand(p) for p in pos) / len(pos), abs=1e-5)


def test_the_evaluation_stream_is_seeded_apart_from_every_training_stream():
    """Held-out CLIP/VLM renders draw from heldout_seed; reusing a training seed would replay training draws."""
    for seed in (0, 1, 2, 12345):
        training = {C.pool_seed(seed), C.pool_seed(seed) + 1} | {C.step_seed(seed, s) for s in range(100_000)}
        assert C.heldout_seed(seed) not in training
        assert C.heldout_seed(seed) != C.heldout_seed(seed + 1)


def test_clip_heldout_renders_come_from_the_evaluation_stream():
    import numpy as np

    rng = random.Random(C.heldout_seed(3))
    expected = [W.render(W.single_object(s), rng) for s in W.SHAPES[:2]]
    data = clip_pt.heldout_single_objects(2, 3)
    for (img, shape, colour), (ref, objs), s in zip(data, expected, W.SHAPES):
        assert shape == s and colour == objs[0].color
        assert np.array_equal(np.asarray(img), np.asarray(ref))


def test_vlm_heldout_pairs_come_from_the_evaluation_stream():
    import numpy as np

    from imgalign.prompts.shapes import build_eval_set

    specs = build_eval_set()
    rng = random.Random(C.heldout_seed(3))
    order = list(range(len(specs)))
    rng.shuffle(order)
    ref, _ = W.render(specs[order[0]], rng)
    ((img, true, bad, kind),) = vlm_pt.heldout_pairs(1, 3)
    assert true == specs[order[0]].prompt() and bad != true
    assert np.array_equal(np.asarray(img), np.asarray(ref))


def test_lr_schedule():
    assert C.lr_at(0, 100, 1.0, 10) == pytest.approx(0.1)
    assert C.lr_at(9, 100, 1.0, 10) == pytest.approx(1.0)
    assert C.lr_at(10, 100, 1.0, 10) == pytest.approx(1.0)
    assert C.lr_at(100, 100, 1.0, 10) == pytest.approx(0.1)
    assert C.lr_at(55, 100, 1.0, 10) == pytest.approx(0.1 + 0.9 * 0.5)


# ---- CLIP pieces ---------------------------------------------------------------------------------------------
def test_multi_positive_loss_equals_clip_loss_when_captions_distinct():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 5, generator=g)
    eye = torch.eye(5, dtype=torch.bool)
    labels = torch.arange(5)
    ref = (
        torch.nn.functional.cross_entropy(logits, labels)
        + torch.nn.functional.cross_entropy(logits.t(), labels)
    ) / 2
    assert torch.allclose(clip_pt.multi_positive_clip_loss(logits, eye), ref)


def test_multi_positive_loss_hand_computed():
    # two identical captions: rows 0 and 1 have targets (1/2, 1/2); zero logits -> loss = log 2 per row
    logits = torch.zeros(2, 2)
    same = clip_pt.same_caption_matrix(["a photo of a circle", "a photo of a circle"])
    assert same.all()
    assert clip_pt.multi_positive_clip_loss(logits, same).item() == pytest.approx(
        torch.log(torch.tensor(2.0)).item()
    )


def test_clip_zero_shot_accuracy_picks_the_closest_unit_text_per_image():
    """Every image encodes to e0; text 0 is e0, the others (3, 3): after normalising them (cos 0.71) text 0 is each
    image's nearest, unnormalised they would win. So the prediction is always the first name, and the accuracy is
    the share of the 5 images whose shape / colour is the first one (shapes cycle: 2 of 5 are circles)."""

    class Fake(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def encode_image(self, x, normalize):
            return torch.tensor([[1.0, 0.0]]).expand(len(x), 2)

        def encode_text(self, tok, normalize):
            raw = torch.tensor([[1.0, 0.0]] + [[3.0, 3.0]] * (len(tok) - 1))
            return torch.nn.functional.normalize(raw, dim=-1) if normalize else raw

    data = clip_pt.heldout_single_objects(5, 0)
    acc = clip_pt.zero_shot_accuracy(
        Fake(), lambda img: torch.zeros(3, 64, 64), lambda texts: torch.arange(len(texts)), n=5, seed=0
    )
    assert acc["zero_shot/shape_acc"] == pytest.approx(2 / 5)
    first = list(W.COLORS)[0]
    assert acc["zero_shot/colour_acc"] == pytest.approx(sum(c == first for _, _, c in data) / 5)


def test_clip_weight_decay_skips_vectors_embeddings_and_the_temperature():
    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(3, 4)
            self.ln = torch.nn.LayerNorm(4)
            self.token_embedding = torch.nn.Embedding(5, 4)
            self.logit_scale = torch.nn.Parameter(torch.tensor(1.0))

    m = Tiny()
    decay, no_decay = clip_pt._param_groups(m, 0.05)
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    assert [id(p) for p in decay["params"]] == [id(m.proj.weight)]
    assert {id(p) for p in no_decay["params"]} == {
        id(p) for p in (m.proj.bias, m.ln.weight, m.ln.bias, m.token_embedding.weight, m.logit_scale)
    }


def test_clip_model_config_selects_the_tower_and_checks_the_resnet_pool_width():
    res = clip_pt.model_config(clip_pt.Config(vision_layers=2))
    assert res["vision_cfg"]["layers"] == [2, 2, 2, 2]  # a list of stage depths: open_clip's ModifiedResNet
    vit = clip_pt.model_config(clip_pt.Config(vision_arch="vit", vision_layers=2, patch_size=8))
    assert vit["vision_cfg"]["layers"] == 2 and vit["vision_cfg"]["patch_size"] == 8
    # the ResNet's attention pool is vision_width * 32 wide: 2 * 32 = 64 is one head of width 64
    clip_pt.Config(vision_width=2, vision_head_width=64).validate()
    with pytest.raises(ValueError, match="multiples of the head width"):
        clip_pt.Config(vision_width=2, vision_head_width=48).validate()


def test_clip_model_config_passes_each_setting_to_its_open_clip_field():
    cfg = clip_pt.Config(
        embed_dim=24, vision_width=2, vision_head_width=64, vision_layers=3, context_length=21, text_width=40,
        text_heads=5, text_layers=4,
    )  # fmt: skip
    mc = clip_pt.model_config(cfg)
    assert mc["embed_dim"] == 24
    assert mc["vision_cfg"] == {"image_size": W.IMAGE_SIZE, "width": 2, "head_width": 64, "layers": [3] * 4}
    assert {k: mc["text_cfg"][k] for k in ("context_length", "width", "heads", "layers")} == {
        "context_length": 21, "width": 40, "heads": 5, "layers": 4,
    }  # fmt: skip


def test_clip_preprocess_config_of_the_exported_folder_equals_the_training_normalisation():
    """open_clip builds the shipped model's preprocess from preprocess_config(); on a 64x64 render it must equal
    what the model was trained on (normalize), or every score would see differently scaled pixels."""
    import numpy as np
    import open_clip

    pc = clip_pt.preprocess_config()
    pre = open_clip.image_transform(
        pc["size"], is_train=False, mean=pc["mean"], std=pc["std"], resize_mode=pc["resize_mode"],
        interpolation=pc["interpolation"],
    )  # fmt: skip
    img = W.render(W.colors("blue", "square"), 3)[0]
    u8 = torch.from_numpy(np.array(img)).permute(2, 0, 1)[None]
    assert torch.allclose(pre(img)[None], clip_pt.normalize(u8), atol=1e-6)


def test_replace_dir_moves_the_new_folder_in_and_leaves_no_old_copy(tmp_path):
    final, tmp = tmp_path / "model", tmp_path / "model.tmp"
    final.mkdir()
    (final / "a").write_text("old")
    tmp.mkdir()
    (tmp / "a").write_text("new")
    C.replace_dir(tmp, final)
    assert (final / "a").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_clip_export_casts_only_floating_tensors_to_the_save_dtype(tmp_path):
    """BatchNorm's integer step counter must stay an integer in the shipped float16 file."""
    from safetensors.torch import load_file

    bn = torch.nn.BatchNorm2d(2)
    clip_pt.export(bn, {}, tmp_path / "out", "float16", "card")
    sd = load_file(tmp_path / "out" / clip_pt.WEIGHTS)
    assert sd["weight"].dtype == sd["running_var"].dtype == torch.float16
    assert sd["num_batches_tracked"].dtype == torch.int64
    clip_pt.export(bn, {}, tmp_path / "out32", "float32", "card")
    assert load_file(tmp_path / "out32" / clip_pt.WEIGHTS)["weight"].dtype == torch.float32


def test_clip_export_writes_the_card_and_both_configs_with_the_preprocess(tmp_path):
    import json

    mcfg = {"embed_dim": 8}
    clip_pt.export(torch.nn.Linear(2, 2), mcfg, tmp_path / "out", "float32", "the card")
    out = tmp_path / "out"
    assert (out / "README.md").read_text() == "the card"
    assert json.loads((out / "open_clip_config.json").read_text()) == {
        "model_cfg": mcfg,
        "preprocess_cfg": clip_pt.preprocess_config(),
    }
    assert json.loads((out / f"{clip_pt.MODEL_NAME}.json").read_text()) == mcfg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no .tmp left behind


@pytest.mark.parametrize("module", ["clip", "vlm"])
def test_encoder_model_card_lists_the_metrics_size_time_config_and_history(module):
    mod = clip_pt if module == "clip" else vlm_pt
    cfg = mod.Config(steps=7)
    history = [{"step": 5, "train/loss": 1.25, "acc": 0.5}]
    card = mod.model_card(cfg, {"final/acc": 0.875}, 12345, 150.0, history).splitlines()
    assert card[0] == f"# shapes-{module}"
    assert "- final/acc: 0.8750" in card and "steps: 7" in card
    assert "| step | train/loss | acc |" in card and "| 5 | 1.250 | 0.500 |" in card
    assert any("parameters: 12,345" in line for line in card)
    assert any("run time: 2.5 min" in line for line in card)
    # a card said "(defaults below)" for a model pretrained with overrides: its command gives them
    assert (
        f"- command: `imgalign world pretrain --component {module} --out DIR --set steps=7` (settings as below; "
        "resumable)" in card
    )
    default = mod.model_card(mod.Config(), {}, 1, 60.0).splitlines()
    assert (
        f"- command: `imgalign world pretrain --component {module} --out DIR` (defaults; resumable)"
        in default
    )


# ---- bad input
def test_shapes_clip_incomplete_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelNotFoundError, match="incomplete"):
        load_shapes_clip(folder=tmp_path)
    (tmp_path / f"{clip_pt.MODEL_NAME}.json").write_text("{}")  # the registry JSON alone: no weights
    with pytest.raises(ModelNotFoundError, match=f"incomplete.*{clip_pt.WEIGHTS}"):
        load_shapes_clip(folder=tmp_path)


def test_an_empty_embedded_model_folder_is_missing(tmp_path, monkeypatch):
    from imgalign import hub

    monkeypatch.setattr(hub, "ASSETS", tmp_path)
    (tmp_path / "shapes-vlm").mkdir()  # e.g. a partial checkout: the folder is there, its files are not
    with pytest.raises(ModelNotFoundError, match="'shapes-vlm' is missing"):
        hub.resolve("shapes-vlm")
    with pytest.raises(ModelNotFoundError, match="not an embedded model"):
        hub.embedded_path("org/model")
    assert hub.resolve("org/model") == "org/model"


def test_every_embedded_name_resolves_to_its_shipped_folder():
    """The names of the hub's table (and the alias shapes-t2i, which eval's shapes checks know) resolve to their
    folders under ASSETS; an unknown name is refused, listing the valid names."""
    from imgalign import hub

    for name, folder in (
        ("shapes", "shapes-t2i"),
        ("shapes-t2i", "shapes-t2i"),
        ("shapes-clip", "shapes-clip"),
        ("shapes-vlm", "shapes-vlm"),
        ("shapes-artifact", "shapes-artifact"),
    ):
        assert hub.resolve(name) == str(hub.ASSETS / folder)
    with pytest.raises(
        ModelNotFoundError,
        match="embedded models: shapes, shapes-artifact, shapes-clip, shapes-t2i, shapes-vlm$",
    ):
        hub.embedded_path("shapes-sd3")


# ---- VLM pieces ----------------------------------------------------------------------------------------------
def test_vlm_tokenizer_covers_every_prompt_and_maps_unknown_words():
    tok = vlm_pt.build_tokenizer()
    unk = tok.unk_token_id
    from imgalign.prompts.shapes import build_eval_set

    for spec in build_eval_set():
        assert unk not in tok(spec.prompt(), add_special_tokens=False)["input_ids"], spec.prompt()
    ids = tok("a photo of a zebra", add_special_tokens=False)["input_ids"]
    assert ids[-1] == unk and unk not in ids[:-1]


def test_vlm_vocabulary_has_each_word_once_with_contiguous_ids_and_ignores_case():
    vocab = vlm_pt.vocabulary()
    assert len(vocab) == len(set(vocab))  # "of" is a prompt word and part of "left of"
    tok = vlm_pt.build_tokenizer()
    assert sorted(tok.get_vocab().values()) == list(range(len(vocab)))
    ids = tok("A Photo of TWO Red Circles", add_special_tokens=False)["input_ids"]
    assert ids == tok("a photo of two red circles", add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids


def test_corruptions_change_the_claim():
    rng = random.Random(0)
    kinds = set()
    from imgalign.prompts.shapes import build_eval_set

    for spec in build_eval_set():
        bad, kind = vlm_pt.corrupt(spec, rng)
        kinds.add(kind)
        assert bad.prompt() != spec.prompt()
        if kind == "relation":
            assert {spec.include[1].position[0], bad.include[1].position[0]} in (
                {"left of", "right of"},
                {"above", "below"},
            )
        if kind == "count":
            assert bad.include[0].count != spec.include[0].count
    assert kinds == {"shape", "colour", "count", "relation"}


def test_a_shape_corruption_keeps_the_clauses_distinct_and_renames_the_exclude():
    rng = random.Random(0)
    seen = set()
    for _ in range(40):
        bad, kind = vlm_pt.corrupt(W.counting("circle", 3), rng)
        if kind == "shape":
            new = bad.include[0].shape
            assert new != "circle" and bad == W.counting(new, 3)  # exclude: (new, 4), not (circle, 4)
            seen.add("counting")
        spec = W.Spec("two_object", (W.Clause("circle"), W.Clause("square")))
        bad, kind = vlm_pt.corrupt(spec, rng)
        if kind == "shape":
            shapes = [c.shape for c in bad.include]
            assert len(set(shapes)) == 2 and shapes != ["circle", "square"]
            seen.add("two_object")
    assert seen == {"counting", "two_object"}


def test_a_colour_corruption_recolours_a_coloured_clause_when_only_one_has_a_colour():
    spec = W.Spec("two_object", (W.Clause("circle", color="red"), W.Clause("square")))
    rng, seen = random.Random(0), 0
    for _ in range(40):
        bad, kind = vlm_pt.corrupt(spec, rng)
        if kind == "colour":
            seen += 1
            assert bad.include[0].color not in (None, "red") and bad.include[1] == spec.include[1]
    assert seen > 5


def test_heldout_pairs_cycle_through_the_whole_shuffled_eval_set():
    from imgalign.prompts.shapes import build_eval_set

    pairs = vlm_pt.heldout_pairs(24, 0)
    assert len({p for _, p, _, _ in pairs}) > 20  # 360 specs: 24 draws are (almost) all distinct
    assert {p for _, p, _, _ in pairs} <= {s.prompt() for s in build_eval_set()}


def test_pair_accuracy_reports_the_true_prompts_mean_loglik(monkeypatch):
    data = vlm_pt.heldout_pairs(6, 0)
    bad_ll = {bad: -0.5 if k % 3 == 0 else -2.0 for k, (_, _, bad, _) in enumerate(data)}
    queries = []

    def loglik(model, processor, images, captions, query=None):
        queries.append(query)
        n = len(captions) // 2  # true prompts, then the corrupted ones
        return torch.tensor([-1.0] * n + [bad_ll[c] for c in captions[n:]])

    monkeypatch.setattr(vlm_pt, "caption_loglik", loglik)
    res = vlm_pt.pair_accuracy(None, None, n=6, batch_size=6)
    assert res["pairs/true_loglik"] == -1.0
    assert res["pairs/accuracy"] == pytest.approx(4 / 6)  # the corrupted prompt wins at k = 0 and 3
    kinds = [kind for *_, kind in data]
    assert len(set(kinds)) > 1
    for kind in set(kinds):  # each kind's share of its own pairs
        wins = [k % 3 != 0 for k in range(6) if kinds[k] == kind]
        assert res[f"pairs/{kind}_acc"] == pytest.approx(sum(wins) / len(wins)), kind
    # in chunks of 4 (4 + 2 pairs) each pair keeps its own kind; the query reaches every scoring call
    assert vlm_pt.pair_accuracy(None, None, n=6, batch_size=4, query=vlm_pt.QUERY) == res
    assert queries == [None, vlm_pt.QUERY, vlm_pt.QUERY]


def test_caption_masks_select_the_assistant_turn():
    from PIL import Image

    tok = vlm_pt.build_tokenizer()
    proc = vlm_pt.build_processor(tok, 8)
    im = Image.new("RGB", (64, 64))
    enc = vlm_pt.encode(proc, [im, im], ["a photo of a red circle", "a photo of two circles left of a square"],
                        [None, vlm_pt.QUERY])  # fmt: skip
    for r, cap in enumerate(["a photo of a red circle", "a photo of two circles left of a square"]):
        ids = enc["input_ids"][r]
        assert tok.convert_ids_to_tokens(ids[enc["caption_mask"][r]].tolist()) == cap.split()
        tgt = tok.convert_ids_to_tokens(ids[enc["target_mask"][r]].tolist())
        assert tgt == [*cap.split(), "<|end|>"]
    assert (enc["input_ids"] == tok.convert_tokens_to_ids("<image>")).sum(1).tolist() == [64, 64]


def test_vlm_processor_normalises_each_channel_by_the_clip_mean_and_std():
    from PIL import Image

    proc = vlm_pt.build_processor(vlm_pt.build_tokenizer(), 8)
    rgb = (255, 0, 128)
    px = proc.image_processor(Image.new("RGB", (64, 64), rgb), return_tensors="pt")["pixel_values"]
    want = [(v / 255 - m) / s for v, m, s in zip(rgb, vlm_pt.MEAN, vlm_pt.STD)]  # (1.93, -1.75, 0.34)
    torch.testing.assert_close(px[0, :, 5, 7], torch.tensor(want), atol=2e-3, rtol=0)


def test_vlm_model_config_passes_each_text_setting_to_its_llama_field():
    cfg = vlm_pt.Config(**{**TINY_VLM, "text_width": 24, "text_heads": 4, "text_kv_heads": 2, "text_ffn": 40})
    for arch in ("resnet", "vit"):
        model = vlm_pt.build_model(dataclasses.replace(cfg, vision_arch=arch), vlm_pt.build_tokenizer())
        tc = model.config.text_config
        got = (tc.hidden_size, tc.num_attention_heads, tc.num_key_value_heads, tc.intermediate_size)
        assert got == (24, 4, 2, 40), arch
        attn = model.model.language_model.layers[0].self_attn
        assert attn.k_proj.weight.shape == (2 * 6, 24)  # kv heads x head dim (24 / 4)


def test_caption_loglik_warns_on_unknown_words():
    from PIL import Image

    tok = vlm_pt.build_tokenizer()
    proc = vlm_pt.build_processor(tok, 16)
    cfg = vlm_pt.Config(**TINY_VLM)
    torch.manual_seed(0)
    model = vlm_pt.build_model(cfg, tok).eval()
    im = Image.new("RGB", (64, 64))
    with pytest.warns(UserWarning, match="outside the shapes-VLM vocabulary"):
        ll = vlm_pt.caption_loglik(model, proc, [im, im], ["a photo of a zebra", "a photo of a circle"])
    assert ll.shape == (2,) and torch.isfinite(ll).all()
    import warnings

    with warnings.catch_warnings():  # an unknown word in the query is not the caption's fault
        warnings.simplefilter("error")
        vlm_pt.caption_loglik(model, proc, [im], ["a photo of a circle"], query="describe this zebra")


def test_caption_loglik_puts_the_query_after_the_image_in_the_user_turn():
    from PIL import Image

    tok = vlm_pt.build_tokenizer()
    proc = vlm_pt.build_processor(tok, 16)
    seen = []

    class Spy(torch.nn.Module):
        def forward(self, input_ids, attention_mask, pixel_values):
            seen.append(input_ids)
            return type("Out", (), {"logits": torch.zeros(*input_ids.shape, len(tok))})()

    im = Image.new("RGB", (64, 64))
    for query in (vlm_pt.QUERY, None):
        ll = vlm_pt.caption_loglik(Spy(), proc, [im], ["a photo of a cross"], query=query)
        assert ll.item() == pytest.approx(-math.log(len(tok)))  # uniform logits
    with_q, without = (tok.convert_ids_to_tokens(ids[0].tolist()) for ids in seen)
    turn = ["<|end|>", "<|assistant|>", "a", "photo", "of", "a", "cross", "<|end|>"]
    assert with_q == ["<s>", "<|user|>", *["<image>"] * 16, "describe", "this", "image", ".", *turn]
    assert without == ["<s>", "<|user|>", *["<image>"] * 16, *turn]


def test_caption_loglik_of_an_empty_caption_is_zero_not_nan():
    from PIL import Image

    tok = vlm_pt.build_tokenizer()
    proc = vlm_pt.build_processor(tok, 16)

    class Uniform(torch.nn.Module):
        def forward(self, input_ids, attention_mask, pixel_values):
            return type("Out", (), {"logits": torch.zeros(*input_ids.shape, len(tok))})()

    im = Image.new("RGB", (64, 64))
    ll = vlm_pt.caption_loglik(Uniform(), proc, [im, im], ["", "a photo of a cross"])
    assert ll.tolist() == pytest.approx([0.0, -math.log(len(tok))])  # no caption token: an empty mean, 0


def test_vlm_query_prob_is_the_share_of_training_examples_with_the_query(tmp_path, monkeypatch):
    seen = []

    def spy(processor, images, captions, queries=None):
        seen.append(list(queries))
        assert all("object" in c for c in captions)  # caption_weights: colour-only captions
        raise _Interrupt

    monkeypatch.setattr(vlm_pt, "encode", spy)
    for p in (0.0, 1.0):
        cfg = vlm_pt.Config(**{**TINY_VLM, "query_prob": p, "caption_weights": (0.0, 0.0, 0.0, 1.0)})
        with pytest.raises(_Interrupt):
            vlm_pt.pretrain(cfg, tmp_path / str(p), progress=False)
    assert seen == [[None] * 4, [vlm_pt.QUERY] * 4]


def test_vlm_pretraining_trains_on_the_pool_renders_upright_with_their_own_captions(tmp_path, monkeypatch):
    """Each image handed to the processor is its pool render (H, W, 3) as rendered, not transposed (a transpose
    swaps left/right with above/below), paired with one of that render's captions."""
    import numpy as np

    seen = []

    def spy(processor, images, captions, queries=None):
        seen.append((images, captions))
        raise _Interrupt

    monkeypatch.setattr(vlm_pt, "encode", spy)
    cfg = vlm_pt.Config(**TINY_VLM)
    with pytest.raises(_Interrupt):
        vlm_pt.pretrain(cfg, tmp_path, progress=False)
    pool = C.render_pool(cfg.seed, cfg.pool_size)
    idx, _ = C.batch_indices(cfg.seed, 0, len(pool), cfg.batch_size)
    ((images, caps),) = seen
    for im, cap, i in zip(images, caps, idx, strict=True):
        assert np.array_equal(np.asarray(im), pool.images[i].numpy().transpose(1, 2, 0))
        assert cap in pool.captions[i].values()


def test_clip_pretraining_draws_captions_with_caption_weights(tmp_path, monkeypatch):
    seen = []

    def spy(pool, seed, step, batch_size, kinds=C.CAPTION_KINDS, weights=None):
        seen.append(weights)
        raise _Interrupt

    monkeypatch.setattr(C, "training_batch", spy)
    cfg = clip_pt.Config(**{**TINY_CLIP, "caption_weights": (0.0, 1.0, 0.0, 0.0)})
    with pytest.raises(_Interrupt):
        clip_pt.pretrain(cfg, tmp_path, progress=False)
    assert seen == [(0.0, 1.0, 0.0, 0.0)]


# ---- tiny pretraining runs: they train, write loadable folders and resume exactly ----------------------------
class _Interrupt(Exception):
    pass


def _interrupt_after_first_checkpoint(monkeypatch):
    real = C.save_checkpoint
    calls = []

    def save_then_stop(path, state):
        real(path, state)
        calls.append(state["step"])
        raise _Interrupt

    monkeypatch.setattr(C, "save_checkpoint", save_then_stop)
    return calls


def _assert_cards_keep_the_mid_run_history(tmp_path, folder):
    """steps=4, eval_every=2: the card's history has the step-2 evaluation and the final one, each with the running
    loss, and a resumed run's card keeps the step-2 row from the checkpoint."""

    def table(run):
        lines = (tmp_path / run / folder / "README.md").read_text().splitlines()
        return [line for line in lines if line.startswith("| ")]

    full = table("full")
    assert "train/loss" in full[0] and [row.split(" | ")[0] for row in full[1:]] == ["| 2", "| 4"]
    assert all("|  |" not in row for row in full)  # no empty cell
    assert table("resumed") == full


TINY_CLIP = dict(
    steps=4, batch_size=6, pool_size=12, warmup=1, embed_dim=16, vision_width=16, vision_layers=1,
    vision_head_width=16, patch_size=16, text_width=16, text_layers=1, text_heads=2, eval_every=2,
    eval_images=8, checkpoint_every=2, save_dtype="float32",
)  # fmt: skip


@pytest.mark.parametrize("arch", ["resnet", "vit"])
def test_clip_pretrain_tiny_runs_and_resumes_exactly(tmp_path, monkeypatch, arch, caplog):
    import open_clip
    from safetensors.torch import load_file

    cfg = clip_pt.Config(**TINY_CLIP, vision_arch=arch)
    with caplog.at_level(logging.WARNING):
        m_full = clip_pt.pretrain(cfg, tmp_path / "full", progress=False)
    # open_clip's "No pretrained weights loaded ... initialized randomly": pretraining starts from random on purpose
    assert "No pretrained weights" not in caplog.text
    assert 0.0 <= m_full["zero_shot/shape_acc"] <= 1.0
    calls = _interrupt_after_first_checkpoint(monkeypatch)
    with pytest.raises(_Interrupt):
        clip_pt.pretrain(cfg, tmp_path / "resumed", progress=False)
    assert calls == [2] and not (tmp_path / "resumed" / "shapes-clip").exists()
    monkeypatch.undo()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    m_resumed = clip_pt.pretrain(cfg, tmp_path / "resumed", progress=False)
    # the running loss average goes on from the checkpoint: a resumed run and a rerun of a finished one report the
    # uninterrupted run's loss (they restarted it, and a rerun reported the last mid-run evaluation's)
    assert m_resumed["train/loss"] == m_full["train/loss"]
    assert clip_pt.pretrain(cfg, tmp_path / "full", progress=False)["train/loss"] == m_full["train/loss"]
    a = load_file(tmp_path / "full" / "shapes-clip" / clip_pt.WEIGHTS)
    b = load_file(tmp_path / "resumed" / "shapes-clip" / clip_pt.WEIGHTS)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert {v.dtype for v in a.values() if v.is_floating_point()} == {torch.float32}  # save_dtype
    _assert_cards_keep_the_mid_run_history(tmp_path, "shapes-clip")
    model, _, pre = open_clip.create_model_and_transforms(
        "local-dir:" + str(tmp_path / "full" / "shapes-clip")
    )
    assert model.visual.image_size in (64, (64, 64))
    with pytest.raises(ValueError, match="different config"):
        clip_pt.pretrain(
            clip_pt.Config(**{**TINY_CLIP, "lr": 1e-4}, vision_arch=arch), tmp_path / "full", progress=False
        )


TINY_VLM = dict(
    steps=4, batch_size=4, pool_size=8, warmup=1, vision_width=16, vision_layers=1, vision_heads=2,
    patch_size=16, text_width=16, text_layers=1, text_heads=2, text_kv_heads=1, text_ffn=32, eval_every=2,
    eval_pairs=6, checkpoint_every=2,
)  # fmt: skip


@pytest.mark.parametrize("arch", ["resnet", "vit"])
def test_vlm_pretrain_tiny_runs_and_resumes_exactly(tmp_path, monkeypatch, arch):
    from safetensors.torch import load_file
    from transformers import AutoModelForImageTextToText, AutoProcessor

    cfg = vlm_pt.Config(**TINY_VLM, vision_arch=arch)
    m_full = vlm_pt.pretrain(cfg, tmp_path / "full", progress=False)
    assert 0.0 <= m_full["pairs/accuracy"] <= 1.0
    calls = _interrupt_after_first_checkpoint(monkeypatch)
    with pytest.raises(_Interrupt):
        vlm_pt.pretrain(cfg, tmp_path / "resumed", progress=False)
    assert calls == [2] and not (tmp_path / "resumed" / "shapes-vlm").exists()
    monkeypatch.undo()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    m_resumed = vlm_pt.pretrain(cfg, tmp_path / "resumed", progress=False)
    # the running loss average goes on from the checkpoint: a resumed run and a rerun of a finished one report the
    # uninterrupted run's loss (they restarted it, and a rerun reported the last mid-run evaluation's)
    assert m_resumed["train/loss"] == m_full["train/loss"]
    assert vlm_pt.pretrain(cfg, tmp_path / "full", progress=False)["train/loss"] == m_full["train/loss"]
    a = load_file(tmp_path / "full" / "shapes-vlm" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "shapes-vlm" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    _assert_cards_keep_the_mid_run_history(tmp_path, "shapes-vlm")
    model = AutoModelForImageTextToText.from_pretrained(tmp_path / "full" / "shapes-vlm")
    proc = AutoProcessor.from_pretrained(tmp_path / "full" / "shapes-vlm")
    img = W.render(W.single_object("cross"), 0)[0]
    assert vlm_pt.caption_loglik(model, proc, [img], ["a photo of a cross"]).shape == (1,)


@pytest.mark.parametrize("module", ["clip", "vlm"])
def test_a_checkpoint_of_another_config_is_refused_before_the_model_is_built(tmp_path, monkeypatch, module):
    """A rerun into a folder whose checkpoint has another config was refused only after the model was built (and,
    for the CLIP, its registry JSON overwritten); the check now comes first, as in the t2i pretraining."""
    import json
    from dataclasses import asdict

    mod, tiny = (clip_pt, TINY_CLIP) if module == "clip" else (vlm_pt, TINY_VLM)
    ckpt = tmp_path / f"{mod.FOLDER}.train" / "checkpoint.pt"
    C.save_checkpoint(
        ckpt, {"config": json.dumps(asdict(mod.Config(**{**tiny, "lr": 0.002})), sort_keys=True)}
    )

    def built(*args, **kwargs):
        raise AssertionError("the model was built before the config check")

    if module == "clip":
        monkeypatch.setattr("open_clip.create_model_and_transforms", built)
    else:
        monkeypatch.setattr(vlm_pt, "build_model", built)
    with pytest.raises(
        ValueError, match=rf"{module}: the checkpoint in .* different config \(lr: 0.002 -> 0.001\)"
    ):
        mod.pretrain(mod.Config(**{**tiny, "lr": 0.001}), tmp_path, progress=False)
    assert list(ckpt.parent.iterdir()) == [ckpt]  # nothing written beside it


@pytest.mark.parametrize("component", ["clip", "vlm", "t2i"])
def test_a_damaged_training_checkpoint_is_one_error_naming_it(tmp_path, capsys, component):
    """A truncated checkpoint (a full disk, a copy cut off) in a pretraining folder was torch's zip-reader
    traceback on the rerun; it is now one error line that names the file and says how to start over."""
    from imgalign.cli import main
    from imgalign.pretrain import t2i

    # its checkpoints are read after the training images are rendered: read one directly
    if component == "t2i":
        ckpt = tmp_path / "vae-ckpt.pt"
        ckpt.write_bytes(b"PK\x03\x04 cut off")
        with pytest.raises(ValueError, match=r"vae-ckpt.pt: damaged training checkpoint.*delete it"):
            t2i.load_state(ckpt)
        return
    mod, tiny = (clip_pt, TINY_CLIP) if component == "clip" else (vlm_pt, TINY_VLM)
    ckpt = tmp_path / f"{mod.FOLDER}.train" / "checkpoint.pt"
    C.save_checkpoint(ckpt, {"step": 1})
    ckpt.write_bytes(ckpt.read_bytes()[:100])
    sets = [a for k, v in tiny.items() for a in ("--set", f"{k}={list(v) if isinstance(v, tuple) else v}")]
    rc = main(["world", "pretrain", "--component", component, "--out", str(tmp_path), *sets])
    err = capsys.readouterr().err
    assert rc == 2 and f"{ckpt}: damaged training checkpoint" in err and "delete it" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("component", ["clip", "vlm", "t2i"])
def test_a_checkpoint_of_another_kind_is_one_error_naming_it(tmp_path, capsys, component):
    """A torch file that is not this stage's checkpoint (another stage's, or any other) in a pretraining folder
    was a bare "error: config" (a KeyError) on the rerun; it is now one line naming the file and what it lacks."""
    from imgalign.cli import main
    from imgalign.pretrain import t2i

    if component == "t2i":  # read after the training images are rendered: read it directly
        ckpt = tmp_path / "t2i-ckpt.pt"
        C.save_checkpoint(ckpt, {"model": {}, "opt": {}, "step": 3, "rng": {}})  # the autoencoder's
        with pytest.raises(ValueError, match=r"t2i-ckpt.pt: not a training checkpoint.*'models'.*delete it"):
            t2i.load_state(ckpt, required=("models", "opt", "ema", "step", "rng", "log"))
        return
    mod, tiny = (clip_pt, TINY_CLIP) if component == "clip" else (vlm_pt, TINY_VLM)
    ckpt = tmp_path / f"{mod.FOLDER}.train" / "checkpoint.pt"
    C.save_checkpoint(ckpt, {"step": 1, "weights": torch.zeros(2)})
    sets = [a for k, v in tiny.items() for a in ("--set", f"{k}={list(v) if isinstance(v, tuple) else v}")]
    rc = main(["world", "pretrain", "--component", component, "--out", str(tmp_path), *sets])
    err = capsys.readouterr().err
    assert rc == 2 and f"{ckpt}: not a training checkpoint of this stage (it lacks 'config')" in err
    assert "delete it" in err


def test_a_checkpoint_or_model_write_cut_short_is_one_error_naming_it(tmp_path):
    """A write cut short (here a file-size limit, as `ulimit -f` sets; a full disk alike) in `world pretrain` was
    torch's "unexpected pos" or safetensors' traceback; it is now an OSError naming the file and what to do, and
    nothing is published under the final name."""
    import resource

    from imgalign.pretrain import t2i

    big = {"w": torch.zeros(4096)}  # 16 KB, past the 8 KB limit below
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(
        resource.RLIMIT_FSIZE, (8192, hard)
    )  # Python ignores SIGXFSZ: writes past it get EFBIG
    try:
        for save, path in (
            (C.save_checkpoint, tmp_path / "clip.train" / "checkpoint.pt"),
            (t2i.save_state, tmp_path / "t2i-ckpt.pt"),
        ):
            with pytest.raises(
                OSError, match=r"cannot write .*\.pt \(.*\): is the disk full.*run the same command"
            ):
                save(path, big)
            assert not path.exists()
        out = tmp_path / "shapes-clip"
        with pytest.raises(
            OSError, match=r"cannot write .*shapes-clip \(.*File too large.*\): A file-size limit stopped it"
        ):
            clip_pt.export(torch.nn.Linear(64, 64), {}, out, "float32", "card")  # 16 KB of weights
        assert not out.exists()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@pytest.mark.parametrize(
    "module, bad, message",
    [
        ("clip", {"eval_images": 0}, "eval_images must be at least 1"),
        ("clip", {"checkpoint_every": 0}, "checkpoint_every must be at least 1"),
        ("clip", {"caption_weights": (0.0, 0.0, 0.0, 0.0)}, "not all 0"),
        ("clip", {"context_length": 19}, "context_length must be at least 20"),
        ("clip", {"batch_size": 1}, r"batch_size >= 2 .*; got steps=\d+, batch_size=1"),
        ("clip", {"pool_size": 5, "batch_size": 6}, "pool_size must be at least batch_size"),
        ("clip", {"caption_weights": (1.0, 1.0)}, "caption_weights needs 4"),
        ("clip", {"vision_arch": "vit", "patch_size": 12}, "patch_size must divide the image size"),
        ("clip", {"text_width": 15}, "multiples of the head width .*text_width=15 over text_heads="),
        ("clip", {"save_dtype": "bfloat16"}, "save_dtype must be float16 or float32"),
        ("vlm", {"eval_pairs": 0}, "eval_pairs must be at least 1"),
        ("vlm", {"threads": 0}, "threads must be at least 1"),
        ("vlm", {"pool_size": 3}, "pool_size must be at least batch_size"),
        ("vlm", {"vision_arch": "vit", "patch_size": 12}, "patch_size must divide the image size"),
        ("vlm", {"patch_size": 4}, "output stride: 8, 16 or 32"),
        ("vlm", {"vision_width": 15}, "multiples of the number of heads; got vision_width=15 over"),
        ("vlm", {"text_heads": 2, "text_kv_heads": 4}, "multiple of text_kv_heads"),
        ("vlm", {"caption_weights": (1.0,)}, "caption_weights needs 4"),
        # NaN and inf passed, then stopped the run after the renders ("Total of weights must be finite")
        ("vlm", {"caption_weights": (float("nan"), 1.0, 1.0, 1.0)}, r"finite non-negative .*got \[nan, 1.0"),
        ("clip", {"caption_weights": (1.0, float("inf"), 1.0, 1.0)}, "caption_weights needs 4 finite"),
        ("clip", {"caption_weights": (1.0, -1.0, 1.0, 1.0)}, "finite non-negative"),
        ("vlm", {"query_prob": -0.1}, r"query_prob must be in \[0, 1\]"),
        # sizes of 0: a ZeroDivisionError traceback (heads) or a model with nothing in it
        ("clip", {"text_heads": 0}, "text_heads must be at least 1"),
        ("clip", {"vision_head_width": 0}, "vision_head_width must be at least 1"),
        ("clip", {"vision_layers": 0}, "vision_layers must be at least 1"),
        ("vlm", {"text_kv_heads": 0}, "text_kv_heads must be at least 1"),
        ("vlm", {"vision_heads": 0}, "vision_heads must be at least 1"),
        ("vlm", {"text_layers": 0}, "text_layers must be at least 1"),
    ],
)
def test_encoder_settings_that_would_fail_late_are_refused_up_front(module, bad, message):
    cfg = clip_pt.Config(**{**TINY_CLIP, **bad}) if module == "clip" else vlm_pt.Config(**{**TINY_VLM, **bad})
    with pytest.raises(ValueError, match=message):
        cfg.validate()


def test_shapes_encoders_load_from_the_given_folder_in_the_given_dtype(tmp_path):
    """`folder=` is the folder loaded (an empty one is incomplete, naming the first missing file); `dtype=` is the
    dtype of the loaded weights."""
    from imgalign.shapes_models import SHAPES_CLIP_NAME, load_shapes_vlm

    with pytest.raises(
        ModelNotFoundError, match=f"'shapes-clip' in {tmp_path} is incomplete .*{SHAPES_CLIP_NAME}.json"
    ):
        load_shapes_clip(folder=tmp_path)
    with pytest.raises(ModelNotFoundError, match=f"'shapes-vlm' in {tmp_path} is incomplete .*config.json"):
        load_shapes_vlm(folder=tmp_path)
    model, _, _ = load_shapes_clip(dtype=torch.float64)
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    model, _ = load_shapes_vlm(dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters() if p.is_floating_point()} == {torch.bfloat16}


def test_an_incomplete_encoder_folder_names_every_missing_file_and_the_component_to_pretrain(tmp_path):
    import shutil

    from imgalign.hub import embedded_path
    from imgalign.shapes_models import CLIP_WEIGHTS, SHAPES_CLIP_NAME, load_shapes_vlm

    clip = tmp_path / "clip"
    clip.mkdir()
    shutil.copy(embedded_path("shapes-clip") / f"{SHAPES_CLIP_NAME}.json", clip)  # the registry JSON alone
    with pytest.raises(ModelNotFoundError) as e:
        load_shapes_clip(folder=clip)
    assert f"(missing {CLIP_WEIGHTS}, open_clip_config.json)" in str(e.value)
    assert "`imgalign world pretrain --component clip`" in str(e.value)
    with pytest.raises(ModelNotFoundError) as e:
        load_shapes_vlm(folder=tmp_path)
    assert "(missing config.json, model.safetensors, tokenizer.json)" in str(e.value)
    assert "`imgalign world pretrain --component vlm`" in str(e.value)


def test_register_shapes_clip_always_re_registers_its_folders_config(tmp_path):
    """A config registered under the same name earlier in the process (e.g. by a pretraining run of another size)
    is replaced by the folder's own."""
    import json

    import open_clip

    from imgalign.hub import embedded_path
    from imgalign.shapes_models import SHAPES_CLIP_NAME, register_shapes_clip

    embedded = embedded_path("shapes-clip")
    cfg = json.loads((embedded / f"{SHAPES_CLIP_NAME}.json").read_text())
    (tmp_path / f"{SHAPES_CLIP_NAME}.json").write_text(json.dumps({**cfg, "embed_dim": 2 * cfg["embed_dim"]}))
    assert register_shapes_clip(tmp_path) == tmp_path
    assert open_clip.get_model_config(SHAPES_CLIP_NAME)["embed_dim"] == 2 * cfg["embed_dim"]
    assert register_shapes_clip() == embedded
    assert open_clip.get_model_config(SHAPES_CLIP_NAME) == cfg


def test_the_shapes_vlm_loads_in_eval_mode_as_float32_by_default_on_the_given_device(tmp_path):
    """float32 whatever dtype the folder's config records (transformers would take that one), in eval mode, on
    `device` (the meta device stands for an accelerator here)."""
    import json
    import shutil

    from imgalign.hub import embedded_path
    from imgalign.shapes_models import load_shapes_vlm

    folder = tmp_path / "vlm"
    shutil.copytree(embedded_path("shapes-vlm"), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "dtype": "bfloat16"}))
    model, _ = load_shapes_vlm(folder=folder)
    assert not model.training
    assert {p.dtype for p in model.parameters() if p.is_floating_point()} == {torch.float32}
    model, _ = load_shapes_vlm(device="meta")
    assert {p.device.type for p in model.parameters()} == {"meta"}


def test_clip_batch_loss_compares_unit_features_whatever_their_length():
    f = torch.eye(3)
    texts = ["a", "b", "c"]
    ref = clip_pt.batch_loss(_SpyClip(), f, f, texts)
    lengths = torch.tensor([[2.0], [0.5], [4.0]])
    assert clip_pt.batch_loss(_SpyClip(), 3 * f, lengths * f, texts).item() == pytest.approx(
        ref.item(), rel=1e-5
    )


@pytest.mark.parametrize("module", ["clip", "vlm"])
def test_encoder_pretraining_keeps_a_running_loss_schedules_the_lr_and_checkpoints_the_last_step(
    tmp_path, monkeypatch, module
):
    """Losses 1, 2, 3 give the running average 0.95 (0.95 * 1 + 0.05 * 2) + 0.05 * 3; the last step (3, off the
    checkpoint_every=2 grid) is checkpointed with the optimizer at that step's scheduled lr and the configured
    weight decay; the CLIP's temperature is clamped at 100 after each step."""
    mod, tiny, name = (
        (clip_pt, TINY_CLIP, "batch_loss") if module == "clip" else (vlm_pt, TINY_VLM, "caption_nll")
    )
    losses, real = iter([1.0, 2.0, 3.0]), getattr(mod, name)

    def known_loss(model, *a):
        if module == "clip":
            with torch.no_grad():
                model.logit_scale.fill_(10.0)  # a temperature of e^10, above CLIP's cap of 100
        return real(model, *a) * 0 + next(losses)  # the real graph, so the step runs, with a known value

    monkeypatch.setattr(mod, name, known_loss)
    cfg = mod.Config(**{**tiny, "steps": 3, "checkpoint_every": 2, "weight_decay": 0.02})
    metrics = mod.pretrain(cfg, tmp_path, progress=False)
    assert metrics["train/loss"] == pytest.approx(0.95 * (0.95 * 1.0 + 0.05 * 2.0) + 0.05 * 3.0)
    st = C.load_checkpoint(tmp_path / f"{mod.FOLDER}.train" / "checkpoint.pt")
    assert st["step"] == 3
    groups = st["optimizer"]["param_groups"]
    assert [g["lr"] for g in groups] == pytest.approx([C.lr_at(2, 3, cfg.lr, cfg.warmup)] * len(groups))
    assert groups[0]["weight_decay"] == 0.02
    if module == "clip":
        assert st["model"]["logit_scale"].item() == pytest.approx(math.log(100), abs=1e-4)


def test_vlm_pretraining_clips_each_steps_gradient_norm_to_1(tmp_path, monkeypatch):
    seen, real = [], torch.nn.utils.clip_grad_norm_

    def clip(params, max_norm, *a, **k):
        seen.append(max_norm)
        return real(params, max_norm, *a, **k)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    _interrupt_after_first_checkpoint(monkeypatch)  # checkpoint_every=2: stop after 2 steps
    with pytest.raises(_Interrupt):
        vlm_pt.pretrain(vlm_pt.Config(**TINY_VLM), tmp_path, progress=False)
    assert seen == [1.0, 1.0]


@pytest.mark.parametrize("module", ["clip", "vlm"])
def test_a_resumed_encoder_run_counts_the_time_before_the_interruption(tmp_path, monkeypatch, module):
    mod, tiny = (clip_pt, TINY_CLIP) if module == "clip" else (vlm_pt, TINY_VLM)
    cfg = mod.Config(**{**tiny, "eval_every": 0})
    _interrupt_after_first_checkpoint(monkeypatch)
    with pytest.raises(_Interrupt):
        mod.pretrain(cfg, tmp_path, progress=False)
    monkeypatch.undo()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ckpt = tmp_path / f"{mod.FOLDER}.train" / "checkpoint.pt"
    state = C.load_checkpoint(ckpt)
    C.save_checkpoint(ckpt, {**state, "elapsed": 600.0})  # 10 minutes before the interruption
    metrics = mod.pretrain(cfg, tmp_path, progress=False)
    assert 10.0 <= metrics["train/minutes"] < 12.0


def test_render_pool_holds_the_upright_renders_of_its_specs_with_their_captions():
    import numpy as np

    from imgalign.prompts.shapes import sample_training_specs

    pool = C.render_pool(3, 2)
    # the stream kept apart from evaluation
    assert pool.specs == sample_training_specs(2, seed=C.pool_seed(3))
    rng = random.Random(C.pool_seed(3) + 1)
    for i, spec in enumerate(pool.specs):
        img, objs = W.render(spec, rng)
        assert torch.equal(pool.images[i].permute(1, 2, 0), torch.from_numpy(np.array(img)))  # (H, W, 3)
        assert pool.captions[i] == C.captions(spec, objs)


def test_replace_dir_clears_a_stale_old_copy_and_history_table_uses_the_last_rows_keys(tmp_path):
    tmp, final = tmp_path / "m.tmp", tmp_path / "m"
    for d, f in ((tmp, "new"), (final, "cur"), (tmp_path / "m.old", "stale")):  # a kill left m.old behind
        d.mkdir()
        (d / f).write_text(f)
    C.replace_dir(tmp, final)
    assert [p.name for p in tmp_path.iterdir()] == ["m"] and (final / "new").is_file()
    lines = C.history_table([{"step": 5, "train/loss": 1.5}, {"step": 10, "train/loss": 1.0, "acc": 0.5}])
    assert lines[2:5] == ["| step | train/loss | acc |", "|---|---|---|", "| 5 | 1.500 |  |"]


def test_the_training_state_records_the_elapsed_seconds(tmp_path):
    import time

    cfg = vlm_pt.Config(**TINY_VLM)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    C.save_training_state(tmp_path / "c.pt", model, opt, 3, time.time() - 30, cfg, [], None)
    assert 30 <= C.load_checkpoint(tmp_path / "c.pt")["elapsed"] < 60


def test_encoder_exports_start_from_an_empty_temp_folder_when_a_killed_run_left_one(tmp_path):
    """A run killed mid-export leaves ``out.tmp`` behind: the next export clears it (the CLIP's ``mkdir`` raised
    FileExistsError on it; the VLM's save_pretrained would have shipped its stale files)."""
    for name in ("clip.tmp", "vlm.tmp"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "stale.bin").write_text("from the killed run")
    clip_pt.export(torch.nn.Linear(2, 2), {}, tmp_path / "clip", "float32", "card")
    assert sorted(p.name for p in (tmp_path / "clip").iterdir()) == sorted(
        ["README.md", clip_pt.WEIGHTS, "open_clip_config.json", f"{clip_pt.MODEL_NAME}.json"]
    )
    tok = vlm_pt.build_tokenizer()
    model = vlm_pt.build_model(vlm_pt.Config(**TINY_VLM), tok)
    vlm_pt.export(model, vlm_pt.build_processor(tok, 16), tmp_path / "vlm", "card")
    assert (tmp_path / "vlm" / "config.json").is_file() and not (tmp_path / "vlm" / "stale.bin").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip", "vlm"]


@pytest.mark.parametrize("module", ["clip", "vlm"])
def test_encoder_pretraining_with_eval_every_0_evaluates_once_at_the_end(tmp_path, monkeypatch, module):
    mod, tiny, name = (
        (clip_pt, TINY_CLIP, "zero_shot_accuracy")
        if module == "clip"
        else (vlm_pt, TINY_VLM, "pair_accuracy")
    )
    calls = []

    def evaluate(*args, **kwargs):
        calls.append(1)
        return {"acc": 0.5}

    monkeypatch.setattr(mod, name, evaluate)
    metrics = mod.pretrain(mod.Config(**{**tiny, "eval_every": 0}), tmp_path, progress=False)
    assert calls == [1] and metrics["acc"] == 0.5


@pytest.mark.parametrize("arch", ["resnet", "vit"])
def test_every_vlm_parameter_gets_a_gradient_from_the_caption_loss(arch):
    """The ViT's features come from its last block (LLaVA's default, the second-to-last, left that block untrained)
    and every weight of the tower, projector and Llama is on the caption loss's path."""
    from PIL import Image

    tok = vlm_pt.build_tokenizer()
    cfg = vlm_pt.Config(**{**TINY_VLM, "vision_arch": arch})
    torch.manual_seed(0)
    model = vlm_pt.build_model(cfg, tok)
    proc = vlm_pt.build_processor(tok, cfg.patch_size, arch)
    im = W.render(W.single_object("cross"), 0)[0]
    enc = vlm_pt.encode(
        proc, [im, Image.new("RGB", (64, 64))], ["a photo of a cross", "a photo of two circles"]
    )
    vlm_pt.caption_nll(model, enc).backward()
    untouched = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
    # LLaVA reads the ViT's hidden states, before the tower's final LayerNorm: that one is unused by design
    assert untouched == (
        [] if arch == "resnet" else [f"model.vision_tower.post_layernorm.{w}" for w in ("weight", "bias")]
    )
