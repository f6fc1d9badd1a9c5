"""Bad input, round 34g: `world pretrain --component t2i` after a run killed while it exported the model left
``OUT/shapes-t2i.tmp/`` behind."""

import pytest
from test_t2i import tiny_config

from imgalign.pretrain import t2i


def test_a_stale_export_folder_is_not_shipped_with_the_model(tmp_path):
    """The export saved into the .tmp folder the killed run left, and moved it into place whole: every stray file
    in it (a half-written shard of the killed export, anything else) shipped in shapes-t2i/."""
    stale = tmp_path / (t2i.FOLDER + ".tmp")
    (stale / "transformer").mkdir(parents=True)
    (stale / "junk.bin").write_bytes(b"half")
    (stale / "transformer" / "diffusion_pytorch_model.safetensors.index.json").write_text("{}")
    t2i.pretrain(tiny_config(steps=1), tmp_path, progress=False)
    shipped = tmp_path / t2i.FOLDER
    assert not (shipped / "junk.bin").exists()
    assert not (shipped / "transformer" / "diffusion_pytorch_model.safetensors.index.json").exists()
    assert not stale.exists()


def test_an_export_cut_short_leaves_no_tmp_folder(tmp_path, monkeypatch):
    """A write cut short (a file-size limit) left OUT/shapes-t2i.tmp/ with the files written so far."""
    import errno

    from diffusers import DiffusionPipeline

    def cut_short(self, folder, **kw):
        (folder / "model_index.json").parent.mkdir(parents=True, exist_ok=True)
        (folder / "model_index.json").write_text("{")
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(DiffusionPipeline, "save_pretrained", cut_short)
    with pytest.raises(OSError, match="A file-size limit stopped it"):
        t2i.pretrain(tiny_config(steps=1), tmp_path, progress=False)
    assert not (tmp_path / (t2i.FOLDER + ".tmp")).exists()
    assert not (tmp_path / t2i.FOLDER).exists()
