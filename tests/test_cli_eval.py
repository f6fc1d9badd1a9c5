import json
import shutil
from pathlib import Path

import pytest
import torch

from imgalign import shapes as W
from imgalign.cli import main
from imgalign.prompts.shapes import build_eval_set


@pytest.fixture()
def small_prompts(tmp_path: Path) -> Path:
    specs = build_eval_set()[::20]  # 18 prompts, 3 per task
    p = tmp_path / "small.jsonl"
    p.write_text("".join(json.dumps(s.to_metadata()) + "\n" for s in specs))
    return p


def test_eval_ground_truth(tmp_path, small_prompts, capsys):
    out = tmp_path / "ev"
    rc = main(
        [
            "eval",
            "--suite",
            "shapes",
            "--ground-truth",
            "--prompts",
            str(small_prompts),
            "--images-per-prompt",
            "2",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= {"suite", "model", "overall", "tasks", "n_images"}
    assert summary["suite"] == "shapes" and summary["n_images"] == 36 and summary["overall"] == 1.0
    printed = json.loads(capsys.readouterr().out)  # the summary's headline on stdout: the score per task too
    assert printed == {k: summary[k] for k in ("overall", "tasks", "n_images")}
    assert set(summary["tasks"]) == set(W.TASKS)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 36 and set(rows[0]) >= {"file", "tag", "prompt", "correct", "reason"}
    assert (out / "images" / "00000" / "metadata.jsonl").exists()
    assert (out / "images" / "00017" / "samples" / "0001.png").exists()
    assert "| task | score | images |" in (out / "report.md").read_text()


def test_world_render_then_eval_images_same_seed_same_files(tmp_path, small_prompts):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        assert (
            main(
                [
                    "world",
                    "render",
                    "--prompts",
                    str(small_prompts),
                    "--images-per-prompt",
                    "1",
                    "--seed",
                    "5",
                    "--out",
                    str(d),
                ]
            )
            == 0
        )
    fa = sorted(p.read_bytes() for p in a.rglob("*.png"))
    fb = sorted(p.read_bytes() for p in b.rglob("*.png"))
    assert fa == fb and len(fa) == 18
    assert main(["eval", "--images", str(a), "--out", str(tmp_path / "ev"), "--no-progress"]) == 0
    assert json.loads((tmp_path / "ev" / "summary.json").read_text())["model"] == f"images:{a}"


def test_a_write_cut_by_a_full_disk_names_the_output_and_what_to_do(tmp_path, small_prompts, capsys):
    """A write that fails part-way (here a file-size limit, as `ulimit -f` sets; a full disk alike) raised an
    OSError whose text was only "[Errno 27] File too large": no file, nothing to do. Now the line names the file and
    says to free space and how to go on; nothing is written under a final name."""
    import resource

    out = tmp_path / "r"
    argv = ["world", "render", "--prompts", str(small_prompts), "--images-per-prompt", "1", "--out", str(out)]
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))  # Python ignores SIGXFSZ: any write gets EFBIG
    try:
        rc = main(argv)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert rc == 2
    err = capsys.readouterr().err
    # the file cut short is named (round 34g: it was "an output file under --out"), and the limit, not the disk
    assert (
        f"File too large while writing {str(out / '00000' / 'metadata.jsonl')!r}: the file-size limit stopped it"
        in err
    ), err
    assert "delete --out (or give a new one) and run the same command again" in err
    assert not [p for p in out.rglob("*") if p.is_file() and not p.name.endswith(".tmp")]


def test_eval_images_with_bad_files_keeps_going(tmp_path, small_prompts, capsys):
    src = tmp_path / "imgs"
    assert (
        main(
            [
                "world",
                "render",
                "--prompts",
                str(small_prompts),
                "--images-per-prompt",
                "2",
                "--out",
                str(src),
            ]
        )
        == 0
    )
    (src / "00001" / "samples" / "0000.png").write_bytes(b"not a png")  # corrupt
    data = (src / "00002" / "samples" / "0000.png").read_bytes()
    (src / "00002" / "samples" / "0000.png").write_bytes(data[: len(data) // 2])  # truncated
    (src / "00003" / "samples" / "0001.png").unlink()  # missing
    for png in (src / "00005" / "samples").glob("*.png"):
        png.unlink()  # a prompt with no image left
    meta = json.loads((src / "00004" / "metadata.jsonl").read_text())
    meta["include"][0]["class"] = "hexagon"  # outside the shapes world
    (src / "00004" / "metadata.jsonl").write_text(json.dumps(meta) + "\n")
    out = tmp_path / "ev"
    rc = main(["eval", "--images", str(src), "--out", str(out), "--no-progress"])
    assert rc == 1
    assert f"5 images could not be judged; see {out / 'results.jsonl'}" in capsys.readouterr().out
    rows = {r["file"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert (
        f"cannot read image {src / '00001' / 'samples' / '0000.png'}"
        in rows["00001/samples/0000.png"]["error"]
    )
    assert str(out) not in rows["00001/samples/0000.png"]["error"]  # nor in PIL's text after it
    assert rows["00002/samples/0000.png"]["error"]
    assert "00003/samples/0001.png" not in rows  # a missing sample is simply not there
    # a prompt folder left without images is one incorrect image, said as such (not as an unreadable 0000.png)
    assert rows["00005/samples/0000.png"]["error"] == (
        f"{src / '00005'}: the prompt folder holds no image (no samples/*.png); the prompt counts as one incorrect image"
    )
    assert "include[0].class" in rows["00004/samples/0000.png"]["error"]
    # named in the user's folder, not in the copy under --out (an edit there would be undone by the next run)
    assert rows["00004/samples/0000.png"]["error"].startswith(f"{src / '00004' / 'metadata.jsonl'}: ")
    assert rows["00000/samples/0000.png"]["correct"] is True
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_errors"] == 5 and summary["n_images"] == 34


def test_eval_images_names_samples_the_layout_does_not_read(tmp_path, capsys, caplog):
    """A prompt folder whose samples are 0000.PNG or JPEGs (a camera, a Windows tool) holds no <n>.png: the error
    names what it holds and says to convert or rename, instead of only 'holds no image'."""
    from PIL import Image

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(s.to_metadata()) + "\n" for s in build_eval_set()[:2]))
    src = tmp_path / "imgs"
    argv = ["world", "render", "--prompts", str(prompts), "--images-per-prompt", "1", "--out", str(src)]
    assert main(argv) == 0
    (src / "00000" / "samples" / "0000.png").rename(src / "00000" / "samples" / "0000.PNG")
    png = src / "00001" / "samples" / "0000.png"
    Image.open(png).convert("RGB").save(png.with_suffix(".jpg"))
    png.unlink()
    out = tmp_path / "ev"
    assert main(["eval", "--images", str(src), "--out", str(out), "--no-progress"]) == 1
    rows = [json.loads(r) for r in (out / "results.jsonl").read_text().splitlines()]
    for row, name in zip(rows, ("0000.PNG", "0000.jpg")):
        assert f"it holds {name}, but the GenEval layout reads only <n>.png (lower-case)" in row["error"]
    assert "not every image is judged" not in caplog.text  # said once, in the error row, not also warned


def test_eval_images_warns_of_samples_left_unjudged_beside_png_ones(tmp_path, caplog):
    """A prompt folder with 0000.png and 0001.jpg is judged on the PNG only (the official layout); the JPEG is
    named in a warning rather than dropped in silence (hidden files such as macOS's ._0000.png are not)."""
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import judge_folder, write_prompt_folder

    spec = W.single_object("circle")
    write_prompt_folder(tmp_path / "imgs", 0, spec.to_metadata(), [W.render(spec, 0)[0]])
    samples = tmp_path / "imgs" / "00000" / "samples"
    W.render(spec, 1)[0].save(samples / "0001.jpg")
    (samples / "._0000.png").write_bytes(b"\x00\x05\x16\x07")
    (samples / "old.jpg").mkdir()  # a folder, whatever its name, is no image
    s = judge_folder(tmp_path / "imgs", tmp_path / "ev", ShapesDetector(), progress=False)
    assert s["n_images"] == 1
    assert f"{samples}: not every image is judged; it holds 0001.jpg, but the GenEval layout" in caplog.text
    assert "._0000.png" not in caplog.text and "old.jpg" not in caplog.text
    # `eval --images` judges a copy holding only the <n>.png samples: the warning looks in the user's folder
    caplog.clear()
    assert (
        main(["eval", "--images", str(tmp_path / "imgs"), "--out", str(tmp_path / "ev2"), "--no-progress"])
        == 0
    )
    assert f"{samples}: not every image is judged; it holds 0001.jpg, but the GenEval layout" in caplog.text


def test_unread_samples_are_named_three_at_most_and_a_missing_samples_folder_holds_none(tmp_path):
    """The warning names the first three images the layout skips and counts the rest; a prompt folder without a
    samples/ folder at all is judged as one incorrect image, not a crash listing a folder that is not there."""
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import _unread_samples, judge_folder, write_prompt_folder

    (tmp_path / "s").mkdir()
    for name in ("a.jpg", "b.JPG", "c.webp", "d.jpeg", "e.PNG", "0000.png", "notes.txt"):
        (tmp_path / "s" / name).write_bytes(b"")
    assert _unread_samples(tmp_path / "s", frozenset({"0000.png"})) == (
        "; it holds a.jpg, b.JPG, c.webp and 2 more, but the GenEval layout reads only <n>.png (lower-case): "
        "convert or rename them"
    )
    write_prompt_folder(tmp_path / "imgs", 0, W.single_object("circle").to_metadata(), [])
    shutil.rmtree(tmp_path / "imgs" / "00000" / "samples", ignore_errors=True)
    s = judge_folder(tmp_path / "imgs", tmp_path / "ev", ShapesDetector(), progress=False)
    assert s["n_errors"] == 1 and s["n_images"] == 1
    row = json.loads((tmp_path / "ev" / "results.jsonl").read_text())
    assert row["error"] == (
        f"{tmp_path / 'imgs' / '00000'}: the prompt folder holds no image (no samples/*.png); the prompt counts "
        "as one incorrect image"
    )


def test_summary_only_when_complete_and_results_are_resumed(tmp_path, small_prompts, monkeypatch):
    src = tmp_path / "imgs"
    main(["world", "render", "--prompts", str(small_prompts), "--images-per-prompt", "1", "--out", str(src)])
    out = tmp_path / "ev"
    import imgalign.eval.suite as suite

    calls = {"n": 0}
    real_judge = suite.judge

    def crashing_judge(*a, **k):
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt  # the user hits Ctrl-C mid-run
        return real_judge(*a, **k)

    monkeypatch.setattr(suite, "judge", crashing_judge)
    with pytest.raises(KeyboardInterrupt):
        main(["eval", "--images", str(src), "--out", str(out), "--no-progress"])
    assert not (out / "summary.json").exists()
    assert len((out / "results.jsonl").read_text().splitlines()) == 5  # judged rows kept
    calls["n"] = -1000
    assert main(["eval", "--images", str(src), "--out", str(out), "--no-progress"]) == 0
    assert calls["n"] == -1000 + 13  # only the 13 remaining images judged
    assert json.loads((out / "summary.json").read_text())["n_images"] == 18
    # an image of --images changed, and the re-judging run is interrupted: the old summary (which no longer
    # describes results.jsonl) is not left behind
    first = next(src.glob("*/samples/0000.png"))
    first.write_bytes((src / "00001" / "samples" / "0000.png").read_bytes())
    (out / "failures.png").write_bytes(b"of an earlier --baseline comparison")
    calls["n"] = 5
    with pytest.raises(KeyboardInterrupt):
        main(["eval", "--images", str(src), "--out", str(out), "--no-progress"])
    assert not (out / "summary.json").exists() and not (out / "report.md").exists()
    assert not (out / "failures.png").exists()


def test_a_line_cut_short_by_a_crash_does_not_swallow_the_next_verdict(tmp_path, small_prompts, monkeypatch):
    """results.jsonl ending in a line cut short (a crash mid-write): the resumed run drops it before appending, so
    the verdicts it writes are lines of their own and survive that run being interrupted too (appended to the cut
    line, the first one was lost and judged again)."""
    src = tmp_path / "imgs"
    main(["world", "render", "--prompts", str(small_prompts), "--images-per-prompt", "1", "--out", str(src)])
    out = tmp_path / "ev"
    argv = ["eval", "--images", str(src), "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    results = out / "results.jsonl"
    lines = results.read_text().splitlines()
    results.write_text("".join(x + "\n" for x in lines[:5]) + lines[5][:20])  # 5 rows and a cut one
    import imgalign.eval.suite as suite

    calls = {"n": 0}
    real_judge = suite.judge

    def crashing_judge(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_judge(*a, **k)

    monkeypatch.setattr(suite, "judge", crashing_judge)
    with pytest.raises(KeyboardInterrupt):
        main(argv)
    rows = [json.loads(x) for x in results.read_text().splitlines()]  # every line whole
    assert len(rows) == 7 and len({r["file"] for r in rows}) == 7
    calls["n"] = -1000
    assert main(argv) == 0
    assert calls["n"] == -1000 + 11  # only the 11 images without a verdict judged


def test_an_out_folder_of_another_evaluation_is_refused(tmp_path, small_prompts, capsys):
    """--out holding another evaluation (other source, prompts, seed...) would judge its images or reuse its
    verdicts: refused, naming what differs, with the earlier results untouched. The same command resumes."""
    out = tmp_path / "ev"
    gt = [
        "eval",
        "--ground-truth",
        "--prompts",
        str(small_prompts),
        "--images-per-prompt",
        "1",
        "--no-progress",
    ]
    assert main(gt + ["--out", str(out)]) == 0
    summary = (out / "summary.json").read_text()
    p = str(small_prompts)
    for other in (
        ["--prompts", p, "--images-per-prompt", "1", "--seed", "1"],
        ["--prompts", p, "--images-per-prompt", "2"],
        ["--images-per-prompt", "1"],  # the suite's own prompt set
    ):
        assert main(["eval", "--ground-truth", "--no-progress", "--out", str(out)] + other) == 2
        err = capsys.readouterr().err
        assert "holds another evaluation" in err and "suite:" not in err  # only what differs is named
    assert main(["eval", "--images", str(out / "images"), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "holds another evaluation" in err and "images:" in err
    assert (out / "summary.json").read_text() == summary
    assert main(gt + ["--out", str(out)]) == 0  # the same evaluation again: resumed, same figures
    assert json.loads((out / "summary.json").read_text())["overall"] == json.loads(summary)["overall"]
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("mine")
    assert main(gt + ["--out", str(tmp_path / "plain")]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert main(["eval", "--images", str(small_prompts), "--out", str(tmp_path / "x")]) == 2
    assert "is a file" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_an_out_folder_left_by_a_model_that_failed_to_load_takes_the_corrected_run(
    tmp_path, small_prompts, capsys, monkeypatch
):
    """A model that fails to load (e.g. a LoRA checkpoint on the wrong base) leaves --out holding only
    eval_args.json: no images or verdicts to mix, so the corrected command may use that folder."""
    from imgalign import sampling

    def fail(model, device="cpu"):
        raise ValueError(f"{model} does not load")

    out = tmp_path / "ev"
    common = ["--prompts", str(small_prompts), "--images-per-prompt", "1", "--no-progress", "--out", str(out)]
    with monkeypatch.context() as m:
        m.setattr(sampling, "load_pipeline", fail)
        assert main(["eval", "--model", "shapes", "--steps", "2", *common]) == 2
    assert "shapes does not load" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["eval_args.json"]
    assert main(["eval", "--ground-truth", *common]) == 0
    assert json.loads((out / "eval_args.json").read_text())["ground_truth"] is True
    assert (out / "summary.json").is_file()


def test_an_out_folder_with_a_damaged_eval_args_json_says_so(tmp_path, small_prompts, capsys):
    """A cut or edited eval_args.json was read as {}, and the refusal listed every setting as 'None there'."""
    out = tmp_path / "ev"
    argv = ["eval", "--ground-truth", "--prompts", str(small_prompts), "--images-per-prompt", "1"]
    assert main([*argv, "--no-progress", "--out", str(out)]) == 0
    (out / "eval_args.json").write_text('{"suite": "sha')
    capsys.readouterr()
    assert main([*argv, "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "eval_args.json is damaged" in err and "None there" not in err and "new --out" in err


def test_a_fixed_image_is_judged_again(tmp_path, small_prompts, capsys):
    """eval --images after the user fixed a corrupt file: the same command judges the new bytes."""
    src = tmp_path / "imgs"
    main(["world", "render", "--prompts", str(small_prompts), "--images-per-prompt", "1", "--out", str(src)])
    good = (src / "00001" / "samples" / "0000.png").read_bytes()
    (src / "00001" / "samples" / "0000.png").write_bytes(b"not a png")
    argv = ["eval", "--images", str(src), "--out", str(tmp_path / "ev"), "--no-progress"]
    assert main(argv) == 1
    (src / "00001" / "samples" / "0000.png").write_bytes(good)
    assert main(argv) == 0
    rows = (tmp_path / "ev" / "results.jsonl").read_text().splitlines()
    assert len(rows) == 18  # one row per image, the corrupt file's verdict replaced
    assert json.loads((tmp_path / "ev" / "summary.json").read_text())["overall"] == 1.0


def test_world_render_refuses_a_folder_with_files(tmp_path, small_prompts, capsys):
    out = tmp_path / "r"
    argv = ["world", "render", "--prompts", str(small_prompts), "--images-per-prompt", "1", "--out", str(out)]
    assert main(argv) == 0
    assert main(argv) == 2
    assert "is not empty" in capsys.readouterr().err


def test_world_render_draws_image_j_of_prompt_i_from_its_image_seed(tmp_path, small_prompts, capsys):
    """Image j of prompt i is the render seeded with image_seed(--seed, i, j), the seed the models sample it with;
    --images-per-prompt 0 and an --out that is a file are refused."""
    import random

    import numpy as np
    from PIL import Image

    from imgalign.prompts.io import load_geneval_metadata
    from imgalign.sampling import image_seed

    metas = load_geneval_metadata(small_prompts)[:3]
    few = tmp_path / "few.jsonl"
    few.write_text("".join(json.dumps(m) + "\n" for m in metas))
    out = tmp_path / "r"
    argv = [
        "world",
        "render",
        "--prompts",
        str(few),
        "--seed",
        "5",
        "--images-per-prompt",
        "2",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    for i, m in enumerate(metas):
        assert json.loads((out / f"{i:05d}" / "metadata.jsonl").read_text()) == m
        for j in range(2):
            want = W.render(W.Spec.from_metadata(m), random.Random(image_seed(5, i, j)))[0]
            got = Image.open(out / f"{i:05d}" / "samples" / f"{j:04d}.png")
            assert np.array_equal(np.asarray(got.convert("RGB")), np.asarray(want.convert("RGB"))), (i, j)
    capsys.readouterr()
    f = tmp_path / "afile"
    f.write_text("x")
    for extra, msg in (
        (
            ["--images-per-prompt", "0", "--out", str(tmp_path / "r0")],
            "--images-per-prompt must be at least 1",
        ),
        (["--out", str(f)], f"--out {str(f)!r} is a file; give a new or empty folder"),
    ):
        assert main(["world", "render", "--prompts", str(few), *extra]) == 2
        assert msg in capsys.readouterr().err
    assert not (tmp_path / "r0").exists()


def test_an_out_folder_under_a_file_is_refused_before_any_work(tmp_path, small_prompts, capsys, monkeypatch):
    """eval and world render with --out under an existing file say which part is a file before reading, rendering
    or judging anything (not a raw '[Errno 20] Not a directory' once the work is done); so they do for an --out
    whose nearest existing folder cannot be written in."""
    src = tmp_path / "src"
    main(["world", "render", "--prompts", str(small_prompts), "--images-per-prompt", "1", "--out", str(src)])
    png = tmp_path / "some.png"
    png.write_bytes(b"not a folder")

    def no_work(*a, **k):
        raise AssertionError("work began before --out was checked")

    monkeypatch.setattr("imgalign.commands.evaluate.read_folder_index", no_work)
    monkeypatch.setattr("imgalign.commands.world.render_folder", no_work)
    for argv in (
        ["eval", "--suite", "shapes", "--images", str(src), "--out", str(png / "sub")],
        ["world", "render", "--prompts", str(small_prompts), "--out", str(png / "x")],
    ):
        assert main(argv) == 2
        assert f"'{png}' is a file, not a folder" in capsys.readouterr().err
    # a folder that takes no new file (as root only a kernel folder does): its write probe refuses it up front
    for argv in (
        ["eval", "--suite", "shapes", "--images", str(src), "--out", "/proc/imgalign-eval"],
        ["world", "render", "--prompts", str(small_prompts), "--out", "/proc/imgalign-render"],
    ):
        assert main(argv) == 2
        assert "cannot write in '/proc'" in capsys.readouterr().err


def test_output_checks_take_an_existing_target_and_probe_only_the_nearest_existing_folder(
    tmp_path, monkeypatch
):
    """check_output_file takes an existing file (it is overwritten) and refuses a folder; check_output_folder takes
    an existing folder and refuses a file, with or without a suffix. Both probe only the nearest existing folder: a
    user's / takes no new file while their home does (simulated here, as root writes anywhere). An existing folder
    that takes no new file is refused itself; messages name the flag given."""
    import re
    import tempfile

    from imgalign.commands import check_output_file, check_output_folder

    old, note = tmp_path / "scores.csv", tmp_path / "NOTES"
    old.write_text("x")
    note.write_text("x")
    real = tempfile.TemporaryFile

    def probe(*args, **kwargs):
        if Path(kwargs["dir"]) != tmp_path:
            raise PermissionError(13, "Permission denied")
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "TemporaryFile", probe)
    check_output_file(old)
    check_output_file(tmp_path / "new" / "deeper" / "s.csv")
    check_output_folder(tmp_path)
    check_output_folder(tmp_path / "new" / "deeper")
    with pytest.raises(ValueError, match=re.escape(f"--out {str(tmp_path)!r} is a folder; give a file name")):
        check_output_file(tmp_path)
    with pytest.raises(
        ValueError, match=re.escape(f"--stats {str(note / 's.csv')!r}: {str(note)!r} is a file,")
    ):
        check_output_file(note / "s.csv", flag="--stats")
    with pytest.raises(ValueError, match=re.escape(f"--out {str(note)!r} is a file; give a folder")):
        check_output_folder(note)
    monkeypatch.undo()
    with pytest.raises(ValueError, match=re.escape("--out '/proc': cannot write in '/proc'")):
        check_output_folder(Path("/proc"))


def test_eval_errors_are_clear(tmp_path, capsys):
    assert main(["eval", "--images", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["eval", "--suite", "coco", "--ground-truth", "--out", str(tmp_path / "o")]) == 2
    assert "unknown suite 'coco'; valid suites: shapes" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"tag": "colors", "prompt": "a photo of a teal circle", "include": [{"class": "circle", "count": 1, "color": "teal"}]}\n'
    )
    assert main(["world", "render", "--prompts", str(bad), "--out", str(tmp_path / "r")]) == 2
    assert "bad.jsonl:1: include[0].color: unknown colour 'teal'" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["eval", "--images", str(empty), "--out", str(tmp_path / "o2")]) == 2
    assert "holds no prompt folders; expected" in capsys.readouterr().err
    # a flat folder of images: say what judges it
    W.render(W.single_object("circle"), 0)[0].save(empty / "a.PNG")
    assert main(["eval", "--images", str(empty), "--out", str(tmp_path / "o2")]) == 2
    assert (
        f"(it holds images directly: `imgalign score {empty} --prompts FILE.jsonl" in capsys.readouterr().err
    )
    # the --out of an `eval --model` run: its generated images are in images/, and the error says so
    from imgalign.eval.suite import write_prompt_folder

    spec = W.single_object("circle")
    write_prompt_folder(empty / "images", 0, spec.to_metadata(), [W.render(spec, 0)[0]])
    assert main(["eval", "--images", str(empty), "--out", str(tmp_path / "o2")]) == 2
    assert f"its sub-folder {str(empty / 'images')!r} does: give that" in capsys.readouterr().err
    shutil.rmtree(empty)
    # a prompt the shapes world cannot draw fails with its line, before --out is claimed
    vocab = tmp_path / "vocab.jsonl"
    vocab.write_text(
        '{"tag": "single_object", "prompt": "a photo of a rectangle", "include": [{"class": "rectangle", "count": 1}]}\n'
    )
    assert main(["eval", "--ground-truth", "--prompts", str(vocab), "--out", str(tmp_path / "o5")]) == 2
    assert f"{vocab}:1: include[0].class: unknown shape 'rectangle'" in capsys.readouterr().err
    assert not (tmp_path / "o5").exists()
    # a mistyped model fails before --out is claimed, so the corrected command may use the same folder
    assert main(["eval", "--model", "shapes_typo", "--out", str(tmp_path / "o3")]) == 2
    assert "'shapes_typo' does not exist" in capsys.readouterr().err
    assert not (tmp_path / "o3" / "eval_args.json").exists()


def test_the_shapes_suite_samples_a_model_on_device(tmp_path, small_prompts, monkeypatch, capsys):
    """--device was read by the geneval suite only: `--suite shapes --model DIR --device cuda` sampled on the CPU
    and `--device bogus` passed. The model now loads on --device, checked before --out is claimed."""
    import imgalign.sampling as S

    devices = []

    def load_pipeline(model, device="cpu"):
        devices.append(device)
        raise ValueError("stop here")

    monkeypatch.setattr(S, "load_pipeline", load_pipeline)
    argv = ["eval", "--model", "shapes", "--prompts", str(small_prompts), "--images-per-prompt", "1"]
    assert main(argv + ["--device", "bogus", "--out", str(tmp_path / "o1")]) == 2
    assert "--device 'bogus' is not a torch device" in capsys.readouterr().err
    assert not (tmp_path / "o1").exists() and devices == []
    monkeypatch.setattr("imgalign.commands.check_device", lambda device, flag="--device": None)  # no GPU here
    assert main(argv + ["--device", "cuda:7", "--out", str(tmp_path / "o2"), "--no-progress"]) == 2
    assert devices == ["cuda:7"] and "stop here" in capsys.readouterr().err


def test_eval_model_sampler_overrides_reach_the_sampler(tmp_path, small_prompts, monkeypatch):
    import imgalign.sampling as S

    seen: dict = {}

    def fake_generate_folder(model, metas, out_dir, images_per_prompt, seed, progress=True, **kw):
        from imgalign.commands.world import render_folder

        assert kw.pop("device") == "cpu"  # --device's default
        seen.update(kw, model=model)
        render_folder(metas, out_dir, images_per_prompt, seed, progress=False)

    monkeypatch.setattr(S, "generate_folder", fake_generate_folder)
    argv = ["eval", "--model", "shapes", "--prompts", str(small_prompts), "--images-per-prompt", "1"]
    argv += ["--steps", "7", "--guidance-scale", "1.5", "--out", str(tmp_path / "o"), "--no-progress"]
    assert main(argv) == 0
    fixed = {"height": S.IMAGE_SIZE, "width": S.IMAGE_SIZE, "max_sequence_length": S.MAX_SEQUENCE_LENGTH}
    assert seen == {"model": "shapes", "num_inference_steps": 7, "guidance_scale": 1.5, **fixed}
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["sampler"] == {"num_inference_steps": 7, "guidance_scale": 1.5, **fixed}
    assert (
        "Sampler: num_inference_steps 7, guidance_scale 1.5, height 64, width 64, max_sequence_length 1"
        in (tmp_path / "o" / "report.md").read_text()
    )
    seen.clear()
    argv = ["eval", "--model", "shapes", "--prompts", str(small_prompts), "--images-per-prompt", "1"]
    assert main(argv + ["--out", str(tmp_path / "o2"), "--no-progress"]) == 0
    # the model's documented evaluation settings
    assert seen == {
        "model": "shapes",
        "num_inference_steps": S.NUM_INFERENCE_STEPS,
        "guidance_scale": S.GUIDANCE_SCALE,
        **fixed,
    }
    argv = [
        "eval",
        "--images",
        str(tmp_path / "o" / "images"),
        "--out",
        str(tmp_path / "o3"),
        "--no-progress",
    ]
    assert main(argv) == 0
    assert "sampler" not in json.loads((tmp_path / "o3" / "summary.json").read_text())  # not generated here
    seen.clear()  # the boundaries: one step, no guidance
    argv = ["eval", "--model", "shapes", "--prompts", str(small_prompts), "--images-per-prompt", "1"]
    assert (
        main(argv + ["--steps", "1", "--guidance-scale", "0", "--out", str(tmp_path / "o4"), "--no-progress"])
        == 0
    )
    assert seen["num_inference_steps"] == 1 and seen["guidance_scale"] == 0.0


def test_a_model_outside_the_shapes_family_on_the_shapes_suite_is_warned_and_recorded(
    tmp_path, small_prompts, monkeypatch, caplog, capsys
):
    """The shapes suite samples any model with the shapes settings (64 px, 1 zero context token, its steps and
    guidance): a model of another family is warned about, naming them, and summary.json and the printed summary
    record them."""
    import geneval_real_tiny as T

    import imgalign.sampling as S
    from imgalign.commands.world import render_folder

    def fake_generate_folder(model, metas, out_dir, images_per_prompt, seed, progress=True, **kw):
        render_folder(metas, out_dir, images_per_prompt, seed, progress=False)

    monkeypatch.setattr(S, "generate_folder", fake_generate_folder)
    other = T.build_tiny_sd3(tmp_path / "tiny")
    argv = ["eval", "--model", str(other), "--prompts", str(small_prompts), "--images-per-prompt", "1"]
    capsys.readouterr()
    with caplog.at_level("WARNING", logger="imgalign.commands.evaluate"):
        assert main(argv + ["--out", str(tmp_path / "o"), "--no-progress"]) == 0
    used = {
        "num_inference_steps": S.NUM_INFERENCE_STEPS,
        "guidance_scale": S.GUIDANCE_SCALE,
        "height": 64,
        "width": 64,
        "max_sequence_length": 1,
    }
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["sampler"] == used
    assert json.loads(capsys.readouterr().out)["sampler"] == used
    warned = [r.getMessage() for r in caplog.records if "not a shapes-family model" in r.getMessage()]
    assert len(warned) == 1 and f"guidance_scale {S.GUIDANCE_SCALE}, height 64" in warned[0]
    assert "max_sequence_length 1" in warned[0]
    caplog.clear()
    # the shapes model itself: no warning
    with caplog.at_level("WARNING", logger="imgalign.commands.evaluate"):
        argv = ["eval", "--model", "shapes", "--prompts", str(small_prompts), "--images-per-prompt", "1"]
        assert main(argv + ["--out", str(tmp_path / "o2"), "--no-progress"]) == 0
    assert not any("not a shapes-family model" in r.getMessage() for r in caplog.records)


def test_eval_sampler_options_need_a_model(tmp_path, small_prompts, capsys):
    argv = ["eval", "--ground-truth", "--prompts", str(small_prompts), "--guidance-scale", "2"]
    assert main(argv + ["--out", str(tmp_path / "o")]) == 2
    assert "--steps and --guidance-scale apply to --model" in capsys.readouterr().err
    argv = ["eval", "--model", "shapes", "--prompts", str(small_prompts), "--steps", "0"]
    assert main(argv + ["--out", str(tmp_path / "o")]) == 2
    assert "--steps must be at least 1" in capsys.readouterr().err


def test_eval_a_lora_checkpoint_of_the_shapes_model(tmp_path, small_prompts):
    """`imgalign eval --model RUN/checkpoints/step-N` for a LoRA run: the checkpoint holds only the LoRA weights and
    names its base in imgalign_model.json, so it must load through the base model."""
    import numpy as np
    from PIL import Image

    from imgalign import hub, sampling
    from imgalign.adapters import load_adapter

    a = load_adapter("shapes")
    a.add_lora(2, 4.0)
    with torch.no_grad():
        for n, p in a.transformer.named_parameters():
            if "lora_B" in n:
                p.add_(0.05 * torch.randn_like(p))
    ckpt = tmp_path / "step-000001"
    a.save(ckpt, base_model=str(hub.resolve("shapes")))
    metas = [json.loads(x) for x in small_prompts.read_text().splitlines()[:3]]
    prompts = tmp_path / "three.jsonl"
    prompts.write_text("".join(json.dumps(m) + "\n" for m in metas))
    common = ["--prompts", str(prompts), "--images-per-prompt", "1", "--steps", "2", "--no-progress"]
    assert main(["eval", "--model", str(ckpt), "--out", str(tmp_path / "ft"), *common]) == 0
    assert main(["eval", "--model", "shapes", "--out", str(tmp_path / "base"), *common]) == 0
    # the same LoRA, live on the adapter's pipeline (unfused), as reference
    sampling.generate_folder(a.pipe, metas, tmp_path / "ref", 1, 0, progress=False, num_inference_steps=2)

    def pixels(root: Path) -> np.ndarray:
        files = sorted(root.glob("*/samples/*.png"))
        assert len(files) == 3
        return np.stack([np.asarray(Image.open(f), dtype=np.float32) for f in files])

    ft, base, ref = (
        pixels(tmp_path / "ft" / "images"),
        pixels(tmp_path / "base" / "images"),
        pixels(tmp_path / "ref"),
    )
    assert np.abs(ft - ref).mean() < 0.5  # fused vs unfused LoRA: rounding only
    assert np.abs(ft - base).mean() > 5 * max(np.abs(ft - ref).mean(), 0.01)
    summary = json.loads((tmp_path / "ft" / "summary.json").read_text())
    assert summary["model"] == str(ckpt) and summary["n_images"] == 3


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["world", "render", "--help"])
    out = capsys.readouterr().out
    assert "(default: 4)" in out and "(default: 0)" in out and "(default: None)" not in out


def test_a_judge_error_is_not_reported_as_an_unreadable_image(tmp_path, small_prompts):
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import judge_folder

    src = tmp_path / "imgs"
    main(["world", "render", "--prompts", str(small_prompts), "--images-per-prompt", "1", "--out", str(src)])
    real = ShapesDetector()

    def picky(img):
        if picky.n == 2:
            picky.n += 1
            raise ValueError("cannot locate the class names")
        picky.n += 1
        return real(img)

    picky.n = 0
    summary = judge_folder(src, tmp_path / "ev", picky, progress=False)
    errors = [json.loads(r)["error"] for r in (tmp_path / "ev" / "results.jsonl").read_text().splitlines()]
    assert [e for e in errors if e] == [
        "judge error on 00002/samples/0000.png: cannot locate the class names"
    ]
    assert summary["n_errors"] == 1 and summary["n_prompts"] == 18


def test_a_closed_stdout_pipe_is_not_reported_as_an_error(monkeypatch, capsys):
    """`imgalign ... | head`: the reader leaving is not an error of the command (it printed 'Broken pipe')."""
    import imgalign.commands.world as world

    def closed(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(world, "run_render", closed)
    assert main(["world", "render", "--prompts", "x.jsonl", "--out", "o"]) == 1
    assert "error" not in capsys.readouterr().err


def test_shapes_suite_and_size_checks_on_a_flux_pipeline(tmp_path, capsys):
    """FLUX pipelines have no ``patch_size``: the size check crashed `eval --suite shapes`, and `grid --size 7`
    was resized by diffusers without a word."""
    from imgalign.trainers.testing import tiny_flux_pipeline

    flux = tiny_flux_pipeline(tmp_path / "flux")
    prompts = tmp_path / "two.jsonl"
    prompts.write_text("".join(json.dumps(s.to_metadata()) + "\n" for s in build_eval_set()[:2]))
    argv = [
        "eval",
        "--suite",
        "shapes",
        "--model",
        str(flux),
        "--prompts",
        str(prompts),
        "--images-per-prompt",
        "1",
    ]
    assert main([*argv, "--steps", "2", "--out", str(tmp_path / "ev"), "--no-progress"]) in (0, 1)
    assert json.loads((tmp_path / "ev" / "summary.json").read_text())["n_images"] == 2
    grid = [
        "grid",
        "--model",
        f"f={flux}",
        "--prompt",
        "a cat",
        "--steps",
        "2",
        "--out",
        str(tmp_path / "g.png"),
    ]
    assert main([*grid, "--size", "7"]) == 2
    assert "is not an image size this model can take" in capsys.readouterr().err


def test_verbose_does_not_outlive_its_call(capsys, monkeypatch):
    """basicConfig does nothing once the root logger has a handler: after an in-process `main(["-v", ...])` a later
    call without -v left the root logger at DEBUG, and any call left a caller's INFO root logger at WARNING. The
    levels hold during the call (checked from inside the command) and the caller's come back, with no handler added."""
    import logging

    from imgalign.commands import rewards_cmd

    root, own = logging.getLogger(), logging.getLogger("imgalign")
    level, own_level = root.level, own.level
    seen = []
    real = rewards_cmd.run_list
    monkeypatch.setattr(rewards_cmd, "run_list", lambda a: seen.append((root.level, own.level)) or real(a))
    try:
        root.setLevel(logging.INFO)  # a caller's own configuration
        handlers = list(root.handlers)
        for argv, during in (  # (the libraries' level, imgalign's own: its INFO messages are shown)
            (["-v", "rewards", "list"], (logging.DEBUG, logging.DEBUG)),
            (["rewards", "list"], (logging.WARNING, logging.INFO)),
        ):
            assert main(argv) == 0
            assert seen[-1] == during  # the command ran at the call's level
            assert root.level == logging.INFO and own.level == own_level  # the caller's levels are back
        assert root.handlers == handlers
    finally:
        root.setLevel(level)
        own.setLevel(own_level)


def test_no_progress_silences_the_libraries_loading_bars_for_the_call(monkeypatch):
    """eval/score --no-progress still printed diffusers' "Loading pipeline components" and transformers' "Loading
    weights" bars. They are off during the call (checked from inside the command) and the caller's setting is back
    after; without --no-progress they stay on."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    from imgalign.commands import score

    seen = []

    def fake(args):
        seen.append(
            (diffusers_logging.is_progress_bar_enabled(), transformers_logging.is_progress_bar_enabled())
        )
        return 0

    monkeypatch.setattr(score, "run_score", fake)
    for argv, during in (
        (["score", "imgs", "--reward", "clip", "--out", "s.jsonl", "--no-progress"], (False, False)),
        (["score", "imgs", "--reward", "clip", "--out", "s.jsonl"], (True, True)),
    ):
        assert main(argv) == 0
        assert seen[-1] == during
        assert diffusers_logging.is_progress_bar_enabled() and transformers_logging.is_progress_bar_enabled()
    # a command without --no-progress leaves them on
    from imgalign.commands import report

    monkeypatch.setattr(report, "run_report", fake)
    assert main(["report", "run"]) == 0 and seen[-1] == (True, True)
    # a caller that had turned a library's bars off keeps them off after the call (not switched on by it)
    diffusers_logging.disable_progress_bar()
    try:
        assert main(["score", "imgs", "--reward", "clip", "--out", "s.jsonl", "--no-progress"]) == 0
        assert seen[-1] == (False, False)
        assert (
            not diffusers_logging.is_progress_bar_enabled() and transformers_logging.is_progress_bar_enabled()
        )
    finally:
        diffusers_logging.enable_progress_bar()


def test_render_report_by_hand():
    """report.md: the overall line names the unjudged images, each task's score and image count, the sampler, and
    the first failures with a reason that cannot break the table (a '|' or a new line)."""
    from imgalign.eval.suite import render_report

    summary = {"suite": "shapes", "model": "m", "overall": 0.25, "n_images": 3, "n_errors": 1,
               "tasks": {"counting": 0.5, "colors": 0.0}, "sampler": {"num_inference_steps": 2}}  # fmt: skip
    rows = [
        {"file": "00000/samples/0000.png", "tag": "counting", "prompt": "p0", "correct": True, "reason": ""},
        {
            "file": "00000/samples/0001.png",
            "tag": "counting",
            "prompt": "p0",
            "correct": False,
            "reason": "a|b\nc",
        },
        {
            "file": "00001/samples/0000.png",
            "tag": "colors",
            "prompt": "p1",
            "correct": False,
            "error": "unreadable",
        },
    ]
    lines = render_report(summary, rows, max_failures=1).splitlines()
    assert "Overall: **0.2500** over 3 images (1 could not be judged)" in lines
    assert "Sampler: num_inference_steps 2" in lines
    assert "| counting | 0.5000 | 2 |" in lines and "| colors | 0.0000 | 1 |" in lines
    assert "## First 1 failures" in lines and lines[-1] == "| 00000/samples/0001.png | p0 | a/b; c |"
    assert "could not be judged" not in render_report({**summary, "n_errors": 0}, rows)
    assert "## First 2 failures" in render_report(summary, rows).splitlines()  # fewer than max_failures
    # a run that generated its images with every setting left to the pipeline still says so
    assert "Sampler: the pipeline's defaults" in render_report({**summary, "sampler": {}}, rows).splitlines()


def test_judge_folder_counts_prompts_and_images_and_skips_other_folders(tmp_path, small_prompts):
    """summary.json: n_prompts counts prompt folders, n_images every judged image, task_images per task; a folder
    that is not a prompt index (a user's notes) is not read as one."""
    from imgalign.commands.world import render_folder
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import judge_folder
    from imgalign.prompts.io import load_geneval_metadata

    metas = load_geneval_metadata(small_prompts)[:2]
    render_folder(metas, tmp_path / "images", 2, seed=0, progress=False)
    (tmp_path / "images" / "notes").mkdir()
    s = judge_folder(
        tmp_path / "images",
        tmp_path / "out",
        ShapesDetector(),
        progress=False,
        extra={"eval_args": {"seed": 0}},
    )
    assert s["n_prompts"] == 2 and s["n_images"] == 4
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["eval_args"] == {"seed": 0}
    from collections import Counter

    assert s["task_images"] == dict(Counter(m["tag"] for m in metas for _ in range(2)))


def test_write_prompt_folder_numbers_images_from_start(tmp_path):
    from PIL import Image

    from imgalign.eval.suite import write_prompt_folder

    meta = W.single_object("circle").to_metadata()
    write_prompt_folder(tmp_path, 3, meta, [Image.new("RGB", (4, 4))], start=2)
    assert sorted(p.name for p in (tmp_path / "00003" / "samples").iterdir()) == ["0002.png"]
    write_prompt_folder(tmp_path, 3, meta, [], start=3)  # the same prompt again: more images of it
    with pytest.raises(ValueError, match="holds another prompt"):  # another prompt: refused, not mixed
        write_prompt_folder(tmp_path, 3, W.single_object("square").to_metadata(), [Image.new("RGB", (4, 4))])


def test_a_guidance_scale_of_zero_is_given_not_dropped():
    """--guidance-scale 0 is a setting (no guidance), not an absent option: it reaches the sampler under its own
    keyword, over the model's default."""
    import argparse

    from imgalign.commands.evaluate import sampler_overrides, shapes_sampler_settings

    args = argparse.Namespace(steps=None, guidance_scale=0.0)
    assert sampler_overrides(args, "steps", "guidance") == {"guidance": 0.0}
    assert shapes_sampler_settings(args)["guidance_scale"] == 0.0
    assert sampler_overrides(argparse.Namespace(steps=None, guidance_scale=None), "steps", "guidance") == {}


def test_the_sampler_settings_are_part_of_an_out_folders_identity(tmp_path, monkeypatch):
    """A rerun with other --steps or --guidance-scale, or an edited prompt file, into the same --out must not resume
    the earlier images; a model folder is named by its absolute path."""
    import argparse

    from imgalign.commands.evaluate import eval_identity

    def ident(**kw):
        base = dict(suite="shapes", images=None, model="shapes", ground_truth=False, steps=None,
                    guidance_scale=None, prompts=None, images_per_prompt=4, seed=0)  # fmt: skip
        return eval_identity(argparse.Namespace(**{**base, **kw}))

    assert ident() == ident()
    assert ident(steps=2) != ident() and ident(guidance_scale=1.5) != ident()
    assert ident(images_per_prompt=2) != ident() and ident(seed=1) != ident()
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("a\n")
    first = ident(prompts=str(prompts))
    prompts.write_text("b\n")
    assert ident(prompts=str(prompts)) != first
    # a model folder is the same model whichever working folder names it (relative or absolute)
    (tmp_path / "m").mkdir()
    monkeypatch.chdir(tmp_path)
    assert ident(model="m") == ident(model=str(tmp_path / "m"))
    assert ident(model="m")["model"] == str(tmp_path / "m")


def test_eval_options_that_cannot_apply_fail_before_any_work(tmp_path, small_prompts, capsys):
    from imgalign.commands.world import render_folder
    from imgalign.prompts.io import load_geneval_metadata

    imgs = tmp_path / "imgs"
    render_folder(load_geneval_metadata(small_prompts)[:1], imgs, 1, seed=0, progress=False)
    for extra in (["--seed", "1"], ["--images-per-prompt", "2"], ["--prompts", str(small_prompts)]):
        assert main(["eval", "--images", str(imgs), *extra, "--out", str(tmp_path / "o")]) == 2
        assert "--images judges every image of the folder" in capsys.readouterr().err
    argv = ["eval", "--ground-truth", "--images-per-prompt", "0", "--out", str(tmp_path / "o")]
    assert main(argv) == 2 and "--images-per-prompt must be at least 1" in capsys.readouterr().err
    for bad in ("nan", "inf", "-1"):
        argv = ["eval", "--model", "shapes", "--guidance-scale", bad, "--out", str(tmp_path / "o")]
        err = (main(argv), capsys.readouterr().err)
        assert err[0] == 2 and f"--guidance-scale must be >= 0 and finite (got {float(bad)})" in err[1], err
    argv = ["eval", "--ground-truth", "--prompts", "generate:0", "--out", str(tmp_path / "o")]
    assert main(argv) == 2  # was: "metadata file 'generate:0' does not exist"
    assert "generate:SEED draws GenEval's real-object prompts, for --suite geneval" in capsys.readouterr().err
    for extra in (["--detector", "foo"], ["--clip", "ViT-B-32:openai"]):  # were ignored: the shapes judge ran
        assert main(["eval", "--ground-truth", *extra, "--out", str(tmp_path / "o")]) == 2
        assert "--detector and --clip apply to --suite geneval" in capsys.readouterr().err
    argv = ["eval", "--ground-truth", "--prompts", str(small_prompts), "--baseline", str(tmp_path / "none")]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert "--baseline needs" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_refreshing_a_copy_onto_itself_keeps_the_images(tmp_path, small_prompts, monkeypatch):
    from imgalign.commands.evaluate import refresh_copy
    from imgalign.commands.world import render_folder
    from imgalign.prompts.io import load_geneval_metadata

    imgs = tmp_path / "imgs"
    render_folder(load_geneval_metadata(small_prompts)[:1], imgs, 1, seed=0, progress=False)
    refresh_copy(imgs, tmp_path / "." / "imgs")
    assert (imgs / "00000" / "samples" / "0000.png").is_file()
    monkeypatch.chdir(tmp_path)  # the same folder named relative and absolute (eval --images OUT/images)
    refresh_copy(Path("imgs"), imgs)
    assert (imgs / "00000" / "samples" / "0000.png").is_file()


def test_an_image_removed_from_the_users_folder_is_not_judged_again(tmp_path, small_prompts):
    """eval --images again after the user deleted one of a prompt's two images: the copy under --out is made
    afresh, so that image is neither kept there nor judged from the old copy."""
    src, out = tmp_path / "imgs", tmp_path / "ev"
    main(["world", "render", "--prompts", str(small_prompts), "--images-per-prompt", "2", "--out", str(src)])
    argv = ["eval", "--images", str(src), "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    (src / "00003" / "samples" / "0001.png").unlink()
    assert main(argv) == 0
    assert not (out / "images" / "00003" / "samples" / "0001.png").exists()
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 35 and "00003/samples/0001.png" not in {r["file"] for r in rows}
    assert json.loads((out / "summary.json").read_text())["n_images"] == 35


def test_a_key_error_prints_its_message_without_quotes(capsys):
    import argparse

    from imgalign.cli import _run

    def fail(args):
        raise KeyError("unknown reward 'x'")

    assert _run(argparse.Namespace(func=fail, verbose=False, command="score")) == 2
    assert capsys.readouterr().err == "imgalign score: error: unknown reward 'x'\n"


def test_verbose_shows_a_user_errors_traceback(capsys):
    """Without -v a user error is one line and status 2; with -v the exception itself propagates (its traceback)."""
    import argparse

    from imgalign.cli import _run

    def fail(args):
        raise ValueError("bad --set key")

    assert _run(argparse.Namespace(func=fail, verbose=False, command="train")) == 2
    assert capsys.readouterr().err == "imgalign train: error: bad --set key\n"
    with pytest.raises(ValueError, match="bad --set key"):
        _run(argparse.Namespace(func=fail, verbose=True, command="train"))


def test_ctrl_c_is_one_line_saying_what_was_kept_and_status_130(monkeypatch, capsys):
    """The `imgalign` program prints Ctrl-C as one line (what the command kept and how to go on), not a
    traceback, and exits with 130; an in-process caller of main() still gets the KeyboardInterrupt."""
    import sys

    import imgalign.commands.train as train
    import imgalign.commands.world as world
    from imgalign.cli import Interrupted, console_main

    def hit(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "run_train", hit)
    monkeypatch.setattr(world, "run_pretrain", hit)
    monkeypatch.setattr(world, "run_render", hit)
    with pytest.raises(Interrupted, match="--resume auto"):
        main(["train"])
    cases = [
        (
            ["train"],
            "imgalign train: interrupted; every checkpoint written so far is whole: add --resume auto",
        ),
        (
            ["world", "pretrain", "--component", "clip", "--out", "o"],
            "imgalign world pretrain: interrupted; run the same command again",
        ),
        (["world", "render", "--prompts", "p", "--out", "o"], "imgalign world render: interrupted\n"),
    ]
    for argv, said in cases:
        monkeypatch.setattr(sys, "argv", ["imgalign", *argv])
        assert console_main() == 130
        err = capsys.readouterr().err
        assert err.startswith(said) and "Traceback" not in err and err.count("\n") == 1


def test_help_shows_no_empty_list_default(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "(default: [])" not in capsys.readouterr().out


def test_help_shows_no_none_or_false_default_and_no_second_default(capsys):
    """A flag's False and an unset option's None are not defaults worth showing, and a help text that names its
    default (grid --seeds: "(default 0)") does not get a second one appended."""

    def help_of(*argv: str) -> str:
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        return " ".join(capsys.readouterr().out.split())  # argparse wraps lines at the terminal width

    assert "(default: False)" not in help_of("train")  # --print-config, --describe
    assert "(default: None)" not in help_of("world", "pretrain")  # --jobs and --out default to None
    grid = help_of("grid")
    assert "(default 0)" in grid and "(default: 0)" not in grid


def test_grid_help_keeps_its_example_command_on_its_own_lines(capsys):
    """grid asks for a raw description so its example (a command continued with a backslash) prints as written;
    the defaults formatter set on every subcommand replaced that and ran the example into the prose around it."""
    with pytest.raises(SystemExit):
        main(["grid", "--help"])
    lines = [x.strip() for x in capsys.readouterr().out.splitlines()]
    assert "imgalign grid --model base=shapes --model grpo=runs/grpo/checkpoints/step-000500 \\" in lines
    assert "Every input is checked before any model loads." in lines
    assert "(default: 160)" in " ".join(lines)  # --cell: the defaults are still shown


def test_train_help_keeps_its_usage_lines_and_names_every_flag(capsys):
    """train's description (its usage lines, then prose) ran together as one paragraph, and omitted --describe."""
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    lines = [x.strip() for x in capsys.readouterr().out.splitlines()]
    first = next(i for i, x in enumerate(lines) if x.startswith("imgalign train [CONFIG.yaml]"))
    assert lines[first + 1] == "[--print-config] [--describe]"


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2 and "required: COMMAND" in capsys.readouterr().err


def test_only_numbered_samples_are_read(tmp_path):
    """Like the official evaluator, a stray picture in a samples folder (a grid.png) is not a sample."""
    from PIL import Image

    from imgalign.eval.suite import read_folder_index, write_prompt_folder

    write_prompt_folder(tmp_path, 0, W.single_object("circle").to_metadata(), [Image.new("RGB", (4, 4))])
    Image.new("RGB", (4, 4)).save(tmp_path / "00000" / "samples" / "grid.png")
    (f,) = read_folder_index(tmp_path)
    assert [p.name for p in f.samples] == ["0000.png"]


def test_a_folder_without_prompt_folders_points_only_at_a_sub_folder_that_holds_them(tmp_path):
    """The hint names the sub-folder in the GenEval layout (an `eval --model` run's images/), not another folder
    that sorts first (a_notes/ beside it), and no sub-folder at all when none holds prompt folders."""
    from PIL import Image

    from imgalign.eval.suite import read_folder_index, write_prompt_folder

    (tmp_path / "a_notes" / "drafts").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="holds no prompt folders; expected") as e:
        read_folder_index(tmp_path)
    assert "sub-folder" not in str(e.value)
    write_prompt_folder(
        tmp_path / "images", 0, W.single_object("circle").to_metadata(), [Image.new("RGB", (4, 4))]
    )
    with pytest.raises(FileNotFoundError) as e:
        read_folder_index(tmp_path)
    assert f"its sub-folder {str(tmp_path / 'images')!r} does: give that" in str(e.value)


def test_eval_ground_truth_defaults_to_four_images_per_prompt(tmp_path, small_prompts):
    out = tmp_path / "ev"
    assert (
        main(["eval", "--ground-truth", "--prompts", str(small_prompts), "--out", str(out), "--no-progress"])
        == 0
    )
    assert json.loads((out / "summary.json").read_text())["n_images"] == 4 * 18


def test_a_results_line_without_a_file_is_dropped_on_resume(tmp_path):
    """A results.jsonl line that is JSON but no verdict row (no "file", e.g. from a hand edit) is dropped like a
    line cut short, not a crash of the resumed run."""
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import judge_folder, write_prompt_folder

    imgs, circle = tmp_path / "imgs", W.single_object("circle")
    write_prompt_folder(imgs, 0, circle.to_metadata(), [W.render(circle, 0)[0]])
    judge_folder(imgs, tmp_path / "ev", ShapesDetector(), progress=False)
    results = tmp_path / "ev" / "results.jsonl"
    results.write_text(results.read_text() + '{"note": "checked by hand"}\n')
    s = judge_folder(imgs, tmp_path / "ev", ShapesDetector(), progress=False)
    rows = [json.loads(x) for x in results.read_text().splitlines()]
    assert s["n_images"] == 1 and [r["file"] for r in rows] == ["00000/samples/0000.png"]


def test_a_reused_verdict_is_reused_again_by_the_next_run(tmp_path):
    """A resumed run writes the verdicts it reuses back with their digest, so a third run judges nothing again."""
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import judge_folder, write_prompt_folder

    imgs, circle = tmp_path / "imgs", W.single_object("circle")
    write_prompt_folder(imgs, 0, circle.to_metadata(), [W.render(circle, 0)[0], W.render(circle, 1)[0]])
    first = judge_folder(imgs, tmp_path / "ev", ShapesDetector(), progress=False)

    def no_detector(image):
        raise AssertionError("an image with a verdict was judged again")

    for _ in range(2):
        assert judge_folder(imgs, tmp_path / "ev", no_detector, progress=False) == first


def test_copy_folder_keeps_the_prompt_folder_names_and_numbered_samples_only(tmp_path):
    """A copy is judged under the user's own names (an unpadded folder 7 stays 7, so results and errors name it),
    with every numbered sample and no stray picture."""
    from PIL import Image

    from imgalign.eval.suite import copy_folder, read_folder_index, write_prompt_folder

    write_prompt_folder(
        tmp_path / "src", 7, W.single_object("circle").to_metadata(), [Image.new("RGB", (4, 4))] * 2
    )
    (tmp_path / "src" / "00007").rename(tmp_path / "src" / "7")
    Image.new("RGB", (4, 4)).save(tmp_path / "src" / "7" / "samples" / "grid.png")
    copy_folder(tmp_path / "src", tmp_path / "dst")
    (f,) = read_folder_index(tmp_path / "dst")
    assert f.path == tmp_path / "dst" / "7" and [p.name for p in f.samples] == ["0000.png", "0001.png"]
    assert sorted(p.name for p in (f.path / "samples").iterdir()) == ["0000.png", "0001.png"]


def test_judge_folder_records_the_prompt_and_suite_and_makes_missing_parents(tmp_path):
    """Each results row carries its prompt (the report's failure table shows it), summary.json the suite name it
    was given, an --out under missing folders is made, and the report lists the first 20 failures by default."""
    from PIL import Image

    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import judge_folder, render_report, write_prompt_folder

    meta = W.single_object("circle").to_metadata()
    write_prompt_folder(tmp_path / "imgs", 0, meta, [Image.new("RGB", (32, 32), "white")])  # no circle: fails
    out = tmp_path / "a" / "b" / "ev"
    s = judge_folder(tmp_path / "imgs", out, ShapesDetector(), suite="mine", progress=False)
    assert s["suite"] == "mine" and json.loads((out / "summary.json").read_text())["suite"] == "mine"
    (row,) = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert row["prompt"] == meta["prompt"] and not row["correct"]
    assert f"| 00000/samples/0000.png | {meta['prompt']} |" in (out / "report.md").read_text()
    rows = [dict(row, file=f"{i:05d}/samples/0000.png") for i in range(25)]
    assert "## First 20 failures" in render_report(dict(s, n_images=25), rows)


def test_a_verdict_is_reused_only_for_the_same_image_and_prompt(tmp_path):
    """The resume digest covers the metadata: the same picture under an edited prompt is judged again."""
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import image_digest, judge_folder, write_prompt_folder

    imgs, circle = tmp_path / "imgs", W.single_object("circle")
    write_prompt_folder(imgs, 0, circle.to_metadata(), [W.render(circle, 0)[0]])
    png = imgs / "00000" / "samples" / "0000.png"
    assert image_digest(png, {"tag": "a"}) != image_digest(png, {"tag": "b"})
    s = judge_folder(imgs, tmp_path / "ev", ShapesDetector(), progress=False, sampler={})  # all defaults
    assert s["overall"] == 1.0 and s["sampler"] == {}
    (imgs / "00000" / "metadata.jsonl").write_text(json.dumps(W.single_object("square").to_metadata()) + "\n")
    assert judge_folder(imgs, tmp_path / "ev", ShapesDetector(), progress=False)["overall"] == 0.0

    def refuse(meta):
        raise ValueError("not in this suite")

    # metadata that now fails its check is not excused by the earlier verdict on the same bytes
    s = judge_folder(imgs, tmp_path / "ev", ShapesDetector(), validate_metadata=refuse, progress=False)
    assert s["n_errors"] == 1
    row = json.loads((tmp_path / "ev" / "results.jsonl").read_text())
    assert row["error"] == f"{imgs / '00000' / 'metadata.jsonl'}: not in this suite"


def test_a_prompt_folder_needs_its_metadata_and_only_its_first_line_counts(tmp_path):
    from imgalign.eval.suite import read_folder_index

    (tmp_path / "00000" / "samples").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=r"00000/metadata.jsonl is missing"):
        read_folder_index(tmp_path)
    first, second = W.single_object("circle").to_metadata(), W.single_object("square").to_metadata()
    (tmp_path / "00000" / "metadata.jsonl").write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    (f,) = read_folder_index(tmp_path)
    assert f.metadata == first and f.samples == []
    # a blank line or spaces around the object are not an error
    (tmp_path / "00000" / "metadata.jsonl").write_text("\n  " + json.dumps(first) + "  \n")
    assert read_folder_index(tmp_path)[0].metadata == first
    (tmp_path / "00000" / "metadata.jsonl").write_text('{"tag": "single_object"}\n')
    with pytest.raises(ValueError, match="must be a GenEval metadata object with 'tag' and 'include'"):
        read_folder_index(tmp_path)


def test_an_unreadable_image_is_named_by_the_users_path_not_the_copy(tmp_path, caplog):
    """With `source_dir`, an OSError's message names the user's file (PIL's own text would name the copy); the
    error is also logged as a warning while judging."""
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import judge_folder, write_prompt_folder

    copy = tmp_path / "copy"
    write_prompt_folder(copy, 0, W.single_object("circle").to_metadata(), [])
    (copy / "00000" / "samples" / "0000.png").mkdir()  # numbered, but a folder: open() fails with EISDIR
    s = judge_folder(copy, tmp_path / "ev", ShapesDetector(), progress=False, source_dir=tmp_path / "mine")
    assert s["n_errors"] == 1
    row = json.loads((tmp_path / "ev" / "results.jsonl").read_text())
    assert (
        row["error"]
        == f"cannot read image {tmp_path / 'mine' / '00000' / 'samples' / '0000.png'}: Is a directory"
    )
    assert row["error"] in caplog.text


def test_an_image_over_pils_pixel_limit_is_an_error_row(tmp_path, monkeypatch):
    """DecompressionBombError (not an OSError) stopped `eval --images` with a traceback; it is the image's error."""
    from PIL import Image

    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import judge_folder, write_prompt_folder

    write_prompt_folder(
        tmp_path / "imgs", 0, W.single_object("circle").to_metadata(), [Image.new("RGB", (64, 64))]
    )
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    s = judge_folder(tmp_path / "imgs", tmp_path / "ev", ShapesDetector(), progress=False)
    assert s["n_errors"] == 1
    row = json.loads((tmp_path / "ev" / "results.jsonl").read_text())
    assert "cannot read image" in row["error"] and "exceeds limit" in row["error"]


def test_a_grey_or_rgba_png_is_judged_as_rgb(tmp_path):
    from PIL import Image

    from imgalign.eval.suite import load_image

    for mode, fill in (("L", 200), ("RGBA", (10, 20, 30, 255))):
        Image.new(mode, (5, 3), fill).save(tmp_path / f"{mode}.png")
        im = load_image(tmp_path / f"{mode}.png")
        assert im.mode == "RGB" and im.size == (5, 3)
        assert im.getpixel((0, 0)) == ((200, 200, 200) if mode == "L" else (10, 20, 30))


def test_a_16_bit_png_is_judged_scaled_to_8_bits_not_white(tmp_path):
    """PIL's convert("RGB") clips a 16-bit PNG's 0-65535 values at 255, so a 16-bit render (e.g. from an image
    editor) was judged as an all-white image; it is scaled as the rewards read it."""
    import numpy as np
    from PIL import Image

    from imgalign.eval.suite import load_image

    a = np.zeros((4, 6), dtype=np.uint16)
    a[:, 3:] = 200 * 257  # a dark left half, a light grey right half
    Image.fromarray(a).save(tmp_path / "deep.png")
    with Image.open(tmp_path / "deep.png") as raw:
        assert raw.mode.startswith("I")
    px = np.asarray(load_image(tmp_path / "deep.png"))
    assert px.shape == (4, 6, 3) and px[0, 0].tolist() == [0, 0, 0] and px[0, 5].tolist() == [200, 200, 200]


def test_an_eval_identity_names_both_judges_and_the_resolved_image_folder(tmp_path, monkeypatch):
    """Another colour classifier gives other verdicts, and the same folder given relatively from another directory
    is the same evaluation: both are in the identity an --out folder is claimed with."""
    import argparse

    from imgalign.commands.evaluate import eval_identity

    (tmp_path / "imgs").mkdir()
    monkeypatch.chdir(tmp_path)
    given = dict(suite="geneval", detector="det", clip="ViT-B-32:openai", images="imgs", model=None)
    ident = eval_identity(argparse.Namespace(**given))
    folder = str((tmp_path / "imgs").resolve())
    assert ident == {"suite": "geneval", "detector": "det", "clip": "ViT-B-32:openai", "images": folder}
    assert eval_identity(argparse.Namespace(**{**given, "clip": "ViT-L-14:openai"})) != ident


def test_a_judge_folder_is_one_evaluation_however_it_is_named(tmp_path, monkeypatch):
    """--detector / --clip were recorded as typed: one judge folder named relatively, then absolutely, was refused as
    another evaluation, and one relative name run from two folders (two judges) resumed the other's verdicts. A
    folder recorded relatively by an earlier version resumes from the folder it was run in."""
    import argparse

    from imgalign.commands.evaluate import claim_out_folder, eval_identity

    for where in ("a", "b"):
        (tmp_path / where / "det").mkdir(parents=True)
        (tmp_path / where / "imgs").mkdir()
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path / "a")
    given = dict(
        suite="geneval", detector="det", clip="ViT-B-32:openai", images=str(tmp_path / "imgs"), model=None
    )
    ident = eval_identity(argparse.Namespace(**given))
    assert ident["detector"] == str(tmp_path / "a" / "det")
    claim_out_folder(out, ident)
    (out / "results.jsonl").write_text("{}\n")  # its verdicts
    absolute = {**given, "detector": str(tmp_path / "a" / "det")}
    claim_out_folder(out, eval_identity(argparse.Namespace(**absolute)))  # the same evaluation: taken
    monkeypatch.chdir(tmp_path / "b")  # 'det' is another folder here
    with pytest.raises(
        ValueError, match=f"holds another evaluation \\(detector: '{tmp_path / 'a' / 'det'}' there"
    ):
        claim_out_folder(out, eval_identity(argparse.Namespace(**given)))
    # eval_args.json of an earlier version, with the judge as typed: read from the folder it is run in
    (out / "eval_args.json").write_text(json.dumps({**ident, "detector": "det"}))
    claim_out_folder(out, eval_identity(argparse.Namespace(**given)))  # run in b: b's det
    monkeypatch.chdir(tmp_path / "a")
    claim_out_folder(out, eval_identity(argparse.Namespace(**absolute)))


def test_an_embedded_judge_is_recorded_by_name_beside_a_folder_of_that_name(tmp_path, monkeypatch):
    """--clip shapes-clip loads the embedded model (hub.resolve), whatever folder of that name the working folder
    holds; it was recorded as that folder's absolute path, so a rerun from elsewhere was refused as another
    evaluation."""
    import argparse

    from imgalign.commands.evaluate import eval_identity

    (tmp_path / "shapes-clip").mkdir()
    monkeypatch.chdir(tmp_path)
    given = dict(suite="geneval", detector="det", clip="shapes-clip", images=str(tmp_path), model=None)
    assert eval_identity(argparse.Namespace(**given))["clip"] == "shapes-clip"


def test_eval_samples_and_renders_with_the_given_seed(tmp_path, small_prompts, monkeypatch):
    import imgalign.sampling as S

    seen: dict = {}

    def fake_generate_folder(model, metas, out_dir, images_per_prompt, seed, progress=True, **kw):
        from imgalign.commands.world import render_folder

        seen.update(seed=seed, images_per_prompt=images_per_prompt)
        render_folder(metas, out_dir, images_per_prompt, seed, progress=False)

    monkeypatch.setattr(S, "generate_folder", fake_generate_folder)
    given = ["--prompts", str(small_prompts), "--images-per-prompt", "1", "--seed", "5", "--out"]
    assert main(["eval", "--model", "shapes", *given, str(tmp_path / "m"), "--no-progress"]) == 0
    assert seen == {"seed": 5, "images_per_prompt": 1}
    assert main(["world", "render", *given, str(tmp_path / "w")]) == 0
    assert main(["eval", "--ground-truth", *given, str(tmp_path / "gt"), "--no-progress"]) == 0
    want = sorted(p.read_bytes() for p in (tmp_path / "w").rglob("*.png"))
    assert sorted(p.read_bytes() for p in (tmp_path / "gt" / "images").rglob("*.png")) == want
    summary = json.loads((tmp_path / "gt" / "summary.json").read_text())
    assert summary["eval_args"]["seed"] == 5 and summary["eval_args"]["ground_truth"] is True


def test_results_keep_the_judges_partial_credit(tmp_path):
    """Three circles for 'four circles' is wrong, with 3/4 partial credit, recorded as the judge gave it."""
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.eval.suite import judge_folder, write_prompt_folder

    imgs = tmp_path / "imgs"
    write_prompt_folder(
        imgs, 0, W.counting("circle", 4).to_metadata(), [W.render(W.counting("circle", 3), 0)[0]]
    )
    judge_folder(imgs, tmp_path / "ev", ShapesDetector(), progress=False)
    row = json.loads((tmp_path / "ev" / "results.jsonl").read_text())
    assert row["correct"] is False and row["partial"] == pytest.approx(0.75)


def test_a_damaged_eval_args_json_alone_is_written_again_and_beside_other_files_is_refused(tmp_path):
    """Cut JSON or bytes that are not UTF-8: alone (its model failed to load), the folder is taken over and
    eval_args.json written anew; beside other files, the folder's evaluation is unknown and refused."""
    from imgalign.commands.evaluate import claim_out_folder

    ident = {"suite": "shapes", "ground_truth": True}
    for i, damaged in enumerate((b'{"suite": "sha', b"\xff\xfe\x00")):
        out = tmp_path / f"ev{i}"
        out.mkdir()
        (out / "eval_args.json").write_bytes(damaged)
        claim_out_folder(out, ident)
        assert json.loads((out / "eval_args.json").read_text()) == ident
        (out / "eval_args.json").write_bytes(damaged)
        (out / "results.jsonl").write_text("")
        with pytest.raises(ValueError, match="eval_args.json is damaged"):
            claim_out_folder(out, ident)


def test_an_eval_identity_keeps_a_model_name_that_is_not_a_path(tmp_path, monkeypatch):
    """An embedded name or Hub id is recorded as given (resolved against the working folder, a rerun from another
    folder would be refused)."""
    import argparse

    from imgalign.commands.evaluate import eval_identity

    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(suite="shapes", images=None, model="shapes", steps=None, guidance_scale=None)
    args.prompts, args.images_per_prompt, args.seed = None, 4, 0
    assert eval_identity(args)["model"] == "shapes"


def test_an_out_folder_is_claimed_with_its_missing_parents(tmp_path):
    from imgalign.commands.evaluate import claim_out_folder

    out = tmp_path / "runs" / "a" / "ev"
    claim_out_folder(out, {"suite": "shapes"})
    assert json.loads((out / "eval_args.json").read_text()) == {"suite": "shapes"}
    empty = tmp_path / "empty"  # an existing empty folder (made beforehand, e.g. by mkdir) is taken
    empty.mkdir()
    claim_out_folder(empty, {"suite": "shapes"})
    assert json.loads((empty / "eval_args.json").read_text()) == {"suite": "shapes"}


def test_ctrl_c_before_a_command_starts_and_a_commands_own_message_are_one_line(monkeypatch, capsys):
    """Ctrl-C while the parser (and the libraries) load names the command as typed and says it wrote nothing
    (the line was `imgalign: interrupted` for every command), status 130; a command's own Interrupted message goes
    out prefixed with the command, as it is for other commands."""
    import sys

    import imgalign.cli as cli
    import imgalign.commands.world as world

    def hit(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sys, "argv", ["imgalign", "world", "render", "--prompts", "p", "--out", "o"])
    monkeypatch.setattr(cli, "build_parser", hit)
    assert cli.console_main() == 130
    assert capsys.readouterr() == (
        "",
        "imgalign world render: interrupted while starting, before it wrote anything\n",
    )
    monkeypatch.undo()

    def kept(args):
        raise cli.Interrupted("interrupted; 3 prompts are rendered")

    monkeypatch.setattr(world, "run_render", kept)
    monkeypatch.setattr(sys, "argv", ["imgalign", "world", "render", "--prompts", "p", "--out", "o"])
    assert cli.console_main() == 130
    assert capsys.readouterr() == ("", "imgalign world render: interrupted; 3 prompts are rendered\n")


@pytest.mark.parametrize(
    "argv, name",
    [
        (["score", "images", "--reward", "clip"], "imgalign score"),
        (["-v", "train", "cfg.yaml"], "imgalign train"),
        (["rewards", "fit-discriminator", "--real", "r"], "imgalign rewards fit-discriminator"),
        (["world", "pretrain"], "imgalign world pretrain"),
        (["eval", "--suite", "shapes"], "imgalign eval"),
        (["report", "runs/x"], "imgalign report"),
        ([], "imgalign"),
        (["--version"], "imgalign"),
        (["Score"], "imgalign"),
    ],
)
def test_ctrl_c_while_starting_names_the_command_as_typed_and_no_folder_or_file_argument(argv, name):
    """A command's first word, and a second only for the commands with subcommands (`score images` named the folder
    as if it were a subcommand); a word that is no command name is left out."""
    from imgalign.cli import starting_interrupted

    assert starting_interrupted(argv) == f"{name}: interrupted while starting, before it wrote anything"


def test_the_command_groups_are_the_commands_with_subcommands():
    """`starting_interrupted` names a second word only for these: a new command with subcommands must be listed."""
    import argparse

    from imgalign.cli import COMMAND_GROUPS, build_parser

    top = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    groups = {
        name
        for name, sub in top.choices.items()
        if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)
    }
    assert groups == set(COMMAND_GROUPS)


def test_world_render_names_the_line_of_a_prompt_the_shapes_world_cannot_draw(
    tmp_path, small_prompts, capsys
):
    """A GenEval prompt the shapes world has no shape for is refused naming the prompt file and its line (counted
    from 1), before the output folder is made."""
    from imgalign.prompts.io import load_geneval_metadata

    ok = load_geneval_metadata(small_prompts)[0]
    dog = {"tag": "single_object", "include": [{"class": "dog", "count": 1}], "prompt": "a photo of a dog"}
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps(ok) + "\n" + json.dumps(dog) + "\n")
    out = tmp_path / "r"
    assert main(["world", "render", "--prompts", str(prompts), "--out", str(out)]) == 2
    # named with its subcommand, as argparse's own errors are (it said `imgalign world: error:`)
    assert f"imgalign world render: error: {prompts}:2: " in capsys.readouterr().err
    assert not out.exists()


def test_geneval_judges_default_to_geneval_s_detector_and_clip(tmp_path, small_prompts, monkeypatch):
    """--detector and --clip have no argparse default (given with the shapes suite they are refused); the geneval
    suite fills in GenEval's Mask2Former and CLIP before checking the judges."""
    import imgalign.eval.real as R
    from imgalign.commands.evaluate import GENEVAL_CLIP, GENEVAL_DETECTOR

    seen = []

    def check_judge_specs(detector, clip):
        seen.append((detector, clip))
        raise ValueError("stop here")

    monkeypatch.setattr(R, "check_judge_specs", check_judge_specs)
    argv = ["eval", "--suite", "geneval", "--model", "shapes", "--prompts", str(small_prompts)]
    assert main([*argv, "--out", str(tmp_path / "o"), "--device", "cpu"]) == 2
    assert seen == [(GENEVAL_DETECTOR, GENEVAL_CLIP)]


def test_geneval_checks_the_users_prompts_before_the_judges(tmp_path, monkeypatch, capsys):
    """A mistake in --prompts is said before the detector's config is looked up (online, fetched), not after."""
    import imgalign.eval.real as R

    seen = []
    monkeypatch.setattr(R, "check_judge_specs", lambda detector, clip: seen.append(detector))
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"tag": "single_object"}\n')
    argv = [
        "eval",
        "--suite",
        "geneval",
        "--model",
        "shapes",
        "--prompts",
        str(bad),
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(argv) == 2
    assert f"{bad}" in capsys.readouterr().err and seen == []


def test_an_unknown_option_names_the_command_and_the_closest_option(capsys):
    """argparse said "imgalign: error: unrecognized arguments: --rewards y": the program, not the command, and
    nothing of --reward. The command's parser now says it, with the closest option for each unknown one."""
    for argv, line in (
        (
            ["score", "x", "--reward", "geneval", "--out", "o", "--rewards", "y"],
            "imgalign score: error: unrecognized arguments: --rewards y (--rewards: did you mean --reward?)",
        ),
        (
            ["world", "pretrain", "--component", "clip", "--out", "o", "--job", "2", "--zzz"],
            "imgalign world pretrain: error: unrecognized arguments: --zzz\n",  # --job is --jobs (abbreviated)
        ),
        (
            ["train", "--output_dir=x"],
            "imgalign train: error: unrecognized arguments: --output_dir=x (--output_dir: did you mean --output-dir?)",
        ),
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and line in err, err


def test_sigterm_is_the_same_one_line_as_ctrl_c_and_status_143(monkeypatch, capsys):
    """SIGTERM (`kill PID`, a job scheduler stopping the job) killed the program at once without a word (a batch
    log showed nothing of what was kept), and left `world pretrain --component all`'s workers training on: it is
    now raised as Ctrl-C is, the command stops as it does for Ctrl-C, and the program exits with 143 (128 + 15).
    The handler is the program's only while it runs."""
    import os
    import signal
    import sys
    import time

    import imgalign.commands.train as train
    from imgalign.cli import console_main
    from tests.conftest import signal_stand_in

    def terminated(args):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # (the handler runs in here)
        return 0

    monkeypatch.setattr(train, "run_train", terminated)
    monkeypatch.setattr(sys, "argv", ["imgalign", "train"])
    with signal_stand_in(signal.SIGTERM) as stand_in:
        assert console_main() == 143
        assert signal.getsignal(signal.SIGTERM) is stand_in
    err = capsys.readouterr().err
    assert err.startswith(
        "imgalign train: interrupted; every checkpoint written so far is whole: add --resume"
    )
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "value, warned",
    [
        ("abc", True),
        ("0", True),
        ("-1", True),
        ("1.5", True),
        ("1", False),
        ("4,2", False),
        (" 2 ", False),
        ("", False),
    ],
)
def test_a_thread_setting_that_is_no_count_is_warned_of_naming_the_variable(value, warned, caplog):
    """OMP_NUM_THREADS=abc (or 0) is ignored by torch, which runs its default thread count; the only word was
    libgomp's "Invalid value for environment variable". The command warns, naming the variable and the count run."""
    import logging

    import torch

    from imgalign.cli import warn_of_thread_settings

    with caplog.at_level(logging.WARNING, logger="imgalign"):
        warn_of_thread_settings({"OMP_NUM_THREADS": value})
    said = f"OMP_NUM_THREADS={value!r} is not a thread count (a whole number of at least 1): torch ignores it and "
    assert (said in caplog.text) is warned
    if warned:
        assert (
            f"runs {torch.get_num_threads()} threads; set it to a number, e.g. OMP_NUM_THREADS=1"
            in caplog.text
        )


def test_a_command_warns_of_a_bad_thread_setting(monkeypatch, caplog):
    import logging

    from imgalign.cli import main

    monkeypatch.setenv("MKL_NUM_THREADS", "many")
    with caplog.at_level(logging.WARNING, logger="imgalign"):
        assert main(["train", "--print-config"]) == 0
    assert "MKL_NUM_THREADS='many' is not a thread count" in caplog.text
