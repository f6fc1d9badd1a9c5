"""Round 31a mutation survivor in imgalign/commands/grid.py: the closing line counts prompts, models and seeds each
by its own number (the earlier tests gave as many models as seeds, so the two counts could trade places)."""

from __future__ import annotations

from PIL import Image

from imgalign.cli import main


def test_grid_says_how_many_prompts_models_and_seeds_each(tmp_path, monkeypatch, capsys):
    import imgalign.eval.gallery as gallery
    import imgalign.pipelines as P
    import imgalign.sampling as S

    monkeypatch.setattr(P, "load_pipeline", lambda spec, device, dtype: spec.label)
    monkeypatch.setattr(
        S, "generate_images", lambda pipe, prompts, seeds, batch_size, **kw: [pipe] * len(seeds)
    )
    monkeypatch.setattr(gallery, "labelled_grid", lambda *a, **kw: Image.new("RGB", (4, 4)))
    out = tmp_path / "g.png"
    argv = ["grid", "--model", "a=shapes", "--model", "b=shapes", "--prompt", "x", "--seeds", "0,1,2"]
    assert main([*argv, "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out} (1 prompt x 2 models x 3 seeds)"
