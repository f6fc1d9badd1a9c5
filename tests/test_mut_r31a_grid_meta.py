"""Round 31a mutation survivor in imgalign/commands/grid.py: a plain --prompt row (no GenEval metadata) reaches a
--reward with metadata None, as `imgalign score` passes it, not as [None] (a plug-in reward that reads metadata when
given one would fail on the None inside)."""

from __future__ import annotations

import sys

from PIL import Image

from imgalign.cli import main


def test_a_row_without_metadata_reaches_the_reward_as_none(tmp_path, monkeypatch):
    import imgalign.eval.gallery as gallery
    import imgalign.pipelines as P
    import imgalign.sampling as S

    (tmp_path / "r31a_meta_reward.py").write_text(
        "import torch\n\n"
        "def seen(images, prompts, metadata=None):\n"
        "    return torch.full((len(prompts),), 1.0 if metadata is None else 2.0)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(P, "load_pipeline", lambda spec, device, dtype: spec.label)
    monkeypatch.setattr(
        S,
        "generate_images",
        lambda pipe, prompts, seeds, batch_size, **kw: [Image.new("RGB", (8, 8))] * len(seeds),
    )
    captions: list = []
    monkeypatch.setattr(
        gallery, "labelled_grid", lambda *a, **kw: captions.append(kw["captions"]) or Image.new("RGB", (4, 4))
    )
    argv = ["grid", "--model", "a=shapes", "--prompt", "x", "--reward", "r31a_meta_reward:seen"]
    try:
        assert main([*argv, "--out", str(tmp_path / "g.png")]) == 0
    finally:
        sys.modules.pop("r31a_meta_reward", None)
    assert [c.split(": ")[-1] for c in captions[0][0]] == ["1.000"]
