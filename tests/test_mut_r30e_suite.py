"""Mutation round 30e, eval/suite.py: what survived the suite's tests (see /work/audit/s67/e/mutants.md)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imgalign.eval.suite import load_image, read_folder_index
from tests.conftest import SQUARE_META as SQUARE
from tests.conftest import square_layout


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    return square_layout(tmp_path / "images")


def test_an_object_written_over_several_lines_is_not_warned_of_as_several_rows(
    layout: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its lines are no rows: the error names line 1 as not JSON, and no warning counts them as metadata rows."""
    (layout / "00000" / "metadata.jsonl").write_text(json.dumps(SQUARE, indent=2) + "\n")
    with pytest.raises(ValueError, match="line 1 is not valid JSON"):
        read_folder_index(layout)
    assert "metadata rows" not in caplog.text


@pytest.mark.parametrize("text", ["", "\n"])
def test_an_empty_metadata_file_is_refused_as_no_metadata_object(layout: Path, text: str) -> None:
    """An empty file (a write cut off) is said to need a GenEval metadata object, not 'not valid JSON (Expecting
    value)' as if a character were wrong."""
    meta = layout / "00000" / "metadata.jsonl"
    meta.write_text(text)
    with pytest.raises(ValueError) as e:
        read_folder_index(layout)
    assert str(e.value) == f"{meta}: line 1 must be a GenEval metadata object with 'tag' and 'include'"


def test_a_sub_folder_holding_a_file_of_a_number_is_not_named_as_holding_prompt_folders(
    tmp_path: Path,
) -> None:
    """Only a sub-folder with numbered folders in it is the hint; a file named 1 is no prompt folder."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "1").write_text("a note")
    with pytest.raises(FileNotFoundError, match="holds no prompt folders; expected") as e:
        read_folder_index(tmp_path)
    assert "sub-folder" not in str(e.value)


def test_a_float_image_of_values_in_0_1_is_scaled_to_8_bits_not_cut_to_black(tmp_path: Path) -> None:
    """A 32-bit float image (mode F, e.g. a TIFF) holding 0.5 is mid grey, as the rewards read it; PIL's convert
    cut it to 0."""
    path = tmp_path / "0000.png"
    Image.fromarray(np.full((4, 4), 0.5, dtype=np.float32)).save(path, format="TIFF")
    with Image.open(path) as im:
        assert im.mode == "F"
    grey = np.asarray(load_image(path))
    assert grey.shape == (4, 4, 3) and 120 <= int(grey.mean()) <= 135
