"""FD math against scipy, running sums, subset-replace rewards (exact vs fast), the fid reward's state."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from imgalign.rewards.fid import (
    FIDReward,
    frechet_distance,
    load_stats,
    mean_cov,
    replace_one_fd_exact,
    replace_one_fd_fast,
    save_stats,
    stats_of,
    trace_sqrt_rank_one_delta,
)

torch.set_num_threads(1)


def scipy_fd(mu1: np.ndarray, s1: np.ndarray, mu2: np.ndarray, s2: np.ndarray) -> float:
    """The pytorch-fid formula, independently: sqrtm of the (non-symmetric) product."""
    covmean = scipy.linalg.sqrtm(s1 @ s2)
    covmean = covmean.real
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))


def _random_stats(rng: np.random.Generator, d: int, n: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    a = rng.normal(size=(d, d)) / np.sqrt(d)
    x = rng.normal(size=(n, d)) @ a + shift
    return x.mean(0), np.cov(x, rowvar=False)


def test_fd_matches_scipy_sqrtm() -> None:
    rng = np.random.default_rng(0)
    for d in (5, 32):
        mu1, s1 = _random_stats(rng, d, 4 * d, 0.0)
        mu2, s2 = _random_stats(rng, d, 4 * d, 0.3)
        ours = frechet_distance(*(torch.from_numpy(v) for v in (mu1, s1, mu2, s2)))
        ref = scipy_fd(mu1, s1, mu2, s2)
        assert abs(ours - ref) / abs(ref) < 1e-6


def test_fd_hand_computed_diagonal() -> None:
    # diagonal covariances: FD = |mu1-mu2|^2 + sum (sqrt(a) - sqrt(b))^2
    mu1, mu2 = torch.tensor([0.0, 1.0]), torch.tensor([1.0, 1.0])
    s1, s2 = torch.diag(torch.tensor([4.0, 1.0])), torch.diag(torch.tensor([1.0, 9.0]))
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(1 + (2 - 1) ** 2 + (1 - 3) ** 2, rel=1e-12)


def test_running_sums_match_numpy_cov() -> None:
    x = torch.randn(50, 6, dtype=torch.float64)
    mu, cov = mean_cov(x.sum(0), x.T @ x, 50)
    assert torch.allclose(mu, x.mean(0))
    assert torch.allclose(cov, torch.from_numpy(np.cov(x.numpy(), rowvar=False)), atol=1e-12)


def _set_up(d: int = 16, n: int = 200, b: int = 24, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(400, d, generator=g, dtype=torch.float64)
    gen = torch.randn(n, d, generator=g, dtype=torch.float64) * 1.3 + 0.4
    new = torch.randn(b, d, generator=g, dtype=torch.float64) * torch.linspace(0.5, 2.0, b)[:, None]
    mu_r, s_r = stats_of(ref)
    from imgalign.rewards.fid import psd_sqrt

    return gen.sum(0), gen.T @ gen, n, gen[0], new, mu_r, s_r, psd_sqrt(s_r), gen


def test_exact_replace_matches_recomputation() -> None:
    s1, s2, n, removed, new, mu_r, s_r, sq, gen = _set_up()
    exact = replace_one_fd_exact(s1, s2, n, removed, new, mu_r, s_r, sq)
    for i in (0, 7):
        feats = torch.cat([gen[1:], new[i : i + 1]])
        mu, cov = stats_of(feats)
        assert exact[i].item() == pytest.approx(frechet_distance(mu_r, s_r, mu, cov), rel=1e-9)


@pytest.mark.parametrize("d,n", [(32, 300), (48, 30)])  # full-rank and rank-deficient (n < d) sets
def test_fast_mode_matches_exact(d: int, n: int) -> None:
    from scipy.stats import spearmanr

    s1, s2, n, removed, new, mu_r, s_r, sq, _ = _set_up(d=d, n=n, b=48)
    exact = replace_one_fd_exact(s1, s2, n, removed, new, mu_r, s_r, sq)
    fast = replace_one_fd_fast(s1, s2, n, removed, new, mu_r, s_r, sq)
    mu, cov = mean_cov(s1, s2, n)
    before = frechet_distance(mu_r, s_r, mu, cov, sq)
    assert spearmanr(before - exact.numpy(), before - fast.numpy()).statistic >= 0.999
    assert torch.allclose(fast, exact, rtol=1e-7)


@pytest.mark.parametrize("zeros", [0, 3])
def test_rank_one_trace_sqrt_against_eigvalsh(zeros: int) -> None:
    g = torch.Generator().manual_seed(1)
    lam = torch.rand(20, generator=g, dtype=torch.float64) * 10 + 0.01
    lam = torch.cat([torch.zeros(zeros, dtype=torch.float64), lam]).sort().values
    z = torch.randn(4, lam.shape[0], generator=g, dtype=torch.float64)
    delta = trace_sqrt_rank_one_delta(lam, z, 0.3)
    for i in range(4):
        m = torch.diag(lam) + 0.3 * torch.outer(z[i], z[i])
        full = torch.linalg.eigvalsh(m).clamp(min=0).sqrt().sum() - lam.sqrt().sum()
        # with zero eigenvalues eigvalsh's own round-off (~1e-15) turns into ~3e-8 after the square root
        assert delta[i].item() == pytest.approx(full.item(), rel=1e-10 if zeros == 0 else 1e-7)


def test_rank_one_trace_sqrt_on_a_zero_or_tiny_spectrum_is_the_closed_form() -> None:
    """With λ = 0 (a set whose covariance is 0 along S), diag(λ) + ρ z zᵀ has the one eigenvalue ρ‖z‖², so
    Δ = √(ρ‖z‖²); the quadrature window must follow ρ‖z‖² (not only max λ) to find it. Same with a tiny spectrum
    next to a large update: Δ = √(λ₀ + ρ z₀²) − √λ₀ for z along one axis."""
    z = torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.0, 2.0]], dtype=torch.float64)  # ‖z‖² = 25, 4
    delta = trace_sqrt_rank_one_delta(torch.zeros(3, dtype=torch.float64), z, 0.25)
    torch.testing.assert_close(delta, torch.tensor([2.5, 1.0], dtype=torch.float64), rtol=1e-9, atol=0)
    lam = torch.tensor([1e-6, 1e-6], dtype=torch.float64)
    delta = trace_sqrt_rank_one_delta(lam, torch.tensor([[100.0, 0.0]], dtype=torch.float64), 1.0)
    assert delta.item() == pytest.approx(math.sqrt(1e-6 + 1e4) - math.sqrt(1e-6), rel=1e-9)


def test_stats_file_roundtrip(tmp_path) -> None:
    mu, sigma = torch.randn(4, dtype=torch.float64), torch.eye(4, dtype=torch.float64)
    save_stats(tmp_path / "s.safetensors", mu, sigma, 10, "stats")
    mu2, sigma2, n, feats = load_stats(tmp_path / "s.safetensors")
    assert torch.equal(mu, mu2) and torch.equal(sigma, sigma2) and n == 10 and feats == "stats"


def test_fid_reward_prefers_samples_that_close_the_gap() -> None:
    r = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=40)
    from imgalign.rewards.fid import shapes_reference_images

    real = shapes_reference_images(24, seed=5)
    noise = torch.rand(24, 3, 64, 64)
    r.update(noise[:16])
    r.update(real[:8] * 0.5)  # degraded set
    out = r(torch.cat([real[8:16], noise[16:24]]), [""] * 16)
    assert out.scores.dtype == torch.float32 and out.scores.shape == (16,)
    assert out.scores[:8].mean() > out.scores[8:].mean()
    state = r.state_dict()
    r2 = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=40)
    r2.load_state_dict(state)
    # the running sums are restored, not rebuilt from the buffer (that differs in the last bits): scores are exact
    assert torch.equal(r2.sum2, r.sum2) and torch.equal(r2.sum1, r.sum1)
    assert torch.equal(r2(real[8:10], ["", ""]).scores, r(real[8:10], ["", ""]).scores)
    group = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=40, mode="group")
    group.load_state_dict(state)
    g = group(real[8:12], [""] * 4).scores
    assert torch.all(g == g[0]) and g[0] > 0


def test_an_empty_set_gives_no_reward_and_a_nan_image_does_not_poison_the_set(caplog) -> None:
    """With no generated set, a batch gets NaN (masked by the trainer) instead of being scored against itself, and
    scoring leaves the set alone: update() adds the samples, once (scoring pushed them too, so the trainer's first
    batch entered the set twice); a NaN image gets NaN and stays out of the set, so later batches score as without
    it."""
    from imgalign.rewards.fid import shapes_reference_images

    real = shapes_reference_images(12, seed=5)
    r = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=40)
    assert not r.ready()
    batch = torch.rand(6, 3, 64, 64)
    with caplog.at_level("WARNING"):
        first = r(batch, [""] * 6).scores
    assert torch.isnan(first).all() and not r.ready() and "fewer than 2 members" in caplog.text
    r.update(batch, [""] * 6)  # as the trainer does after the step
    assert r.ready() and r.state_dict()["buffer"].shape[0] == 6
    clean = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=40)
    clean.load_state_dict(r.state_dict())
    bad = torch.rand(2, 3, 64, 64)
    bad[1] = float("nan")
    r.update(bad[1:])  # a NaN image pushed: left out
    out = r(torch.cat([real[:3], bad[1:]]), [""] * 4).scores
    assert torch.isfinite(out[:3]).all() and torch.isnan(out[3])
    torch.testing.assert_close(out[:3], clean(real[:3], [""] * 3).scores)
    # score() given only NaN images (__call__ keeps them from it; the fast mode would solve for no sample): all NaN
    assert torch.isnan(r.score(bad[1:].expand(3, -1, -1, -1), [""] * 3, None).scores).all()


def test_an_image_with_one_nan_pixel_is_left_out_like_a_nan_image() -> None:
    """One NaN pixel makes only some of the stats features NaN (those of its channel): the row is still not finite,
    so it stays out of the set (the sums would be NaN for good) and its own reward is NaN, the others' finite."""
    r = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=40)
    g = torch.Generator().manual_seed(1)
    imgs = torch.rand(5, 3, 64, 64, generator=g)
    imgs[4, 0, 3, 3] = float("nan")
    f = r.encoder(imgs[4:]).double()
    assert torch.isfinite(f).any() and not torch.isfinite(f).all()  # a partly NaN feature row
    out = r.update(imgs[:4])
    assert out["fid/set_size"] == 4.0  # the set's size, not set_size
    r.update(imgs[4:])
    assert r.buffer.shape[0] == 4 and torch.isfinite(r.sum1).all() and torch.isfinite(r.sum2).all()
    scores = r(imgs[2:], [""] * 3).scores
    assert torch.isfinite(scores[:2]).all() and torch.isnan(scores[2])


def test_a_full_set_slides_scores_against_its_oldest_member_and_keeps_the_newest_on_resume() -> None:
    """set_size=4 with 6 samples pushed: the set is the last 4 (sums, mean and covariance as recomputed from them);
    a sample's reward replaces the oldest member (a direct FD recomputation); mode=group replaces the B oldest
    (all of them when B > set_size); a state loaded with a smaller set_size keeps the newest members."""
    g = torch.Generator().manual_seed(3)
    imgs = torch.rand(11, 3, 64, 64, generator=g)
    r = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=4, exact=True)
    feats = r.encoder(imgs).double()  # (11, d)
    r.update(imgs[:3])
    logged = r.update(imgs[3:6])  # 6 pushed: feats 0 and 1 evicted

    def fd(members: torch.Tensor) -> float:
        return frechet_distance(r.mu_ref, r.sigma_ref, *stats_of(members))

    kept = feats[2:6]
    assert torch.equal(r.buffer, kept)
    torch.testing.assert_close(r.sum1, kept.sum(0))
    torch.testing.assert_close(r.sum2, kept.T @ kept)
    mu, cov = mean_cov(r.sum1, r.sum2, 4)
    mu_k, cov_k = stats_of(kept)
    torch.testing.assert_close(mu, mu_k)
    torch.testing.assert_close(cov, cov_k)
    assert r.current_fd() == pytest.approx(fd(kept), rel=1e-9)
    assert logged == {"fid/set_size": 4.0, "fid/fd": r.current_fd()}
    # a sample replaces the oldest member, feats[2]
    out = r(imgs[6:8], ["", ""])
    for i in (6, 7):
        want = fd(kept) - fd(torch.cat([feats[3:6], feats[i : i + 1]]))
        assert out.scores[i - 6].item() == pytest.approx(want, rel=1e-5, abs=1e-6)
    # group mode: B = 2 replaces the 2 oldest; B = 5 > set_size replaces all 4 with the batch's first 4
    group = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=4, mode="group")
    group.load_state_dict(r.state_dict())
    two = group(imgs[6:8], ["", ""]).scores
    want = fd(kept) - fd(torch.cat([feats[4:6], feats[6:8]]))
    assert two[0].item() == pytest.approx(want, rel=1e-5, abs=1e-6) and torch.all(two == two[0])
    five = group(imgs[6:11], [""] * 5).scores
    assert five[0].item() == pytest.approx(fd(kept) - fd(feats[6:10]), rel=1e-5, abs=1e-6)
    # resumed with a smaller set: the 2 newest, sums rebuilt from them
    small = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=2)
    small.load_state_dict(r.state_dict())
    assert torch.equal(small.buffer, feats[4:6])
    torch.testing.assert_close(small.sum1, feats[4:6].sum(0))
    torch.testing.assert_close(small.sum2, feats[4:6].T @ feats[4:6])


def test_score_asks_for_a_generated_set(tmp_path, capsys) -> None:
    from PIL import Image

    from imgalign.cli import main

    Image.new("RGB", (64, 64)).save(tmp_path / "a.png")
    argv = [
        "score",
        str(tmp_path / "a.png"),
        "--reward",
        "fid:features=stats,ref_size=16",
        "--out",
        str(tmp_path / "s.jsonl"),
    ]
    assert main(argv) == 2
    assert "give init=FOLDER" in capsys.readouterr().err


def test_fid_needs_two_members_and_stats_of_its_own_features(tmp_path) -> None:
    """set_size < 2 is refused; one member is no set (a covariance needs 2): scores are NaN, not an error; a
    stats file of another encoder is refused by name."""
    with pytest.raises(ValueError, match="set_size must be at least 2"):
        FIDReward(features="stats", ref_size=16, set_size=1)
    r = FIDReward(features="stats", ref="shapes", ref_size=16, set_size=4)
    r.update(torch.rand(1, 3, 64, 64))
    assert not r.ready() and torch.isnan(r(torch.rand(2, 3, 64, 64), ["", ""]).scores).all()
    save_stats(tmp_path / "s.safetensors", r.mu_ref, r.sigma_ref, 16, "shapes-clip")
    with pytest.raises(ValueError, match="computed with features 'shapes-clip', not 'stats'"):
        FIDReward(features="stats", ref=str(tmp_path / "s.safetensors"))


def test_fid_ref_shapes_needs_two_renders_and_says_which_option(tmp_path) -> None:
    """ref=shapes with ref_size 1 said "need at least 2 samples for a covariance, got 1" and with 0 "need at least one
    array to stack", neither naming the option; the message names ref_size. A stats file ignores ref_size."""
    for n in (0, 1):
        with pytest.raises(ValueError, match=f"fid reward: ref_size must be at least 2 .*got {n}"):
            FIDReward(features="stats", ref="shapes", ref_size=n)
    r = FIDReward(features="stats", ref="shapes", ref_size=2)
    save_stats(tmp_path / "s.safetensors", r.mu_ref, r.sigma_ref, 2, "stats")
    assert FIDReward(features="stats", ref=str(tmp_path / "s.safetensors"), ref_size=1).mu_ref.equal(r.mu_ref)


def test_save_stats_refuses_a_folder(tmp_path) -> None:
    """A folder given as the stats file is refused by name (os.replace onto it failed after writing a temp file)."""
    with pytest.raises(IsADirectoryError, match="is a folder; give a file name for the statistics"):
        save_stats(tmp_path, torch.zeros(2), torch.eye(2), 2, "stats")
    assert list(tmp_path.iterdir()) == []


def test_mean_cov_refuses_one_sample_and_stats_files_of_another_kind(tmp_path) -> None:
    """One sample has no covariance (n − 1 = 0): refused, not a division by zero; a safetensors file that is not
    imgalign FID statistics (no kind tag) is refused by name."""
    from safetensors.torch import save_file

    x = torch.ones(1, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="need at least 2 samples"):
        mean_cov(x.sum(0), x.T @ x, 1)
    save_file({"mu": torch.zeros(3), "sigma": torch.eye(3)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="is not an imgalign FID stats file"):
        load_stats(tmp_path / "other.safetensors")


def test_stats_of_fewer_images_than_feature_dimensions_warn(caplog) -> None:
    """2 images in 64-d features gave an FD (18596 for two render sets) printed as a plain number."""
    import logging

    with caplog.at_level(logging.WARNING):
        stats_of(torch.randn(3, 5))
        assert "FID statistics of 3 images in 5-d features: the covariance is singular" in caplog.text
        caplog.clear()
        stats_of(torch.randn(6, 5))
        assert caplog.text == ""


def test_a_damaged_stats_file_is_refused_by_name(tmp_path) -> None:
    """NaN/inf values, shapes that do not fit, missing metadata or an image count below 2 in a stats file gave an FD of nan printed as a
    result, a LinAlgError or shape traceback, or a bare 'error: features'; each is now refused naming the file."""
    from safetensors.torch import save_file

    meta = {"kind": "imgalign-fid-stats", "features": "stats", "n": "10"}
    mu, sigma = torch.zeros(3, dtype=torch.float64), torch.eye(3, dtype=torch.float64)
    for name, tensors, m, msg in (
        (
            "nan",
            {"mu": mu, "sigma": sigma * float("nan")},
            meta,
            "NaN or inf values; recompute them with `imgalign",
        ),
        ("inf", {"mu": mu + float("inf"), "sigma": sigma}, meta, "hold NaN or inf values"),
        ("shape", {"mu": mu, "sigma": sigma[:2]}, meta, r"sigma \(2, 3\)"),
        ("mu2d", {"mu": mu[None], "sigma": sigma}, meta, r"mu \(1, 3\)"),
        ("nofeat", {"mu": mu, "sigma": sigma}, {**meta, "features": ""}, "images and features"),
        ("badn", {"mu": mu, "sigma": sigma}, {**meta, "n": "many"}, "n of at least 2 images and features"),
        ("n1", {"mu": mu, "sigma": sigma}, {**meta, "n": "1"}, "n of at least 2 images"),
        # isdigit() takes '²', which int() refuses ("invalid literal for int()")
        ("nsup", {"mu": mu, "sigma": sigma}, {**meta, "n": "²"}, "n of at least 2 images"),
    ):
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp_path / f"{name}.safetensors"), m)
        with pytest.raises(ValueError, match=rf"{name}.safetensors.*{msg}"):
            load_stats(tmp_path / f"{name}.safetensors")
    # whole, but of other dimensions than the features (another model under that name): a shape traceback, then
    # refused at the first update, after the model loaded and a rollout was drawn; now when the reward is built
    save_stats(tmp_path / "d3.safetensors", mu, sigma, 10, "stats")
    with pytest.raises(
        ValueError,
        match=r"d3.safetensors holds 3-d features; 'stats' gives \d+-d ones: .*fid-stats --features stats",
    ):
        FIDReward(features="stats", ref=str(tmp_path / "d3.safetensors"))


def test_a_full_set_resumes_with_its_saved_sums_and_an_old_state_rebuilds_them() -> None:
    """A set that is full (the usual case in a long run) and has slid resumes with its saved running sums; a state
    without sums (an older one) rebuilds them from the buffer; a state of another encoder is refused."""
    g = torch.Generator().manual_seed(4)
    r = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=6)
    for _ in range(4):
        r.update(torch.rand(3, 3, 64, 64, generator=g))  # 12 pushed: full, 6 evicted
    state = r.state_dict()
    assert state["buffer"].shape[0] == 6
    resumed = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=6)
    resumed.load_state_dict(state)
    assert torch.equal(resumed.sum1, r.sum1) and torch.equal(resumed.sum2, r.sum2)
    old = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=6)
    old.load_state_dict({k: v for k, v in state.items() if k not in ("sum1", "sum2")})
    torch.testing.assert_close(old.sum1, state["buffer"].sum(0))
    torch.testing.assert_close(old.sum2, state["buffer"].T @ state["buffer"])
    with pytest.raises(ValueError, match="state was saved with features 'shapes-clip', not 'stats'"):
        resumed.load_state_dict({**state, "features": "shapes-clip"})


def test_a_saved_state_is_a_copy_of_the_running_sums() -> None:
    """state_dict copies the sums: later updates (in place, +=) do not change a state already taken."""
    g = torch.Generator().manual_seed(5)
    r = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=8)
    r.update(torch.rand(3, 3, 64, 64, generator=g))
    state = r.state_dict()
    s1, s2 = state["sum1"].clone(), state["sum2"].clone()
    r.update(torch.rand(2, 3, 64, 64, generator=g))
    assert torch.equal(state["sum1"], s1) and torch.equal(state["sum2"], s2)
    resumed = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=8)
    resumed.load_state_dict(state)
    resumed.update(torch.rand(2, 3, 64, 64, generator=g))
    assert torch.equal(state["sum1"], s1) and torch.equal(state["sum2"], s2)


def test_init_starts_from_a_folder_and_only_sample_and_group_modes_exist(tmp_path) -> None:
    """init=FOLDER fills the set with that folder's images (oldest first), so the reward is ready at once; a mode
    other than sample/group is refused, and group mode is refused for training."""
    from PIL import Image

    g = torch.Generator().manual_seed(6)
    for i, im in enumerate(torch.rand(3, 64, 64, 3, generator=g)):
        Image.fromarray((im.numpy() * 255).astype(np.uint8)).save(tmp_path / f"{i}.png")
    from imgalign.rewards.io import load_image_folder

    r = FIDReward(features="stats", ref="shapes", ref_size=16, set_size=8, init=str(tmp_path))
    feats = r.encoder(load_image_folder(tmp_path)).double()
    assert r.ready() and torch.equal(r.buffer, feats)
    torch.testing.assert_close(r.sum1, feats.sum(0))
    # ref=FOLDER: the reference statistics are those of every image in the folder
    ref = FIDReward(features="stats", ref=str(tmp_path), set_size=8)
    mu, sigma = stats_of(feats)
    torch.testing.assert_close(ref.mu_ref, mu)
    torch.testing.assert_close(ref.sigma_ref, sigma)
    with pytest.raises(ValueError, match="mode must be 'sample' or 'group', got 'batch'"):
        FIDReward(features="stats", ref_size=16, mode="batch")
    assert (
        FIDReward.training_error({"mode": "group"}) and FIDReward.training_error({"mode": "sample"}) is None
    )


def test_ref_shapes_uses_ref_size_seeded_renders() -> None:
    """ref=shapes: the reference statistics are those of the first `ref_size` seeded training renders."""
    from imgalign.rewards.fid import shapes_reference_images

    r = FIDReward(features="stats", ref="shapes", ref_size=12, set_size=4)
    mu, sigma = stats_of(r.encoder(shapes_reference_images(12)))
    torch.testing.assert_close(r.mu_ref, mu)
    torch.testing.assert_close(r.sigma_ref, sigma)


def test_a_collapsed_set_scores_its_own_image_zero_in_both_modes() -> None:
    """A set of 4 copies of one image (a collapsed generator) scored on that image: replacing a member changes
    nothing, so the reward is 0. The fast mode gave NaN (its quadrature window is scaled by the set's spread and the
    update, both 0 here), which the trainer masks."""
    img = torch.full((1, 3, 64, 64), 0.5)
    for exact in (False, True):
        r = FIDReward(features="stats", ref="shapes", ref_size=64, set_size=4, exact=exact)
        r.update(img.expand(4, -1, -1, -1))
        assert r(img.expand(2, -1, -1, -1), ["", ""]).scores.tolist() == pytest.approx([0.0, 0.0], abs=1e-6)


def test_stats_of_as_many_images_as_dimensions_or_two_images_warn(caplog) -> None:
    """n = d samples span at most d - 1 dimensions around their mean (singular), and so do 2 images (the smallest
    set a covariance allows) in 5-d features: both warn."""
    import logging

    with caplog.at_level(logging.WARNING):
        stats_of(torch.randn(5, 5))
        assert "FID statistics of 5 images in 5-d features: the covariance is singular" in caplog.text
        caplog.clear()
        stats_of(torch.randn(2, 5))
        assert "FID statistics of 2 images in 5-d features" in caplog.text


def test_a_safetensors_file_without_the_stats_kind_tag_is_refused(tmp_path) -> None:
    """mu, sigma, n and features all present, but no kind tag (another tool's file): not read as FID statistics,
    and the error says how to write them."""
    from safetensors.torch import save_file

    save_file(
        {"mu": torch.zeros(3, dtype=torch.float64), "sigma": torch.eye(3, dtype=torch.float64)},
        str(tmp_path / "x.safetensors"),
        {"features": "stats", "n": "10"},
    )
    with pytest.raises(
        ValueError, match=r"x.safetensors is not an imgalign FID stats file \(write one with `imga"
    ):
        load_stats(tmp_path / "x.safetensors")


def test_update_logs_the_fd_from_two_members_and_training_takes_the_default_mode() -> None:
    """The set's FD is logged as soon as it has 2 members (a covariance); the default mode (sample) trains."""
    r = FIDReward(features="stats", ref="shapes", ref_size=16, set_size=4)
    g = torch.Generator().manual_seed(9)
    assert r.update(torch.rand(1, 3, 64, 64, generator=g)) == {"fid/set_size": 1.0}
    assert r.update(torch.rand(1, 3, 64, 64, generator=g)) == {"fid/set_size": 2.0, "fid/fd": r.current_fd()}
    assert FIDReward.training_error({}) is None


def test_the_fid_reward_is_stateful_and_exact_picks_the_per_sample_eigensolve(monkeypatch) -> None:
    """The trainer updates and checkpoints only stateful rewards (fid's set would stay empty: every reward NaN);
    exact=true scores with replace_one_fd_exact, the default with replace_one_fd_fast (their values agree)."""
    import imgalign.rewards.fid as fid

    calls: list[str] = []

    def spy(name: str):
        def run(*args: torch.Tensor) -> torch.Tensor:
            calls.append(name)
            return torch.zeros(args[4].shape[0], dtype=torch.float64)

        return run

    monkeypatch.setattr(fid, "replace_one_fd_exact", spy("exact"))
    monkeypatch.setattr(fid, "replace_one_fd_fast", spy("fast"))
    g = torch.Generator().manual_seed(10)
    imgs = torch.rand(4, 3, 64, 64, generator=g)
    for exact in (True, False):
        r = FIDReward(features="stats", ref="shapes", ref_size=16, set_size=4, exact=exact)
        assert r.stateful
        r.update(imgs[:3])
        r(imgs[3:], [""])
    assert calls == ["exact", "fast"]


def test_sample_details_hold_the_fd_before_and_after_that_samples_replacement() -> None:
    """Each sample's details: fd_before (the set's FD, shared) and its own fd_after; the reward is their difference."""
    g = torch.Generator().manual_seed(11)
    r = FIDReward(features="stats", ref="shapes", ref_size=16, set_size=6)
    r.update(torch.rand(6, 3, 64, 64, generator=g))
    out = r(torch.rand(3, 3, 64, 64, generator=g) * torch.tensor([0.2, 0.6, 1.0]).view(3, 1, 1, 1), [""] * 3)
    before = [d["fd_before"] for d in out.details]
    after = [d["fd_after"] for d in out.details]
    assert before == [r.current_fd()] * 3 and len(set(after)) == 3
    assert out.scores.tolist() == pytest.approx([before[0] - a for a in after], rel=1e-5)


def test_a_state_of_exactly_set_size_members_keeps_its_saved_sums() -> None:
    """A full set (as many members as set_size) resumes with the sums saved beside it, not sums rebuilt from the
    buffer (stats features are float32, so here both are exact and equal: the saved ones are marked to tell)."""
    g = torch.Generator().manual_seed(12)
    r = FIDReward(features="stats", ref="shapes", ref_size=16, set_size=4)
    r.update(torch.rand(5, 3, 64, 64, generator=g))
    state = r.state_dict()
    state["sum1"] = state["sum1"] + 1e-9
    resumed = FIDReward(features="stats", ref="shapes", ref_size=16, set_size=4)
    resumed.load_state_dict(state)
    assert resumed.buffer.shape[0] == 4 and torch.equal(resumed.sum1, state["sum1"])


def test_group_mode_score_gives_nan_to_a_sample_whose_features_are_not_finite() -> None:
    """score() called directly (an encoder may overflow on a finite image): in group mode the non-finite sample gets
    NaN and stays out of the replacement; the others share the group's reward."""
    g = torch.Generator().manual_seed(13)
    r = FIDReward(features="stats", ref="shapes", ref_size=16, set_size=6, mode="group")
    r.update(torch.rand(6, 3, 64, 64, generator=g))
    imgs = torch.rand(3, 3, 64, 64, generator=g)
    imgs[1] = float("nan")
    s = r.score(imgs, [""] * 3, None).scores
    assert torch.isnan(s[1]) and bool(torch.isfinite(s[[0, 2]]).all()) and s[0] == s[2]
    torch.testing.assert_close(s[[0, 2]], r.score(imgs[[0, 2]], [""] * 2, None).scores)


def test_a_generated_set_no_larger_than_the_feature_dimension_is_warned_of(caplog):
    """set_size <= d gives the generated set a singular covariance (768-d DINOv2 features with the default 512), as
    stats_of warns of a reference set; nothing said it. 59-d stats features: 59 warns, 60 does not."""
    with caplog.at_level("WARNING"):
        FIDReward(features="stats", ref="shapes", ref_size=80, set_size=59)
    assert (
        "fid reward: set_size 59 <= the 59-d stats features: the generated set's covariance is singular"
        in (caplog.text)
    )
    caplog.clear()
    with caplog.at_level("WARNING"):
        FIDReward(features="stats", ref="shapes", ref_size=80, set_size=60)
    assert "set_size" not in caplog.text


def test_a_stats_file_with_a_non_symmetric_covariance_is_refused_by_name(tmp_path) -> None:
    """The matrix square root reads one triangle of sigma: a hand-edited or foreign file's other triangle was
    ignored without a word (an FD of another covariance); a covariance is symmetric, so it is refused. The
    float-exact symmetry save_stats writes, and a tiny rounding difference, load."""
    from safetensors.torch import save_file

    meta = {"kind": "imgalign-fid-stats", "features": "stats", "n": "10"}
    mu = torch.zeros(3, dtype=torch.float64)
    lower = torch.tensor([[2.0, 0.0, 0.0], [0.5, 1.0, 0.0], [0.1, 0.2, 3.0]], dtype=torch.float64)
    save_file({"mu": mu, "sigma": lower}, str(tmp_path / "tri.safetensors"), meta)
    with pytest.raises(
        ValueError, match=r"tri.safetensors: its FID covariance sigma is not symmetric \(.* 0.5\)"
    ):
        load_stats(tmp_path / "tri.safetensors")
    sym = lower + lower.T
    near = sym.clone()
    near[0, 1] += 1e-9
    save_file({"mu": mu, "sigma": near}, str(tmp_path / "near.safetensors"), meta)
    assert torch.equal(load_stats(tmp_path / "near.safetensors")[1], near)
