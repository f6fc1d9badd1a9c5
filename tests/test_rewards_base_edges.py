"""rewards/base.py edges: image modes pil_to_rgb converts, same_reward_key's file options, spec numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imgalign.rewards.base import parse_reward_spec, pil_to_rgb, reward_key, same_reward_key


def test_big_endian_16_bit_and_grey_alpha_images_convert_as_their_kin_do() -> None:
    """A big-endian 16-bit image is scaled from 0-65535 like I;16 (PIL's convert clips it at 255); a transparent
    grey+alpha ('LA') pixel is composited on black like an RGBA one (convert('RGB') drops the alpha: white)."""
    big = Image.fromarray(np.array([[200, 65535]], dtype=">u2"))
    assert big.mode == "I;16B"
    assert np.asarray(pil_to_rgb(big))[0, :, 0].tolist() == [0, 255]  # 200 / 65535 of white, not 200 / 255
    clear_white = Image.new("LA", (2, 2), (255, 0))
    assert np.asarray(pil_to_rgb(clear_white)).max() == 0


def test_same_reward_key_resolves_an_existing_file_option_and_leaves_an_empty_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One head file named two ways is one key (its resolved path); an empty value names no file (Path('') is the
    current folder, which exists) and stays empty."""
    (tmp_path / "d.safetensors").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    key = same_reward_key("my_head_reward:head=d.safetensors")
    assert key == same_reward_key(f"my_head_reward:head={tmp_path}/./d.safetensors")
    assert key == f"my_head_reward:head={(tmp_path / 'd.safetensors').resolve()}"
    assert (
        same_reward_key("my_head_reward:head=")
        == reward_key("my_head_reward:head=")
        == "my_head_reward:head="
    )


def test_an_exponent_without_a_sign_is_a_number() -> None:
    """'1e5' and '2E3' are numbers, as '1e-3' is (YAML 1.1 reads an exponent without a sign, or without a dot in
    the mantissa, as text)."""
    assert parse_reward_spec("x:a=1e5,b=2E3,c=+1.5e2")[1] == {"a": 100000.0, "b": 2000.0, "c": 150.0}


def test_a_quoted_string_value_reads_back_as_itself_from_its_key_text() -> None:
    """A string that is itself quoted ("'q'") is quoted again in a key, so the key reads back the same value (as
    written it would read back as q)."""
    from imgalign.rewards.base import _key_text, _option_value

    for value in ("'q'", '"q"', "q", "007", "true"):
        assert _option_value(_key_text(value)) == value
    assert _key_text("'q'") == "\"'q'\""


def test_register_reward_lists_the_reward_with_its_description(monkeypatch: pytest.MonkeyPatch) -> None:
    """`imgalign rewards list` shows each reward's one-line description as registered, by name."""
    import imgalign.rewards.base as base

    base._import_builtin()  # into the real registry: a copy made first would keep the built-in rewards to itself
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    base.register_reward("my_listed", "scores how listed an image is")(base.FunctionReward)
    listed = base.list_rewards()
    assert listed["my_listed"] == "scores how listed an image is"
    assert list(listed) == sorted(listed)
