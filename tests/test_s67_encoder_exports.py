"""The shapes CLIP and VLM exports cut short (a file-size limit, a full disk) leave no ``OUT/<model>.tmp/`` behind,
as the t2i export's does (round 34g): the half-written folder stayed until the next run removed it. The error
names the model folder and says what stopped it."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from imgalign.pretrain import clip as clip_pt
from imgalign.pretrain import vlm as vlm_pt


def _too_large(*args, **kwargs):
    raise OSError(errno.EFBIG, "File too large")


def test_a_clip_export_cut_short_leaves_no_tmp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("safetensors.torch.save_file", _too_large)
    with pytest.raises(OSError, match=r"cannot write .*clip .*A file-size limit stopped it"):
        clip_pt.export(torch.nn.Linear(2, 2), {}, tmp_path / "clip", "float32", "card")
    assert list(tmp_path.iterdir()) == []


def test_a_vlm_export_cut_short_leaves_no_tmp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Model:
        def save_pretrained(self, folder: Path) -> None:
            Path(folder).mkdir(parents=True)
            (Path(folder) / "config.json").write_text("{")
            _too_large()

    with pytest.raises(OSError, match=r"cannot write .*vlm .*A file-size limit stopped it"):
        vlm_pt.export(Model(), None, tmp_path / "vlm", "card")
    assert list(tmp_path.iterdir()) == []
