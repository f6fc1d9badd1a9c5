"""Behaviour of the fid reward, image reading, the reward sanity check, the registries and atomic writes that no
test checked (mutation round 17)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_rewards_tiny import make_tiny_dinov2

from imgalign.rewards.fid import FIDReward, load_stats, save_stats

torch.set_num_threads(1)


def test_save_stats_makes_the_folders_of_its_file(tmp_path: Path) -> None:
    """`fid-stats --out runs/ref/s.safetensors` into a folder that does not exist yet: it is made."""
    path = tmp_path / "runs" / "ref" / "s.safetensors"
    save_stats(path, torch.zeros(3), torch.eye(3), 4, "stats")
    mu, sigma, n, feats = load_stats(path)
    assert torch.equal(sigma, torch.eye(3, dtype=torch.float64)) and (n, feats) == (4, "stats")


def test_stats_of_a_relative_encoder_folder_record_it_absolute_and_match_another_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """save_stats records `dinov2:dino` as the absolute folder; the fid reward takes those stats with the folder
    spelt another way (`dinov2:./dino`), as it is the same encoder."""
    make_tiny_dinov2(tmp_path / "dino")
    monkeypatch.chdir(tmp_path)
    stats = tmp_path / "s.safetensors"
    save_stats(stats, torch.zeros(32), torch.eye(32), 10, "dinov2:dino")
    assert load_stats(stats)[3] == f"dinov2:{tmp_path / 'dino'}"
    r = FIDReward(features="dinov2:./dino", ref=str(stats), set_size=40)
    assert torch.equal(r.mu_ref, torch.zeros(32, dtype=torch.float64))


def test_stats_of_a_gone_encoder_are_refused_for_an_encoder_of_other_dimensions(tmp_path: Path) -> None:
    """A stats file whose recorded encoder folder is gone may be re-pointed at a model of the same kind, but not at
    one whose features have other dimensions: refused when the reward is built, naming both sizes, not at the
    first update as "the reference statistics are 16-d"."""
    dino = make_tiny_dinov2(tmp_path / "dino")
    stats = tmp_path / "s.safetensors"
    save_stats(stats, torch.zeros(16), torch.eye(16), 10, f"dinov2:{tmp_path / 'gone'}")
    with pytest.raises(ValueError, match=r"holds 16-d features; .* gives 32-d ones: it is not the encoder"):
        FIDReward(features=f"dinov2:{dino}", ref=str(stats), set_size=40)


def test_a_blank_path_is_refused_as_empty_and_a_bracket_pattern_is_a_glob(tmp_path: Path) -> None:
    """A path of spaces ("$DIR " with DIR unset) is the empty path, refused as such; `[ab].png` is a glob (as in
    the shell), matching a.png and b.png, not a missing file."""
    from imgalign.rewards.io import find_images

    with pytest.raises(FileNotFoundError, match=r"an empty path \(''"):
        find_images(["  "])
    for name in ("a.png", "b.png", "c.png"):
        (tmp_path / name).write_bytes(b"")
    assert find_images([str(tmp_path / "[ab].png")]) == [tmp_path / "a.png", tmp_path / "b.png"]


def test_the_other_files_note_leaves_out_hidden_files_and_images(tmp_path: Path) -> None:
    """The note of files skipped for their suffix names neither hidden ones (.DS_Store, a .git folder), which the
    folder walk skips as `ls` does, nor the images it reads."""
    from imgalign.rewards.io import other_files_note

    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("x")
    (tmp_path / ".DS_Store").write_bytes(b"x")
    (tmp_path / "a.PNG").write_bytes(b"x")
    assert other_files_note(tmp_path) == ""
    (tmp_path / "notes").write_text("x")
    assert other_files_note(tmp_path).startswith(
        " (it holds 1 other file(s), e.g. 'notes': (no suffix); images"
    )


def test_swap_needs_two_colours_and_a_kind_that_does_not_apply_falls_back_to_a_shape_change() -> None:
    """Swapping the colours of "a red circle and a red square" changes nothing, so swap does not apply there; a
    corruption asked only of kinds that do not apply (swap of a counting prompt) changes a shape instead."""
    import random

    from imgalign import shapes as W
    from imgalign.rewards.sanity import applicable_kinds, corrupt_spec

    assert applicable_kinds(W.color_attr("red", "circle", "red", "square")) == ["shape", "colour"]
    assert "swap" in applicable_kinds(W.color_attr("red", "circle", "blue", "square"))
    bad, kind = corrupt_spec(W.counting("circle", 2), random.Random(0), ("swap",))
    assert kind == "shape" and bad.tag == "counting" and bad.include[0].shape != "circle"


def test_a_registry_whose_call_takes_no_arguments_accepts_a_function_of_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make()` names no argument: a user's zero-argument function fits it, one that needs an argument does not."""
    from imgalign.trainers.registry import Registry

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "r17_widgets.py").write_text(
        "def make():\n    return 1\n\n\ndef make_one(x):\n    return x\n"
    )
    reg: Registry[object] = Registry("widget", call="make()")
    assert reg.get("r17_widgets:make")() == 1
    with pytest.raises(
        ValueError, match=r"widget 'r17_widgets:make_one' cannot be called as make\(\): .*'x'"
    ):
        reg.get("r17_widgets:make_one")


def test_a_name_of_many_multibyte_characters_gets_a_short_temporary_name(tmp_path: Path) -> None:
    """The file-name limit is in bytes: 129 characters of which 124 are 'é' (253 bytes) is a name the file system
    takes, but '.NAME.tmp' (258 bytes) is not; the temporary name is shortened by its bytes, not its characters."""
    from imgalign.files import atomic_write_text, temporary_name

    path = tmp_path / ("é" * 124 + ".json")
    assert len(path.name) < 250 < len(path.name.encode()) <= 255
    assert len(temporary_name(path).name.encode()) <= 255
    atomic_write_text(path, "x")
    assert path.read_text() == "x" and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_open_mode_of_a_folder_leaves_the_targets_of_its_links_alone(tmp_path: Path) -> None:
    """A link in a published folder (to a file elsewhere, kept private) is not followed: chmod through it would
    make that other file readable to everyone."""
    import os
    import stat

    from imgalign.files import open_mode

    secret = tmp_path / "secret.txt"
    secret.write_text("x")
    secret.chmod(0o600)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.txt").write_text("x")
    (tmp_path / "out" / "link.txt").symlink_to(secret)
    old = os.umask(0o022)
    try:
        open_mode(tmp_path / "out")
    finally:
        os.umask(old)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "out" / "a.txt").stat().st_mode) == 0o644


def test_a_write_whose_move_into_place_fails_leaves_no_temporary(tmp_path: Path) -> None:
    """The move onto the result's name can fail after the whole file was written (the name is a folder): the
    error propagates, the folder is untouched, and the finished `.NAME.tmp` is removed, not left beside it."""
    from imgalign.files import atomic_write_text

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "kept.txt").write_text("kept")
    with pytest.raises(IsADirectoryError):
        atomic_write_text(tmp_path / "out", "x")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert (tmp_path / "out" / "kept.txt").read_text() == "kept"


def test_a_folder_of_only_hidden_images_says_they_are_skipped_as_hidden(tmp_path) -> None:
    """A folder holding only `.a.png` (or images under a hidden folder) was "no readable images" without a word
    of them; the note names one and says why it is skipped. Other files and hidden ones are both named."""
    from PIL import Image

    from imgalign.rewards.io import load_image_folder, other_files_note

    Image.new("RGB", (8, 8)).save(tmp_path / ".a.png")
    (tmp_path / ".cache").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / ".cache" / "b.png")
    (tmp_path / ".notes.txt").write_text("x")  # hidden and no image: not counted
    with pytest.raises(FileNotFoundError, match=r"2 hidden image\(s\), e.g. '.a.png', skipped as hidden"):
        load_image_folder(tmp_path)
    (tmp_path / "c.heic").write_bytes(b"x")
    note = other_files_note(tmp_path)
    assert note.startswith(
        " (it holds 1 other file(s), e.g. 'c.heic': .heic; images are found by their suffix"
    )
    assert note.endswith(
        "; it holds 2 hidden image(s), e.g. '.a.png', skipped as hidden files and folders (names "
        "starting with '.') are: rename them to read them)"
    )
    assert other_files_note(tmp_path / ".cache") == ""  # the folder given is read, whatever its own name
