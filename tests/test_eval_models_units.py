"""eval/models.py: which models are of the shapes family (sampled with its trained settings) (mutation round 10)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from imgalign.eval.models import is_shapes_family, sampling_defaults
from imgalign.hub import ASSETS, EMBEDDED
from imgalign.pipelines import ModelSpec

REF = ASSETS / EMBEDDED["shapes"] / "transformer" / "config.json"
needs_shapes = pytest.mark.skipif(
    not REF.is_file(), reason="the embedded shapes model is not in this checkout"
)


@needs_shapes
def test_the_other_embedded_models_are_not_of_the_shapes_family(tmp_path, monkeypatch) -> None:
    """shapes-clip, shapes-vlm and shapes-artifact name embedded models, not folders: a folder of that name in the
    working directory holding a shapes transformer config does not make them of the family."""
    monkeypatch.chdir(tmp_path)
    for name in ("shapes-clip", "shapes-vlm", "shapes-artifact"):
        (tmp_path / name / "transformer").mkdir(parents=True)
        shutil.copy(REF, tmp_path / name / "transformer" / "config.json")
        assert not is_shapes_family(ModelSpec("m", name)), name
        assert sampling_defaults(ModelSpec("m", name)) == {}
    assert is_shapes_family(ModelSpec("m", str(tmp_path / "shapes-clip")))  # the folder, by its path


@needs_shapes
def test_without_the_embedded_shapes_model_no_folder_is_of_its_family(tmp_path, monkeypatch) -> None:
    """An install without the shapes model's files has no architecture to compare with: a folder is not of the
    family (and nothing fails reading the missing reference)."""
    (tmp_path / "ft" / "transformer").mkdir(parents=True)
    shutil.copy(REF, tmp_path / "ft" / "transformer" / "config.json")
    assert is_shapes_family(ModelSpec("ft", str(tmp_path / "ft")))
    monkeypatch.setattr("imgalign.hub.ASSETS", tmp_path / "no-assets")
    assert not is_shapes_family(ModelSpec("ft", str(tmp_path / "ft")))


@needs_shapes
def test_another_architecture_is_not_of_the_shapes_family(tmp_path: Path) -> None:
    cfg = json.loads(REF.read_text())
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "config.json").write_text(
        json.dumps({**cfg, "num_layers": cfg["num_layers"] + 1})
    )
    assert not is_shapes_family(ModelSpec("x", str(tmp_path)))
