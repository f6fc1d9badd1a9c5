"""Mutation round 20: `imgalign score` (imgalign/commands/score.py)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch
from PIL import Image

from imgalign.cli import main


def _prompt_length(one_at_a_time: bool):
    def f(images: torch.Tensor, prompts: list[str], metadata: object = None) -> torch.Tensor:
        if one_at_a_time and len(prompts) > 1:
            raise RuntimeError("one image at a time")
        return torch.tensor([float(len(p)) for p in prompts])

    return f


@pytest.mark.parametrize("one_at_a_time", [False, True], ids=["batch", "failed-batch-retried"])
def test_each_image_is_scored_against_its_own_prompt(
    one_at_a_time: bool, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reward gets each image's --prompts prompt, in the batch's order (the other tests' rewards read the
    image only, so prompts given as "" went unseen), also when a failed batch is scored again an image at a time.
    The reward scores a prompt by its length."""
    mod = types.ModuleType("my_lab.r20_prompt_len")
    mod.f = _prompt_length(one_at_a_time)
    monkeypatch.setitem(sys.modules, "my_lab.r20_prompt_len", mod)
    prompts = {"a.png": "a red circle", "b.png": "two blue squares", "c.png": "a cat"}
    rows = []
    for name, prompt in prompts.items():
        Image.new("RGB", (8, 8), "white").save(tmp_path / name)
        rows.append(json.dumps({"file": name, "prompt": prompt}))
    (tmp_path / "p.jsonl").write_text("\n".join(rows) + "\n")
    out = tmp_path / "s.jsonl"
    argv = [
        "score",
        str(tmp_path),
        "--reward",
        "my_lab.r20_prompt_len:f",
        "--prompts",
        str(tmp_path / "p.jsonl"),
    ]
    assert main([*argv, "--no-progress", "--out", str(out)]) == 0, capsys.readouterr().err
    got = {Path(r["file"]).name: r for r in map(json.loads, out.read_text().splitlines())}
    assert {k: r["scores"]["my_lab.r20_prompt_len:f"] for k, r in got.items()} == {
        k: float(len(p)) for k, p in prompts.items()
    }
    assert {k: r["prompt"] for k, r in got.items()} == prompts


def test_a_missing_prompts_file_is_named_as_missing(tmp_path: Path, capsys) -> None:
    """`--prompts none.jsonl` (a typo) is named as a file that does not exist, before any reward loads and with no
    --out written, not as an unreadable file with the system's errno text."""
    Image.new("RGB", (8, 8), "white").save(tmp_path / "a.png")
    missing = tmp_path / "none.jsonl"
    out = tmp_path / "s.jsonl"
    argv = [
        "score",
        str(tmp_path / "a.png"),
        "--reward",
        "geneval",
        "--prompts",
        str(missing),
        "--out",
        str(out),
    ]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"prompt file {str(missing)!r} does not exist" in err
    assert not out.exists()
