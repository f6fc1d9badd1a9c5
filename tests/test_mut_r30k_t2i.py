"""Mutation round 30k: the t2i model's export (imgalign/pretrain/t2i.py) stopped by Ctrl-C."""

import pytest
from test_t2i import tiny_config

from imgalign.pretrain import t2i


def test_an_export_stopped_by_ctrl_c_leaves_no_tmp_folder(tmp_path, monkeypatch):
    """Ctrl-C (a KeyboardInterrupt, no Exception) in the middle of the save: OUT/shapes-t2i.tmp/ is removed too."""
    from diffusers import DiffusionPipeline

    def interrupted(self, folder, **kw):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model_index.json").write_text("{")
        raise KeyboardInterrupt

    monkeypatch.setattr(DiffusionPipeline, "save_pretrained", interrupted)
    with pytest.raises(KeyboardInterrupt):
        t2i.pretrain(tiny_config(steps=1), tmp_path, progress=False)
    assert not (tmp_path / (t2i.FOLDER + ".tmp")).exists()
    assert not (tmp_path / t2i.FOLDER).exists()
