"""Bad-input round 20: reward head files that are damaged or hand-edited, and the commands that read them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from imgalign.rewards.heads import FeatureHead, load_head, save_head

torch.set_num_threads(1)

Tensors = dict[str, torch.Tensor]
Meta = dict[str, str]


def _edit_meta(key: str, value: str | None) -> Callable[[Tensors, Meta], None]:
    def edit(tensors: Tensors, meta: Meta) -> None:
        if value is None:
            del meta[key]
        else:
            meta[key] = value

    return edit


def _drop_tensor(tensors: Tensors, meta: Meta) -> None:
    del tensors["net.0.weight"]


def _nan_weight(tensors: Tensors, meta: Meta) -> None:
    tensors["net.0.weight"][0, 0] = float("nan")


def _zero_std(tensors: Tensors, meta: Meta) -> None:
    tensors["std"].zero_()


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (_edit_meta("dim", "3"), "size mismatch for mean: copying a param with shape torch.Size([5])"),
        (_edit_meta("dim", "-1"), "zeros: Dimension size must be non-negative"),
        (_edit_meta("dim", None), "its metadata has no 'dim'"),
        (_edit_meta("hidden", "abc"), "invalid literal for int() with base 10: 'abc'"),
        (_edit_meta("features", None), "its metadata has no 'features'"),
        (_edit_meta("extra", "{bad"), "Expecting property name enclosed in double quotes"),
        (_drop_tensor, 'Missing key(s) in state_dict: "net.0.weight"'),
        (_nan_weight, "NaN or inf weights"),
        (_zero_std, "a feature scale 'std' <= 0"),
    ],
    ids=[
        "dim",
        "dim-negative",
        "no-dim",
        "hidden-text",
        "no-features",
        "extra-json",
        "tensor",
        "nan",
        "std0",
    ],
)
def test_a_damaged_head_file_is_named_with_what_is_wrong_and_what_to_do(
    tmp_path: Path, edit: Callable[[Tensors, Meta], None], reason: str
) -> None:
    """A head file whose metadata or tensors were damaged (or hand-edited) failed with a RuntimeError traceback
    from load_state_dict, a bare "dim" (a KeyError), json's "Expecting property name ...", or -- NaN weights, a zero
    feature scale -- loaded and gave every image a "non-finite score" row. Each is now one error naming the file,
    what is wrong and the command that fits it again."""
    good = tmp_path / "good.safetensors"
    save_head(good, FeatureHead(5, hidden=4), "stats", "discriminator", {"real": "r"})
    tensors = load_file(str(good))
    with safe_open(str(good), framework="pt") as fh:
        meta = dict(fh.metadata())
    edit(tensors, meta)
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    with pytest.raises(ValueError) as err:
        load_head(bad, task="discriminator")
    message = str(err.value)
    assert message.startswith(f"{bad} is a damaged imgalign feature head (")
    assert reason in message and message.endswith("fit it again with `imgalign rewards fit-discriminator`")
    assert "\n" not in message
    assert load_head(good, task="discriminator")[1]["extra"] == {
        "real": "r"
    }  # the undamaged file still loads
