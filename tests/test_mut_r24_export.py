"""Round 24 mutation kills: an export clears a temp folder an earlier, interrupted export left behind, so none of its
files is published in the model folder."""

from __future__ import annotations

from pathlib import Path

import torch

from imgalign.pretrain import clip as clip_pt
from imgalign.pretrain import vlm as vlm_pt


def test_a_clip_export_publishes_none_of_a_stale_temp_folders_files(tmp_path: Path) -> None:
    out = tmp_path / "shapes-clip"
    stale = tmp_path / "shapes-clip.tmp"
    stale.mkdir()
    (stale / "pytorch_model.bin").write_text("left by an interrupted export")
    clip_pt.export(torch.nn.Linear(2, 2), {"embed_dim": 8}, out, "float32", "card")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [clip_pt.WEIGHTS, "open_clip_config.json", f"{clip_pt.MODEL_NAME}.json", "README.md"]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shapes-clip"]


class _Saves:
    """Stands for the model or the processor: save_pretrained writes one file."""

    def __init__(self, name: str) -> None:
        self.name = name

    def save_pretrained(self, folder: Path) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / self.name).write_text("{}")


def test_a_vlm_export_publishes_none_of_a_stale_temp_folders_files(tmp_path: Path) -> None:
    out = tmp_path / "shapes-vlm"
    stale = tmp_path / "shapes-vlm.tmp"
    stale.mkdir()
    (stale / "model.safetensors.index.json").write_text("left by an interrupted export")
    vlm_pt.export(_Saves("model.safetensors"), _Saves("processor_config.json"), out, "card")
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "model.safetensors",
        "processor_config.json",
    ]
    assert (out / "README.md").read_text() == "card"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shapes-vlm"]
