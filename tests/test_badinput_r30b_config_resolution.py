"""Bad-input round 30b: a model.resolution the model cannot take is refused by the start-up checks, before any model
loads (it was refused by the adapter once the pipeline had loaded: minutes for SD3.5 or FLUX)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.config import ConfigError, load_config
from imgalign.trainers.config import FlowGRPOConfig
from imgalign.trainers.testing import tiny_flux_pipeline
from imgalign.trainers.trainer import preflight


@pytest.fixture(scope="module")
def flux_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_flux_pipeline(tmp_path_factory.mktemp("flux"))


@pytest.mark.parametrize(
    ("side", "error"),
    [
        (7, r"model.resolution=7 does not fit model 'shapes': use a multiple of 8 .*e\.g\. 8"),
        (36, r"model.resolution=36 does not fit model 'shapes': use a multiple of 8 .*e\.g\. 32"),
        (
            72,
            r"model.resolution=72 is larger than model 'shapes' can take: at most 64 .*8 patches of 8 pixels",
        ),
    ],
)
def test_a_resolution_the_shapes_model_cannot_take_is_refused_before_it_loads(
    side: int, error: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shapes model (VAE factor 4 x patch 2 = 8 pixels, a positional grid of 8 patches) takes multiples of 8 up
    to 64. preflight passed 7, 36 and 72 and the run failed only after the model loaded; now preflight names
    model.resolution, the multiple (or the largest side) and a size that fits."""
    monkeypatch.setattr("imgalign.pipelines.load_pipeline", lambda *a, **k: pytest.fail("a model loaded"))
    cfg = load_config(FlowGRPOConfig, None, [f"model.resolution={side}"])
    with pytest.raises(ConfigError, match=error):
        preflight(cfg, output_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("side", [0, 8, 24, 64])
def test_a_resolution_the_shapes_model_takes_passes_preflight(side: int, tmp_path: Path) -> None:
    """0 (the model's default) and multiples of 8 up to 64 pass the new check, so it refuses no size the adapter
    takes."""
    cfg = load_config(FlowGRPOConfig, None, [f"model.resolution={side}"])
    assert Path(preflight(cfg, output_dir=tmp_path / "run")).name == "shapes-t2i"


def test_a_flux_resolution_must_be_a_multiple_but_has_no_upper_bound(flux_dir: Path, tmp_path: Path) -> None:
    """The tiny FLUX pipeline (a VAE that does not downsample, 2x2 packed patches) takes any even side, and the
    adapter bounds no FLUX side (RoPE), so preflight refuses 7 but passes 5000, far above the 4x-default list that
    ``folder_sizes`` gives for grids: a bound there would refuse a size that trains."""
    cfg = load_config(FlowGRPOConfig, None, [f"model.path={flux_dir}", "model.resolution=7"])
    with pytest.raises(ConfigError, match=r"model.resolution=7 does not fit model .*: use a multiple of 2 "):
        preflight(cfg, output_dir=tmp_path / "run")
    cfg = load_config(FlowGRPOConfig, None, [f"model.path={flux_dir}", "model.resolution=5000"])
    assert preflight(cfg, output_dir=tmp_path / "run") == str(flux_dir.resolve())
