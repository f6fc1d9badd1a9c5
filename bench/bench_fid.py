"""Benchmark the FD reward math at d = 2048, B = 64 (defaults), side by side:

1. one FD: the symmetric eigvalsh form (S = Σ_ref^½ precomputed, as the reward does) vs scipy.linalg.sqrtm of the
   product (pytorch-fid's form), with the relative difference of the two values;
2. per-sample subset-replace rewards for a batch: exact (one eigvalsh per sample) vs fast (exact rank-one update,
   one eigh per batch + a Sherman-Morrison integral per sample), with the speed ratio, the largest relative error and Spearman's rho.

``--exact-samples K`` times the exact mode on K of the B samples and scales the time by B / K (its cost is linear in
B); the output says when it does. Run: ``python bench/bench_fid.py [--d 2048] [--batch 64] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.linalg
import torch
from scipy.stats import spearmanr

from imgalign.rewards.fid import (
    frechet_distance,
    mean_cov,
    psd_sqrt,
    replace_one_fd_exact,
    replace_one_fd_fast,
    trace_sqrt_product,
)
from imgalign.trainers.testing import int_at_least, positive_int


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d", type=positive_int, default=2048, help="feature dimension")
    ap.add_argument("--batch", type=positive_int, default=64, help="samples scored per batch (B)")
    ap.add_argument("--set-size", type=int_at_least(2), default=4096, help="generated reference set size")
    ap.add_argument("--exact-samples", type=int, default=0, help="time exact mode on K samples (0: all B)")
    ap.add_argument("--threads", type=positive_int, default=1)
    args = ap.parse_args()
    if not 0 <= args.exact_samples <= args.batch:
        raise SystemExit(f"--exact-samples must be in 0..--batch ({args.batch}), got {args.exact_samples}")
    torch.set_num_threads(args.threads)
    d, b, n = args.d, args.batch, args.set_size
    g = torch.Generator().manual_seed(0)
    print(f"d={d} B={b} set_size={n} threads={args.threads}")

    # reference: Σ_ref = A Aᵀ / d + 0.05 I; generated set: n samples from a shifted, differently mixed Gaussian
    a = torch.randn(d, d, generator=g, dtype=torch.float64)
    sigma_ref = a @ a.T / d + 0.05 * torch.eye(d, dtype=torch.float64)
    mu_ref = torch.zeros(d, dtype=torch.float64)
    mix = (
        torch.eye(d, dtype=torch.float64) + 0.3 * torch.randn(d, d, generator=g, dtype=torch.float64) / d**0.5
    )
    gen = torch.randn(n, d, generator=g, dtype=torch.float64) @ mix + 0.05
    sum1, sum2 = gen.sum(0), gen.T @ gen
    mu, cov = mean_cov(sum1, sum2, n)
    new = (torch.randn(b, d, generator=g, dtype=torch.float64) @ mix) * torch.linspace(0.8, 1.3, b)[
        :, None
    ].double()

    t = time.perf_counter()
    sqrt_ref = psd_sqrt(sigma_ref)
    t_sqrt_ref = time.perf_counter() - t

    t = time.perf_counter()
    tr_eig = trace_sqrt_product(sqrt_ref, cov)
    fd_eig = float((mu_ref - mu) @ (mu_ref - mu) + sigma_ref.trace() + cov.trace() - 2 * tr_eig)
    t_eig = time.perf_counter() - t

    s1, s2 = sigma_ref.numpy(), cov.numpy()
    t = time.perf_counter()
    covmean = scipy.linalg.sqrtm(s1 @ s2).real
    fd_scipy = float(((mu_ref - mu).numpy() ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))
    t_scipy = time.perf_counter() - t
    assert abs(frechet_distance(mu_ref, sigma_ref, mu, cov, sqrt_ref) - fd_eig) < 1e-9 * abs(fd_eig)

    print("\n== one FD ==")
    print(f"{'method':<36}{'seconds':>10}{'FD':>22}")
    print(f"{'eigvalsh(S Σ S), S precomputed':<36}{t_eig:>10.3f}{fd_eig:>22.10f}")
    print(f"{'scipy.linalg.sqrtm(Σ1 Σ2)':<36}{t_scipy:>10.3f}{fd_scipy:>22.10f}")
    print(f"(S = Σ_ref^½ once per reference: {t_sqrt_ref:.3f} s)")
    print(
        f"speed ratio scipy/eigvalsh: {t_scipy / t_eig:.1f}x; relative difference {abs(fd_eig - fd_scipy) / abs(fd_scipy):.2e}"
    )

    k = args.exact_samples or b
    t = time.perf_counter()
    exact = replace_one_fd_exact(sum1, sum2, n, gen[0], new[:k], mu_ref, sigma_ref, sqrt_ref)
    t_exact = (time.perf_counter() - t) * b / k
    t = time.perf_counter()
    fast = replace_one_fd_fast(sum1, sum2, n, gen[0], new, mu_ref, sigma_ref, sqrt_ref)
    t_fast = time.perf_counter() - t
    before = fd_eig
    r_exact, r_fast = before - exact, before - fast[:k]
    rel = float(((r_fast - r_exact).abs() / r_exact.abs().clamp(min=1e-300)).max())
    rho = spearmanr(r_exact.numpy(), r_fast.numpy()).statistic if k > 2 else float("nan")

    print(f"\n== per-sample subset-replace rewards, B={b} ==")
    scaled = f" (timed on {k} samples, x{b / k:.0f})" if k < b else ""
    print(f"{'mode':<36}{'seconds':>10}")
    print(f"{'exact (B eigvalsh)' + scaled:<36}{t_exact:>10.3f}")
    print(f"{'fast (rank-one, 1 eigh)':<36}{t_fast:>10.3f}")
    print(
        f"speed ratio exact/fast: {t_exact / t_fast:.1f}x; on the {k} compared samples: max relative reward error "
        f"{rel:.2e}, Spearman {rho:.4f}"
    )


if __name__ == "__main__":
    main()
