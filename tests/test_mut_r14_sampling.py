"""imgalign.sampling, mutation round 14 (no model loads): the sizes read from configs that cannot tell or have no
grid bound, the size message, the warning about an unread guidance scale, and generate_folder's resume check."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from PIL import Image

from imgalign.hub import embedded_path
from imgalign.sampling import (
    check_size,
    folder_sizes,
    generate_folder,
    supported_sizes,
    warn_unread_guidance,
)

METAS = [{"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a photo of a cat"}]


def _shapes_configs(tmp_path: Path, transformer: dict[str, Any], vae: dict[str, Any]) -> Path:
    """A copy of the shapes model's configs with keys of the transformer's and the VAE's config.json replaced
    (a value of ... drops the key)."""
    base = embedded_path("shapes")
    for part, over in (("transformer", transformer), ("vae", vae)):
        config = {**json.loads((base / part / "config.json").read_text()), **over}
        (tmp_path / part).mkdir(parents=True, exist_ok=True)
        (tmp_path / part / "config.json").write_text(
            json.dumps({k: v for k, v in config.items() if v is not ...})
        )
    (tmp_path / "model_index.json").write_text((base / "model_index.json").read_text())
    return tmp_path


def _sd3_pipe(transformer: dict[str, Any], vae_scale_factor: int = 4, default_sample_size: int = 16) -> Any:
    """What supported_sizes and check_size read of an SD3 pipeline."""
    return SimpleNamespace(
        patch_size=transformer["patch_size"],
        vae_scale_factor=vae_scale_factor,
        default_sample_size=default_sample_size,
        transformer=SimpleNamespace(config=SimpleNamespace(**transformer)),
    )


def test_folder_sizes_are_none_for_a_vae_config_without_block_out_channels_or_a_config_that_is_not_json(
    tmp_path,
):
    """The configs cannot tell: None (checked after loading), not a KeyError or JSONDecodeError."""
    assert folder_sizes(_shapes_configs(tmp_path / "a", {}, {"block_out_channels": ...})) is None
    bad = _shapes_configs(tmp_path / "b", {}, {})
    (bad / "transformer" / "config.json").write_text("{not json")
    assert folder_sizes(bad) is None


def test_folder_sizes_of_a_null_pos_embed_max_size_are_the_loaded_pipelines(tmp_path):
    """pos_embed_max_size null (a model without a bounded grid): the sizes supported_sizes gives the loaded
    pipeline (its grid is sample_size), not a TypeError."""
    folder = _shapes_configs(tmp_path, {"pos_embed_max_size": None}, {})
    config = json.loads((folder / "transformer" / "config.json").read_text())
    sizes, trained = folder_sizes(folder)
    assert sizes == supported_sizes(_sd3_pipe(config)) and trained == 64
    assert sizes[-1] == 4 * 2 * config["sample_size"]


def test_a_size_the_model_cannot_take_names_the_range_and_the_trained_size_in_pixels():
    """The shapes model's numbers: multiples of 8 (VAE factor 4 x patch 2) up to its grid of 8 patches (64 px),
    trained at 16 latent pixels = 64 px."""
    pipe = _sd3_pipe({"patch_size": 2, "pos_embed_max_size": 8, "sample_size": 16})
    with pytest.raises(ValueError) as e:
        check_size(pipe, 64, 72)
    assert str(e.value) == (
        "width=72 is not an image size this model can take; use a multiple of 8 from 8 to 64 (trained at 64)"
    )


def test_an_unread_guidance_scale_is_warned_about_only_when_given_for_a_model_without_guidance_embedding(
    caplog,
):
    """A FLUX.1-schnell-like transformer (guidance_embeds false) ignores the scale: warned when one is given; no
    warning without a scale, or for a transformer whose config has no guidance_embeds (SD3: true CFG)."""
    schnell = SimpleNamespace(transformer=SimpleNamespace(config=SimpleNamespace(guidance_embeds=False)))
    sd3 = SimpleNamespace(transformer=SimpleNamespace(config=SimpleNamespace(patch_size=2)))
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        warn_unread_guidance(schnell, "schnell", None)
        warn_unread_guidance(sd3, "sd3", 4.0)
        warn_unread_guidance(object(), "stub", 4.0)  # no transformer: nothing to tell
        assert caplog.messages == []
        warn_unread_guidance(schnell, "schnell", 0.0)
    assert caplog.messages == [
        "schnell has no guidance embedding (a FLUX.1-schnell-like transformer): guidance scale 0.0 changes "
        "nothing for it"
    ]


def test_generate_folder_warns_about_generates_guidance_scale_for_a_model_without_guidance_embedding(
    tmp_path, caplog
):
    """generate (the default sampler) takes the scale as guidance_scale, generate_images as guidance: either
    one is warned about."""
    pipe = SimpleNamespace(transformer=SimpleNamespace(config=SimpleNamespace(guidance_embeds=False)))

    def sample(pipe: Any, prompts: list[str], seeds: list[int], **kw: Any) -> list[Image.Image]:
        return [Image.new("RGB", (4, 4)) for _ in prompts]

    for k, setting in enumerate(("guidance_scale", "guidance")):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
            generate_folder(pipe, METAS, tmp_path / str(k), 1, 0, False, sample=sample, **{setting: 3.5})
        assert [m for m in caplog.messages if "guidance scale 3.5 changes nothing" in m], setting


def test_generate_folder_warns_about_no_image_of_a_fresh_folder(tmp_path, caplog):
    """Images not written yet are simply sampled: no 'cannot be read' warning per image."""

    def sample(pipe: Any, prompts: list[str], seeds: list[int], **kw: Any) -> list[Image.Image]:
        return [Image.new("RGB", (4, 4)) for _ in prompts]

    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        generate_folder(object(), METAS, tmp_path, 2, 0, False, sample=sample)
    assert caplog.messages == []
    assert sorted(p.name for p in (tmp_path / "00000" / "samples").iterdir()) == ["0000.png", "0001.png"]


def test_generate_folder_samples_again_an_image_its_reader_calls_broken(tmp_path, monkeypatch):
    """PIL raises SyntaxError for some broken files ('broken PNG file'): such an image is sampled again, not a
    traceback that stops the run."""
    import imgalign.eval.suite as suite

    calls: list[list[int]] = []

    def sample(pipe: Any, prompts: list[str], seeds: list[int], **kw: Any) -> list[Image.Image]:
        calls.append(list(seeds))
        return [Image.new("RGB", (4, 4)) for _ in prompts]

    generate_folder(object(), METAS, tmp_path, 1, 0, False, sample=sample)

    def broken(path: Path) -> Image.Image:
        raise SyntaxError("broken PNG file")

    monkeypatch.setattr(suite, "load_image", broken)
    generate_folder(object(), METAS, tmp_path, 1, 0, False, sample=sample)
    assert len(calls) == 2 and calls[1] == calls[0]


@pytest.mark.parametrize("value, ignores", [(False, True), (None, True), (0, True), (True, False)])
def test_a_null_guidance_embeds_is_a_transformer_without_a_guidance_embedding(value, ignores) -> None:
    """diffusers builds FLUX's guidance embedding only `if guidance_embeds`: a hand-edited `null` builds none, so
    the guidance scale changes nothing, but only `is False` counted as ignoring it (no warning was given). A
    config without the setting (SD3) reads the scale through true CFG."""
    from imgalign.pipelines import ignores_guidance

    assert ignores_guidance(SimpleNamespace(config=SimpleNamespace(guidance_embeds=value))) is ignores
    assert ignores_guidance(SimpleNamespace(config=SimpleNamespace())) is False
