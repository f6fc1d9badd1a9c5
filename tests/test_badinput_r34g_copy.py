"""Bad input, round 34g: `imgalign eval --images` copies the folder into --out; a copy cut short (a file-size limit,
a full disk) left the image it was copying truncated under its final name."""

import errno
import shutil

import pytest
from PIL import Image

from imgalign import shapes as W


def test_a_copy_cut_short_leaves_no_truncated_image_under_its_final_name(tmp_path, monkeypatch):
    """`ulimit -f 8; imgalign eval --images SRC --out OUT` with a 12 KB image: OUT/images/00000/samples/0001.png was
    left with its first 8 KB. Each file is copied whole or not at all now, and the error names that file."""
    from imgalign.eval.suite import copy_folder, write_prompt_folder

    write_prompt_folder(
        tmp_path / "src", 0, W.single_object("circle").to_metadata(), [Image.new("RGB", (4, 4))] * 2
    )
    real = shutil.copyfile

    def cut_short(src, dst, **kw):
        if str(src).endswith("0001.png"):  # half the bytes, then the limit: as the kernel does it
            with open(src, "rb") as fs, open(dst, "wb") as fd:
                fd.write(fs.read()[:10])
            raise OSError(errno.EFBIG, "File too large", str(src), None, str(dst))
        return real(src, dst, **kw)

    monkeypatch.setattr(shutil, "copyfile", cut_short)
    dst = tmp_path / "dst"
    with pytest.raises(OSError) as e:
        copy_folder(tmp_path / "src", dst)
    final = dst / "00000" / "samples" / "0001.png"
    assert e.value.filename2 == str(final)
    samples = sorted(p.name for p in (dst / "00000" / "samples").iterdir())
    assert samples == ["0000.png"]  # the whole one; no half 0001.png, no hidden temporary
    monkeypatch.setattr(shutil, "copyfile", real)
    copy_folder(tmp_path / "src", dst)
    assert final.read_bytes() == (tmp_path / "src" / "00000" / "samples" / "0001.png").read_bytes()
