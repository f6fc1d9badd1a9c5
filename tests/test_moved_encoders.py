"""A head or FID stats file whose encoder folder moved: the recorded absolute path no longer loads, and another
name of the same encoder was refused as "other features", so it could not be used again without refitting."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from test_rewards_tiny import make_tiny_dinov2

from imgalign.rewards.base import build_reward
from imgalign.rewards.features import moved_encoder, recorded_encoder_gone, split_encoder_name
from imgalign.rewards.heads import FeatureHead, save_head

torch.set_num_threads(1)


def test_encoder_names_split_into_kind_and_path_and_a_gone_folder_may_be_stood_in_for(tmp_path: Path) -> None:
    assert split_encoder_name("dinov2:/a/b") == ("dinov2:", "/a/b")
    assert split_encoder_name("open_clip:ViT-B-32@/m/x.pt") == ("open_clip:ViT-B-32@", "/m/x.pt")
    assert split_encoder_name("open_clip:local-dir:/m") == ("open_clip:local-dir:", "/m")
    assert split_encoder_name("shapes-clip") == ("", "shapes-clip")
    here = tmp_path / "new"
    here.mkdir()
    gone = str(tmp_path / "old")
    assert moved_encoder(f"dinov2:{gone}", f"dinov2:{here}")
    assert not moved_encoder(f"dinov2:{here}", f"dinov2:{here}")  # the recorded one is there: not moved
    assert not moved_encoder(f"dinov2:{gone}", f"clip:{here}")  # another kind of encoder
    assert not moved_encoder(f"dinov2:{gone}", f"dinov2:{tmp_path / 'nowhere'}")  # the new one is not there
    assert not moved_encoder("dinov2:facebook/dinov2-small", f"dinov2:{here}")  # a Hub id does not move
    assert not moved_encoder(
        f"open_clip:ViT-B-32@{gone}", f"open_clip:ViT-B-16@{here}"
    )  # another architecture
    assert recorded_encoder_gone(f"dinov2:{here}", "head h", "features") == ""
    assert recorded_encoder_gone("shapes-clip", "head h", "features") == ""
    assert recorded_encoder_gone(f"dinov2:{gone}", "head h", "features") == (
        f"head h was made with features 'dinov2:{gone}', whose {gone!r} is no longer there: if that encoder "
        "moved, give its new place as features=dinov2:NEW_PATH"
    )


@pytest.fixture()
def moved(tmp_path: Path) -> tuple[Path, Path, torch.Tensor]:
    """(old folder, gone; new folder; images): a tiny DINOv2 moved after a head was fitted on it."""
    old = make_tiny_dinov2(tmp_path / "dino")
    return (
        old,
        tmp_path / "moved" / "dino",
        torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(0)),
    )


def _head(path: Path, features: str, task: str) -> Path:
    torch.manual_seed(0)
    save_head(path, FeatureHead(32), features, task, {})
    return path


@pytest.mark.parametrize("task", ["discriminator", "artifact"])
def test_a_head_whose_encoder_moved_is_re_pointed_with_features(
    moved, tmp_path: Path, task: str, caplog
) -> None:
    old, new, x = moved
    head = _head(tmp_path / "h.safetensors", f"dinov2:{old}", task)
    spec = f"{task}:head={head}" if task == "discriminator" else f"{task}:model={head}"
    before = build_reward(spec)(x, [""] * 3).scores
    new.parent.mkdir()
    shutil.move(old, new)
    with pytest.raises(
        ValueError, match=r"is no longer there: if that encoder moved, give its new place as features="
    ):
        build_reward(spec)
    with caplog.at_level("WARNING"):
        after = build_reward(f"{spec},features=dinov2:{new}")(x, [""] * 3).scores
    torch.testing.assert_close(after, before)
    assert "which are no longer there; scoring with" in caplog.text
    # a model of the same kind but another size is not the encoder the head was fitted on
    wide = tmp_path / "wide"
    from transformers import Dinov2Config, Dinov2Model

    Dinov2Model(
        Dinov2Config(hidden_size=48, num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=8)
    ).save_pretrained(wide)
    shutil.copy(new / "preprocessor_config.json", wide)
    with pytest.raises(ValueError, match="takes 32-d features; .* gives 48-d ones: it is not the encoder"):
        build_reward(f"{spec},features=dinov2:{wide}")


def test_fid_stats_whose_encoder_moved_are_used_with_the_new_place(moved, tmp_path: Path, caplog) -> None:
    from imgalign.rewards.fid import save_stats

    old, new, x = moved
    stats = tmp_path / "ref.safetensors"
    save_stats(stats, torch.zeros(32), torch.eye(32), 10, f"dinov2:{old}")
    new.parent.mkdir()
    shutil.move(old, new)
    with pytest.raises(ValueError, match=r"stats file .* is no longer there: .* features=dinov2:NEW_PATH"):
        build_reward(f"fid:ref={stats}")  # features= left at shapes-clip
    with caplog.at_level("WARNING"):
        r = build_reward(f"fid:ref={stats},features=dinov2:{new},set_size=40")
    assert "which are no longer there; using" in caplog.text
    torch.testing.assert_close(r.mu_ref, torch.zeros(32, dtype=r.mu_ref.dtype))
    # `rewards fd STATS FOLDER --features NEW` refused what the fid reward takes
    from imgalign.cli import main
    from imgalign.rewards.base import to_pil

    (tmp_path / "imgs").mkdir()
    for i, im in enumerate(to_pil(x)):
        im.save(tmp_path / "imgs" / f"{i}.png")
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert main(["rewards", "fd", str(stats), str(tmp_path / "imgs"), "--features", f"dinov2:{new}"]) == 0
    assert "which are no longer there; comparing with" in caplog.text


def test_an_online_discriminator_state_resumes_with_its_encoder_named_another_way_or_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The online discriminator's state recorded its features as typed: a run begun with ``dinov2:m/dino`` was
    refused when resumed as ``dinov2:/abs/m/dino`` (and the other way round), and once the folder moved the advice
    named the gone folder. The state records the absolute path; a moved folder given anew is warned about."""
    import logging

    make_tiny_dinov2(tmp_path / "m" / "dino")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("imgalign.rewards.features._CACHE", {})
    opts = "online=true,ref_size=4,hidden=4"
    a = build_reward(f"discriminator:features=dinov2:m/dino,{opts}")
    state = a.state_dict()
    assert state["features"] == f"dinov2:{tmp_path / 'm' / 'dino'}"
    b = build_reward(f"discriminator:features=dinov2:{tmp_path / 'm' / 'dino'},{opts}")
    b.load_state_dict(state)
    b.load_state_dict({**state, "features": "dinov2:m/dino"})  # a state saved as typed, before
    with pytest.raises(ValueError, match="the saved state uses features 'stats'"):
        b.load_state_dict({**state, "features": "stats"})
    shutil.move(tmp_path / "m", tmp_path / "n")
    c = build_reward(f"discriminator:features=dinov2:n/dino,{opts}")
    with caplog.at_level(logging.WARNING, logger="imgalign.rewards.discriminator"):
        c.load_state_dict(state)
    assert "are no longer there; resuming with" in caplog.text
    assert all(torch.equal(x, y) for x, y in zip(c.head.state_dict().values(), a.head.state_dict().values()))
