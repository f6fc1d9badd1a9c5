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


def _no_encoder(*args: object, **kwargs: object) -> None:
    raise AssertionError("a feature encoder was built before the inputs were checked")


def test_fd_and_fid_stats_check_their_inputs_before_any_encoder_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fd FOLDER missing` computed the folder's features first (minutes for a reference folder) and then said "path
    'missing' is not a folder"; `fd FOLDER image.png` said the image was no stats file only after that work too;
    `fid-stats --images missing` loaded the encoder first. Each is now refused before any encoder is built."""
    from imgalign.cli import main

    monkeypatch.setattr("imgalign.rewards.features.build_features", _no_encoder)
    folder = tmp_path / "imgs"
    folder.mkdir()
    image = folder / "a.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")
    missing = str(tmp_path / "missing")
    for a, b in ((str(folder), missing), (missing, "shapes")):
        assert main(["rewards", "fd", a, b, "--features", "stats", "--n", "4"]) == 2
        err = capsys.readouterr().err
        assert (
            f"{missing!r} is not a folder, a stats file or 'shapes': give an image folder, a .safetensors"
            in err
        )
    assert main(["rewards", "fd", str(folder), str(image), "--features", "stats"]) == 2
    assert (
        f"{str(image)!r} is an image file; fd compares two image folders or stats files"
        in capsys.readouterr().err
    )
    # a stats file of other features after a folder: the folder's features were computed before it was refused
    from imgalign.rewards.fid import save_stats

    other = tmp_path / "other.safetensors"
    save_stats(other, torch.zeros(3), torch.eye(3), 4, "inception")
    assert main(["rewards", "fd", str(folder), str(other), "--features", "stats"]) == 2
    assert f"{other} holds 'inception' statistics, not 'stats'; pass --features inception" in (
        capsys.readouterr().err
    )
    out = tmp_path / "s.safetensors"
    assert main(["rewards", "fid-stats", "--images", missing, "--features", "stats", "--out", str(out)]) == 2
    assert f"--images {missing!r} is not a folder" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["fit-discriminator", "--real", "r", "--fake", "f", "--features", "stats"],
        ["fit-artifact", "--clean", "r", "--artifact", "f"],
        ["fid-stats", "--images", "r", "--features", "stats"],
    ],
    ids=lambda a: a[0],
)
def test_an_out_ending_in_a_slash_is_refused_before_it_is_written_as_a_file(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--out heads/` (a new folder, meant to hold the result) wrote the head or statistics as a file named
    `heads`. It is refused, naming the option, before any work."""
    from imgalign.cli import main

    monkeypatch.setattr("imgalign.rewards.features.build_features", _no_encoder)
    monkeypatch.chdir(tmp_path)
    for name in ("r", "f"):
        Path(name).mkdir()
    assert main(["rewards", *argv, "--out", "heads/"]) == 2
    err = capsys.readouterr().err
    assert "--out 'heads/' ends in a slash, so it names a folder" in err and "give a file name" in err
    assert not Path("heads").exists()


@pytest.mark.parametrize(
    ("spec", "option", "leave"),
    [
        ("fid:features=stats,ref=", "ref", ", or leave ref= out (default 'shapes')"),
        ("discriminator:features=stats,online=true,ref=", "ref", ", or leave ref= out (default 'shapes')"),
        ("discriminator:head=", "head", ", or leave head= out"),
        ("artifact:model=''", "model", ", or leave model= out (default 'shapes-artifact')"),
        ("fid:features=stats,init= ", "init", ", or leave init= out"),
    ],
)
def test_a_reward_option_given_empty_is_refused_by_name(
    spec: str, option: str, leave: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fid:ref=$STATS` with STATS unset: '' read as a path is the current folder, so fid and the online
    discriminator took every image under it as their reference set, silently; `head=` said "head file '.' is a
    folder" and `model=` "head file 'head.safetensors' does not exist". An empty option is now refused by name."""
    from imgalign.rewards.base import build_reward, to_pil

    monkeypatch.chdir(tmp_path)
    for i, im in enumerate(to_pil(torch.rand(4, 3, 16, 16))):  # what the current folder's images were read as
        im.save(tmp_path / f"{i}.png")
    with pytest.raises(ValueError) as err:
        build_reward(spec)
    assert str(err.value) == (
        f"reward {spec.split(':')[0]!r}: option {option}= is empty (an unset shell variable?): give a value{leave}"
    )


def test_an_option_whose_default_is_empty_may_be_given_empty() -> None:
    """`vlm_loglik:query=` is its default (no question); a required option given empty cannot be left out."""
    from imgalign.rewards.base import _call_factory

    def factory(device: str, dtype: torch.dtype, path: str, query: str = "") -> dict[str, str]:
        return {"path": path, "query": query}

    assert _call_factory("mine", factory, "cpu", torch.float32, {"path": "p", "query": ""})["query"] == ""
    with pytest.raises(
        ValueError,
        match=r"^reward 'mine': option path= is empty \(an unset shell variable\?\): "
        r"give a value$",
    ):
        _call_factory("mine", factory, "cpu", torch.float32, {"path": " "})


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["rewards", "fit-discriminator", "--real", "", "--fake", "f", "--out", "h.safetensors"],
            "--real is empty",
        ),
        (
            ["rewards", "fit-artifact", "--clean", "c", "--artifact", " ", "--out", "h.safetensors"],
            "--artifact is empty",
        ),
        (["rewards", "fit-artifact", "--clean", "c", "--artifact", "f", "--out", ""], "--out is empty"),
        (["rewards", "fid-stats", "--images", "", "--out", "s.safetensors"], "--images is empty"),
        (["rewards", "fd", "f", ""], "an fd argument is empty ('', an unset shell variable?)"),
        (
            ["score", "", "--reward", "artifact", "--out", "s.jsonl"],
            "an empty path ('', an unset shell variable?)",
        ),
        (["score", "f", "--reward", "artifact", "--out", "s.jsonl", "--prompts", ""], "--prompts is empty"),
        (["score", "f", "--reward", "artifact", "--out", "s.jsonl", "--baseline", ""], "--baseline is empty"),
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) else "",
)
def test_an_empty_path_is_refused_not_read_as_the_current_folder(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path given as "" ("$DIR" with DIR unset) is Path('.'): fid-stats --images "" wrote statistics of every
    image under the current folder, fd "" compared it, fit-* read it as a class, score "" scored it, and score's
    --prompts "" / --baseline "" were read as not given. Each is refused by name before any work."""
    from imgalign.cli import main
    from imgalign.rewards.base import to_pil

    monkeypatch.setattr("imgalign.rewards.features.build_features", _no_encoder)
    monkeypatch.setattr("imgalign.rewards.base.build_reward", _no_encoder)
    monkeypatch.chdir(tmp_path)
    for name in ("c", "f"):
        Path(name).mkdir()
        for i, im in enumerate(to_pil(torch.rand(3, 3, 16, 16))):
            im.save(Path(name) / f"{i}.png")
    assert main(argv) == 2
    assert said in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "f"]  # nothing written


@pytest.mark.parametrize(
    "argv",
    [
        ["rewards", "fit-discriminator", "--real", "r", "--fake", "f", "--features", "stats"],
        ["rewards", "fid-stats", "--images", "r", "--features", "stats"],
    ],
    ids=lambda a: a[1],
)
def test_an_out_that_is_a_pipe_or_device_is_refused_not_replaced(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--out /dev/null` (to discard the result) wrote the head beside it and moved it onto it: as root that
    replaced the device with a regular file. Shown with a FIFO, which was replaced the same way."""
    import os
    import stat

    from imgalign.cli import main

    monkeypatch.setattr("imgalign.rewards.features.build_features", _no_encoder)
    monkeypatch.chdir(tmp_path)
    for name in ("r", "f"):
        Path(name).mkdir()
    os.mkfifo("pipe")
    assert main([*argv, "--out", "pipe"]) == 2
    err = capsys.readouterr().err
    assert "--out 'pipe' is not a regular file (a device or a pipe, such as /dev/null)" in err
    assert stat.S_ISFIFO(os.stat("pipe").st_mode)


def test_no_readable_images_names_the_files_skipped_for_their_suffix(tmp_path: Path) -> None:
    """A folder of .avif photos (PIL opens them) gave "no readable images under 'x'", which said nothing of the
    files there: images are found by their suffix, and the message now names the others (.heic here; .avif is
    read now)."""

    from imgalign.rewards.base import to_pil
    from imgalign.rewards.io import encode_image_folder, load_image_folder

    for i, im in enumerate(to_pil(torch.rand(2, 3, 8, 8))):
        im.save(tmp_path / f"p{i}.png")
        (tmp_path / f"p{i}.png").rename(tmp_path / f"p{i}.heic")
    (tmp_path / "notes").write_text("x")
    (tmp_path / ".DS_Store").write_text("x")  # hidden: neither read nor named
    want = (
        f"no readable images under {str(tmp_path)!r} (it holds 3 other file(s), e.g. 'notes': (no suffix), .heic; "
        "images are found by their suffix: .png, .jpg, .jpeg, .webp, .bmp, .gif, .tif, .tiff, .avif)"
    )
    for read in (load_image_folder, lambda p: encode_image_folder(p, lambda x: x)):
        with pytest.raises(FileNotFoundError) as err:
            read(tmp_path)
        assert str(err.value) == want


def test_a_folder_of_avif_images_is_read(tmp_path: Path) -> None:
    """.avif photos (Pillow opens them when built with AVIF, as its wheels are) were skipped for their suffix."""
    from PIL import features

    from imgalign.rewards.base import to_pil
    from imgalign.rewards.io import load_image_folder

    if not features.check("avif"):
        pytest.skip("this Pillow is built without AVIF")
    for i, im in enumerate(to_pil(torch.rand(2, 3, 16, 16))):
        im.save(tmp_path / f"p{i}.avif", quality=100)
    assert load_image_folder(tmp_path).shape == (2, 3, 16, 16)


def test_fid_statistics_given_as_a_head_and_a_head_given_as_statistics_are_named(tmp_path: Path) -> None:
    """`discriminator:head=STATS` said only "is not an imgalign feature head", and `fid:ref=HEAD` only "is not an
    imgalign FID stats file": each now says what the file is and where it goes."""
    from imgalign.rewards.fid import load_stats, save_stats
    from imgalign.rewards.heads import FeatureHead, load_head, save_head

    stats = tmp_path / "s.safetensors"
    save_stats(stats, torch.zeros(4), torch.eye(4), 10, "stats")
    with pytest.raises(
        ValueError, match=f"{stats} holds FID reference statistics .*give it as fid:ref={stats}"
    ):
        load_head(stats)
    head = tmp_path / "h.safetensors"
    save_head(head, FeatureHead(4), "stats", "discriminator", {})
    with pytest.raises(
        ValueError, match=f"{head} is a discriminator head .*, not FID statistics: give it to"
    ):
        load_stats(head)


def test_a_head_whose_metadata_names_no_encoder_is_named(tmp_path: Path) -> None:
    """A head file whose metadata records features no encoder reads (hand-edited, or written by other code) failed
    with "unknown feature encoder 'nope:xx'", naming no head."""
    from imgalign.rewards import build_reward
    from imgalign.rewards.heads import FeatureHead, save_head

    head = tmp_path / "h.safetensors"
    save_head(head, FeatureHead(4), "nope:xx", "discriminator", {})
    with pytest.raises(
        ValueError, match=f"head '{head}' records features 'nope:xx', which names no feature encoder"
    ):
        build_reward(f"discriminator:head={head}")
    save_head(head, FeatureHead(4), "dinov2:", "discriminator", {})  # a kind without its folder
    with pytest.raises(ValueError, match="records features 'dinov2:', which names no feature encoder"):
        build_reward(f"discriminator:head={head}")
    save_head(head, FeatureHead(4), "nope:xx", "artifact", {})
    with pytest.raises(
        ValueError, match="records features 'nope:xx', which names no feature encoder .*fit the head"
    ):
        build_reward(f"artifact:model={head}")


def test_an_avif_file_on_a_pillow_without_avif_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a Pillow built without AVIF, an .avif photo (now a suffix read) was 'not an image', no more."""
    from PIL import features

    from imgalign.rewards.io import ImageReadError, read_image

    bad = tmp_path / "p.avif"
    bad.write_bytes(b"\x00\x00\x00\x1cftypavif" + bytes(40))  # no decodable image either way
    monkeypatch.setattr(features, "check", lambda name: name != "avif")
    with pytest.raises(ImageReadError, match="this Pillow is built without AVIF: install Pillow's wheels"):
        read_image(bad)
    monkeypatch.setattr(features, "check", lambda name: True)
    with pytest.raises(ImageReadError) as err:
        read_image(bad)
    assert "without AVIF" not in str(err.value)
