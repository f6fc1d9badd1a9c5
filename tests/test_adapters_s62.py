"""``load_adapter`` (the Python API) checks a local pipeline folder as the CLI does before it loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from imgalign.adapters import load_adapter
from imgalign.pipelines import IncompleteModelError


@pytest.mark.parametrize("entry", [[None], []])
def test_load_adapter_refuses_a_damaged_component_entry(sd3_dir: Path, tmp_path: Path, entry: list) -> None:
    # "vae": [null] was taken for a part left out: the pipeline loaded without its VAE and the first decode
    # failed with "'NoneType' object has no attribute 'config'"
    folder = tmp_path / "sd3"
    shutil.copytree(sd3_dir, folder)
    index = folder / "model_index.json"
    spec = json.loads(index.read_text())
    spec["vae"] = entry
    index.write_text(json.dumps(spec))
    with pytest.raises(
        IncompleteModelError, match=r"is damaged: its 'vae' entry is .*not a \[library, class\] pair"
    ):
        load_adapter(folder)


def test_load_adapter_refuses_a_folder_missing_its_weights(sd3_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "sd3"
    shutil.copytree(sd3_dir, folder)
    for f in (folder / "transformer").glob("*.safetensors"):
        f.unlink()
    with pytest.raises(IncompleteModelError, match=r"missing: transformer/ weights"):
        load_adapter(folder)


def test_load_adapter_still_loads_a_complete_folder(sd3_dir: Path) -> None:
    adapter = load_adapter(sd3_dir)
    assert adapter.pipe.vae is not None
