"""Mutation round 29 (helper b): a shapes-clip folder without its open_clip model config
(shapes-clip-tiny.json) is refused by name before open_clip reads it (a mutant that skipped the check passed
every test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.hub import ASSETS, EMBEDDED, ModelNotFoundError, embedded_path
from imgalign.shapes_models import SHAPES_CLIP_NAME, load_shapes_clip, register_shapes_clip


@pytest.mark.skipif(not (ASSETS / EMBEDDED["shapes-clip"]).is_dir(), reason="no embedded shapes-clip here")
def test_a_clip_folder_without_its_model_config_is_named_incomplete(tmp_path: Path) -> None:
    clip = tmp_path / "clip"
    clip.mkdir()
    for f in embedded_path("shapes-clip").iterdir():
        if f.is_file() and f.name != f"{SHAPES_CLIP_NAME}.json":
            (clip / f.name).symlink_to(f)
    for load in (register_shapes_clip, load_shapes_clip):
        with pytest.raises(ModelNotFoundError) as e:
            load(folder=clip)
        assert f"incomplete (missing {SHAPES_CLIP_NAME}.json)" in str(e.value)
        assert "`imgalign world pretrain --component clip`" in str(e.value)
