"""Mutation round 25 (stop 62): units of the shapes text-to-image pretraining (:mod:`imgalign.pretrain.t2i`) that
the earlier tests left unchecked. Small and fast: no pretraining run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_t2i import TINY_T2I

from imgalign.pretrain import t2i


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def tiny(**kw: object) -> t2i.Config:
    return t2i.Config(**{**TINY_T2I, **kw})


def test_the_card_gives_the_size_of_the_whole_folder_with_its_component_subfolders(tmp_path: Path) -> None:
    """write_card's folder size counts every file of the pipeline: the weights lie in component subfolders
    (transformer/, vae/, ...), not next to model_index.json."""
    (tmp_path / "model_index.json").write_bytes(b"x" * 100_000)
    for sub in ("transformer", "vae"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "diffusion_pytorch_model.safetensors").write_bytes(b"x" * 1_000_000)
    metrics = {"params": 10.0, "train_seconds": 60.0, "total_seconds": 120.0}
    t2i.write_card(tmp_path, tiny(), metrics, [])
    card = (tmp_path / "README.md").read_text()
    assert "- 10 trained parameters; folder size 2.1 MB" in card


def test_pretrain_trains_and_checkpoints_both_text_encoders(tmp_path: Path) -> None:
    """The transformer and both text encoders are trained: the checkpoint holds all three, and the shipped second
    text encoder (EMA 0: the trained weights) is no longer its initial build_text_encoder(seed + 2)."""
    from safetensors.torch import load_file

    from imgalign.pretrain.tokenizer import save_tokenizer

    cfg = tiny(n_images=4, vae_steps=1, steps=1, ema=0.0, lr=1e-2, warmup=0)
    t2i.pretrain(cfg, tmp_path, progress=False)
    st = t2i.load_state(tmp_path / t2i.WORK / "t2i-ckpt.pt")
    assert st is not None and len(st["models"]) == 3
    tok = save_tokenizer(tmp_path / "tok", cfg.max_length)
    initial = t2i.build_text_encoder(cfg, tok, cfg.seed + 2).state_dict()
    shipped = load_file(tmp_path / t2i.FOLDER / "text_encoder_2" / "model.safetensors")
    assert shipped.keys() <= initial.keys()
    assert [k for k, w in shipped.items() if not torch.equal(w, initial[k])] != []
