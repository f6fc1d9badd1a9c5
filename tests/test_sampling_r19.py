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


def test_ten_truncated_rows_are_all_named_without_an_and_more() -> None:
    """Up to 10 truncated rows are listed whole; "and N more" comes only past 10."""
    from imgalign.sampling import long_rows_warning

    prompts = [f"p{i}" for i in range(10)]
    line = long_rows_warning("m", prompts, {p: ("CLIP", 80) for p in prompts}, "CLIP 77")
    assert "rows 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 (row 1: 80 CLIP tokens)" in line
    assert "more" not in line
