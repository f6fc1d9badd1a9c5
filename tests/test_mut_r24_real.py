"""eval/real.py (mutation round 24): a detector folder whose config names an architecture transformers does not
know is refused naming the detector, as a missing file is."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from imgalign.eval.real import HFDetector


def test_a_detector_config_of_an_unknown_model_type_is_refused_naming_the_detector(tmp_path: Path) -> None:
    folder = tmp_path / "det"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "not-a-model"}))
    with pytest.raises(
        FileNotFoundError, match=rf"^cannot load detector {re.escape(repr(str(folder)))}: .*not-a-model"
    ):
        HFDetector(str(folder))
