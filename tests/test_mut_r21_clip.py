"""rewards/clip.py: behaviour mutation round 21 found unchecked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from imgalign.rewards.clip import check_open_clip_name, clipscore
from tests.conftest import copy_with_json


def test_clipscore_of_half_precision_embeddings_is_computed_in_float32() -> None:
    """A bf16 reward's embeddings: the cosine is taken in float32 (bf16 keeps 3 digits, and ranked close images
    by round-off), so the score is float32 and matches the float64 value closely."""
    g = torch.Generator().manual_seed(0)
    img, txt = torch.randn(4, 64, generator=g), torch.randn(4, 64, generator=g)
    img16, txt16 = img.bfloat16(), txt.bfloat16()
    got = clipscore(img16, txt16, clamp=False)
    want = 2.5 * torch.nn.functional.cosine_similarity(img16.double(), txt16.double(), dim=-1)
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), want, atol=1e-5)


def test_a_missing_nested_path_gets_no_hub_id_hint() -> None:
    """Only ORG/NAME can be a Hub id: a missing models/clip/v2 is named as no such folder, without the hint."""
    with pytest.raises(FileNotFoundError) as e:
        check_open_clip_name("models/clip/v2", None)
    assert "no such folder; give a folder" in str(e.value)
    assert "Hub id" not in str(e.value)


def test_a_name_that_is_no_valid_hub_id_is_no_transformers_model() -> None:
    """ORG/NAME with a character a Hub id cannot hold (a space) is not looked up in the cache (huggingface_hub
    raised its validation error): it is no transformers model, and the open_clip loader names it."""
    from imgalign.rewards.clip import transformers_clip_config, transformers_config

    assert transformers_config("my org/clip") is None
    assert transformers_clip_config("my org/clip") is None


@pytest.fixture(scope="module")
def hf_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from imgalign.trainers.testing import tiny_transformers_clip

    return tiny_transformers_clip(tmp_path_factory.mktemp("hfclip") / "clip")


def test_the_context_is_the_tokenizers_length_when_the_model_has_more_positions(
    hf_clip: Path, tmp_path: Path
) -> None:
    """A tokenizer whose model_max_length (20 here) is below the text tower's 77 positions: prompts are cut at 20
    tokens, the tokenizer's limit, and said so."""
    from imgalign.rewards import build_reward

    folder = copy_with_json(hf_clip, tmp_path / "clip", "tokenizer_config.json", model_max_length=20)
    r = build_reward(f"clip:model={folder}")
    assert r.tokenizer.context_length == 20
    assert r.tokenizer(["abc" * 33])["input_ids"].shape == (1, 20)


def test_a_processor_without_a_tokenizer_is_refused(hf_clip: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A processor with an image processor but no tokenizer holds no CLIP processor: refused when the reward loads,
    not with an AttributeError at the first prompt."""
    import transformers

    from imgalign.rewards.clip import load_transformers_clip

    image_proc = transformers.AutoProcessor.from_pretrained(hf_clip).image_processor
    monkeypatch.setattr(
        transformers.AutoProcessor,
        "from_pretrained",
        lambda *a, **k: SimpleNamespace(image_processor=image_proc, tokenizer=None),
    )
    with pytest.raises(ValueError, match="holds no CLIP processor"):
        load_transformers_clip(str(hf_clip), torch.device("cpu"), torch.float32)


def test_a_processor_cropping_to_another_width_than_the_model_takes_is_refused(
    hf_clip: Path, tmp_path: Path
) -> None:
    """The processor's pixels must be the model's side in both directions: a crop 8 pixels too wide (the height
    right) is refused when the reward loads, naming both sizes."""
    from imgalign.rewards.clip import load_transformers_clip

    side = int(json.loads((hf_clip / "config.json").read_text())["vision_config"]["image_size"])
    folder = tmp_path / "clip"
    shutil.copytree(hf_clip, folder)
    config = folder / "processor_config.json"  # transformers 5 writes the image processor's fields in it
    proc = json.loads(config.read_text())
    proc["image_processor"].update(do_center_crop=True, crop_size={"height": side, "width": side + 8})
    config.write_text(json.dumps(proc))
    with pytest.raises(ValueError, match=f"makes {side}x{side + 8} pixels and the model takes {side}x{side}"):
        load_transformers_clip(str(folder), torch.device("cpu"), torch.float32)


def test_an_incomplete_open_clip_config_names_the_missing_field() -> None:
    """open_clip's KeyError said only 'text_cfg': the error names it as the field the config lacks."""
    from imgalign.rewards.clip import incomplete_config

    msg = incomplete_config("local-dir:/m", KeyError("text_cfg"))
    assert "is incomplete (no 'text_cfg'); it needs embed_dim" in msg
    assert "(missing embed_dim)" in incomplete_config("local-dir:/m", TypeError("missing embed_dim"))


def test_the_shapes_clip_scores_in_bfloat16_as_in_float32() -> None:
    """dtype=bfloat16: the float32 images are cast to the model's bfloat16 before it (it failed on float32 pixels),
    and the cosines are float32's to bfloat16's precision."""
    from imgalign.rewards import build_reward

    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    prompts = ["a red circle", "two blue squares"]
    ref = build_reward("clip")(x, prompts)
    got = build_reward("clip", dtype=torch.bfloat16)(x, prompts)
    assert [d["cosine"] for d in got.details] == pytest.approx([d["cosine"] for d in ref.details], abs=0.05)
