"""`imgalign score` edges: a layout folder without its metadata, the metadata rows a prompt-free reward gets, and
a failed batch scored again item by item."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign import shapes as W
from imgalign.cli import main
from imgalign.eval.suite import write_prompt_folder


def test_a_layout_folder_without_its_metadata_file_is_an_error_row_not_a_refusal(tmp_path: Path) -> None:
    """An image at <index>/samples/<n>.png whose folder has no metadata.jsonl has no prompt: its row says so and
    the other images are scored (reading the missing file was refused as an unreadable metadata file)."""
    spec = W.single_object("circle")
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, spec.to_metadata(), [W.render(spec, 0)[0]])
    (gen / "00001" / "samples").mkdir(parents=True)
    W.render(spec, 1)[0].save(gen / "00001" / "samples" / "0000.png")
    out = tmp_path / "s.jsonl"
    argv = ["score", str(gen), "--reward", "geneval:mode=strict", "--no-progress", "--out", str(out)]
    assert main(argv) == 1
    rows = {"/".join(Path(r["file"]).parts[-3:]): r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["00000/samples/0000.png"]["scores"] == {"geneval:mode=strict": 1.0}
    assert rows["00001/samples/0000.png"]["scores"] == {}
    assert "no prompt" in rows["00001/samples/0000.png"]["error"]


def test_a_prompt_free_reward_gets_an_empty_metadata_row_for_an_image_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Images with and without metadata in one batch: the reward's metadata holds a dict for every image (an empty
    one for the image without), never None, as the reward contract says (a list of B dicts)."""
    spec = W.single_object("circle")
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, spec.to_metadata(), [W.render(spec, 0)[0]])
    W.render(spec, 1)[0].save(tmp_path / "loose.png")
    (tmp_path / "meta_rows_reward.py").write_text(
        "import torch\n\n\ndef tags(images, prompts, metadata):\n"
        "    return torch.tensor([float(len(m.get('tag', ''))) for m in metadata])\n"
        "tags.needs_prompt = False\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "s.jsonl"
    argv = ["score", str(gen), str(tmp_path / "loose.png"), "--reward", "meta_rows_reward:tags"]
    assert main([*argv, "--no-progress", "--out", str(out)]) == 0
    rows = {Path(r["file"]).name: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["0000.png"]["scores"] == {"meta_rows_reward:tags": float(len(spec.to_metadata()["tag"]))}
    assert rows["loose.png"]["scores"] == {"meta_rows_reward:tags": 0.0}
    assert rows["loose.png"]["error"] is None


def test_a_failed_batch_scores_each_item_on_its_own_image() -> None:
    """When a batch fails, each item is scored again alone, on its own image, with its own prompt and metadata
    (the items after a failing first one must not be scored on another image)."""
    import torch

    from imgalign.commands.score import _score_group

    seen: list[tuple[list[str], list[dict]]] = []

    def reward(x: torch.Tensor, prompts: list[str], metadata: list[dict] | None) -> object:
        seen.append((list(prompts), list(metadata or [])))
        if "boom" in prompts:
            raise RuntimeError("boom")
        return type("Out", (), {"scores": x.flatten(1).mean(1)})()

    x = torch.stack([torch.full((3, 2, 2), v) for v in (0.25, 0.5, 0.75)])
    rows = [{"scores": {}, "error": None} for _ in range(3)]
    _score_group(reward, "r", x, ["boom", "b", "c"], [{"i": 0}, {"i": 1}, {"i": 2}], rows)
    assert rows == [
        {"scores": {}, "error": "r: RuntimeError: boom"},
        {"scores": {"r": 0.5}, "error": None},
        {"scores": {"r": 0.75}, "error": None},
    ]
    assert seen[1:] == [(["boom"], [{"i": 0}]), (["b"], [{"i": 1}]), (["c"], [{"i": 2}])]


def test_a_plugin_rewards_key_error_names_its_type_in_the_row_and_a_value_error_does_not():
    """A plug-in's KeyError read only "'difficulty'"; imgalign's own ValueErrors say what is wrong in their text."""
    import torch

    from imgalign.commands.score import _score_group

    def score(images, prompts, metadata):
        raise KeyError("difficulty") if prompts[0] == "k" else ValueError("reward 'r' needs metadata")

    rows = [{"scores": {}, "error": None}]
    _score_group(score, "r", torch.zeros(1, 3, 4, 4), ["k"], [{}], rows)
    assert rows[0]["error"] == "r: KeyError: 'difficulty'"
    rows = [{"scores": {}, "error": None}]
    _score_group(score, "r", torch.zeros(1, 3, 4, 4), ["v"], [{}], rows)
    assert rows[0]["error"] == "r: reward 'r' needs metadata"


def test_a_baseline_score_of_an_integer_too_large_for_a_float_is_refused_by_line(tmp_path):
    """1 and 400 zeros is a JSON number: it passed the number check and stopped the paired table with an
    OverflowError traceback, after the scoring."""
    from imgalign.commands.score import CLIError, load_baseline

    base = tmp_path / "base.jsonl"
    row = {"file": "a.png", "prompt": None, "scores": {"artifact": 0.5}, "error": None}
    big = json.dumps({**row, "file": "b.png"}).replace("0.5", "1" + "0" * 400)
    base.write_text(json.dumps(row) + "\n" + big + "\n")
    with pytest.raises(CLIError) as e:
        load_baseline(base)
    assert str(e.value).startswith(
        f"--baseline {str(base)!r} line 2: score 'artifact' is an integer too large for a float; pass the unedited"
    )
