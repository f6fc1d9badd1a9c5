"""Round 19 (mutation round, stop 56): grid's and world render's closing line count each noun in the singular for
one ("1 prompt", not "1 prompts")."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from imgalign.cli import main
from imgalign.commands import counted


@pytest.mark.parametrize(("n", "text"), [(0, "0 seeds"), (1, "1 seed"), (2, "2 seeds"), (11, "11 seeds")])
def test_counted_is_singular_only_for_one(n, text):
    assert counted(n, "seed") == text


def _stub_grid(monkeypatch) -> None:
    import imgalign.eval.gallery as gallery
    import imgalign.pipelines as P
    import imgalign.sampling as S

    monkeypatch.setattr(P, "load_pipeline", lambda spec, device, dtype: spec.label)
    monkeypatch.setattr(
        S, "generate_images", lambda pipe, prompts, seeds, batch_size, **kw: [pipe] * len(seeds)
    )
    monkeypatch.setattr(gallery, "labelled_grid", lambda *a, **kw: Image.new("RGB", (4, 4)))


def test_grid_says_one_prompt_model_and_seed_in_the_singular(tmp_path, monkeypatch, capsys):
    _stub_grid(monkeypatch)
    out = tmp_path / "g.png"
    assert main(["grid", "--model", "a=shapes", "--prompt", "x", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out} (1 prompt x 1 model x 1 seed)"


def test_grid_counts_several_in_the_plural(tmp_path, monkeypatch, capsys):
    _stub_grid(monkeypatch)
    out = tmp_path / "g.png"
    argv = [
        "grid",
        "--model",
        "a=shapes",
        "--model",
        "b=shapes",
        "--prompt",
        "x",
        "--prompt",
        "y",
        "--prompt",
        "z",
    ]
    assert main(argv + ["--seeds", "0,1", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out} (3 prompts x 2 models x 2 seeds)"


def test_world_render_says_one_prompt_and_one_image_in_the_singular(tmp_path, capsys):
    from imgalign.prompts.shapes import build_eval_set

    specs = build_eval_set()[::20][:3]
    one, three = tmp_path / "one.jsonl", tmp_path / "three.jsonl"
    one.write_text(json.dumps(specs[0].to_metadata()) + "\n")
    three.write_text("".join(json.dumps(s.to_metadata()) + "\n" for s in specs))
    out, out3 = tmp_path / "r", tmp_path / "r3"
    assert (
        main(["world", "render", "--prompts", str(one), "--images-per-prompt", "1", "--out", str(out)]) == 0
    )
    assert capsys.readouterr().out.strip() == f"wrote 1 prompt x 1 image to {out}"
    assert (
        main(["world", "render", "--prompts", str(three), "--images-per-prompt", "2", "--out", str(out3)])
        == 0
    )
    assert capsys.readouterr().out.strip() == f"wrote 3 prompts x 2 images to {out3}"


def test_a_grid_too_large_through_its_seed_columns_alone_is_refused(tmp_path, monkeypatch, capsys):
    """Every seed of every model is a column: the pixel check counts models x seeds columns, not models alone."""
    import imgalign.pipelines as P
    from imgalign.commands.grid import check_grid_pixels

    monkeypatch.setattr(P, "load_pipeline", lambda *a, **k: pytest.fail("a model loaded"))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 60_000)  # Pillow opens 120,000 pixels
    check_grid_pixels(1, 2, 160)  # two columns: taken
    argv = ["grid", "--model", "a=shapes", "--model", "b=shapes", "--prompt", "x", "--seeds", "0,1,2"]
    assert main([*argv, "--out", str(tmp_path / "g.png")]) == 2
    assert "the grid of 1 prompt x 6 images would be at least" in capsys.readouterr().err
