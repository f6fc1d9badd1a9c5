"""eval/suite.py, mutation round 32f survivors."""

from __future__ import annotations

from pathlib import Path

from imgalign import shapes as W
from imgalign.eval.suite import copy_folder, write_prompt_folder

SPEC = W.single_object("circle")


def test_a_sample_that_is_a_link_to_an_image_is_copied_as_that_image(tmp_path: Path) -> None:
    """(S06: `s.is_symlink() and not s.exists()` made `s.is_symlink()`) only a link whose target is gone is refused;
    a sample that links to an image elsewhere (a layout of links into a shared store) is copied, its target's
    bytes under the sample's name, not the link."""
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, SPEC.to_metadata(), [])
    store = tmp_path / "store.png"
    W.render(SPEC, 0)[0].save(store)
    (gen / "00000" / "samples" / "0000.png").symlink_to(store)
    copy_folder(gen, tmp_path / "copy")
    copied = tmp_path / "copy" / "00000" / "samples" / "0000.png"
    assert not copied.is_symlink() and copied.read_bytes() == store.read_bytes()
