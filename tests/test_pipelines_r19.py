"""imgalign.pipelines, mutation round 19: behaviour no other test pinned down (the weight-file check on a real
model's header size, and on a file cut one byte short of its header's end)."""

from __future__ import annotations

from pathlib import Path

import torch


def _save(folder: Path, tensors: int) -> tuple[Path, int]:
    """A safetensors file of `tensors` small tensors; returns it and its header size (its first 8 bytes)."""
    from safetensors.torch import save_file

    f = folder / "w.safetensors"
    save_file(
        {f"transformer_blocks.{i:04d}.attn.to_q.weight": torch.zeros(2) for i in range(tensors)}, str(f)
    )
    return f, int.from_bytes(f.read_bytes()[:8], "little")


def test_a_cut_short_weights_file_with_a_header_of_a_real_models_size_is_named(tmp_path: Path) -> None:
    """A real transformer's header describes hundreds of tensors (tens of kilobytes, 100 kB for SD3's): a copy of it
    cut short is named, not taken for an implausible header and left to the loader."""
    from imgalign.pipelines import truncated_weights

    f, n = _save(tmp_path, 400)
    assert n > 20_000
    whole = f.read_bytes()
    f.write_bytes(whole[:-8])
    assert truncated_weights(tmp_path) == [
        f"the rest of {tmp_path.name}/w.safetensors ({len(whole) - 8} of {len(whole)} bytes there: truncated)"
    ]


def test_a_weights_file_cut_one_byte_inside_its_header_is_named(tmp_path: Path) -> None:
    """A file that ends one byte before its header does is named as cut inside its header."""
    from imgalign.pipelines import truncated_weights

    f, n = _save(tmp_path, 4)
    f.write_bytes(f.read_bytes()[: 8 + n - 1])
    assert truncated_weights(tmp_path) == [
        f"the rest of {tmp_path.name}/w.safetensors ({8 + n - 1} of more than {8 + n} bytes there: truncated)"
    ]


def test_a_weights_file_one_byte_short_of_its_data_is_named(tmp_path: Path) -> None:
    """A copy that lost only its last byte is named as cut short too."""
    from imgalign.pipelines import truncated_weights

    f, _ = _save(tmp_path, 4)
    whole = f.read_bytes()
    f.write_bytes(whole[:-1])
    assert truncated_weights(tmp_path) == [
        f"the rest of {tmp_path.name}/w.safetensors ({len(whole) - 1} of {len(whole)} bytes there: truncated)"
    ]


def test_a_cut_short_transformer_in_an_overlays_transformer_subfolder_is_refused_before_loading(
    tmp_path: Path,
) -> None:
    """BASE+OVERLAY whose overlay holds its transformer in a transformer/ subfolder: weights cut short there are
    named before the base loads, as for a transformer at the overlay's top."""
    import pytest

    from imgalign.pipelines import ModelSpec, check_model_spec

    sub = tmp_path / "ft" / "transformer"
    sub.mkdir(parents=True)
    (sub / "config.json").write_text('{"_class_name": "SD3Transformer2DModel"}')
    f, _ = _save(sub, 4)
    f.write_bytes(f.read_bytes()[:-8])
    with pytest.raises(ValueError, match=r"is incomplete; missing: the rest of transformer/w\.safetensors"):
        check_model_spec(ModelSpec("ft", "shapes", str(tmp_path / "ft")))


def test_a_fine_tune_on_a_base_of_a_family_imgalign_does_not_train_is_left_to_the_loader(
    tmp_path: Path,
) -> None:
    """The family check compares two known families only: a base pipeline of another class (a UNet pipeline) is
    not refused as "a None pipeline"; the loader speaks for it."""
    from imgalign.pipelines import ModelSpec, check_overlay_family

    base, ft = tmp_path / "base", tmp_path / "ft"
    base.mkdir()
    ft.mkdir()
    (base / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline"}')
    (ft / "imgalign_model.json").write_text('{"family": "sd3", "base_model": "shapes"}')
    assert check_overlay_family(ModelSpec("ft", str(base), str(ft)), ft) is None
