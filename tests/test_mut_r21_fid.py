"""rewards/fid.py: behaviour mutation round 21 found unchecked."""

from __future__ import annotations

import torch

from imgalign.rewards.fid import replace_one_fd_exact, replace_one_fd_fast, stats_of


def test_fast_mode_matches_exact_on_features_of_small_scale() -> None:
    """Features of norm ~0.05 (a spectrum far below 1): the fast replacement FD is the exact one too, the rank-one
    change of the trace not taken as 0."""
    g = torch.Generator().manual_seed(0)
    ref, gen = torch.randn(200, 8, generator=g) * 0.01, torch.randn(40, 8, generator=g) * 0.02 + 0.01
    new = torch.randn(6, 8, generator=g).double() * 0.02
    mu_r, s_r = stats_of(ref)
    lam, v = torch.linalg.eigh(s_r)
    sq = (v * lam.clamp(min=0).sqrt()) @ v.T
    f = gen.double()
    args = (f.sum(0), f.T @ f, f.shape[0], f[0], new, mu_r, s_r, sq)
    exact, fast = replace_one_fd_exact(*args), replace_one_fd_fast(*args)
    assert torch.allclose(fast, exact, rtol=1e-7, atol=0)
