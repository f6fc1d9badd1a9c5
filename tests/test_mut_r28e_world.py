"""imgalign.commands.world, mutation round 28 (helper e): a --set key that is a bare component name."""

from __future__ import annotations

import pytest

from imgalign.commands.world import split_component_overrides


def test_a_set_key_that_is_only_a_component_name_is_not_read_as_that_components_setting() -> None:
    """``--set clip=3`` has no ``component.`` prefix: it is a plain key (refused with the prefix hint for several
    components, passed through whole for one), not the clip component's setting ``3``."""
    with pytest.raises(ValueError, match=r"--set 'clip=3': with --component all, prefix the key"):
        split_component_overrides(["t2i", "clip"], ["clip=3"])
    assert split_component_overrides(["clip"], ["clip=3"]) == {"clip": ["clip=3"]}
