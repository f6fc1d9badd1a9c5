"""imgalign.shapes_models: what counts as a present file (mutation round 21)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from imgalign.hub import ASSETS, EMBEDDED, ModelNotFoundError, embedded_path
from imgalign.shapes_models import CLIP_WEIGHTS, load_shapes_clip

needs_clip = pytest.mark.skipif(
    not (ASSETS / EMBEDDED["shapes-clip"]).is_dir(), reason="the embedded shapes-clip is not in this checkout"
)


@needs_clip
def test_a_folder_in_place_of_a_weights_file_is_named_missing(tmp_path: Path) -> None:
    """A folder named like a required file (a botched copy) is not the file: the folder is named incomplete
    instead of open_clip failing on it with IsADirectoryError."""
    clip = tmp_path / "clip"
    shutil.copytree(embedded_path("shapes-clip"), clip)
    (clip / CLIP_WEIGHTS).unlink()
    (clip / CLIP_WEIGHTS).mkdir()
    with pytest.raises(ModelNotFoundError, match=f"incomplete \\(missing {CLIP_WEIGHTS}\\)"):
        load_shapes_clip(folder=clip)
