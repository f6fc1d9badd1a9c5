"""rewards/features.py: behaviour mutation round 21 found unchecked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from imgalign.rewards.features import build_features, image_processor_transform, image_stats, local_name


def test_an_encoder_gives_every_image_of_a_batch_larger_than_its_chunk_in_order() -> None:
    """Images are encoded `batch_size` at a time: 5 images in chunks of 2 give the 5 rows of encoding each alone."""
    enc = build_features("stats")
    images = torch.rand(5, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    got = enc(images, batch_size=2)
    assert got.shape == (5, enc.dim)
    assert torch.allclose(got, torch.cat([image_stats(images[i : i + 1]) for i in range(5)]), atol=1e-5)


def test_an_empty_batch_gives_no_rows_of_the_encoders_width() -> None:
    """No images: a (0, D) tensor, which stacks with other features (a (0,) one did not)."""
    enc = build_features("stats")
    assert enc(torch.zeros(0, 3, 16, 16)).shape == (0, enc.dim)


def test_a_hub_id_or_missing_path_is_recorded_as_given() -> None:
    """Only a path that exists here is made absolute: a Hub id (dinov2:facebook/dinov2-base) read as a relative path
    would be recorded as /cwd/facebook/dinov2-base, which no other machine has."""
    for name in (
        "dinov2:facebook/dinov2-base",
        "clip:openai/clip-vit-large-patch14",
        "open_clip:ViT-B-32@openai",
    ):
        assert local_name(name) == name


def test_only_an_open_clip_arch_is_split_at_its_at_sign() -> None:
    """open_clip:ARCH@CKPT names an architecture and a file; a dinov2:, clip: or local-dir: folder whose name holds
    an @ (models/dino@v2) is one path."""
    from imgalign.rewards.features import split_encoder_name

    assert split_encoder_name("open_clip:ViT-B-32@/ckpt/a.pt") == ("open_clip:ViT-B-32@", "/ckpt/a.pt")
    assert split_encoder_name("dinov2:/models/dino@v2") == ("dinov2:", "/models/dino@v2")
    assert split_encoder_name("clip:/models/clip@v2") == ("clip:", "/models/clip@v2")
    assert split_encoder_name("open_clip:local-dir:/m/c@2") == ("open_clip:local-dir:", "/m/c@2")


def test_a_name_without_a_kind_or_without_a_path_names_no_encoder() -> None:
    """names_an_encoder wants stats, shapes-clip, or a kind with its folder, file or Hub id: a bare word or a kind
    alone (dinov2: with nothing after it) is refused before anything loads."""
    from imgalign.rewards.features import names_an_encoder

    assert names_an_encoder("stats") and names_an_encoder("shapes-clip")
    assert names_an_encoder("dinov2:facebook/dinov2-base")
    assert not names_an_encoder("resnet50")
    assert not names_an_encoder("dinov2:")
    assert not names_an_encoder("open_clip:")


def test_a_recorded_hub_id_is_not_called_a_folder_that_is_gone() -> None:
    """Only an absolute recorded path that is missing gets the "no longer there" advice: a Hub id such as
    dinov2:facebook/dinov2-base is not a folder that moved."""
    from imgalign.rewards.features import recorded_encoder_gone

    assert recorded_encoder_gone("dinov2:facebook/dinov2-base", "head h", "features") == ""
    assert "no longer there" in recorded_encoder_gone("dinov2:/no/such/dino", "head h", "features")


def test_a_relative_encoder_folder_is_built_and_named_by_its_absolute_path(tmp_path, monkeypatch) -> None:
    """dinov2:models/dino from the folder holding models/ builds the encoder of /abs/models/dino, the name a head
    or stats file records (a relative one was read elsewhere as a Hub id)."""
    import imgalign.rewards.features as feats

    (tmp_path / "models" / "dino").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    built: list[str] = []

    def fake_build(name: str, device: torch.device, dtype: torch.dtype) -> feats.FeatureEncoder:
        built.append(name)
        return feats.FeatureEncoder(name, lambda x: x.mean((2, 3)), 3, device, dtype)

    monkeypatch.setattr(feats, "_build", fake_build)
    monkeypatch.setattr(feats, "_CACHE", {})
    enc = build_features("dinov2:models/dino")
    assert built == [f"dinov2:{tmp_path / 'models' / 'dino'}"]
    assert enc.name == built[0]


def test_stats_features_of_a_half_precision_run_are_those_of_the_float32_images() -> None:
    """The stats encoder has no weights to run in bf16: the images are not rounded to bf16 before their statistics
    (which moved histogram bins and the spectrum's small bands)."""
    x = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    assert torch.equal(build_features("stats", dtype=torch.bfloat16)(x), image_stats(x))


def test_an_open_clip_encoders_dim_is_its_feature_width() -> None:
    """enc.dim (what a head or a stats file is checked against) is the width of the features, not the batch size of
    the probe that measured it."""
    enc = build_features("shapes-clip")
    feats = enc(torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(2)))
    assert enc.dim == feats.shape[1] > 2
    assert enc(torch.zeros(0, 3, 64, 64)).shape == (0, enc.dim)


def test_a_crop_wider_than_the_image_pads_the_width_with_the_odd_column_on_the_right() -> None:
    """transformers' centre crop larger than the image zero-pads it first: 3 columns more than a 4-wide image are
    1 on the left and 2 on the right, the height untouched."""
    from imgalign.rewards.features import processor_geometry

    x = torch.arange(1.0, 17.0).view(1, 1, 4, 4)
    got = processor_geometry(x, None, (4, 4), (4, 7))
    assert got.shape == (1, 1, 4, 7)
    assert torch.equal(got[..., 1:5], x)
    assert not got[..., 0].any() and not got[..., 5:].any()


def test_the_processor_crop_offset_is_truncated_as_transformers_does() -> None:
    """A 4x4 crop of a 7x7 image starts at int(3 / 2) = 1 (rows and columns 1-4), not at round(1.5) = 2."""
    from imgalign.rewards.features import processor_geometry

    x = torch.arange(49.0).view(1, 1, 7, 7)
    assert torch.equal(processor_geometry(x, None, (7, 7), (4, 4)), x[..., 1:5, 1:5])


def test_a_crop_size_of_zero_is_refused_as_unset() -> None:
    """A hand-edited crop_size of 0 pixels is as good as none: the processor is refused by name, not built into
    a transform that makes empty images."""
    from imgalign.rewards.features import image_processor_transform

    proc = SimpleNamespace(
        size={"shortest_edge": 8},
        crop_size={"height": 0, "width": 8},
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )
    with pytest.raises(ValueError, match="crop_size .* lacks 'height' or 'width'"):
        image_processor_transform(proc, "enc", "cpu", torch.float32)


def test_a_size_with_a_height_and_no_width_is_refused() -> None:
    """size {"height": 8} resizes to no known width: refused by name."""
    from imgalign.rewards.features import image_processor_transform

    proc = SimpleNamespace(
        size={"height": 8}, do_center_crop=False, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    with pytest.raises(ValueError, match="has neither 'shortest_edge' nor 'height' and 'width'"):
        image_processor_transform(proc, "enc", "cpu", torch.float32)


def test_a_mean_written_as_a_string_is_one_number_and_a_bool_is_none() -> None:
    """A hand-edited "0.5" is 0.5 for all three channels ("123" was read as (1, 2, 3)); true is no number."""
    from imgalign.rewards.features import per_channel

    assert per_channel(SimpleNamespace(image_mean="0.5"), "image_mean", "enc") == (0.5, 0.5, 0.5)
    assert per_channel(SimpleNamespace(image_mean="123"), "image_mean", "enc") == (123.0, 123.0, 123.0)
    with pytest.raises(ValueError, match="image_std True is not one number or three"):
        per_channel(SimpleNamespace(image_std=True), "image_std", "enc")


def test_a_zero_std_or_a_nan_mean_is_refused() -> None:
    """A std of 0 (every feature inf) or a NaN mean (every feature NaN) is refused naming the key."""
    from imgalign.rewards.features import per_channel

    with pytest.raises(ValueError, match="image_std .* must be finite numbers above 0"):
        per_channel(SimpleNamespace(image_std=[0.5, 0.0, 0.5]), "image_std", "enc")
    with pytest.raises(ValueError, match="image_mean .* must be finite numbers"):
        per_channel(SimpleNamespace(image_mean=[0.5, float("nan"), 0.5]), "image_mean", "enc")


def test_a_rescale_factor_of_true_is_no_number() -> None:
    """A hand-edited rescale_factor: true (a bool, which Python counts as 1) is refused, not taken as 1, which left
    pixels 255 times too bright."""
    proc = SimpleNamespace(
        size={"shortest_edge": 8}, do_center_crop=False, do_normalize=False, rescale_factor=True
    )
    with pytest.raises(ValueError, match="rescale_factor True is not a number > 0"):
        image_processor_transform(proc, "enc", "cpu", torch.float32)


def test_stats_features_refuse_images_below_three_pixels_a_side() -> None:
    """The 3x3 Laplacian needs 3 pixels a side: a 2-pixel-high image is refused naming its size."""
    with pytest.raises(ValueError, match="at least 3x3 pixels, not 5x2"):
        image_stats(torch.rand(1, 3, 2, 5))


def test_stats_features_clamp_pixels_slightly_outside_the_unit_range() -> None:
    """Images a little outside [0, 1] (a decoder's overshoot) have the statistics of their clamped pixels."""
    x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(4)) * 1.2 - 0.1
    assert torch.equal(image_stats(x), image_stats(x.clamp(0, 1)))


def test_the_saturation_histogram_is_of_chroma_over_value() -> None:
    """Saturation is (max - min) / max: a flat (0.5, 0.25, 0.25) image has 0.5, half in each of the two bins around
    it (centres 3/7 and 4/7 of 8 on [0, 1]), not its chroma 0.25."""
    x = torch.tensor([0.5, 0.25, 0.25]).view(1, 3, 1, 1).expand(1, 3, 8, 8)
    sat = image_stats(x)[0, 24:32]
    assert torch.allclose(sat, torch.tensor([0, 0, 0, 0.5, 0.5, 0, 0, 0]), atol=1e-4)


def test_the_laplacian_energies_are_of_three_scales() -> None:
    """The three Laplacian energies are of the image halved twice (8 pixels or more a side): pixel noise has most
    at the finest scale, and averaging 2x2 blocks lowers it, so the three differ and fall."""
    lap = image_stats(torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(5)))[0, 48:51]
    assert lap[0] > lap[1] > lap[2]
