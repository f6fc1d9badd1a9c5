"""encoder_common.exporting (the CLIP, VLM and t2i exports): a Ctrl-C mid-write removes ``OUT.tmp`` as a full disk
does, and a write that fails before the ``.tmp`` folder exists is still the OSError naming the model folder."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from imgalign.pretrain import clip as clip_pt
from imgalign.pretrain import vlm as vlm_pt


def test_a_clip_export_stopped_by_ctrl_c_leaves_no_tmp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("safetensors.torch.save_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        clip_pt.export(torch.nn.Linear(2, 2), {}, tmp_path / "clip", "float32", "card")
    assert list(tmp_path.iterdir()) == []


def test_a_vlm_export_failing_before_its_tmp_folder_exists_names_the_model_folder(tmp_path: Path) -> None:
    class Model:
        def save_pretrained(self, folder: Path) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match=r"cannot write .*vlm .*") as info:
        vlm_pt.export(Model(), None, tmp_path / "vlm", "card")
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []
