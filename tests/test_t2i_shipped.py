"""The shipped embedded model ``shapes`` loads exactly as a user loads SD3 without T5, offline, and samples."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)


def test_shipped_pipeline_loads_with_diffusers_and_generates():
    from diffusers import StableDiffusion3Pipeline
    from transformers import CLIPTokenizer

    from imgalign import hub
    from imgalign.pretrain.tokenizer import shapes_words
    from imgalign.sampling import MAX_SEQUENCE_LENGTH

    folder = hub.embedded_path("shapes")
    pipe = StableDiffusion3Pipeline.from_pretrained(folder, text_encoder_3=None, tokenizer_3=None)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(
        "a photo of a red circle",
        height=64,
        width=64,
        num_inference_steps=2,
        guidance_scale=4.0,
        max_sequence_length=MAX_SEQUENCE_LENGTH,
        generator=torch.Generator().manual_seed(0),
    )
    assert out.images[0].size == (64, 64)
    tok = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    assert all(len(tok(w, add_special_tokens=False).input_ids) == 1 for w in shapes_words())
    assert sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) <= 14e6


def test_the_tokenizer_pretraining_builds_is_the_shipped_one():
    """The vocabulary and merges are rebuilt from sets of words: they must not depend on the process's string-hash
    seed (the shipped ones were built in another process), so a rerun of the pretraining tokenizes as shipped."""
    import json

    from imgalign import hub
    from imgalign.pretrain.tokenizer import build_vocab, shapes_words

    shipped = json.loads((hub.embedded_path("shapes") / "tokenizer" / "tokenizer.json").read_text())["model"]
    vocab, merges = build_vocab(tuple(shapes_words()))
    assert shipped["vocab"] == vocab
    assert shipped["merges"] == [list(m) for m in merges]


def test_the_tokenizer_pretraining_builds_pads_and_maps_unknowns_as_the_shipped_one(tmp_path):
    """Its special tokens are the shipped tokenizer's: padding (SD3 pads every prompt to max_length) and unknown
    pieces are <|endoftext|>, as in the tokenizer the shipped text encoders were trained with (mutation round 10)."""
    import json

    from imgalign import hub
    from imgalign.pretrain.tokenizer import save_tokenizer

    shipped = json.loads((hub.embedded_path("shapes") / "tokenizer" / "tokenizer_config.json").read_text())
    tok = save_tokenizer(tmp_path / "tok", shipped["model_max_length"])
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        assert getattr(tok, key) == shipped[key], key
    words = tok("a circle", add_special_tokens=False).input_ids
    padded = tok("a circle", padding="max_length", max_length=6).input_ids
    assert padded == [tok.bos_token_id, *words, tok.eos_token_id, tok.eos_token_id, tok.eos_token_id]


def test_load_pipeline_by_name_is_deterministic():
    import numpy as np

    from imgalign.pipelines import load_pipeline
    from imgalign.sampling import generate

    pipe = load_pipeline("shapes")
    a = generate(pipe, ["a photo of two squares"], [3], num_inference_steps=2)[0]
    b = generate(pipe, ["a photo of two squares"], [3], num_inference_steps=2)[0]
    assert np.array_equal(np.asarray(a), np.asarray(b))


def test_the_default_config_builds_the_shipped_architecture():
    """A pretraining with the default settings rebuilds exactly the shipped components (widths, MLP sizes,
    position-embedding grid, autoencoder, scheduler), as its card's `defaults` command promises."""
    import json
    import tempfile
    from pathlib import Path

    from imgalign import hub
    from imgalign.pretrain import t2i
    from imgalign.pretrain.tokenizer import save_tokenizer

    def norm(d):
        skip = {"architectures", "dtype", "torch_dtype", "transformers_version"}
        return {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in d.items()
            if not k.startswith("_") and k not in skip
        }

    cfg = t2i.Config()
    folder = hub.embedded_path("shapes")
    with tempfile.TemporaryDirectory() as d:
        tok = save_tokenizer(Path(d) / "tok", cfg.max_length)
        built = {
            "transformer": dict(t2i.build_transformer(cfg).config),
            "text_encoder": t2i.build_text_encoder(cfg, tok, 1).config.to_dict(),
            "vae": dict(t2i.build_vae(cfg).config),
            "scheduler": dict(t2i.build_scheduler(cfg).config),
        }
    for name, conf in built.items():
        fname = "scheduler_config.json" if name == "scheduler" else "config.json"
        shipped = norm(json.loads((folder / name / fname).read_text()))
        ours = norm(conf)
        assert {k: (v, ours.get(k)) for k, v in shipped.items() if ours.get(k) != v} == {}, name
