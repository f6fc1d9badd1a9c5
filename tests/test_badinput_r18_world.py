"""Bad-input round 18: `imgalign world render` / `pretrain` and `imgalign eval --suite shapes` with odd counts, empty
options, interrupted runs and output folders of other commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign import shapes as W
from imgalign.commands import world
from imgalign.prompts.io import load_geneval_metadata
from imgalign.prompts.shapes import EVAL_SET_PATH


@pytest.fixture()
def two_prompts(tmp_path: Path) -> Path:
    p = tmp_path / "two.jsonl"
    p.write_text("".join(json.dumps(m) + "\n" for m in load_geneval_metadata(EVAL_SET_PATH)[:2]))
    return p


def test_render_writes_each_image_as_it_is_drawn(tmp_path, two_prompts, monkeypatch, capsys):
    """world render (and eval --ground-truth) kept every image of a prompt in memory until its last one was drawn:
    1 prompt x 20,000 images held 340 MB more (about 17 KB an image), so a huge --images-per-prompt ran out of memory. The
    bar counted prompts: 0/1 for the whole of a one-prompt render."""
    out = tmp_path / "r"
    drawn = []
    real = W.render

    def render(spec, rng):
        # every image drawn before this one is on disk already
        assert len(list(out.glob("*/samples/*.png"))) == len(drawn)
        drawn.append(spec)
        return real(spec, rng)

    monkeypatch.setattr(W, "render", render)
    metas = load_geneval_metadata(two_prompts)
    world.render_folder(metas, out, 3, 0, progress=True)
    assert len(drawn) == 6 and len(list(out.glob("*/samples/*.png"))) == 6
    assert "6/6" in capsys.readouterr().err  # the bar counts images
