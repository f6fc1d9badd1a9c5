"""Units of the shapes-VLM pretraining (``imgalign.pretrain.vlm``), the embedded-encoder loaders
(``imgalign.shapes_models``) and the shared pretraining helpers (``imgalign.pretrain``) that the end-to-end runs in
test_encoders.py do not pin down: settings refused up front, the processor, the vision towers' configs, the
seeding, the modes and the evaluation's arguments, the scoring of ties, and damaged checkpoints."""

from __future__ import annotations

import random

import pytest
import torch
from test_encoders import TINY_VLM

from imgalign import shapes as W
from imgalign.pretrain import load_state, restores_torch_threads
from imgalign.pretrain import vlm as vlm_pt


class _Stop(Exception):
    pass


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    """One torch thread per test (the offline environment is conftest's `_offline`)."""
    torch.set_num_threads(1)


# ---- settings refused up front --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad, message",
    [
        ({"steps": 0}, "steps and batch_size must be >= 1"),
        ({"batch_size": 0}, "steps and batch_size must be >= 1"),
        ({"vision_arch": "vgg"}, "vision_arch must be resnet or vit, got 'vgg'"),
        ({"text_width": 10, "text_heads": 4}, "text_width=10 over text_heads=4"),
        ({"text_ffn": 0}, "text_ffn must be at least 1"),
        ({"checkpoint_every": 0}, "checkpoint_every must be at least 1"),
        ({"query_prob": 1.5}, r"query_prob must be in \[0, 1\]"),
    ],
)
def test_vlm_settings_that_would_fail_late_are_refused_up_front(bad: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        vlm_pt.Config(**{**TINY_VLM, **bad}).validate()


def test_the_vit_tower_takes_any_patch_size_that_divides_the_image() -> None:
    """Only the ResNet's output stride is limited to 8, 16 or 32; the ViT's patch may be 4 (256 tokens)."""
    vlm_pt.Config(**{**TINY_VLM, "vision_arch": "vit", "patch_size": 4}).validate()
    vlm_pt.Config(**{**TINY_VLM, "query_prob": 0.0}).validate()
    vlm_pt.Config(**{**TINY_VLM, "query_prob": 1.0}).validate()


# ---- processor and model -------------------------------------------------------------------------------------
def test_vlm_processor_keeps_every_pixel_of_a_64px_render_in_place() -> None:
    """The processor only normalises a 64x64 render: no resize or crop moves a pixel (a zoom would crop objects
    near the border, and the shipped model was trained on whole renders)."""
    import numpy as np

    proc = vlm_pt.build_processor(vlm_pt.build_tokenizer(), 8)
    img, _ = W.render(W.single_object("cross"), random.Random(0))
    px = proc.image_processor(img, return_tensors="pt")["pixel_values"][0]  # (3, 64, 64)
    arr = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255).permute(2, 0, 1)
    want = (arr - torch.tensor(vlm_pt.MEAN)[:, None, None]) / torch.tensor(vlm_pt.STD)[:, None, None]
    torch.testing.assert_close(px, want, atol=2e-2, rtol=0)


def test_vlm_vit_tower_config_takes_each_vision_setting_and_its_last_layer() -> None:
    cfg = vlm_pt.Config(
        **{**TINY_VLM, "vision_arch": "vit", "vision_width": 24, "vision_layers": 3, "vision_heads": 4}
    )
    model = vlm_pt.build_model(cfg, vlm_pt.build_tokenizer())
    vc = model.config.vision_config
    got = (vc.hidden_size, vc.intermediate_size, vc.num_hidden_layers, vc.num_attention_heads)
    assert got == (24, 96, 3, 4)
    assert (vc.image_size, vc.patch_size) == (W.IMAGE_SIZE, cfg.patch_size)
    # the projector reads the tower's last block, not the one before it
    assert model.config.vision_feature_layer == -1
    assert model.config.vision_feature_select_strategy == "default"  # the CLS token is dropped


def test_vlm_resnet_tower_strides_by_the_patch_size() -> None:
    """Output stride = patch_size: the tower's grid has as many cells as the processor puts image tokens (a
    mismatch is transformers' "Image features and image tokens do not match")."""
    from PIL import Image

    tok = vlm_pt.build_tokenizer()
    for patch in (8, 32):
        torch.manual_seed(0)
        model = vlm_pt.build_model(vlm_pt.Config(**{**TINY_VLM, "patch_size": patch}), tok).eval()
        enc = vlm_pt.encode(vlm_pt.build_processor(tok, patch), [Image.new("RGB", (64, 64))], ["a cross"])
        assert (enc["input_ids"] == tok.convert_tokens_to_ids("<image>")).sum() == (64 // patch) ** 2
        with torch.no_grad():
            assert torch.isfinite(vlm_pt.token_logprobs(model, enc)).all(), patch


@pytest.mark.parametrize("stride", [8, 16, 32])
def test_each_documented_resnet_output_stride_is_a_valid_patch_size(stride: int) -> None:
    vlm_pt.Config(**{**TINY_VLM, "vision_arch": "resnet", "patch_size": stride}).validate()


def test_vlm_tokenizer_takes_as_many_tokens_as_the_model_has_positions() -> None:
    """A longer model_max_length would let prompts through that the model cannot embed; a shorter one warned
    "sequence length is longer than the specified maximum" on every training conversation (64 image tokens)."""
    tok = vlm_pt.build_tokenizer()
    model = vlm_pt.build_model(vlm_pt.Config(**TINY_VLM), tok)
    assert tok.model_max_length == model.config.text_config.max_position_embeddings == 128
    assert model.config.text_config.vocab_size == len(tok)  # no untrained ids for the softmax to leak mass to


def test_the_vlm_tokenizer_alone_formats_the_chat() -> None:
    """AutoTokenizer users get the same conversation format as the processor's."""
    text = vlm_pt.build_tokenizer().apply_chat_template(
        vlm_pt.conversation("a cross", vlm_pt.QUERY), tokenize=False
    )
    assert text == "<s><|user|><image> describe this image.<|end|><|assistant|> a cross<|end|>"


@pytest.mark.parametrize("arch", ["resnet", "vit"])
def test_vlm_config_states_as_many_image_tokens_as_the_processor_puts_in(arch: str) -> None:
    from PIL import Image

    tok = vlm_pt.build_tokenizer()
    model = vlm_pt.build_model(vlm_pt.Config(**{**TINY_VLM, "vision_arch": arch}), tok)
    enc = vlm_pt.encode(vlm_pt.build_processor(tok, 16, arch), [Image.new("RGB", (64, 64))], ["a cross"])
    n = int((enc["input_ids"] == tok.convert_tokens_to_ids("<image>")).sum())
    assert model.config.image_seq_length == n == (64 // 16) ** 2


def test_an_empty_or_absent_query_leaves_the_user_turn_the_image_alone() -> None:
    from PIL import Image

    tok = vlm_pt.build_tokenizer()
    proc = vlm_pt.build_processor(tok, 16)
    im = Image.new("RGB", (64, 64))
    expected = ["<s>", "<|user|>", *["<image>"] * 16, "<|end|>", "<|assistant|>", "a", "cross", "<|end|>"]
    for queries in (None, [None], [""]):
        ids = vlm_pt.encode(proc, [im], ["a cross"], queries)["input_ids"][0]
        assert tok.convert_ids_to_tokens(ids.tolist()) == expected, queries
    assert vlm_pt.conversation("a cross", "")[0]["content"] == [{"type": "image"}]


def test_a_colour_corruption_keeps_the_specs_excluded_objects() -> None:
    spec = W.Spec("counting", (W.Clause("circle", 2, "red"),), (("circle", 3),))
    rng, seen = random.Random(0), 0
    for _ in range(40):
        bad, kind = vlm_pt.corrupt(spec, rng)
        if kind == "colour":
            seen += 1
            assert bad.exclude == spec.exclude and bad.include[0].color not in (None, "red")
    assert seen > 5


def test_corruptions_reach_the_second_clause_too() -> None:
    """A colour corruption recolours the coloured clause wherever it is; a shape corruption picks either clause."""
    spec = W.Spec("colors", (W.Clause("circle"), W.Clause("square", color="blue")))
    rng, changed = random.Random(0), set()
    for _ in range(60):
        bad, kind = vlm_pt.corrupt(spec, rng)
        if kind == "colour":
            assert bad.include[0] == spec.include[0] and bad.include[1].color not in (None, "blue")
        else:
            changed |= {i for i in (0, 1) if bad.include[i].shape != spec.include[i].shape}
    assert changed == {0, 1}


def test_pair_accuracy_averages_the_true_prompts_loglik_over_every_pair(monkeypatch) -> None:
    def loglik(model, processor, images, captions, query=None):
        n = len(captions) // 2
        return torch.tensor([-float(k + 1) for k in range(n)] + [-9.0] * n)

    monkeypatch.setattr(vlm_pt, "caption_loglik", loglik)
    res = vlm_pt.pair_accuracy(None, None, n=4, batch_size=4)
    assert res["pairs/true_loglik"] == pytest.approx(-2.5) and res["pairs/accuracy"] == 1.0
    # 5 pairs in chunks of 4: the last chunk holds a single pair, and it counts (-1 -2 -3 -4, then -1)
    assert vlm_pt.pair_accuracy(None, None, n=5, batch_size=4)["pairs/true_loglik"] == pytest.approx(-11 / 5)


# ---- the training loop's seeding, modes and evaluation -----------------------------------------------------
def test_vlm_adamw_runs_with_the_configured_weight_decay_and_betas(tmp_path, monkeypatch) -> None:
    """weight_decay reaches AdamW (its default 0.01 equalled the old hard-coded value, so no run showed it)."""
    seen = []

    class Spy(torch.optim.AdamW):
        def __init__(self, params, **kw):
            seen.append(kw)
            raise _Stop

    monkeypatch.setattr(torch.optim, "AdamW", Spy)
    with pytest.raises(_Stop):
        vlm_pt.pretrain(vlm_pt.Config(**{**TINY_VLM, "weight_decay": 0.25}), tmp_path, progress=False)
    assert seen == [{"lr": TINY_VLM.get("lr", 2e-3), "betas": (0.9, 0.98), "weight_decay": 0.25}]


def test_vlm_weights_are_initialised_from_the_configured_seed(tmp_path, monkeypatch) -> None:
    seeds = []

    def built(cfg, tokenizer):
        seeds.append(torch.initial_seed())
        raise _Stop

    monkeypatch.setattr(vlm_pt, "build_model", built)
    for seed in (0, 5):
        with pytest.raises(_Stop):
            vlm_pt.pretrain(vlm_pt.Config(**{**TINY_VLM, "seed": seed}), tmp_path / str(seed), progress=False)
    assert seeds == [0, 5]


def test_vlm_trains_in_train_mode_and_evaluates_in_eval_mode_on_the_seeds_heldout_pairs(
    tmp_path, monkeypatch
) -> None:
    """The ResNet has BatchNorm: each step runs in train mode, each evaluation in eval mode (and training goes on
    in train mode after it); the evaluation draws `eval_pairs` held-out pairs of the run's seed."""
    modes, evals, real = [], [], vlm_pt.caption_nll

    def nll(model, enc):
        modes.append(model.training)
        return real(model, enc)

    def pairs(model, processor, n, seed):
        evals.append((model.training, n, seed))
        return {"pairs/accuracy": 0.5}

    monkeypatch.setattr(vlm_pt, "caption_nll", nll)
    monkeypatch.setattr(vlm_pt, "pair_accuracy", pairs)
    cfg = vlm_pt.Config(**{**TINY_VLM, "seed": 3, "eval_every": 1, "steps": 3, "eval_pairs": 5})
    vlm_pt.pretrain(cfg, tmp_path, progress=False)
    assert modes == [True, True, True]
    assert evals == [(False, 5, 3)] * 3  # after steps 1 and 2, and at the end


def test_pair_accuracy_counts_a_tie_as_a_loss_and_scores_both_prompts_on_the_same_image(monkeypatch) -> None:
    """A model that scores every prompt alike has accuracy 0, not 1; the corrupted prompt of each pair is scored
    on that pair's image."""
    data = vlm_pt.heldout_pairs(3, 0)
    seen = []

    def loglik(model, processor, images, captions, query=None):
        seen.append(images)
        return torch.full((len(captions),), -1.0)

    monkeypatch.setattr(vlm_pt, "caption_loglik", loglik)
    res = vlm_pt.pair_accuracy(None, None, n=3, batch_size=3)
    assert res["pairs/accuracy"] == 0.0
    imgs = [d[0] for d in data]
    ((images),) = seen
    assert len(images) == 6
    for got, want in zip(images, imgs + imgs):
        assert got.tobytes() == want.tobytes()


# ---- the loaders ---------------------------------------------------------------------------------------------
def test_the_shapes_vlm_processor_comes_from_the_given_folder(tmp_path) -> None:
    import json
    import shutil

    from imgalign.hub import embedded_path
    from imgalign.shapes_models import load_shapes_vlm

    folder = tmp_path / "vlm"
    shutil.copytree(embedded_path("shapes-vlm"), folder)
    config = folder / "processor_config.json"
    settings = json.loads(config.read_text())
    config.write_text(json.dumps({**settings, "patch_size": 16}))
    _, proc = load_shapes_vlm(folder=folder)
    assert proc.patch_size == 16


# ---- checkpoints -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "content",
    [b"", b"not a checkpoint\n", b"(garbage", b".garbage", b"hello", b"\x00" * 8, b"U\xe72VQ\x18\xe0\x85m"],
)
def test_a_file_that_is_no_torch_file_at_all_is_a_damaged_checkpoint(tmp_path, content: bytes) -> None:
    """Whatever bytes are in the checkpoint's place (an empty file, a text file, a pickle opcode with no data), the
    error is one line naming the file, torch's reason and how to start over. An empty file was an IndexError from
    the handler itself; text reached torch's legacy unpickler: a KeyError, IndexError or UnicodeDecodeError."""
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(content)
    with pytest.raises(
        ValueError, match=r"checkpoint.pt: damaged training checkpoint, cannot be read \(\w+"
    ) as e:
        load_state(path, required=("config",))
    assert "\n" not in str(e.value) and "delete it" in str(e.value)
    if not content:
        assert "cannot be read (EOFError); delete it" in str(e.value)


def test_a_torch_file_of_a_tensor_or_of_an_arbitrary_object_is_not_a_checkpoint(tmp_path) -> None:
    """A tensor saved under the checkpoint's name lacks its entries (torch's "Tensor.__contains__" error before);
    a pickled object other than tensors and plain data is not loaded (weights_only): no code runs from it."""
    path = tmp_path / "checkpoint.pt"
    torch.save(torch.zeros(2), path)
    with pytest.raises(ValueError, match=r"not a training checkpoint of this stage \(it lacks 'config'\)"):
        load_state(path, required=("config",))
    torch.save({"config": _Stop()}, path)
    with pytest.raises(ValueError, match=r"damaged training checkpoint, cannot be read"):
        load_state(path, required=("config",))
    assert load_state(tmp_path / "none.pt") is None


def test_pretraining_gives_back_the_callers_torch_thread_count_on_return_and_on_raise() -> None:
    @restores_torch_threads
    def run(threads: int, fail: bool) -> int:
        torch.set_num_threads(threads)
        if fail:
            raise _Stop
        return threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)  # not 1: the count the tests' fixtures leave
        assert run(1, False) == 1 and torch.get_num_threads() == 3
        with pytest.raises(_Stop):
            run(2, True)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
