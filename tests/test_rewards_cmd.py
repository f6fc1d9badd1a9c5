"""`imgalign rewards fd | fid-stats | check`: small runs with the weight-free `stats` features."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from test_rewards_heads import degrade, write_folder

from imgalign.cli import main
from imgalign.rewards.base import build_reward
from imgalign.rewards.fid import load_stats, save_stats, shapes_reference_images

torch.set_num_threads(1)


def _fd(capsys: pytest.CaptureFixture, *argv: str) -> float:
    assert main(["rewards", "fd", *argv]) == 0
    return float(re.search(r"features: (\S+)", capsys.readouterr().out).group(1))


def test_fd_renders_vs_degraded(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = write_folder(tmp_path / "a", shapes_reference_images(100, seed=1))
    b = write_folder(tmp_path / "b", shapes_reference_images(100, seed=2))
    c = write_folder(tmp_path / "c", degrade(shapes_reference_images(100, seed=3)))
    same = _fd(capsys, str(a), str(b), "--features", "stats")
    # a folder against itself printed -1.8e-09 (round-off) before
    assert 0 <= _fd(capsys, str(a), str(a), "--features", "stats") < 1e-6
    other = _fd(capsys, str(a), str(c), "--features", "stats")
    assert same < 0.1 * other
    stats = tmp_path / "a.safetensors"
    assert main(["rewards", "fid-stats", "--images", str(a), "--features", "stats", "--out", str(stats)]) == 0
    # the folder's image count (not the --n of renders) is printed and recorded
    assert f"wrote {stats} (100 images, " in capsys.readouterr().out and load_stats(stats)[2] == 100
    assert _fd(capsys, str(stats), str(b), "--features", "stats") == pytest.approx(same, rel=1e-5)
    r = build_reward(f"fid:features=stats,ref={stats},set_size=32,init={b}")
    assert torch.isfinite(r(shapes_reference_images(4, seed=9), [""] * 4).scores).all()
    assert main(["rewards", "fd", str(stats), str(b), "--features", "shapes-clip"]) == 2  # features mismatch
    # stats into a folder not made yet; a folder as --out; a truncated stats file; a folder of one image
    deep = tmp_path / "new" / "dir" / "s.safetensors"
    assert main(["rewards", "fid-stats", "--images", str(a), "--features", "stats", "--out", str(deep)]) == 0
    assert (
        main(["rewards", "fid-stats", "--images", str(a), "--features", "stats", "--out", str(tmp_path)]) == 2
    )
    assert "is a folder; give a file name" in capsys.readouterr().err
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(stats.read_bytes()[:200])
    assert main(["rewards", "fd", str(cut), str(b), "--features", "stats"]) == 2
    assert f"{cut} is not an imgalign FID stats file" in capsys.readouterr().err
    one = write_folder(tmp_path / "one", shapes_reference_images(1, seed=4))
    assert main(["rewards", "fd", str(b), str(one), "--features", "stats"]) == 2
    assert f"{str(one)!r} holds 1 readable image; FID statistics need at least 2" in capsys.readouterr().err
    (one / "b.heic").write_bytes(b"x")  # a second photo of a suffix not read is named
    assert main(["rewards", "fd", str(b), str(one), "--features", "stats"]) == 2
    assert "holds 1 readable image (it holds 1 other file(s), e.g. 'b.heic': .heic; images are found by" in (
        capsys.readouterr().err
    )
    # a stats file of other dimensions under the same features name: a shape traceback before
    mu, sigma, n, _ = load_stats(stats)
    small = tmp_path / "small.safetensors"
    save_stats(small, mu[:4], sigma[:4, :4], n, "stats")
    assert main(["rewards", "fd", str(stats), str(small), "--features", "stats"]) == 2
    assert f"{stats} has {mu.shape[0]}-d features and {small} 4-d" in capsys.readouterr().err
    # one of the same dimensions saved under another features name: refused, naming the --features to pass
    other = tmp_path / "other.safetensors"
    save_stats(other, mu, sigma, n, "inception")
    assert main(["rewards", "fd", str(other), str(b), "--features", "stats"]) == 2
    err = capsys.readouterr().err
    assert f"{other} holds 'inception' statistics, not 'stats'; pass --features inception" in err


def test_fid_stats_out_under_a_file_is_refused_before_features(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = write_folder(tmp_path / "a", shapes_reference_images(4, seed=1))
    png = tmp_path / "some.png"
    png.write_bytes(b"not a folder")

    def no_work(*a, **k):
        raise AssertionError("features were extracted before --out was checked")

    monkeypatch.setattr("imgalign.rewards.fid.folder_features", no_work)
    argv = [
        "rewards",
        "fid-stats",
        "--images",
        str(a),
        "--features",
        "stats",
        "--out",
        str(png / "x.safetensors"),
    ]
    assert main(argv) == 2
    assert f"'{png}' is a file, not a folder" in capsys.readouterr().err


def test_check_command(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["rewards", "check", "--reward", "geneval", "--n", "24"]) == 0
    assert "geneval: true > corrupted in 1.000 of 24 pairs" in capsys.readouterr().out
    # a reward that never reads the prompt ties on every pair: refused, not reported as 0.000, and (a Reward class
    # declares it) before its model loads
    import imgalign.rewards.base as base

    with monkeypatch.context() as m:
        m.setattr(base, "build_reward", lambda *a, **k: pytest.fail("the reward's model loaded"))
        assert main(["rewards", "check", "--reward", "artifact", "--n", "4"]) == 2
    assert "does not read the prompt" in capsys.readouterr().err


def test_check_says_when_a_reward_returns_non_finite_scores_or_raises(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An all-NaN reward gets no verdict ('true > corrupted in 0.000 ... mean true nan' read as a bad reward), a
    partly-NaN one a count of those pairs, and one that raises a line naming it instead of a traceback."""
    import sys
    import types

    mod = types.ModuleType("my_lab.check_fns")
    mod.allnan = lambda images, prompts, metadata=None: torch.full((len(prompts),), float("nan"))
    mod.half = lambda images, prompts, metadata=None: torch.tensor(
        [float("nan") if i % 2 else 1.0 for i in range(len(prompts))]
    )

    def boom(images, prompts, metadata=None):
        raise RuntimeError("reward server down")

    mod.boom = boom
    # -inf for prompts of odd length, else 1: a finite true score above a -inf corrupted one is no win either
    mod.neginf = lambda images, prompts, metadata=None: torch.tensor(
        [float("-inf") if len(p) % 2 else 1.0 for p in prompts]
    )
    monkeypatch.setitem(sys.modules, "my_lab.check_fns", mod)
    assert main(["rewards", "check", "--reward", "my_lab.check_fns:neginf", "--n", "32"]) == 0
    assert "true > corrupted in 0.000 of 32 pairs" in capsys.readouterr().out
    assert main(["rewards", "check", "--reward", "my_lab.check_fns:allnan", "--n", "4"]) == 2
    out = capsys.readouterr()
    assert "returned non-finite scores (NaN or inf) for all 4 pairs, so there is no verdict" in out.err
    assert not out.out
    assert main(["rewards", "check", "--reward", "my_lab.check_fns:half", "--n", "4"]) == 0
    assert (
        "mean true 1.0000, corrupted 1.0000; 2 of 4 pairs had a non-finite score" in capsys.readouterr().out
    )
    assert main(["rewards", "check", "--reward", "my_lab.check_fns:boom", "--n", "4"]) == 2
    err = capsys.readouterr().err
    assert (
        "my_lab.check_fns:boom failed while scoring the check's images: RuntimeError: reward server down"
        in err
    )
    assert "(run with -v for the traceback)" in err
    # with -v the reward's own error propagates (its traceback), not a line asking for -v
    with pytest.raises(RuntimeError, match="reward server down"):
        main(["-v", "rewards", "check", "--reward", "my_lab.check_fns:boom", "--n", "4"])


def test_true_vs_corrupted_renders_the_seeds_specs_and_counts_a_non_finite_corrupted_score() -> None:
    """The images are the exact renders of the seed's specs with that seed's noise; a pair whose corrupted score
    alone is NaN is no win and counts as non-finite (the means are over the other pairs: none here)."""
    import math

    from imgalign import shapes as W
    from imgalign.prompts.shapes import sample_training_specs
    from imgalign.rewards.base import RewardOutput
    from imgalign.rewards.sanity import true_vs_corrupted

    seen: list[torch.Tensor] = []

    def nan_on_corrupted(images, prompts, metadata):  # called with the true prompts, then the corrupted ones
        seen.append(images)
        return RewardOutput(torch.full((len(prompts),), 1.0 if len(seen) % 2 else float("nan")))

    res = true_vs_corrupted(nan_on_corrupted, n=4, seed=3, batch_size=4)
    assert torch.equal(seen[0], W.render_tensor(sample_training_specs(4, seed=3), seed=3))
    assert res.n_nonfinite == 4 and res.accuracy == 0.0 and math.isnan(res.mean_true)


def test_corruptions_are_unsatisfied_by_the_true_render() -> None:
    import random

    from imgalign import shapes as W
    from imgalign.eval.geneval import judge
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.prompts.shapes import sample_training_specs
    from imgalign.rewards.sanity import KINDS, applicable_kinds, corrupt_spec

    det, rng, seen = ShapesDetector(), random.Random(0), set()
    for spec in sample_training_specs(60, seed=3):
        img = W.render(spec, 0)[0]
        for kind in applicable_kinds(spec):
            bad, got = corrupt_spec(spec, rng, (kind,))
            assert got == kind and bad.tag == spec.tag and bad.prompt() != spec.prompt()
            assert not judge(img, det(img), bad.to_metadata()).correct, (spec.prompt(), bad.prompt())
            seen.add(kind)
    assert seen == set(KINDS)


def test_a_shape_corruption_moves_the_counting_exclude_and_any_coloured_clause_allows_colour() -> None:
    import random

    from imgalign import shapes as W
    from imgalign.rewards.sanity import applicable_kinds, corrupt_spec

    bad, kind = corrupt_spec(W.counting("circle", 2), random.Random(0), ("shape",))
    new = bad.include[0].shape
    assert kind == "shape" and new != "circle" and bad.exclude == ((new, 3),)  # "exactly 2": no third `new`
    spec = W.Spec("two_object", (W.Clause("circle"), W.Clause("square", color="red")))
    assert applicable_kinds(spec) == ["shape", "colour"]
    rng = random.Random(0)  # either clause's shape may change, never both
    changed = [
        tuple(
            a.shape != b.shape for a, b in zip(spec.include, corrupt_spec(spec, rng, ("shape",))[0].include)
        )
        for _ in range(20)
    ]
    assert set(changed) == {(True, False), (False, True)}


def recording_fitters(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple]:
    """fit_discriminator and fit_artifact replaced by recorders: ``seen["disc"]`` / ``seen["art"]`` = (args,
    kwargs)."""
    seen: dict[str, tuple] = {}
    monkeypatch.setattr(
        "imgalign.rewards.discriminator.fit_discriminator",
        lambda *a, **k: seen.setdefault("disc", (a, k)) and {},
    )
    monkeypatch.setattr(
        "imgalign.rewards.artifact.fit_artifact",
        lambda *a, **k: seen.setdefault("art", (a, k)) and {},
    )
    return seen


def test_fit_commands_pass_every_option_to_the_fitter(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fit-discriminator / fit-artifact hand each flag to the fitter under its own name (real and fake, clean and
    artifact in order); --hidden 0 (a linear head) is allowed; a missing folder is named by its flag."""
    seen = recording_fitters(monkeypatch)
    real = write_folder(tmp_path / "real", shapes_reference_images(2, seed=1))
    fake = write_folder(tmp_path / "fake", shapes_reference_images(2, seed=2))
    big = write_folder(tmp_path / "big", torch.rand(2, 3, 80, 80))
    out = str(tmp_path / "h.safetensors")
    base = ["rewards", "fit-discriminator", "--real", str(real), "--fake", str(fake), "--out", out]
    opts = ["--features", "stats", "--hidden", "0", "--epochs", "7", "--lr", "0.5", "--val-frac", "0.3"]
    assert main([*base, *opts]) == 0
    a, k = seen["disc"]
    assert a == (str(real), str(fake), "stats", out)
    assert k == {"hidden": 0, "epochs": 7, "lr": 0.5, "val_frac": 0.3, "device": "cpu"}
    base = ["rewards", "fit-artifact", "--clean", str(real), "--artifact", str(big), "--out", out]
    assert main([*base, "--hidden", "0", "--epochs", "9", "--val-frac", "0.4"]) == 0
    a, k = seen["art"]
    assert a == (str(real), str(big), "stats", out)
    assert k == {
        "hidden": 0,
        "epochs": 9,
        "val_frac": 0.4,
        "device": "cpu",
        "extra": {"clean": str(real), "artifact": str(big)},
    }
    capsys.readouterr()
    nope = str(tmp_path / "nope")
    a_file = tmp_path / "one.png"  # an image given for its folder is refused as one, not read as a class
    a_file.write_bytes(b"")
    for cmd, flags in (
        ("fit-discriminator", ("--real", "--fake")),
        ("fit-artifact", ("--clean", "--artifact")),
    ):
        for i, flag in enumerate(flags):
            for bad in (nope, str(a_file)):
                dirs = [str(real), str(real)]
                dirs[i] = bad
                assert main(["rewards", cmd, flags[0], dirs[0], flags[1], dirs[1], "--out", out]) == 2
                assert f"{flag} {bad!r} is not a folder" in capsys.readouterr().err
    for cmd, folders in (
        ("fit-discriminator", ("--real", "--fake")),
        ("fit-artifact", ("--clean", "--artifact")),
    ):
        argv = ["rewards", cmd, folders[0], str(real), folders[1], str(real), "--out", out]
        assert main([*argv, "--hidden", "-1"]) == 2
        assert "--hidden must be 0 (a linear head) or more" in capsys.readouterr().err
        # one folder as both classes (also by another spelling of its path) is refused before any image is read
        argv = ["rewards", cmd, folders[0], str(real), folders[1], str(real / ".." / real.name), "--out", out]
        assert main(argv) == 2
        assert f"{folders[0]} and {folders[1]} are the same folder" in capsys.readouterr().err
        # one folder inside the other: the outer class read the inner one's images too (a hidden one is not read)
        inner = write_folder(real / "sub", shapes_reference_images(2))
        for first, second, named in ((real, inner, folders[1]), (inner, real, folders[0])):
            argv = ["rewards", cmd, folders[0], str(first), folders[1], str(second), "--out", out]
            assert main([*argv, "--epochs", "1"]) == 2
            assert f"{named} '{real / 'sub'}' lies inside the" in capsys.readouterr().err
        hidden = write_folder(real / ".hidden", shapes_reference_images(2, seed=3))
        argv = ["rewards", cmd, folders[0], str(real), folders[1], str(hidden), "--out", out, "--epochs", "1"]
        assert main(argv) == 0


def test_build_shapes_artifact_command_writes_where_it_is_told(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--out, --n and --features reach build_shapes_artifact; the shipped model's folder only without --out."""
    from imgalign.hub import ASSETS, EMBEDDED

    calls: list[tuple] = []
    monkeypatch.setattr(
        "imgalign.rewards.artifact.build_shapes_artifact", lambda out, **k: calls.append((out, k)) or {}
    )
    assert (
        main(["rewards", "build-shapes-artifact", "--out", str(tmp_path), "--n", "7", "--features", "x"]) == 0
    )
    assert main(["rewards", "build-shapes-artifact"]) == 0
    assert calls == [
        (tmp_path, {"n": 7, "features": "x"}),
        (ASSETS / EMBEDDED["shapes-artifact"], {"n": 1400, "features": "stats"}),
    ]
    capsys.readouterr()
    # "$OUT" with OUT unset is not "no --out": it overwrote the shipped model
    assert main(["rewards", "build-shapes-artifact", "--out", ""]) == 2
    assert "--out is empty (an unset shell variable?)" in capsys.readouterr().err
    assert len(calls) == 2


def test_fd_of_two_render_sets_and_fid_stats_of_renders(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """'shapes' as both sides of fd is two independent render sets (seeds 0 and 1), not one set against itself;
    fid-stats of renders takes --n of them and records that count."""
    from imgalign.rewards.features import build_features
    from imgalign.rewards.fid import frechet_distance, stats_of

    enc = build_features("stats")
    want = frechet_distance(
        *stats_of(enc(shapes_reference_images(40, seed=0))),
        *stats_of(enc(shapes_reference_images(40, seed=1))),
    )
    assert want > 0
    assert _fd(capsys, "shapes", "shapes", "--features", "stats", "--n", "40") == pytest.approx(
        want, rel=1e-4
    )
    out = tmp_path / "s.safetensors"
    assert (
        main(
            [
                "rewards",
                "fid-stats",
                "--images",
                "shapes",
                "--n",
                "5",
                "--features",
                "stats",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    mu, sigma, n, feats = load_stats(out)
    want_mu, want_sigma = stats_of(enc(shapes_reference_images(5)))
    assert n == 5 and feats == "stats" and mu.shape[0] != 5
    assert torch.allclose(mu, want_mu) and torch.allclose(sigma, want_sigma)
    assert "(5 images," in capsys.readouterr().out
    nope = str(tmp_path / "nope")
    assert main(["rewards", "fid-stats", "--images", nope, "--features", "stats", "--out", str(out)]) == 2
    assert f"--images {nope!r} is not a folder" in capsys.readouterr().err
    assert main(["rewards", "fd", nope, "shapes", "--features", "stats", "--n", "4"]) == 2
    assert f"{nope!r} is not a folder, a stats file or 'shapes'" in capsys.readouterr().err


def test_check_reads_seed_and_kinds_and_reports_each_mean(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rewards check` scores the pairs of its --seed with corruptions of --kinds only (a trailing comma is no
    kind; an unknown kind is refused), passes each image's metadata, and prints the means and accuracies
    true_vs_corrupted gives; a prompt reward that is not ready is refused."""
    import sys
    import types

    from imgalign.rewards.base import Reward, RewardOutput
    from imgalign.rewards.sanity import true_vs_corrupted

    seen: list[tuple[list[str], object]] = []

    def by_length(images, prompts, metadata=None):  # longer prompts score higher: means differ
        seen.append((list(prompts), metadata))
        return torch.tensor([float(len(p)) for p in prompts])

    class NotReady(Reward):
        name = "not_ready"

        def __init__(self, device: str = "cpu", dtype: torch.dtype = torch.float32) -> None:
            super().__init__(device, dtype)

        def score(self, images, prompts, metadata) -> RewardOutput:
            return RewardOutput(torch.zeros(len(prompts)))

        def ready(self) -> bool:
            return False

    mod = types.ModuleType("my_lab.check_seed")
    mod.by_length, mod.NotReady = by_length, NotReady
    monkeypatch.setitem(sys.modules, "my_lab.check_seed", mod)
    argv = ["rewards", "check", "--reward", "my_lab.check_seed:by_length", "--n", "6"]
    assert main([*argv, "--seed", "3", "--kinds", "colour,"]) == 0
    res = true_vs_corrupted(build_reward("my_lab.check_seed:by_length"), n=6, seed=3, kinds=("colour",))
    assert seen[0] == seen[2] and seen[0][1] is not None and len(seen[0][1]) == 6  # same pairs, with metadata
    assert res.mean_true != res.mean_corrupted
    tasks = ", ".join(f"{k} {v:.2f}" for k, v in res.per_task.items())
    kinds = ", ".join(f"{k} {v:.2f}" for k, v in res.per_kind.items())
    # only prompts a colour change applies to (it left the other tasks to shape corruptions)
    assert set(res.per_kind) == {"colour"} and set(res.per_task) <= {"colors", "color_attr"}
    line = (
        f"true > corrupted in {res.accuracy:.3f} of 6 pairs ({tasks}; by corruption: {kinds}); "
        f"mean true {res.mean_true:.4f}, corrupted {res.mean_corrupted:.4f}\n"
    )
    assert capsys.readouterr().out == f"my_lab.check_seed:by_length: {line}"
    assert main([*argv, "--kinds", "colour,shap"]) == 2
    assert "unknown corruption kind(s) ['shap']; valid: shape, colour" in capsys.readouterr().err
    assert main(["rewards", "check", "--reward", "my_lab.check_seed:NotReady", "--n", "2"]) == 2
    assert "my_lab.check_seed:NotReady cannot score yet" in capsys.readouterr().err


def test_too_few_renders_and_no_corruption_kind_are_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--n 0 or 1 renders gave 'need at least one array to stack' (or a covariance error) naming no flag, and
    build-shapes-artifact left an empty folder; an empty --kinds ran shape corruptions only. Refused up front."""

    def no_work(*a, **k):
        raise AssertionError("features were built before --n was checked")

    monkeypatch.setattr("imgalign.rewards.features.build_features", no_work)
    out = tmp_path / "s.safetensors"
    for n in ("0", "1"):
        fid = [
            "rewards",
            "fid-stats",
            "--images",
            "shapes",
            "--features",
            "stats",
            "--n",
            n,
            "--out",
            str(out),
        ]
        assert main(fid) == 2 and not out.exists()
        assert f"--n must be at least 2 (renders for --images shapes; a covariance needs 2), got {n}" in (
            capsys.readouterr().err
        )
        # 'shapes' as either side: the second too (a folder or stats file first)
        for a, b in (("shapes", "shapes"), (str(tmp_path / "imgs"), "shapes")):
            assert main(["rewards", "fd", a, b, "--features", "stats", "--n", n]) == 2
            assert f"--n must be at least 2 (renders for 'shapes'; a covariance needs 2), got {n}" in (
                capsys.readouterr().err
            )
        folder = tmp_path / "art"
        assert main(["rewards", "build-shapes-artifact", "--n", n, "--out", str(folder)]) == 2
        assert not folder.exists() and f"--n must be at least 2 (training images per class), got {n}" in (
            capsys.readouterr().err
        )
    assert main(["rewards", "check", "--reward", "geneval", "--n", "2", "--kinds", ","]) == 2
    assert "--kinds ',' names no corruption kind; give some of: shape, colour" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["fit-discriminator", "--real", "r", "--fake", "f", "--out", "h.safetensors"],
        ["fit-artifact", "--clean", "c", "--artifact", "a", "--out", "h.safetensors"],
        ["fd", "shapes", "shapes"],
        ["check", "--reward", "clip"],
        ["fid-stats", "--images", "shapes", "--out", "s.safetensors"],
    ],
    ids=lambda a: a[0],
)
def test_a_cuda_device_this_machine_lacks_fails_first(argv, tmp_path, capsys, monkeypatch):
    """--device cuda on a machine without one failed with torch's traceback once the work had started."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.chdir(tmp_path)
    assert main(["rewards", *argv, "--device", "cuda"]) == 2
    assert "--device 'cuda': this machine has no CUDA device; use --device cpu" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--epochs", "0"], "--epochs must be at least 1, got 0"),
        (["--lr", "0"], "--lr must be > 0 and finite, got 0.0"),
        (["--lr", "nan"], "--lr must be > 0 and finite, got nan"),
        (["--lr", "inf"], "--lr must be > 0 and finite, got inf"),  # fitted a head of NaN weights
        (["--val-frac", "1"], "--val-frac must be in [0, 1) (the held-out share of each class), got 1.0"),
        (["--val-frac", "-0.1"], "--val-frac must be in [0, 1)"),
    ],
    ids=["epochs0", "lr0", "lrnan", "lrinf", "valfrac1", "valfracneg"],
)
def test_fit_sizes_at_their_boundaries_are_refused_before_any_image_is_read(
    extra, message, tmp_path, capsys, monkeypatch
):
    """--epochs 0 fits nothing, --lr 0 (or nan) never moves the head and --lr inf made its weights NaN, --val-frac 1
    holds out every image: refused naming the flag, before the fitter (and before any image is encoded)."""
    monkeypatch.setattr(
        "imgalign.rewards.discriminator.fit_discriminator", lambda *a, **k: pytest.fail("the fitter ran")
    )
    monkeypatch.setattr(
        "imgalign.rewards.artifact.fit_artifact", lambda *a, **k: pytest.fail("the fitter ran")
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    out = str(tmp_path / "h.safetensors")
    argv = ["rewards", "fit-discriminator", "--real", str(tmp_path / "a"), "--fake", str(tmp_path / "b")]
    assert main([*argv, "--out", out, *extra]) == 2
    assert message in capsys.readouterr().err
    if extra[0] != "--lr":  # fit-artifact has no --lr
        argv = ["rewards", "fit-artifact", "--clean", str(tmp_path / "a"), "--artifact", str(tmp_path / "b")]
        assert main([*argv, "--out", out, *extra]) == 2
        assert message in capsys.readouterr().err


def test_check_counts_a_single_non_finite_pair_and_refuses_n_0(capsys, monkeypatch):
    """One pair with a NaN score is named ('1 of 4 pairs'), as many are; --n 0 checks nothing and is refused."""
    import sys
    import types

    calls: list[int] = []

    def first_nan(images, prompts, metadata=None):
        s = torch.ones(len(prompts))
        if not calls:  # the first score of the first call only
            s[0] = float("nan")
        calls.append(len(prompts))
        return s

    mod = types.ModuleType("my_lab.check_one_nan")
    mod.first_nan = first_nan
    monkeypatch.setitem(sys.modules, "my_lab.check_one_nan", mod)
    assert main(["rewards", "check", "--reward", "my_lab.check_one_nan:first_nan", "--n", "4"]) == 0
    assert "; 1 of 4 pairs had a non-finite score" in capsys.readouterr().out
    assert main(["rewards", "check", "--reward", "my_lab.check_one_nan:first_nan", "--n", "0"]) == 2
    assert "--n must be at least 1 (got 0)" in capsys.readouterr().err


def test_fid_stats_out_that_is_a_folder_is_refused_naming_it(tmp_path, capsys):
    assert main(["rewards", "fid-stats", "--images", "shapes", "--n", "4", "--out", str(tmp_path)]) == 2
    assert (
        f"--out {str(tmp_path)!r} is a folder; give a file name for the statistics" in capsys.readouterr().err
    )


def test_build_shapes_artifact_out_that_is_a_file_is_refused_before_the_renders(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(
        "imgalign.rewards.artifact.build_shapes_artifact",
        lambda *a, **k: pytest.fail("it rendered and fitted"),
    )
    f = tmp_path / "model.txt"
    f.write_text("x")
    assert main(["rewards", "build-shapes-artifact", "--out", str(f), "--n", "4"]) == 2
    assert f"--out {str(f)!r} is a file; give a folder" in capsys.readouterr().err


def test_a_class_folder_with_one_image_is_named(tmp_path, capsys):
    """A head needs 2 images per class; a folder holding one said "need at least 2 examples per class, got 1 and
    3", naming neither folder nor flag."""
    g = torch.Generator().manual_seed(0)
    one = write_folder(tmp_path / "one", torch.rand(1, 3, 16, 16, generator=g))
    three = write_folder(tmp_path / "three", torch.rand(3, 3, 16, 16, generator=g))
    out = str(tmp_path / "h.safetensors")
    common = ["--features", "stats", "--out", out, "--epochs", "1"]
    for argv, flag in (
        (["fit-discriminator", "--real", str(three), "--fake", str(one)], "--fake"),
        (["fit-artifact", "--clean", str(one), "--artifact", str(three)], "--clean"),
    ):
        assert main(["rewards", *argv, *common]) == 2
        err = capsys.readouterr().err
        assert f"{flag} {str(one)!r} holds 1 image(s); a head needs at least 2 per class" in err, err
    assert not Path(out).exists()


def test_an_out_with_an_image_name_is_refused_and_the_image_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """fit-discriminator, fit-artifact and fid-stats --out DIR/0000.png (an image of the folder just read) wrote the
    safetensors result over that image; an image suffix is refused before any image is read."""
    real = write_folder(tmp_path / "real", shapes_reference_images(2, seed=1))
    fake = write_folder(tmp_path / "fake", shapes_reference_images(2, seed=2))
    image = real / "0000.png"
    before = image.read_bytes()
    for argv, what in (
        (["fit-discriminator", "--real", str(real), "--fake", str(fake)], "head"),
        (["fit-artifact", "--clean", str(real), "--artifact", str(fake)], "head"),
        (["fid-stats", "--images", str(real)], "statistics"),
    ):
        assert main(["rewards", *argv, "--features", "stats", "--out", str(image)]) == 2
        assert f"is an image name, but the {what} is written as a safetensors file" in capsys.readouterr().err
        assert image.read_bytes() == before


def test_fit_artifact_names_an_unknown_encoder_before_reading_the_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fit-artifact read (and decoded) both class folders before it found --features mistyped."""
    real = write_folder(tmp_path / "real", shapes_reference_images(2, seed=1))
    fake = write_folder(tmp_path / "fake", shapes_reference_images(2, seed=2))

    def no_reading(*args, **kwargs):
        raise AssertionError("a folder was read before --features was checked")

    monkeypatch.setattr("imgalign.rewards.io.load_image_folder", no_reading)
    monkeypatch.setattr("imgalign.rewards.io.encode_image_folder", no_reading)
    argv = ["rewards", "fit-artifact", "--clean", str(real), "--artifact", str(fake), "--features", "stat"]
    assert main([*argv, "--out", str(tmp_path / "h.safetensors")]) == 2
    assert "unknown feature encoder 'stat'" in capsys.readouterr().err
