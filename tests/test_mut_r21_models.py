"""eval/models.py: a folder whose transformer config.json is damaged (mutation round 21)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.eval.models import is_shapes_family, sampling_defaults, shapes_max_sequence_length
from imgalign.hub import ASSETS, EMBEDDED
from imgalign.pipelines import ModelSpec

REF = ASSETS / EMBEDDED["shapes"] / "transformer" / "config.json"
needs_shapes = pytest.mark.skipif(
    not REF.is_file(), reason="the embedded shapes model is not in this checkout"
)


@needs_shapes
@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b'{"num_layers": 5,', "not valid JSON"),
        (b"[1, 2]", "a JSON list, not an object"),
        (b'{"num_layers": "\xff"}', "not valid JSON"),
    ],
)
def test_a_damaged_transformer_config_is_named_not_a_bare_json_error(
    tmp_path: Path, content: bytes, why: str
) -> None:
    """`imgalign eval`/`grid`/`train` read the transformer's config.json to tell the shapes family before the
    pipeline loads: a cut or hand-edited one said only "Expecting property name ...: line 1 column 18" (a JSON list:
    an AttributeError traceback), naming no file."""
    config = tmp_path / "ft" / "transformer" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_bytes(content)
    spec = ModelSpec("ft", str(tmp_path / "ft"))
    for ask in (is_shapes_family, sampling_defaults, lambda s: shapes_max_sequence_length(s.base)):
        with pytest.raises(ValueError, match="is damaged") as info:
            ask(spec)
        assert str(config) in str(info.value) and why in str(info.value)
        assert "copy or save the model again" in str(info.value)


@needs_shapes
def test_a_readable_config_of_the_shapes_architecture_still_is_of_the_family(tmp_path: Path) -> None:
    config = tmp_path / "ft" / "transformer" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(REF.read_text(encoding="utf-8").replace('"_class_name"', '"_other"'), encoding="utf-8")
    assert is_shapes_family(ModelSpec("ft", str(tmp_path / "ft")))
