"""Round 22 mutations of `imgalign world` (`imgalign.commands.world`): what `world render` writes with its defaults
(four images per prompt, seed 0, image j of prompt i from `image_seed(0, i, j)`, each prompt's metadata line as
given), what it says, the line a bad prompt is named by, and how `--set` keys reach their component."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imgalign import shapes as W
from imgalign.cli import main
from imgalign.commands.world import split_component_overrides
from imgalign.prompts.io import load_geneval_metadata
from imgalign.sampling import image_seed


def test_render_defaults_write_four_seeded_images_and_the_metadata_of_each_prompt(
    tmp_path: Path, two_prompts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gt"
    assert main(["world", "render", "--prompts", str(two_prompts), "--out", str(out), "--no-progress"]) == 0
    assert f"wrote 2 prompts x 4 images to {out}" in capsys.readouterr().out
    metas = load_geneval_metadata(two_prompts)
    assert sorted(p.name for p in out.iterdir()) == ["00000", "00001"]
    for i, meta in enumerate(metas):
        folder = out / f"{i:05d}"
        assert json.loads((folder / "metadata.jsonl").read_text()) == meta
        assert sorted(p.name for p in (folder / "samples").iterdir()) == [f"{j:04d}.png" for j in range(4)]
        spec = W.Spec.from_metadata(meta)
        for j in range(4):
            want = np.asarray(W.render(spec, random.Random(image_seed(0, i, j)))[0])
            got = np.asarray(Image.open(folder / "samples" / f"{j:04d}.png").convert("RGB"))
            assert np.array_equal(got, want), (i, j)


def test_render_names_the_line_of_a_prompt_the_shapes_world_cannot_draw(
    tmp_path: Path, two_prompts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = {"tag": "single_object", "include": [{"class": "star", "count": 1}], "prompt": "a photo of a star"}
    prompts = tmp_path / "three.jsonl"
    prompts.write_text(two_prompts.read_text() + json.dumps(bad) + "\n")
    assert main(["world", "render", "--prompts", str(prompts), "--out", str(tmp_path / "o")]) == 2
    assert f"{prompts}:3: include[0].class: unknown shape 'star'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_component_prefixed_set_reaches_that_component_without_its_prefix() -> None:
    per = split_component_overrides(["t2i", "clip"], ["clip.steps=5", "t2i.lr=0.1"], ("t2i", "clip", "vlm"))
    assert per == {"t2i": ["lr=0.1"], "clip": ["steps=5"]}
    with pytest.raises(ValueError, match="setting of the vlm component"):
        split_component_overrides(["t2i"], ["vlm.steps=5"], ("t2i", "clip", "vlm"))


@pytest.mark.parametrize("count", ["0", "-1"])
def test_render_refuses_fewer_than_one_image_per_prompt(
    tmp_path: Path, two_prompts: Path, capsys: pytest.CaptureFixture[str], count: str
) -> None:
    argv = ["world", "render", "--prompts", str(two_prompts), "--out", str(tmp_path / "o")]
    assert main([*argv, "--images-per-prompt", count]) == 2
    assert "--images-per-prompt must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_render_refuses_an_out_folder_that_holds_something(
    tmp_path: Path, two_prompts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    assert main(["world", "render", "--prompts", str(two_prompts), "--out", str(out)]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("cpus, line", [(8, "training t2i, clip, vlm in 2 processes"), (1, None)])
def test_pretrain_all_without_jobs_trains_two_components_at_once_where_two_cpus_allow(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    inline_pretrain_pool: list[int],
    capsys: pytest.CaptureFixture[str],
    cpus: int,
    line: str | None,
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    assert main(["world", "pretrain", "--component", "all", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    if line is None:  # one CPU: one component after the other, no pool
        assert "processes" not in out and inline_pretrain_pool == []
    else:
        assert line in out and inline_pretrain_pool == [2]


def test_pretrain_refuses_jobs_below_one_before_it_writes_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pre"
    assert main(["world", "pretrain", "--component", "all", "--out", str(out), "--jobs", "0"]) == 2
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err
    assert not out.exists()


def test_pretrain_refuses_a_file_where_a_component_writes_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "shapes-clip").write_text("not a folder\n")
    assert main(["world", "pretrain", "--component", "clip", "--out", str(tmp_path)]) == 2
    assert (
        "holds a file named 'shapes-clip', where pretraining clip writes a folder" in capsys.readouterr().err
    )


def test_pretrain_without_out_says_it_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["world", "pretrain", "--component", "clip"]) == 2
    assert "--out is required" in capsys.readouterr().err


def test_only_the_first_component_in_the_pool_shows_a_bar(
    tmp_path: Path, inline_pretrain_pool: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["world", "pretrain", "--component", "all", "--out", str(tmp_path), "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "t2i: {'progress': True}" in out
    assert "clip: {'progress': False}" in out and "vlm: {'progress': False}" in out
