"""vlm.Config.validate at its boundary: a pool exactly one batch large is enough (each step samples the batch
without replacement from it); one smaller is refused by name."""

from __future__ import annotations

import pytest

from imgalign.pretrain import vlm as vlm_pt


def test_a_vlm_pool_of_exactly_one_batch_is_accepted_and_one_smaller_refused() -> None:
    vlm_pt.Config(pool_size=8, batch_size=8).validate()
    with pytest.raises(ValueError, match="pool_size must be at least batch_size"):
        vlm_pt.Config(pool_size=7, batch_size=8).validate()
