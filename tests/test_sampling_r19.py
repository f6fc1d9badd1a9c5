"""imgalign.sampling, mutation round 19 (no model loads): behaviour no other test pinned down."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class _Pipe:
    """A callable with the attributes the sampler reads (VAE factor 4 x patch 2, a 16-patch grid, trained at 64);
    records the prompts of each call."""

    patch_size, vae_scale_factor, default_sample_size = 2, 4, 16

    def __init__(self) -> None:
        self.prompts: list[list[str]] = []
        self.tokenizer = SimpleNamespace(get_vocab=lambda: {"a</w>": 0})
        self.transformer = SimpleNamespace(config=SimpleNamespace(pos_embed_max_size=16, sample_size=16))

    def __call__(self, prompt: list[str], generator: Any, **kw: Any) -> SimpleNamespace:
        self.prompts.append(list(prompt))
        return SimpleNamespace(images=list(prompt))


def test_generate_samples_32_prompts_per_pipeline_call_by_default() -> None:
    """BATCH_SIZE (32) is generate's batch: 33 prompts take two pipeline calls, of 32 and 1."""
    from imgalign.sampling import generate

    pipe = _Pipe()
    generate(pipe, ["a"] * 33, list(range(33)))
    assert [len(p) for p in pipe.prompts] == [32, 1]
