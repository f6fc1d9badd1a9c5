"""`imgalign score`: prompts from JSONL or the GenEval layout, bad files as error rows, CSV, exit status."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imgalign import shapes as W
from imgalign.cli import main
from imgalign.eval.suite import write_prompt_folder
from imgalign.rewards.base import list_rewards

SPECS = [
    W.single_object("circle"),
    W.colors("red", "square"),
    W.counting("cross", 2),
    W.two_object("circle", "triangle"),
]


class ScoreSpy:
    """Stands in for ``imgalign.commands.score._score_group``: records the files each call scores and raises
    KeyboardInterrupt (the user's Ctrl-C) once `stop_at` files are scored (-1: never)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, stop_at: int = -1) -> None:
        import imgalign.commands.score as S

        self.scored: list[str] = []
        self.stop_at = stop_at
        self._real = S._score_group
        monkeypatch.setattr(S, "_score_group", self)

    def __call__(self, reward, key, x, prompts, metas, rows):  # _score_group's signature
        if len(self.scored) == self.stop_at:
            raise KeyboardInterrupt
        self.scored.extend(r["file"] for r in rows)
        return self._real(reward, key, x, prompts, metas, rows)


def write_nan_reward(folder: Path, monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """An importable reward `module`:f scoring an image its mean value, or NaN when that is above 0.5 (a white image).
    Each test names its own module: an imported one stays in sys.modules."""
    (folder / f"{module}.py").write_text(
        "import torch\n\n\ndef f(images, prompts, metadata):\n    m = images.mean(dim=(1, 2, 3))\n"
        "    return torch.where(m > 0.5, torch.full_like(m, float('nan')), m)\n"
    )
    monkeypatch.syspath_prepend(str(folder))


def _prompt_row(file: str, spec: W.Spec) -> dict:
    return {"file": file, **spec.to_metadata()}


@pytest.fixture()
def folder(tmp_path: Path) -> tuple[Path, Path]:
    d = tmp_path / "imgs"
    d.mkdir()
    rows = []
    for i, s in enumerate(SPECS):
        W.render(s, i)[0].save(d / f"ok{i}.png")
        rows.append(_prompt_row(f"ok{i}.png", s))
    img = W.render(SPECS[0], 9)[0]
    img.convert("L").save(d / "gray.png")
    img.convert("RGBA").save(d / "rgba.png")
    img.convert("P").save(d / "palette.png")
    Image.fromarray(np.asarray(img.convert("L"), dtype=np.uint16) * 257).save(d / "deep16.png")
    for name in ("gray.png", "rgba.png", "palette.png", "deep16.png"):
        rows.append(_prompt_row(name, SPECS[0]))
    (d / "empty.png").write_bytes(b"")
    (d / "notimage.png").write_text("hello, I am text")
    good = (d / "ok0.png").read_bytes()
    (d / "truncated.png").write_bytes(good[: len(good) // 2])
    (d / "corrupt.png").write_bytes(good[:40] + bytes(range(256)) * 4)
    for name in ("empty.png", "notimage.png", "truncated.png", "corrupt.png"):
        rows.append(_prompt_row(name, SPECS[0]))
    W.render(SPECS[1], 3)[0].save(d / "noprompt.png")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d, prompts


def test_score_folder_with_bad_files(
    folder: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    d, prompts = folder
    out = tmp_path / "scores.jsonl"
    rc = main(
        [
            "score",
            str(d),
            "--reward",
            "geneval",
            "--reward",
            "artifact",
            "--prompts",
            str(prompts),
            "--out",
            str(out),
            "--batch-size",
            "3",
            "--no-progress",
        ]
    )
    assert rc == 1  # some files failed
    rows = {Path(r["file"]).name: r for r in map(json.loads, out.read_text().splitlines())}
    assert len(rows) == 13
    for name in (
        "ok0.png",
        "ok1.png",
        "ok2.png",
        "ok3.png",
        "gray.png",
        "rgba.png",
        "palette.png",
        "deep16.png",
    ):
        assert rows[name]["error"] is None, rows[name]
        assert set(rows[name]["scores"]) == {"geneval", "artifact"}
    for i in range(4):
        assert rows[f"ok{i}.png"]["scores"]["geneval"] == 1.0
        assert rows[f"ok{i}.png"]["prompt"] == SPECS[i].prompt()
    assert "empty file" in rows["empty.png"]["error"]
    assert "not an image" in rows["notimage.png"]["error"]
    assert "truncated.png" in rows["truncated.png"]["error"]
    assert "corrupt.png" in rows["corrupt.png"]["error"]
    assert "no prompt" in rows["noprompt.png"]["error"]
    for name in ("empty.png", "notimage.png", "truncated.png", "corrupt.png", "noprompt.png"):
        assert rows[name]["scores"] == {}
    text = capsys.readouterr().out
    assert "geneval" in text and "13 files, 8 fully scored, 5 with errors" in text


def test_read_image_names_the_file_whatever_pil_raises(tmp_path: Path) -> None:
    """PIL raises ValueError, not OSError, for some malformed headers (a PPM with maxval 0, here behind a .png
    name), and SyntaxError for a broken PNG chunk: still an ImageReadError naming the file, so `score` gives it an
    error row."""
    from imgalign.rewards.io import ImageReadError, read_image

    bad = tmp_path / "maxval0.png"
    bad.write_bytes(b"P6\n8 8\n0\n" + bytes(192))
    with pytest.raises(ImageReadError, match="maxval0.png: cannot decode image"):
        read_image(bad)

    # a PNG whose second data chunk has a broken type: PIL identifies it, then raises SyntaxError in load()
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, "PNG")
    data, pos, out = buf.getvalue(), 8, bytearray(buf.getvalue()[:8])
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        parts = (
            [(b"IDAT", body[: length // 2]), (b"ID@T", body[length // 2 :])]
            if kind == b"IDAT"
            else [(kind, body)]
        )
        for k, b in parts:
            out += struct.pack(">I", len(b)) + k + b + struct.pack(">I", zlib.crc32(k + b))
    (tmp_path / "chunk.png").write_bytes(bytes(out))
    with pytest.raises(ImageReadError, match=r"chunk.png: cannot decode image \(broken PNG file"):
        read_image(tmp_path / "chunk.png")


def test_an_image_over_pils_pixel_limit_is_an_error_row_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PIL refuses images over twice MAX_IMAGE_PIXELS (a 14000x14000 scan) with DecompressionBombError, which is not
    an OSError: it ended the whole run with a traceback and no output. It is now that file's error row."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # so a 64x64 image is "too large"
    d = tmp_path / "d"
    d.mkdir()
    Image.new("RGB", (64, 64)).save(d / "big.png")
    Image.new("RGB", (8, 8)).save(d / "small.png")
    out = tmp_path / "s.jsonl"
    assert main(["score", str(d), "--reward", "artifact", "--out", str(out), "--no-progress"]) == 1
    rows = [json.loads(r) for r in out.read_text().splitlines()]
    assert rows[0]["error"].startswith(f"{d / 'big.png'}: too large to decode (Image size (4096 pixels)")
    assert rows[1]["error"] is None and "artifact" in rows[1]["scores"]


def test_score_geneval_layout_and_csv(tmp_path: Path) -> None:
    d = tmp_path / "gen"
    for i, s in enumerate(SPECS):
        write_prompt_folder(d, i, s.to_metadata(), [W.render(s, j)[0] for j in range(2)])
    out = tmp_path / "scores.csv"
    rc = main(["score", str(d), "--reward", "geneval:mode=strict", "--out", str(out), "--no-progress"])
    assert rc == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 8 and rows[0].keys() == {"file", "prompt", "geneval:mode=strict", "error"}
    assert all(float(r["geneval:mode=strict"]) == 1.0 and r["error"] == "" for r in rows)


def test_geneval_rows_are_checked_and_a_bom_is_read(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A prompt row with a misspelt 'tag' (it sets the detection threshold) is refused with its file and line instead
    of being judged under another threshold; a BOM at the head of a prompt file or a folder's metadata.jsonl is
    read as the UTF-8 it is."""
    img = tmp_path / "a.png"
    W.render(SPECS[2], 0)[0].save(img)
    row = _prompt_row("a.png", SPECS[2])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task" if k == "tag" else k: v for k, v in row.items()}) + "\n")
    argv = [
        "score",
        str(img),
        "--reward",
        "geneval:mode=strict",
        "--no-progress",
        "--out",
        str(tmp_path / "s.jsonl"),
    ]
    assert main([*argv, "--prompts", str(bad)]) == 2
    assert f"{bad}:1: field 'tag' is missing" in capsys.readouterr().err
    # a plain-text prompt list instead of JSONL rows says what --prompts takes
    txt = tmp_path / "prompts.txt"
    txt.write_text("a photo of a red circle\n")
    assert main([*argv, "--prompts", str(txt)]) == 2
    assert '--prompts takes JSONL, one row per image such as {"file": "a.png"' in capsys.readouterr().err
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + (json.dumps(row) + "\n").encode())
    assert main([*argv, "--prompts", str(bom)]) == 0
    d = tmp_path / "gen"
    write_prompt_folder(d, 0, SPECS[2].to_metadata(), [W.render(SPECS[2], 0)[0]])
    meta = d / "00000" / "metadata.jsonl"
    meta.write_bytes(b"\xef\xbb\xbf" + meta.read_bytes())
    folder_argv = ["score", str(d), "--reward", "geneval:mode=strict", "--no-progress", "--out"]
    assert main([*folder_argv, str(tmp_path / "g.jsonl")]) == 0
    assert main(["eval", "--images", str(d), "--out", str(tmp_path / "ev"), "--no-progress"]) == 0
    # a folder's metadata.jsonl with a misspelt 'tag' is refused as a prompt file's is
    row = json.loads(meta.read_text(encoding="utf-8-sig"))
    meta.write_text(json.dumps({"task" if k == "tag" else k: v for k, v in row.items()}) + "\n")
    assert main([*folder_argv, str(tmp_path / "s.jsonl")]) == 2
    assert f"{meta}:1: field 'tag' is missing" in capsys.readouterr().err


def test_a_quoted_glob_expands_to_folders_as_the_shell_would(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`imgalign score 'runs/*/images'`: a glob matching folders scores the images in them (it found nothing); a
    glob matching nothing is an error naming it."""
    for run in ("a", "b"):
        for i, s in enumerate(SPECS[:2]):
            write_prompt_folder(tmp_path / "runs" / run / "images", i, s.to_metadata(), [W.render(s, 0)[0]])
    out = tmp_path / "scores.jsonl"
    argv = ["score", str(tmp_path / "runs" / "*" / "images"), "--reward", "geneval", "--out", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    files = sorted(json.loads(r)["file"] for r in out.read_text().splitlines())
    assert [str(Path(f).relative_to(tmp_path / "runs")) for f in files] == [
        f"{run}/images/0000{i}/samples/0000.png" for run in ("a", "b") for i in range(2)
    ]
    argv = ["score", str(tmp_path / "runs" / "*" / "imgs"), "--reward", "geneval", "--out", str(out)]
    assert main(argv) == 2
    assert "imgs' matches no file or folder" in capsys.readouterr().err


def test_find_images_walks_folders_by_suffix_keeps_named_files_and_drops_repeats(tmp_path: Path) -> None:
    """A folder gives its image files at any depth, suffixes in any case; a named file is kept whatever its
    suffix; a `**` glob reaches nested files; a file named twice (or inside a named folder) is listed once."""
    from imgalign.rewards.io import find_images

    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("d/a.png", "d/sub/B.JPG", "d/notes.txt", "x.txt"):
        (tmp_path / name).write_bytes(b"")
    d = tmp_path / "d"
    assert find_images([d]) == [d / "a.png", d / "sub" / "B.JPG"]
    assert find_images([tmp_path / "x.txt", d / "a.png", d]) == [
        tmp_path / "x.txt",
        d / "a.png",
        d / "sub" / "B.JPG",
    ]
    assert find_images([str(tmp_path / "**" / "B.JPG")]) == [d / "sub" / "B.JPG"]  # two folders down
    (d / "album.png").mkdir()  # a folder named like an image is walked, not listed
    (d / "album.png" / "c.png").write_bytes(b"")
    assert find_images([d]) == [d / "a.png", d / "album.png" / "c.png", d / "sub" / "B.JPG"]


def test_find_images_skips_hidden_files_and_follows_symlinked_folders(tmp_path: Path) -> None:
    """macOS leaves `._a.png` (AppleDouble, not an image) and `.DS_Store` beside copied images: a folder walk skips
    hidden names, as `ls` does, instead of giving each an error row. A symlinked subfolder is walked (a link
    loop ends), not silently left out."""
    from imgalign.rewards.io import find_images

    d, other = tmp_path / "d", tmp_path / "other"
    (d / ".thumbs").mkdir(parents=True)
    other.mkdir()
    for name in ("d/a.png", "d/._a.png", "d/.DS_Store", "d/.thumbs/t.png", "other/b.png"):
        (tmp_path / name).write_bytes(b"")
    (d / "linked").symlink_to(other, target_is_directory=True)
    (other / "loop").symlink_to(d, target_is_directory=True)
    assert find_images([d]) == [d / "a.png", d / "linked" / "b.png"]
    assert find_images([d / "._a.png"]) == [d / "._a.png"]  # a file named explicitly is kept
    (d / "gone.png").symlink_to(tmp_path / "deleted.png")  # a dangling link is no image file
    assert find_images([d]) == [d / "a.png", d / "linked" / "b.png"]


def test_load_image_folder_limits_and_resizes_bicubic(tmp_path: Path) -> None:
    from imgalign.rewards.io import load_image_folder, pil_batch

    rng = np.random.default_rng(0)
    ims = [Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)) for _ in range(3)]
    for i, im in enumerate(ims):
        im.save(tmp_path / f"{i}.png")
    x = load_image_folder(tmp_path, size=5, limit=2)
    assert x.shape == (2, 3, 5, 5)
    assert load_image_folder(tmp_path, size=5).shape == (3, 3, 5, 5)
    # limit=0 read the whole folder (a falsy limit meant "no limit")
    with pytest.raises(ValueError, match="limit must be a positive number of images, got 0"):
        load_image_folder(tmp_path, limit=0)
    want = np.asarray(ims[1].resize((5, 5), Image.Resampling.BICUBIC), dtype=np.float32) / 255.0
    np.testing.assert_allclose(x[1].permute(1, 2, 0).numpy(), want)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "empty.png").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="no readable images under"):
        load_image_folder(bad)
    with pytest.raises(ValueError, match="no images to batch"):
        pil_batch([])


def test_load_image_folder_of_mixed_sizes_keeps_the_common_size(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 1x1 thumbnail that sorts first no longer shrinks every other image of the folder to 1x1 (a silently
    meaningless FD / FID statistic); the odd image is resized to the size most images have."""
    from imgalign.rewards.io import load_image_folder

    rng = np.random.default_rng(0)
    ims = [Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)) for _ in range(3)]
    for i, im in enumerate(ims):
        im.save(tmp_path / f"{i + 1}.png")
    Image.new("RGB", (1, 1), (255, 0, 0)).save(tmp_path / "0_thumb.png")
    with caplog.at_level("WARNING"):
        x = load_image_folder(tmp_path)
    assert x.shape == (4, 3, 8, 8)
    assert "1 of 4 images are not 8x8 and were resized to it (bicubic)" in caplog.text
    np.testing.assert_allclose(x[1].permute(1, 2, 0).numpy(), np.asarray(ims[0], dtype=np.float32) / 255.0)


def test_encode_image_folder_reads_a_batch_at_a_time_and_equals_encoding_the_whole_folder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """FID statistics and discriminator fits held every image of a folder as float32 pixels (10,000 images of
    512x512: 31 GB); the encoder now sees `batch_size` images at a time, resized as load_image_folder resizes them
    (the size most files have, from their headers; an unreadable file skipped and named), with the same result."""
    import torch

    from imgalign.rewards.io import encode_image_folder, load_image_folder

    rng = np.random.default_rng(1)
    for i in range(5):
        Image.fromarray(rng.integers(0, 256, (8, 6, 3), dtype=np.uint8)).save(tmp_path / f"{i + 1}.png")
    Image.new("RGB", (1, 1), (255, 0, 0)).save(tmp_path / "0_thumb.png")  # sorts first, in the first batch
    (tmp_path / "3_broken.png").write_bytes(b"not a png")
    seen: list[tuple[int, ...]] = []

    def encode(x):
        seen.append(tuple(x.shape))
        return x.flatten(1) * 2.0

    with caplog.at_level("WARNING"):
        feats = encode_image_folder(tmp_path, encode, batch_size=2)
    assert seen == [(2, 3, 8, 6), (2, 3, 8, 6), (2, 3, 8, 6)]
    assert "1 of 6 images are not 6x8 and were resized to it (bicubic)" in caplog.text
    assert "skipped 1 unreadable image(s)" in caplog.text and "3_broken.png" in caplog.text
    torch.testing.assert_close(feats, encode(load_image_folder(tmp_path)), rtol=0, atol=0)
    seen.clear()
    assert encode_image_folder(tmp_path, encode, size=4, batch_size=4).shape == (6, 3 * 4 * 4)
    assert seen == [(4, 3, 4, 4), (2, 3, 4, 4)]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no readable images under"):
        encode_image_folder(empty, encode)


def test_prompt_free_rewards_need_no_prompts(
    folder: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reward that reads no prompt scores images that have none; it is given "" for each (the reward contract's
    list of strings), not None."""
    import imgalign.commands.score as S

    given = []
    real = S._score_group
    monkeypatch.setattr(
        S, "_score_group", lambda r, k, x, prompts, *a: given.extend(prompts) or real(r, k, x, prompts, *a)
    )
    d, _ = folder
    out = tmp_path / "a.jsonl"
    rc = main(
        [
            "score",
            str(d / "ok0.png"),
            str(d / "noprompt.png"),
            "--reward",
            "artifact",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    assert all(json.loads(r)["error"] is None for r in out.read_text().splitlines())
    assert given == ["", ""]


def test_a_prompt_reward_on_images_without_prompts_is_refused_up_front(
    folder: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    d, _ = folder
    out = tmp_path / "g.jsonl"
    argv = ["score", str(d / "ok0.png"), str(d / "noprompt.png"), "--reward", "geneval", "--out", str(out)]
    assert main(argv + ["--no-progress"]) == 2
    assert "none of the 2 image(s) has one: pass --prompts" in capsys.readouterr().err and not out.exists()


def test_a_function_reward_declaring_no_prompt_scores_images_without_one(
    folder: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain function reward can say it reads no prompt (``fn.needs_prompt = False``, as Reward classes do): it
    then scores images that have none. Every function was taken as reading one, so `imgalign score` refused it."""
    d, _ = folder
    (tmp_path / "my_rewards.py").write_text(
        "def red(images, prompts, metadata=None):\n"
        "    return images[:, 0].mean(dim=(1, 2))\n"
        "red.needs_prompt = False\n"
        "def red_with_prompt(images, prompts, metadata=None):\n"
        "    return images[:, 0].mean(dim=(1, 2))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "r.jsonl"
    argv = ["score", str(d / "ok0.png"), str(d / "noprompt.png"), "--out", str(out), "--no-progress"]
    assert main(argv + ["--reward", "my_rewards:red"]) == 0
    rows = [json.loads(r) for r in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["error"] is None for r in rows), rows
    out.unlink()
    assert main(argv + ["--reward", "my_rewards:red_with_prompt"]) == 2 and not out.exists()


def test_unknown_reward_fails_up_front(
    folder: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    d, prompts = folder
    out = tmp_path / "x.jsonl"
    rc = main(["score", str(d), "--reward", "clipp", "--prompts", str(prompts), "--out", str(out)])
    assert rc == 2 and not out.exists()
    assert "unknown reward 'clipp' (did you mean 'clip'?); valid rewards:" in capsys.readouterr().err
    assert main(["score", str(tmp_path / "missing"), "--reward", "artifact", "--out", str(out)]) == 2
    (tmp_path / "afile").write_text("x")  # an output path under a file: refused before any scoring
    assert main(["score", str(d), "--reward", "artifact", "--out", str(tmp_path / "afile" / "s.jsonl")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_rewards_list(capsys: pytest.CaptureFixture) -> None:
    assert main(["rewards", "list"]) == 0
    text = capsys.readouterr().out
    for name in ("clip", "vlm_loglik", "discriminator", "artifact", "fid", "geneval"):
        assert name in text
    # one column of descriptions, after the longest name ('discriminator') and two spaces
    col = len("discriminator") + 2
    assert all(ln[:col].rstrip() in list_rewards() and ln[col] != " " for ln in text.splitlines()), text


def test_paired_changes_hand_computed() -> None:
    from imgalign.cli import CLIError
    from imgalign.commands.score import pair_key, paired_changes

    assert pair_key("/a/run/images/00003/samples/0001.png") == "00003/samples/0001.png"
    assert pair_key("/a/b/x.png") == "x.png"
    base = {
        f"0000{i}/samples/0000.png": {
            "file": f"/base/0000{i}/samples/0000.png",
            "prompt": "p",
            "scores": {"r": b},
        }
        for i, b in enumerate([0.0, 1.0, 2.0])
    }
    rows = [
        {"file": f"/run/0000{i}/samples/0000.png", "prompt": "p", "scores": {"r": x}, "error": None}
        for i, x in enumerate([1.0, 3.0, 5.0])  # differences 1, 2, 3
    ]
    rows.append({"file": "/run/00009/samples/0000.png", "prompt": "p", "scores": {"r": 9.0}, "error": None})
    (t,) = paired_changes(rows, base, ["r"])
    assert t["n"] == 3 and t["baseline"] == 1.0 and t["current"] == 3.0
    assert t["change"] == 2.0 and t["se"] == pytest.approx(1 / np.sqrt(3))  # std (ddof 1) of 1, 2, 3 is 1
    rows[0]["prompt"] = "q"
    with pytest.raises(CLIError, match="prompts differ"):
        paired_changes(rows, base, ["r"])


def test_duplicate_pair_keys_are_an_error(tmp_path: Path) -> None:
    """Outside the GenEval layout images pair by file name: two images with one name cannot be paired."""
    from imgalign.cli import CLIError
    from imgalign.commands.score import load_baseline, paired_changes

    row = {"prompt": "p", "scores": {"r": 1.0}, "error": None}
    dup = tmp_path / "dup.jsonl"
    dup.write_text("".join(json.dumps({**row, "file": f"/base/{d}/x.png"}) + "\n" for d in ("a", "b")))
    with pytest.raises(CLIError, match="/base/a/x.png and /base/b/x.png both pair by the key 'x.png'"):
        load_baseline(dup)
    ok = tmp_path / "ok.jsonl"
    ok.write_text(json.dumps({**row, "file": "/base/x.png"}) + "\n")
    base = load_baseline(ok)
    rows = [{**row, "file": f"/run/{d}/x.png"} for d in ("a", "b")]
    with pytest.raises(CLIError, match="the scored images: /run/a/x.png and /run/b/x.png"):
        paired_changes(rows, base, ["r"])
    (t,) = paired_changes(rows[:1], base, ["r"])
    assert t["n"] == 1 and t["change"] == 0.0


def test_score_with_baseline_prints_paired_change(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    base_dir, run_dir = tmp_path / "base", tmp_path / "run"
    for i, s in enumerate(SPECS):
        write_prompt_folder(base_dir, i, s.to_metadata(), [W.render(s, j)[0] for j in range(2)])
        # the run draws the wrong picture for the second image of the first two prompts
        imgs = [W.render(s, 0)[0], W.render(SPECS[(i + 2) % 4] if i < 2 else s, 1)[0]]
        write_prompt_folder(run_dir, i, s.to_metadata(), imgs)
    args = ["--reward", "geneval:mode=strict", "--no-progress"]
    assert main(["score", str(base_dir), "--out", str(tmp_path / "base.jsonl"), *args]) == 0
    capsys.readouterr()
    rc = main(
        [
            "score",
            str(run_dir),
            "--out",
            str(tmp_path / "run.jsonl"),
            "--baseline",
            str(tmp_path / "base.jsonl"),
            *args,
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "paired with" in out
    line = out.split("paired with")[1].splitlines()[-1]  # the paired table's geneval row
    # differences: six 0s and two -1s -> mean -0.25, std (ddof 1) sqrt(1.5 / 7), se that / sqrt(8)
    assert line.split()[1:] == ["8", "1.0000", "0.7500", "-0.2500", f"{np.sqrt(1.5 / 7 / 8):.4f}"]
    # the same reward under other options is another column: never paired with the strict scores (partial credit
    # against 0/1 read as a change)
    partial = [
        "score",
        str(run_dir),
        "--reward",
        "geneval",
        "--no-progress",
        "--out",
        str(tmp_path / "p.jsonl"),
    ]
    assert main([*partial, "--baseline", str(tmp_path / "base.jsonl")]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"\ngeneval +0 +no image scored in both", printed)
    assert "the baseline holds scores of: geneval:mode=strict" in printed
    # the same reward and options written another way is the same column: geneval's default mode is partial
    assert main([*partial, "--reward", "geneval: mode=partial"]) == 2
    err = capsys.readouterr().err
    assert "--reward 'geneval: mode=partial' is given as 'geneval' does (the same reward and options)" in err
    strict = ["--reward", " geneval: mode=strict", "--baseline", str(tmp_path / "base.jsonl")]
    assert main([*partial[:2], *strict, "--no-progress", "--out", str(tmp_path / "s2.jsonl")]) == 0
    assert "no image scored in both" not in capsys.readouterr().out
    # --out on the --baseline file, and a reward given twice, are refused before scoring
    before = (tmp_path / "base.jsonl").read_text()
    assert (
        main([*partial[:-1], str(tmp_path / "base.jsonl"), "--baseline", str(tmp_path / "base.jsonl")]) == 2
    )
    assert "is the --baseline file" in capsys.readouterr().err
    assert (tmp_path / "base.jsonl").read_text() == before
    assert main([*partial, "--reward", "geneval"]) == 2
    assert "--reward 'geneval' is given twice" in capsys.readouterr().err


def test_bad_baseline_fails_before_scoring(
    folder: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    d, prompts = folder
    out = tmp_path / "x.jsonl"
    common = ["score", str(d / "ok0.png"), "--reward", "artifact", "--out", str(out)]
    assert main([*common, "--baseline", str(tmp_path / "nope.jsonl")]) == 2 and not out.exists()
    assert "--baseline" in capsys.readouterr().err
    assert main([*common, "--baseline", str(d)]) == 2 and not out.exists()
    assert f"--baseline {str(d)!r} is a folder; pass the JSONL" in capsys.readouterr().err
    assert main([*common, "--prompts", str(d)]) == 2 and not out.exists()
    assert f"prompt file {str(d)!r} is a folder" in capsys.readouterr().err
    csv_base = tmp_path / "b.csv"
    csv_base.write_text("file,prompt,artifact,error\nok0.png,p,1.0,\n")
    assert main([*common, "--baseline", str(csv_base)]) == 2 and not out.exists()
    assert "line 1 is not an `imgalign score` JSONL row" in capsys.readouterr().err


def test_a_baseline_score_that_is_not_a_number_is_refused_and_nan_pairs_with_nothing(
    folder: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A hand-edited or foreign --baseline with a null, text or NaN score is refused naming the line and score
    (null crashed with a traceback after scoring, text was paired as a number); a NaN score (an older imgalign
    wrote them) pairs with nothing (it crashed statistics.stdev after scoring)."""
    d, _ = folder
    out = tmp_path / "x.jsonl"
    common = ["score", str(d / "ok0.png"), "--reward", "artifact", "--out", str(out)]
    b = tmp_path / "b.jsonl"
    row = {"file": "ok0.png", "prompt": None, "error": None}
    for bad in (None, "0.5", {"a": 1}, True):
        b.write_text(
            json.dumps({**row, "file": "ok1.png", "scores": {"artifact": 0.1}})
            + "\n"
            + json.dumps({**row, "scores": {"artifact": bad}})
            + "\n"
        )
        assert main([*common, "--baseline", str(b)]) == 2 and not out.exists()
        err = capsys.readouterr().err
        assert f"--baseline {str(b)!r} line 2: score 'artifact' is {bad!r}, not a number" in err
    row = {"prompt": None, "error": None}
    lines = [
        {**row, "file": f"ok{i}.png", "scores": {"artifact": v}}
        for i, v in enumerate([float("nan"), 0.0, 0.0])
    ]
    b.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main(["score", *(str(d / f"ok{i}.png") for i in range(3)), *common[2:], "--baseline", str(b)]) == 0
    table = capsys.readouterr().out.splitlines()[-1].split()
    assert table[:2] == ["artifact", "2"] and all(math.isfinite(float(x)) for x in table[2:])


def test_out_on_the_prompts_file_is_refused(
    folder: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """--out naming the --prompts file would replace the user's prompt rows with scores."""
    d, prompts = folder
    before = prompts.read_text()
    assert (
        main(
            [
                "score",
                str(d / "ok0.png"),
                "--reward",
                "artifact",
                "--prompts",
                str(prompts),
                "--out",
                str(prompts),
            ]
        )
        == 2
    )
    assert "is the --prompts file; write the scores to another file" in capsys.readouterr().err
    assert prompts.read_text() == before


def test_a_file_that_is_not_utf8_is_named(
    folder: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-UTF-8 --prompts, --baseline (or a PNG given as one) or folder metadata.jsonl is refused naming the
    file and saying what to do, not with a bare codec error; score and eval read metadata the same way. `score`
    reads every folder's metadata before it builds a reward, so it does not stop partway."""
    d, _ = folder
    out = tmp_path / "x.jsonl"
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(b'\xff\xfe{"x":1}\n')
    common = ["score", str(d / "ok0.png"), "--reward", "artifact", "--no-progress", "--out", str(out)]
    assert main([*common, "--prompts", str(latin1)]) == 2
    assert f"cannot read prompt file {str(latin1)!r}: it is not UTF-8 text" in capsys.readouterr().err
    for bad in (latin1, d / "ok0.png"):
        assert main([*common, "--baseline", str(bad)]) == 2 and not out.exists()
        err = capsys.readouterr().err
        assert f"cannot read --baseline {str(bad)!r}" in err and "imgalign score --out X.jsonl" in err
    gen = tmp_path / "gen"
    for i in range(2):
        write_prompt_folder(gen, i, SPECS[i].to_metadata(), [W.render(SPECS[i], 0)[0]])
    meta = gen / "00001" / "metadata.jsonl"
    meta.write_bytes(b"\xff\xfe")
    # refused before any reward is built or any image scored (the first folder is fine)
    built: list[str] = []
    monkeypatch.setattr("imgalign.rewards.base.build_reward", lambda spec, **kw: built.append(spec))
    assert main(["score", str(gen), "--reward", "geneval", "--no-progress", "--out", str(out)]) == 2
    assert f"cannot read metadata file {str(meta)!r}: it is not UTF-8 text" in capsys.readouterr().err
    assert not built and not out.exists()
    monkeypatch.undo()
    assert main(["eval", "--images", str(gen), "--out", str(tmp_path / "ev"), "--no-progress"]) == 2
    assert f"cannot read metadata file {str(meta)!r}: it is not UTF-8 text" in capsys.readouterr().err


def test_a_baseline_pairs_options_written_another_way(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gain=3 and gain=3.0 are one reward (one column, paired); '1' and 1 are two; a custom reward's default is
    dropped from its column as a registered one's is."""
    (tmp_path / "mybright.py").write_text(
        "def bright(images, prompts, metadata, gain=1.0, ref='x'):\n    return gain * images.mean(dim=(1, 2, 3))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    d = tmp_path / "imgs"
    d.mkdir()
    for i in range(2):
        Image.new("RGB", (8, 8), (60 * i, 0, 0)).save(d / f"{i}.png")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"file": f"{i}.png", "prompt": "red"}) + "\n" for i in range(2)))
    common = ["score", str(d), "--prompts", str(prompts), "--no-progress", "--reward"]
    assert main([*common, "mybright:bright:gain=3", "--out", str(tmp_path / "base.jsonl")]) == 0
    first = json.loads((tmp_path / "base.jsonl").read_text().splitlines()[0])
    assert set(first["scores"]) == {"mybright:bright:gain=3"}
    capsys.readouterr()
    base = ["--baseline", str(tmp_path / "base.jsonl")]
    assert main([*common, "mybright: bright:gain=3.0", "--out", str(tmp_path / "run.jsonl"), *base]) == 0
    out = capsys.readouterr().out
    assert "paired with" in out and "no image scored in both" not in out
    assert main([*common, "mybright:bright:gain=1.0", "--out", str(tmp_path / "d.jsonl")]) == 0
    assert set(json.loads((tmp_path / "d.jsonl").read_text().splitlines()[0])["scores"]) == {
        "mybright:bright"
    }
    twice = [*common, "mybright:bright:ref='1'", "--reward", "mybright:bright:ref=1", "--out"]
    assert main([*twice, str(tmp_path / "t.jsonl")]) == 0
    scores = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])["scores"]
    assert set(scores) == {'mybright:bright:ref="1"', "mybright:bright:ref=1"}


def test_a_baseline_written_with_older_column_names_still_pairs(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """An older imgalign named columns by its own canonical form (clip:weight=3.0, a default written out): read as
    a baseline, they are mapped to today's keys, so the same reward pairs ("no image scored in both" before)."""
    from imgalign.cli import CLIError
    from imgalign.commands.score import load_baseline

    old = tmp_path / "old.jsonl"
    row = {"file": "0.png", "prompt": "red", "scores": {"geneval:mode=partial": 0.5, "clip:weight=3.0": 0.25}}
    old.write_text(json.dumps(row) + "\n" + json.dumps({**row, "file": "1.png"}) + "\n")
    base = load_baseline(old)
    assert base["0.png"]["scores"] == {"geneval": 0.5, "clip:weight=3": 0.25}
    unknown = {"file": "0.png", "prompt": "red", "scores": {"no_such_module_q:f": 1.0}}
    old.write_text(json.dumps(unknown) + "\n")
    assert load_baseline(old)["0.png"]["scores"] == {"no_such_module_q:f": 1.0}  # kept as written
    # a hand-merged row naming one reward twice: refused naming the line unless the two agree (NaN with NaN)
    two = {"file": "1.png", "prompt": "red", "scores": {"clip:weight=3.0": 0.25, "clip:weight=3": 0.5}}
    old.write_text(json.dumps(row) + "\n" + json.dumps(two) + "\n")
    with pytest.raises(
        CLIError, match=r"old.jsonl' line 2: columns 'clip:weight=3.0' and 'clip:weight=3' are one"
    ):
        load_baseline(old)
    for same in (0.25, float("nan")):
        two["scores"] = {"clip:weight=3.0": same, "clip:weight=3": same}
        old.write_text(json.dumps(two) + "\n")
        assert list(load_baseline(old)["1.png"]["scores"]) == ["clip:weight=3"]


class _FakeReward:
    """Scores each image by its mean pixel value; NaN for a prompt containing 'nan'; a batch with a prompt 'boom'
    raises. Records the metadata argument of every call."""

    def __init__(self) -> None:
        self.metas: list = []

    def __call__(self, x, prompts, metadata=None):  # noqa: ANN001, ANN204
        import torch

        self.metas.append(metadata)
        if "boom" in prompts:
            raise RuntimeError("boom")
        s = x.float().flatten(1).mean(1)
        s = torch.where(torch.tensor(["nan" in p for p in prompts]), torch.full_like(s, float("nan")), s)
        return type("Out", (), {"scores": s})()


def test_score_group_isolates_a_failing_item_and_refuses_non_finite_scores() -> None:
    import torch

    from imgalign.commands.score import _score_group

    x = torch.stack([torch.full((3, 2, 2), v) for v in (0.25, 0.5, 0.75)])
    rows = [{"scores": {}, "error": None} for _ in range(3)]
    reward = _FakeReward()
    _score_group(reward, "r", x, ["a", "boom", "nan"], [{}, {}, {}], rows)
    assert rows[0] == {"scores": {"r": 0.25}, "error": None}  # scored after the batch failed, one by one
    assert rows[1] == {"scores": {}, "error": "r: RuntimeError: boom"}
    assert rows[2] == {"scores": {}, "error": "r: non-finite score nan"}
    assert reward.metas == [None] * 4  # no metadata: None, not a list of empty dicts
    _score_group(reward, "s", x[1:2], ["boom"], [{"tag": "t"}], rows[1:2])  # a second reward's error is added
    assert rows[1]["error"] == "r: RuntimeError: boom; s: RuntimeError: boom" and reward.metas[-1] == [
        {"tag": "t"}
    ]


def test_score_group_refuses_an_infinite_score_as_it_does_nan() -> None:
    """+-inf is not a score either: the row gets an error, the finite score beside it is kept."""
    import torch

    from imgalign.commands.score import _score_group

    out = type("Out", (), {"scores": torch.tensor([float("inf"), 0.5, float("-inf")])})()
    rows = [{"scores": {}, "error": None} for _ in range(3)]
    _score_group(lambda x, p, m: out, "r", torch.zeros(3, 3, 2, 2), ["a", "b", "c"], [{}] * 3, rows)
    assert [r["error"] for r in rows] == ["r: non-finite score inf", None, "r: non-finite score -inf"]
    assert [r["scores"] for r in rows] == [{}, {"r": 0.5}, {}]


def test_summary_table_by_hand() -> None:
    from imgalign.commands.score import summary_table

    rows = [{"scores": {"r": v}, "error": None} for v in (1.0, 2.0, 3.0, 6.0)]
    rows.append({"scores": {}, "error": "bad"})
    lines = summary_table(rows, ["r"]).splitlines()
    # mean 3, population std sqrt((4 + 1 + 0 + 9) / 4) = 1.8708
    assert lines[1].split() == ["r", "4", "3.0000", "1.8708", "1.0000", "6.0000"]
    assert lines[-1] == "5 files, 4 fully scored, 1 with errors"
    # a row one reward scored and another failed on is not fully scored
    rows.append({"scores": {"r": 3.0}, "error": "s: boom"})
    assert summary_table(rows, ["r"]).splitlines()[-1] == "6 files, 4 fully scored, 2 with errors"


def test_prompt_lookup_by_name_only_when_unique_and_the_layout_needs_a_numbered_folder(
    tmp_path: Path,
) -> None:
    from imgalign.commands.score import _lookup, pair_key

    mapping = {"a/x.png": {"prompt": "p"}, "b/x.png": {"prompt": "q"}, "c/y.png": {"prompt": "r"}}
    assert _lookup(tmp_path / "x.png", mapping, None) is None  # two rows named x.png: neither is guessed
    assert _lookup(tmp_path / "y.png", mapping, None) == {"prompt": "r"}
    assert pair_key("/run/imgs/samples/0000.png") == "0000.png"  # 'imgs' is no prompt index
    assert pair_key("/run/00007/samples/0000.png") == "00007/samples/0000.png"


def test_a_prompt_row_finds_its_file_whatever_the_unicode_normal_form(tmp_path: Path) -> None:
    """macOS writes 'café.png' decomposed (NFD), a prompt file typed elsewhere has it composed (NFC): the two are
    one name (the image got 'no prompt ...: add it to --prompts' while its row was there)."""
    import unicodedata

    from imgalign.commands.score import _lookup, load_prompt_map

    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"file": unicodedata.normalize("NFC", "d/café.png"), "prompt": "x"}) + "\n")
    nfd = tmp_path / "d" / unicodedata.normalize("NFD", "café.png")
    assert _lookup(nfd, load_prompt_map(p), tmp_path) == {"file": "d/café.png", "prompt": "x"}
    assert _lookup(Path(nfd.name), load_prompt_map(p), None) == {"file": "d/café.png", "prompt": "x"}
    # a prompt file typed on macOS (NFD) finds an NFC name, and the folder decides between two such names
    rows = [{"file": unicodedata.normalize("NFD", f"{d}/café.png"), "prompt": d} for d in ("d", "e")]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    nfc = tmp_path / "e" / unicodedata.normalize("NFC", "café.png")
    assert _lookup(nfc, load_prompt_map(p), tmp_path)["prompt"] == "e"
    assert _lookup(nfd, load_prompt_map(p), tmp_path)["prompt"] == "d"


def test_large_images_are_scored_in_smaller_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--batch-size counts images, but 32 photos of 6000x6000 are a 14 GB float32 batch (one took 5.6 GB of RSS
    with clip and artifact): a batch also ends at MAX_BATCH_PIXELS."""
    import imgalign.commands.score as score_mod
    import imgalign.rewards.io as io_mod

    d = tmp_path / "d"
    d.mkdir()
    for i in range(3):
        Image.new("RGB", (16, 4), (i, 0, 0)).save(d / f"{i}.png")  # not square: width times height pixels
    sizes = []
    real = io_mod.pil_batch
    monkeypatch.setattr(io_mod, "pil_batch", lambda ims, size=None: sizes.append(len(ims)) or real(ims, size))
    assert score_mod.MAX_BATCH_PIXELS * 3 * 4 == 768 * 2**20  # float32 RGB: the 768 MiB its comment gives
    monkeypatch.setattr(score_mod, "MAX_BATCH_PIXELS", 2 * 16 * 4)
    out = tmp_path / "s.jsonl"
    assert main(["score", str(d), "--reward", "artifact", "--out", str(out), "--no-progress"]) == 0
    assert sizes == [2, 1] and len(out.read_text().splitlines()) == 3


def test_csv_columns_follow_the_rewards_as_given_and_sizes_are_batched_apart(tmp_path: Path) -> None:
    d = tmp_path / "gen"
    write_prompt_folder(d, 0, SPECS[0].to_metadata(), [W.render(SPECS[0], 0)[0]])
    small = W.render(SPECS[0], 1)[0]
    write_prompt_folder(d, 1, SPECS[0].to_metadata(), [small.resize((small.width // 2, small.height // 2))])
    args = ["--reward", "geneval:mode=strict", "--reward", "artifact", "--no-progress"]
    assert main(["score", str(d), "--out", str(tmp_path / "s.jsonl"), *args]) == 0
    assert main(["score", str(d), "--out", str(tmp_path / "s.csv"), *args]) == 0
    js = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    cs = list(csv.DictReader((tmp_path / "s.csv").open()))
    assert [[float(r[k]) for k in ("geneval:mode=strict", "artifact")] for r in cs] == [
        [r["scores"]["geneval:mode=strict"], r["scores"]["artifact"]] for r in js
    ]
    # the half-size image scores as it does alone (batched with its own size, not resized to the first's)
    assert main(["score", str(d / "00001"), "--out", str(tmp_path / "one.jsonl"), *args]) == 0
    alone = json.loads((tmp_path / "one.jsonl").read_text())
    assert alone["scores"]["artifact"] == js[1]["scores"]["artifact"]


def test_prompt_file_rows_are_checked_and_blank_lines_skipped(tmp_path: Path) -> None:
    """Blank lines are skipped; a row whose prompt is not a string, a file of blank lines only, or two rows that
    give one image different prompts are refused."""
    from imgalign.cli import CLIError
    from imgalign.commands.score import load_prompt_map

    p = tmp_path / "p.jsonl"
    p.write_text('{"file": "a.png", "prompt": "x"}\n\n  \n{"file": "b.png", "prompt": "y"}\n')
    assert {k: r["prompt"] for k, r in load_prompt_map(p).items()} == {"a.png": "x", "b.png": "y"}
    for bad in ('{"file": "a.png"}\n', '{"file": "a.png", "prompt": 3}\n'):
        p.write_text(bad)
        with pytest.raises(CLIError, match=r"p.jsonl:1: each row needs string fields 'file' and 'prompt'"):
            load_prompt_map(p)
    p.write_text("\n \n")
    with pytest.raises(CLIError, match="holds no rows"):
        load_prompt_map(p)
    for empty in ("", " \t\r"):  # the other prompt readers refuse it too
        p.write_text(json.dumps({"file": "a.png", "prompt": empty}) + "\n")
        with pytest.raises(CLIError, match=r"p.jsonl:1: the prompt of 'a.png' is empty"):
            load_prompt_map(p)
    # one image named twice: the same row again is harmless, another prompt for it is refused naming both lines
    row = '{"file": "a.png", "prompt": "x"}\n'
    p.write_text(row + '{"file": "b.png", "prompt": "y"}\n' + row)
    assert len(load_prompt_map(p)) == 2
    p.write_text(row + '{"file": "b.png", "prompt": "y"}\n{"file": "a.png", "prompt": "z"}\n')
    with pytest.raises(CLIError, match=r"p.jsonl:3: file 'a.png' already has another row \(line 1\)"):
        load_prompt_map(p)
    # the row repeated on line 2 does not move the line named: the first line that gave it
    p.write_text(row + row + '{"file": "a.png", "prompt": "z"}\n')
    with pytest.raises(CLIError, match=r"p.jsonl:3: file 'a.png' already has another row \(line 1\)"):
        load_prompt_map(p)


def test_prompt_lookup_by_resolved_path_and_relative_to_the_prompt_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two rows share a file name, so only the full path can match: a relative image path finds its absolute
    row, and an image finds a row written relative to a prompt folder that was itself given relative."""
    from imgalign.commands.score import _lookup, pair_key

    monkeypatch.chdir(tmp_path)
    absolute = {str(tmp_path / d / "x.png"): {"prompt": d} for d in ("a", "b")}
    assert _lookup(Path("a/x.png"), absolute, None) == {"prompt": "a"}
    relative = {f"{d}/x.png": {"prompt": d} for d in ("a", "b")}
    assert _lookup(Path("prompts/b/x.png"), relative, Path("prompts")) == {"prompt": "b"}
    # an absolute image path matches a row of a prompt folder given relative (both are resolved first)
    assert _lookup(tmp_path / "prompts" / "a" / "x.png", relative, Path("prompts")) == {"prompt": "a"}
    assert pair_key("/samples/00003/imgs/0000.png") == "0000.png"  # 'samples' must be the image's own folder


def test_cli_prompts_match_relative_to_the_prompt_file_and_fall_back_to_folder_metadata(
    tmp_path: Path,
) -> None:
    """`--prompts` rows name files relative to the prompt file's folder (file names alone are ambiguous here);
    images that --prompts does not list still take their GenEval folder's metadata.jsonl."""
    for d, s in (("a", SPECS[0]), ("b", SPECS[1])):
        (tmp_path / d).mkdir()
        W.render(s, 0)[0].save(tmp_path / d / "x.png")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(
            json.dumps(_prompt_row(f"{d}/x.png", s)) + "\n" for d, s in (("a", SPECS[0]), ("b", SPECS[1]))
        )
    )
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, SPECS[2].to_metadata(), [W.render(SPECS[2], 0)[0]])
    out = tmp_path / "s.jsonl"
    argv = ["score", str(tmp_path / "a"), str(tmp_path / "b"), str(gen), "--prompts", str(prompts)]
    assert main([*argv, "--reward", "geneval:mode=strict", "--no-progress", "--out", str(out)]) == 0
    rows = [json.loads(r) for r in out.read_text().splitlines()]
    assert [r["prompt"] for r in rows] == [SPECS[0].prompt(), SPECS[1].prompt(), SPECS[2].prompt()]
    assert all(r["scores"] == {"geneval:mode=strict": 1.0} for r in rows)


def test_folder_metadata_without_a_prompt_is_refused(tmp_path: Path) -> None:
    from imgalign.cli import CLIError
    from imgalign.commands.score import _read_geneval_meta

    meta = tmp_path / "metadata.jsonl"
    meta.write_text('{"note": 1}\n')
    with pytest.raises(
        CLIError, match=r"metadata.jsonl:1: expected a GenEval metadata object with a string 'prompt'"
    ):
        _read_geneval_meta(meta)
    meta.write_text('{"prompt": "  "}\n')
    with pytest.raises(CLIError, match=r"metadata.jsonl:1: .* 'prompt' that is not empty"):
        _read_geneval_meta(meta)
    # only the first line is the folder's metadata (as eval reads it); a line after it is not
    meta.write_text('{"prompt": "first"}\n{"prompt": "second"}\n')
    assert _read_geneval_meta(meta) == {"prompt": "first"}
    meta.write_text("\n")  # an empty file (a write cut off) is refused the same way, not an IndexError
    with pytest.raises(CLIError, match=r"metadata.jsonl:1: expected a GenEval metadata object"):
        _read_geneval_meta(meta)


def test_summary_table_of_a_reward_that_scored_nothing() -> None:
    from imgalign.commands.score import summary_table

    lines = summary_table([{"scores": {}, "error": "bad"}], ["r"]).splitlines()
    assert lines[1].split() == ["r", "0", "-", "-", "-", "-"]
    assert lines[-1] == "1 files, 0 fully scored, 1 with errors"


def test_baseline_rows_are_checked_and_blank_lines_skipped(tmp_path: Path) -> None:
    from imgalign.cli import CLIError
    from imgalign.commands.score import load_baseline

    b = tmp_path / "b.jsonl"
    row = {"file": "x.png", "prompt": "p", "scores": {"r": 1.0}, "error": None}
    b.write_text(json.dumps(row) + "\n\n" + json.dumps({**row, "file": "y.png"}) + "\n")
    assert sorted(load_baseline(b)) == ["x.png", "y.png"]
    b.write_text(json.dumps({**row, "scores": [1.0]}) + "\n")
    with pytest.raises(
        CLIError, match=r"line 1 is not an `imgalign score` JSONL row \(scores is not an object\)"
    ):
        load_baseline(b)
    b.write_text("\n")
    with pytest.raises(CLIError, match="holds no rows"):
        load_baseline(b)


def test_paired_changes_skip_images_one_side_did_not_score_and_give_the_se_of_two() -> None:
    """An image that failed this time (no score) is left out, not read as missing; with two pairs the standard
    error is already defined: differences 1 and 3 have std (ddof 1) sqrt(2), se sqrt(2) / sqrt(2) = 1."""
    from imgalign.commands.score import paired_changes, paired_table

    base = {f"{n}.png": {"file": f"/b/{n}.png", "prompt": "p", "scores": {"r": 0.0}} for n in "abc"}
    rows = [
        {"file": f"/r/{n}.png", "prompt": "p", "scores": {"r": x}, "error": None}
        for n, x in (("a", 1.0), ("b", 3.0))
    ]
    rows.append({"file": "/r/c.png", "prompt": "p", "scores": {}, "error": "r: boom"})
    (t,) = paired_changes(rows, base, ["r"])
    assert (t["n"], t["baseline"], t["current"], t["change"]) == (2, 0.0, 2.0, 2.0)
    assert t["se"] == pytest.approx(1.0)
    # a gain is printed with its sign, as a loss is
    assert paired_table([t], "b.jsonl").splitlines()[-1].split() == [
        "r",
        "2",
        "0.0000",
        "2.0000",
        "+2.0000",
        "1.0000",
    ]


def test_the_baseline_columns_are_named_when_any_reward_did_not_pair(
    folder: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    d, prompts = folder
    files = [str(d / "ok0.png"), str(d / "ok1.png")]
    common = ["score", *files, "--prompts", str(prompts), "--no-progress", "--reward", "artifact"]
    assert main([*common, "--out", str(tmp_path / "base.jsonl")]) == 0
    capsys.readouterr()
    run = [*common, "--reward", "geneval", "--out", str(tmp_path / "run.jsonl")]
    assert main([*run, "--baseline", str(tmp_path / "base.jsonl")]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"\ngeneval +0 +no image scored in both", printed)
    assert "the baseline holds scores of: artifact (a reward pairs" in printed


def test_output_suffixes_csv_in_any_case_json_and_a_new_folder(
    folder: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`.CSV` is CSV (an error row leaves its score cell empty); `.json` is JSON lines; the output's folder is
    made; a batch size below 1 is refused."""
    d, prompts = folder
    common = ["score", str(d / "ok0.png"), str(d / "empty.png"), "--prompts", str(prompts), "--no-progress"]
    common += ["--reward", "artifact"]
    assert main([*common, "--out", str(tmp_path / "S.CSV")]) == 1
    rows = list(csv.DictReader((tmp_path / "S.CSV").open()))
    assert [r["file"] for r in rows] == [str(d / "ok0.png"), str(d / "empty.png")]
    assert float(rows[0]["artifact"]) > 0 or rows[0]["artifact"] != ""
    assert rows[0]["error"] == "" and rows[1]["artifact"] == "" and "empty file" in rows[1]["error"]
    out = tmp_path / "new" / "sub" / "s.json"
    assert main([*common, "--out", str(out)]) == 1
    assert [json.loads(r)["file"] for r in out.read_text().splitlines()] == [r["file"] for r in rows]
    assert main([*common, "--batch-size", "0", "--out", str(tmp_path / "z.jsonl")]) == 2
    assert "--batch-size must be at least 1" in capsys.readouterr().err


def test_a_folder_image_without_metadata_gets_an_error_row_not_a_refusal(tmp_path: Path) -> None:
    """Only when no image has a prompt is a prompt reward refused up front; otherwise the image without one gets
    its error row and the rest are scored. Each error is written once, whatever the batch size."""
    gen = tmp_path / "gen"
    write_prompt_folder(gen, 0, SPECS[0].to_metadata(), [W.render(SPECS[0], 0)[0]])
    W.render(SPECS[0], 1)[0].save(tmp_path / "loose.png")
    out = tmp_path / "s.jsonl"
    argv = [
        "score",
        str(gen),
        str(tmp_path / "loose.png"),
        "--reward",
        "geneval:mode=strict",
        "--no-progress",
    ]
    assert main([*argv, "--batch-size", "1", "--out", str(out)]) == 1
    rows = {Path(r["file"]).name: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["0000.png"]["scores"] == {"geneval:mode=strict": 1.0} and rows["0000.png"]["error"] is None
    assert rows["loose.png"]["error"].count("no prompt") == 1


def test_each_non_finite_score_is_reported_once_whatever_the_batch_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_nan_reward(tmp_path, monkeypatch, "nanreward")
    d = tmp_path / "imgs"
    d.mkdir()
    for name, v in (("0.png", 255), ("1.png", 0)):
        Image.new("RGB", (8, 8), (v, v, v)).save(d / name)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"file": f"{i}.png", "prompt": "p"}) + "\n" for i in range(2)))
    out = tmp_path / "s.jsonl"
    argv = ["score", str(d), "--prompts", str(prompts), "--reward", "nanreward:f", "--batch-size", "1"]
    assert main([*argv, "--no-progress", "--out", str(out)]) == 1
    rows = [json.loads(r) for r in out.read_text().splitlines()]
    assert [r["error"] for r in rows] == ["nanreward:f: non-finite score nan", None]
    assert rows[1]["scores"] == {"nanreward:f": 0.0}


def test_an_interrupted_run_keeps_its_scored_batches_and_a_rerun_scores_only_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in the third batch: the two batches scored are kept beside --out (no --out file is written), the
    message names that file, and the same command run again scores only the rest (an image rewritten since, or
    whose prompt changed, is scored again) and writes what one uninterrupted run writes."""
    import imgalign.commands.score as S
    from imgalign.cli import Interrupted

    d = tmp_path / "gen"
    for i, s in enumerate(SPECS):
        write_prompt_folder(d, i, s.to_metadata(), [W.render(s, j)[0] for j in range(2)])
    out = tmp_path / "scores.jsonl"
    argv = ["score", str(d), "--reward", "geneval:mode=strict", "--batch-size", "2", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "whole.jsonl")]) == 0
    spy = ScoreSpy(monkeypatch, stop_at=4)  # Ctrl-C once 4 images are scored
    scored = spy.scored
    with pytest.raises(Interrupted, match=r"the 4 of 8 images fully scored so far are kept in .*partial"):
        main([*argv, "--out", str(out)])
    assert not out.exists()
    partial = S.partial_path(out)
    assert len(partial.read_text().splitlines()) == 1 + 4
    spy.stop_at = -1
    assert main([*argv, "--out", str(out)]) == 0
    assert len(scored) == 8  # four images more, not eight
    assert out.read_text() == (tmp_path / "whole.jsonl").read_text() and not partial.exists()

    # interrupted again after one batch: a rewritten image is scored again, the others are not
    scored.clear()
    spy.stop_at = 4
    with pytest.raises(Interrupted):
        main([*argv, "--batch-size", "4", "--out", str(out)])
    first = d / "00000" / "samples" / "0000.png"
    W.render(SPECS[0], 5)[0].save(first)
    scored.clear()
    spy.stop_at = -1
    assert main([*argv, "--out", str(out)]) == 0
    assert scored == [str(first), *sorted(str(f) for f in d.glob("0000[23]/samples/*.png"))]


def test_a_partial_of_other_rewards_or_cut_short_is_not_misread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file an interrupted run left is reused only for the same rewards (else every image is scored again), and
    a line cut short by a kill (or a line that is JSON but no entry) is skipped, not an error."""
    import imgalign.commands.score as S

    d = tmp_path / "gen"
    for i, s in enumerate(SPECS[:2]):
        write_prompt_folder(d, i, s.to_metadata(), [W.render(s, 0)[0]])
    out = tmp_path / "s.jsonl"
    argv = ["score", str(d), "--batch-size", "1", "--no-progress", "--out", str(out)]
    partial = S.partial_path(out)
    files = sorted(str(f) for f in d.rglob("*.png"))
    scored = ScoreSpy(monkeypatch).scored
    assert main([*argv, "--reward", "geneval:mode=strict"]) == 0
    kept = [json.loads(x) for x in out.read_text().splitlines()]
    entry = {"row": kept[0], "meta": SPECS[0].to_metadata(), "stamp": S._stamp(Path(files[0]))}
    partial.write_text(json.dumps({"rewards": ["geneval"]}) + "\n" + json.dumps(entry) + "\n")
    scored.clear()
    assert main([*argv, "--reward", "geneval:mode=strict"]) == 0
    assert scored == files  # the partial scored another reward
    partial.write_text(
        json.dumps({"rewards": ["geneval:mode=strict"]}) + "\n" + json.dumps(entry) + '\n{}\n[1]\n{"ro'
    )
    scored.clear()
    assert main([*argv, "--reward", "geneval:mode=strict"]) == 0
    assert scored == files[1:]
    assert [json.loads(x) for x in out.read_text().splitlines()] == kept


def test_a_cuda_device_this_machine_lacks_fails_before_any_reward_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """score --device cuda on a machine without one failed with torch's traceback once the reward was moved."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    img = tmp_path / "a.png"
    W.render(SPECS[0], 0)[0].save(img)
    argv = ["score", str(img), "--reward", "artifact", "--out", str(tmp_path / "s.jsonl"), "--no-progress"]
    assert main([*argv, "--device", "cuda"]) == 2
    assert "--device 'cuda': this machine has no CUDA device; use --device cpu" in capsys.readouterr().err
    assert not (tmp_path / "s.jsonl").exists()


def test_a_second_interruption_keeps_what_the_first_kept_and_a_changed_prompt_or_stamp_is_scored_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted twice: the second run's file keeps the images the first run scored as well as its own, so the
    third run scores only the rest. An image whose folder metadata changed, or whose size or modification time
    differs from the one scored (even with the other of the two unchanged), is scored again."""
    import os

    from imgalign.cli import Interrupted

    d = tmp_path / "gen"
    for i, s in enumerate(SPECS):
        write_prompt_folder(d, i, s.to_metadata(), [W.render(s, j)[0] for j in range(2)])
    files = sorted(str(f) for f in d.rglob("*.png"))
    out = tmp_path / "scores.jsonl"
    argv = ["score", str(d), "--reward", "geneval:mode=strict", "--batch-size", "2", "--no-progress"]
    argv += ["--out", str(out)]
    spy = ScoreSpy(monkeypatch, stop_at=2)  # Ctrl-C once 2 images are scored
    scored = spy.scored
    spy.stop_at = 0
    with pytest.raises(Interrupted, match=r"^imgalign score: interrupted before any image was fully scored$"):
        main(argv)
    spy.stop_at = 2
    with pytest.raises(Interrupted, match=r"the 2 of 8 images"):
        main(argv)
    scored.clear()
    with pytest.raises(Interrupted, match=r"the 4 of 8 images"):
        main(argv)
    assert scored == files[2:4]
    scored.clear()
    spy.stop_at = -1
    assert main(argv) == 0
    assert scored == files[4:]

    # interrupted after the first two prompts' four images; then prompt 0's metadata changes (another spec),
    # image 00001/0000 is rewritten at its old modification time, image 00001/0001 is touched (same size)
    scored.clear()
    spy.stop_at = 4
    with pytest.raises(Interrupted, match=r"the 4 of 8 images"):
        main(argv)
    (d / "00000" / "metadata.jsonl").write_text(json.dumps(SPECS[3].to_metadata()) + "\n")
    a, b = d / "00001" / "samples" / "0000.png", d / "00001" / "samples" / "0001.png"
    st = a.stat()
    Image.open(a).convert("RGB").save(
        a, compress_level=0
    )  # the same pixels in more bytes, at the same time stamp
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert a.stat().st_size != st.st_size
    st = b.stat()
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the same bytes, a second later
    scored.clear()
    spy.stop_at = -1
    assert main(argv) == 0
    assert sorted(scored) == files


def test_what_score_cannot_do_is_refused_before_any_output(
    folder: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An --out suffix that is neither JSONL nor CSV, a folder without images and a reward that is not ready are
    refused (status 2) before anything is written."""
    import sys
    import types

    import torch

    from imgalign.rewards.base import Reward, RewardOutput

    class NotReady(Reward):
        name = "not_ready"
        not_ready_help = "fit it first"

        def score(self, images, prompts, metadata) -> RewardOutput:
            return RewardOutput(torch.zeros(len(prompts)))

        def ready(self) -> bool:
            return False

    mod = types.ModuleType("my_lab_score_ready")
    mod.NotReady = NotReady
    monkeypatch.setitem(sys.modules, "my_lab_score_ready", mod)
    d, prompts = folder
    empty = tmp_path / "nothing"
    empty.mkdir()
    img = str(d / "ok0.png")
    for argv, msg, out in (
        ([img, "--reward", "artifact"], "must end in .jsonl or .csv", "s.txt"),
        ([str(empty), "--reward", "artifact"], "no image files found in", "s.jsonl"),
        ([img, "--reward", "my_lab_score_ready:NotReady"], "cannot score yet: fit it first", "s.jsonl"),
    ):
        assert main(["score", *argv, "--prompts", str(prompts), "--out", str(tmp_path / out)]) == 2, msg
        assert msg in capsys.readouterr().err
        assert not (tmp_path / out).exists()


def test_images_a_prompt_file_does_not_list_get_error_rows_saying_to_add_them(
    folder: tuple[Path, Path], tmp_path: Path
) -> None:
    """With --prompts given, an image it does not list is an error row that says to add it there (not a refusal
    of the run, though no image has a prompt)."""
    d, _ = folder
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"file": "elsewhere.png", "prompt": "a red circle"}) + "\n")
    out = tmp_path / "s.jsonl"
    argv = ["score", str(d / "ok0.png"), "--reward", "geneval", "--prompts", str(other), "--no-progress"]
    assert main([*argv, "--out", str(out)]) == 1
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert (
        row["error"]
        == f"no prompt for {d / 'ok0.png'}: add it to --prompts (or use the GenEval folder layout)"
    )
    # a row whose file differs only in letter case is pointed at (a case-insensitive disk hides the typo)
    other.write_text(json.dumps({"file": "OK0.PNG", "prompt": "a red circle"}) + "\n")
    assert main([*argv, "--out", str(out)]) == 1
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert row["error"].startswith(
        f"no prompt for {d / 'ok0.png'}: --prompts has 'OK0.PNG', which differs in letter"
    )
    # its folder too: the file name is what is compared
    other.write_text(json.dumps({"file": f"{d.name}/OK0.PNG", "prompt": "a red circle"}) + "\n")
    assert main([*argv, "--out", str(out)]) == 1
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert row["error"].startswith(
        f"no prompt for {d / 'ok0.png'}: --prompts has '{d.name}/OK0.PNG', which differs in letter"
    )


def test_an_image_removed_while_others_are_scored_gets_an_error_row(
    folder: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An image deleted after the folder was listed (before it is read) is an error row; the others are scored."""
    import imgalign.rewards.io as io_mod

    d, prompts = folder
    real = io_mod.read_image

    def read_and_remove_the_next(f, *args):
        if Path(f).name == "ok0.png":
            (d / "ok1.png").unlink()
        return real(f, *args)

    monkeypatch.setattr(io_mod, "read_image", read_and_remove_the_next)
    out = tmp_path / "s.jsonl"
    files = [str(d / "ok0.png"), str(d / "ok1.png"), str(d / "ok2.png")]
    argv = ["score", *files, "--reward", "artifact", "--prompts", str(prompts), "--no-progress"]
    assert main([*argv, "--out", str(out)]) == 1
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["error"] is None for r in rows] == [True, False, True]
    assert "ok1.png" in rows[1]["error"] and rows[1]["scores"] == {}


def test_an_interruption_counts_and_keeps_only_the_images_scored_without_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row with an error (here a non-finite score) is not kept for a rerun: the message counts the images fully
    scored, and the rerun scores the failed image again."""
    import imgalign.commands.score as S
    from imgalign.cli import Interrupted

    write_nan_reward(tmp_path, monkeypatch, "nanreward2")
    d = tmp_path / "imgs"
    d.mkdir()
    for name, v in (("0.png", 255), ("1.png", 0), ("2.png", 0)):
        Image.new("RGB", (8, 8), (v, v, v)).save(d / name)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"file": f"{i}.png", "prompt": "p"}) + "\n" for i in range(3)))
    out = tmp_path / "s.jsonl"
    argv = ["score", str(d), "--prompts", str(prompts), "--reward", "nanreward2:f", "--batch-size", "1"]
    argv += ["--no-progress", "--out", str(out)]
    spy = ScoreSpy(monkeypatch, stop_at=2)  # Ctrl-C once 2 images are scored
    scored = spy.scored
    with pytest.raises(Interrupted, match=r"the 1 of 3 images fully scored so far"):
        main(argv)
    assert len(S.partial_path(out).read_text().splitlines()) == 1 + 1
    scored.clear()
    spy.stop_at = -1
    assert main(argv) == 1
    assert scored == [str(d / "0.png"), str(d / "2.png")]


def test_ctrl_c_while_out_is_written_says_every_score_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C once every image was scored, while --out is written: the message said only "interrupted" (nothing of
    the scores kept beside --out, which the same command turns into --out at once); it names them, and no half
    --out is left."""
    import imgalign.commands.score as S
    from imgalign.cli import Interrupted

    d = tmp_path / "gen"
    for i, s in enumerate(SPECS[:2]):
        write_prompt_folder(d, i, s.to_metadata(), [W.render(s, j)[0] for j in range(2)])
    out = tmp_path / "scores.jsonl"
    argv = ["score", str(d), "--reward", "geneval:mode=strict", "--no-progress", "--out", str(out)]

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(S, "write_rows", interrupted)
    with pytest.raises(Interrupted, match=r"the 4 of 4 images fully scored so far are kept in .*partial"):
        main(argv)
    assert not out.exists()
    monkeypatch.undo()
    spy = ScoreSpy(monkeypatch)
    assert main(argv) == 0
    assert spy.scored == [] and len(out.read_text().splitlines()) == 4  # nothing scored again
