"""imgalign.sampling without a model: the sizes read from a pipeline folder's configs, the settings
generate_images hands the pipeline, and the seeds of the GenEval layout (a stub pipeline records its calls)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from imgalign.hub import embedded_path
from imgalign.sampling import folder_sizes, generate_images


class _Recorder:
    """A pipeline stand-in without a transformer: records each call's settings and seeds, returns the prompts."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], dict[str, Any]]] = []

    def __call__(self, prompt: list[str], generator: list[Any], **kw: Any) -> SimpleNamespace:
        self.calls.append(([g.initial_seed() for g in generator], kw))
        return SimpleNamespace(images=list(prompt))


def _sd3_folder(tmp_path: Path, drop: tuple[str, ...]) -> Path:
    """A copy of the shapes model's configs (VAE factor 4) whose transformer config lacks the keys `drop`."""
    base = embedded_path("shapes")
    (tmp_path / "transformer").mkdir()
    (tmp_path / "vae").mkdir()
    (tmp_path / "model_index.json").write_text((base / "model_index.json").read_text())
    (tmp_path / "vae" / "config.json").write_text((base / "vae" / "config.json").read_text())
    config = json.loads((base / "transformer" / "config.json").read_text())
    (tmp_path / "transformer" / "config.json").write_text(
        json.dumps({k: v for k, v in config.items() if k not in drop})
    )
    return tmp_path


def test_folder_sizes_of_an_sd3_config_without_size_keys_are_diffusers_defaults(tmp_path):
    """A transformer config.json that leaves out patch_size, sample_size and pos_embed_max_size loads with
    SD3Transformer2DModel's defaults (2, 128, 96): sides are multiples of 4 x 2 up to a grid of 96 patches, trained at
    128 x 4 (not the 128-patch grid sample_size alone would give)."""
    from diffusers import SD3Transformer2DModel

    defaults = {k: p.default for k, p in inspect.signature(SD3Transformer2DModel.__init__).parameters.items()}
    assert (defaults["patch_size"], defaults["sample_size"], defaults["pos_embed_max_size"]) == (2, 128, 96)
    folder = _sd3_folder(tmp_path, ("patch_size", "sample_size", "pos_embed_max_size"))
    assert folder_sizes(folder) == ([8 * k for k in range(1, 97)], 512)


def test_generate_images_passes_a_zero_guidance_scale_on():
    """guidance=0 is a setting (imgalign grid --guidance 0 allows it), not "unset": it reaches the pipeline instead of
    the pipeline's own default scale."""
    pipe = _Recorder()
    generate_images(pipe, ["a"], [3], guidance=0.0)
    assert pipe.calls == [([3], {"output_type": "pil", "guidance_scale": 0.0})]


def test_generate_images_refuses_more_prompts_than_seeds_before_sampling():
    """One seed per prompt, both ways: extra prompts are not sampled from unseeded or reused noise."""
    pipe = _Recorder()
    for prompts, seeds in ((["a", "b"], [1]), (["a"], [1, 2])):
        with pytest.raises(
            ValueError, match=rf"got {len(prompts)} prompts but {len(seeds)} seeds; give one seed"
        ):
            generate_images(pipe, prompts, seeds)
    assert pipe.calls == []


def test_generate_folder_refuses_zero_images_per_prompt_before_loading_anything(tmp_path):
    """0 images per prompt would write an empty layout that judges as a score of nothing: refused up front (the
    model is not loaded, nothing sampled or written)."""
    from imgalign.sampling import generate_folder

    def sample(*args: Any, **kwargs: Any) -> list[Any]:
        raise AssertionError("sampled")

    metas = [{"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a cat"}]
    for n in (0, -1):
        with pytest.raises(ValueError, match="images per prompt must be at least 1"):
            generate_folder(tmp_path / "no-such-model", metas, tmp_path / "out", n, 0, False, sample=sample)
    assert not (tmp_path / "out").exists()


def test_generate_folder_samples_batch_size_images_per_pipeline_call_across_prompts(tmp_path):
    """2 prompts x 2 images at batch_size 3: two pipeline calls of 3 and 1 images (not one call per image), each
    image seeded with image_seed(seed, i, j)."""
    from PIL import Image

    from imgalign.sampling import generate_folder, image_seed

    seen: list[list[int]] = []

    def pipe(prompt: list[str], generator: list[Any], **kw: Any) -> SimpleNamespace:
        seen.append([g.initial_seed() for g in generator])
        return SimpleNamespace(images=[Image.new("RGB", (4, 4)) for _ in prompt])

    metas = [
        {"tag": "single_object", "include": [{"class": c, "count": 1}], "prompt": c} for c in ("cat", "dog")
    ]
    generate_folder(pipe, metas, tmp_path, 2, 5, progress=False, batch_size=3, sample=generate_images)
    seeds = [image_seed(5, i, j) for i in range(2) for j in range(2)]
    assert seen == [seeds[:3], seeds[3:]]


def test_generate_folder_lets_the_pipelines_truncation_notice_through_once(tmp_path, caplog):
    """diffusers' "The following part of your input was truncated ..." was logged for every batch (45 times for the
    shapes suite on a FLUX model, whose T5 the suite's settings give one token); once now, other records pass."""
    import logging

    from PIL import Image

    from imgalign.sampling import generate_folder

    class Pipe:
        def __call__(self, prompt: list[str], generator: list[Any], **kw: Any) -> SimpleNamespace:
            log = logging.getLogger(type(self).__module__)  # where diffusers' pipelines log it
            log.warning("The following part of your input was truncated because ...: %s", prompt)
            log.warning("another notice")
            return SimpleNamespace(images=[Image.new("RGB", (4, 4)) for _ in prompt])

    metas = [
        {"tag": "single_object", "include": [{"class": c, "count": 1}], "prompt": c} for c in ("cat", "dog")
    ]
    with caplog.at_level("WARNING"):
        generate_folder(Pipe(), metas, tmp_path, 2, 0, progress=False, batch_size=1, sample=generate_images)
    said = [r.getMessage() for r in caplog.records]
    assert said.count("another notice") == 4
    assert [m for m in said if m.startswith("The following part")] == [
        "The following part of your input was truncated because ...: ['cat']"
    ]
