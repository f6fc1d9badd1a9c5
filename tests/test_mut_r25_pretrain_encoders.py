"""Mutation round 25 (stop 62): the CLIP/VLM pretraining's shared pieces (:mod:`imgalign.pretrain.encoder_common`)
and the CLIP batch loss (:mod:`imgalign.pretrain.clip`)."""

from __future__ import annotations

import itertools

import pytest

from imgalign.pretrain import encoder_common as C


def test_no_training_step_of_one_seed_replays_a_step_of_another_seed() -> None:
    """Each seed is its own training data stream: over a default CLIP run (2000 steps) no step seed of one seed is a
    step seed of another, seeds 2**16 apart included (a 16-bit step seed gave seeds 0 and 65536 the same batches)."""
    seeds = (0, 1, 12345, 1 << 16, (1 << 16) + 1, 1 << 20)
    streams = {s: {C.step_seed(s, step) for step in range(2000)} for s in seeds}
    assert all(len(v) == 2000 for v in streams.values())
    assert [(a, b) for a, b in itertools.combinations(seeds, 2) if streams[a] & streams[b]] == []


def test_clip_batch_loss_counts_the_batchs_own_duplicate_captions_as_positives() -> None:
    """Identical captions of this batch, at their own positions, are each other's positives: texts "a", "a", "b"
    make texts 0 and 1 the positives of images 0 and 1 (reversed texts would pair image 0 with text 0 alone)."""
    import torch

    from imgalign.pretrain import clip as clip_pt

    class Spy:
        logit_scale = torch.tensor(10.0).log()

        def encode_image(self, x: torch.Tensor, normalize: bool) -> torch.Tensor:
            return torch.nn.functional.normalize(x, dim=-1)

        encode_text = encode_image

    gen = torch.Generator().manual_seed(0)
    images, texts_f = torch.randn(3, 4, generator=gen), torch.randn(3, 4, generator=gen)
    texts = ["a", "a", "b"]
    same = torch.tensor([[True, True, False], [True, True, False], [False, False, True]])
    assert torch.equal(clip_pt.same_caption_matrix(texts), same)
    unit = torch.nn.functional.normalize
    logits = 10 * unit(images, dim=-1) @ unit(texts_f, dim=-1).t()
    expected = clip_pt.multi_positive_clip_loss(logits, same).item()
    assert expected != pytest.approx(clip_pt.multi_positive_clip_loss(logits, same.flip(0, 1)).item())
    assert clip_pt.batch_loss(Spy(), images, texts_f, texts).item() == pytest.approx(expected, rel=1e-6)


def test_the_exported_clip_folder_records_and_loads_the_trained_architecture(tmp_path) -> None:
    """The folder's open_clip config and registry JSON are the trained model's (a tiny, non-default size), so
    load_shapes_clip(folder=...) builds that model and loads its weights."""
    import json

    from test_encoders import TINY_CLIP

    from imgalign.pretrain import clip as clip_pt
    from imgalign.shapes_models import load_shapes_clip

    cfg = clip_pt.Config(
        **{**TINY_CLIP, "steps": 1, "eval_every": 0, "checkpoint_every": 1, "eval_images": 4}
    )
    clip_pt.pretrain(cfg, tmp_path, progress=False)
    folder = tmp_path / clip_pt.FOLDER
    want = clip_pt.model_config(cfg)
    assert json.loads((folder / "open_clip_config.json").read_text())["model_cfg"] == want
    assert json.loads((folder / f"{clip_pt.MODEL_NAME}.json").read_text()) == want
    model, _, _ = load_shapes_clip(folder=folder)
    assert model.text_projection.shape[1] == cfg.embed_dim
