"""Mutation round 31k: pipelines.check_weights_loaded on stand-in pipelines: a tensor left on the meta device in a
buffer counts as a parameter does, a Hub id is named with the component in brackets (no folder of that name
exists), and components that are no torch modules (a scheduler, a tokenizer) are passed over."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from imgalign.pipelines import check_weights_loaded


def meta_buffer_module() -> torch.nn.Module:
    m = torch.nn.Linear(2, 2)
    m.register_buffer("pos_embed", torch.empty(4, device="meta"))
    return m


def test_a_buffer_left_on_the_meta_device_is_refused(tmp_path: Path) -> None:
    pipe = SimpleNamespace(components={"scheduler": object(), "transformer": meta_buffer_module()})
    with pytest.raises(ValueError, match=r"lack 1 of the transformer's tensors \(e\.g\. pos_embed\)"):
        check_weights_loaded(pipe, tmp_path)


def test_a_hub_id_is_named_with_the_component_in_brackets() -> None:
    meta = torch.nn.Linear(2, 2, device="meta")
    pipe = SimpleNamespace(components={"tokenizer": "not a module", "vae": meta})
    with pytest.raises(ValueError) as e:
        check_weights_loaded(pipe, "org/no-such-local-model")
    assert str(e.value).startswith(
        "cannot load the pipeline 'org/no-such-local-model': the weights in org/no-such-local-model (vae) lack 2 of "
        "the vae's tensors (e.g. weight)"
    )


def test_filled_modules_and_other_components_pass(tmp_path: Path) -> None:
    check_weights_loaded(SimpleNamespace(components={"a": torch.nn.Linear(2, 2), "b": None}), tmp_path)
    check_weights_loaded(object(), tmp_path)  # no components at all
