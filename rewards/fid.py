"""``fid``: distribution-wise Fréchet-distance rewards with subset replacement (algorithms.md §8).

Math (all float64):

* FD(μ1, Σ1; μ2, Σ2) = ‖μ1 − μ2‖² + tr Σ1 + tr Σ2 − 2 tr((Σ1 Σ2)^½), and with S = Σ1^½ (precomputed once for the
  fixed reference) tr((Σ1 Σ2)^½) = Σ sqrt(eigvalsh(S Σ2 S)): a symmetric eigenproblem, cheaper and stabler than
  ``sqrtm`` of the non-symmetric product (whose eigvalsh would be wrong).
* The generated reference set (the last ``set_size`` samples passed to :meth:`FIDReward.update`) is kept as running
  float64 sums Σf and Σffᵀ, so adding or removing one sample costs O(d²).
* Per-sample reward (subset replace, "distribution-wise rewards" paper): r_i = FD(set) − FD(set with its oldest
  member replaced by sample i). Every sample of a batch replaces the same member, so rewards are comparable.
  ``mode=group`` replaces the B oldest members with the whole batch and gives every sample the same reward.
* ``exact=true`` solves one eigenproblem per sample (O(B d³)); the default fast mode expands tr((S Σ' S)^½) to
  second order around the current set (:func:`replace_one_fd_fast`): one eigenproblem per batch plus O(B d²).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from imgalign.rewards.base import Reward, RewardOutput, register_reward

log = logging.getLogger(__name__)


# ---- pure math -----------------------------------------------------------------------------------------------
def psd_sqrt(sigma: torch.Tensor) -> torch.Tensor:
    """Symmetric PSD square root via eigh; negative eigenvalues from round-off are clamped to 0. (d, d) -> (d, d)."""
    lam, v = torch.linalg.eigh(sigma.double())
    return (v * lam.clamp(min=0).sqrt()) @ v.T


def trace_sqrt_product(sqrt_sigma1: torch.Tensor, sigma2: torch.Tensor) -> torch.Tensor:
    """tr((Σ1 Σ2)^½) = Σ sqrt(eigvalsh(S Σ2 S)) with S = Σ1^½ (algorithms.md §8). -> scalar float64."""
    m = sqrt_sigma1 @ sigma2.double() @ sqrt_sigma1  # (d, d), symmetric PSD
    m = (m + m.T) / 2
    return torch.linalg.eigvalsh(m).clamp(min=0).sqrt().sum()


def frechet_distance(
    mu1: torch.Tensor,
    sigma1: torch.Tensor,
    mu2: torch.Tensor,
    sigma2: torch.Tensor,
    sqrt_sigma1: torch.Tensor | None = None,
) -> float:
    """FD between N(μ1, Σ1) and N(μ2, Σ2) (Heusel et al. 2017, eq. 6), symmetric eigvalsh form. μ: (d,), Σ: (d, d)."""
    s = psd_sqrt(sigma1) if sqrt_sigma1 is None else sqrt_sigma1.double()
    diff = mu1.double() - mu2.double()
    fd = diff @ diff + sigma1.double().trace() + sigma2.double().trace() - 2 * trace_sqrt_product(s, sigma2)
    return float(fd)


def mean_cov(sum1: torch.Tensor, sum2: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased covariance from float64 running sums Σf (d,) and Σffᵀ (d, d) over n samples."""
    if n < 2:
        raise ValueError(f"need at least 2 samples for a covariance, got {n}")
    mu = sum1 / n
    cov = (sum2 - n * torch.outer(mu, mu)) / (n - 1)
    return mu, (cov + cov.T) / 2


def stats_of(feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean (d,) and unbiased covariance (d, d) of features (N, d), in float64."""
    f = feats.double()
    return mean_cov(f.sum(0), f.T @ f, f.shape[0])


def replace_one_fd_exact(
    sum1: torch.Tensor,
    sum2: torch.Tensor,
    n: int,
    removed: torch.Tensor,
    added: torch.Tensor,
    mu_ref: torch.Tensor,
    sigma_ref: torch.Tensor,
    sqrt_ref: torch.Tensor,
) -> torch.Tensor:
    """FD(reference, set with `removed` (d,) replaced by each row of `added` (B, d)) -> (B,) float64, exactly."""
    out = []
    for f in added.double():
        s1 = sum1 - removed + f
        s2 = sum2 - torch.outer(removed, removed) + torch.outer(f, f)
        mu, cov = mean_cov(s1, s2, n)
        out.append(frechet_distance(mu_ref, sigma_ref, mu, cov, sqrt_ref))
    return torch.tensor(out, dtype=torch.float64)


def replace_one_fd_fast(
    sum1: torch.Tensor,
    sum2: torch.Tensor,
    n: int,
    removed: torch.Tensor,
    added: torch.Tensor,
    mu_ref: torch.Tensor,
    sigma_ref: torch.Tensor,
    sqrt_ref: torch.Tensor,
    order: int = 2,
    eps: float = 1e-10,
) -> torch.Tensor:
    """Taylor version of :func:`replace_one_fd_exact`. The mean and trace terms are exact; the cross term
    tr((S Σ' S)^½) is expanded around M = S Σ S = V diag(λ) Vᵀ (one eigh per batch). The replacement changes Σ by
    the rank-4 H = Σ_t c_t x_t x_tᵀ, x = (f, r, μ', μ), c = (1, −1, −n, n)/(n − 1); in M's eigenbasis
    H̃ = Σ_t c_t u_t u_tᵀ with u_t = Vᵀ S x_t, and (Daleckii–Krein, f = sqrt)
        tr f(M + H̃) ≈ tr f(M) + Σ_j f'(λ_j) H̃_jj + ½ Σ_jk f'^[1](λ_j, λ_k) H̃_jk²,
    with f'(λ) = 1/(2√λ) and divided difference f'^[1](a, b) = −1/(2√a√b(√a + √b)). Eigenvalues below eps·max
    are dropped (sqrt is not smooth at 0). Cost O(B d²) after the eigh. `order` 1 or 2. -> (B,) float64."""
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order}")
    mu, cov = mean_cov(sum1, sum2, n)
    m = sqrt_ref @ cov @ sqrt_ref
    lam, v = torch.linalg.eigh((m + m.T) / 2)
    lam = lam.clamp(min=0)
    keep = lam > eps * lam.max().clamp(min=1e-300)
    rt = torch.where(keep, lam.sqrt(), torch.zeros_like(lam))  # √λ (d,)
    fp = torch.where(keep, 0.5 / rt.clamp(min=1e-300), torch.zeros_like(lam))  # f'(λ) (d,)
    w = sqrt_ref @ v  # S V (d, d): u = x @ w
    f = added.double()  # (B, d)
    b = f.shape[0]
    mu_new = (sum1 + f - removed) / n  # (B, d)
    xs = torch.stack([f, removed.expand(b, -1), mu_new, mu.expand(b, -1)], 1)  # (B, 4, d)
    c = torch.tensor([1.0, -1.0, -n, n], dtype=torch.float64) / (n - 1)  # (4,)
    u = xs @ w  # (B, 4, d)
    cross = rt.sum() + ((u * u) @ fp * c).sum(1)  # first order (B,)
    if order == 2:
        rr = rt[:, None] * rt[None, :]
        dd = torch.where(
            keep[:, None] & keep[None, :], -0.5 / (rr * (rt[:, None] + rt[None, :])).clamp(min=1e-300), 0
        )
        ti, si = torch.triu_indices(4, 4)
        prod = u[:, ti] * u[:, si]  # u_t ∘ u_s (B, 10, d)
        quad = ((prod @ dd) * prod).sum(-1)  # (B, 10)
        mult = torch.where(ti == si, 1.0, 2.0).double() * c[ti] * c[si]  # symmetric pairs counted twice
        cross = cross + 0.5 * (quad * mult).sum(1)
    tr_new = (sum2.trace() + (f * f).sum(1) - removed @ removed - n * (mu_new * mu_new).sum(1)) / (n - 1)
    diff = mu_ref - mu_new  # (B, d)
    return (diff * diff).sum(1) + sigma_ref.trace() + tr_new - 2 * cross


# ---- reference statistics ------------------------------------------------------------------------------------
def save_stats(path: str | Path, mu: torch.Tensor, sigma: torch.Tensor, n: int, features: str) -> None:
    """Write reference statistics to a safetensors file (atomically), tagged with the encoder name."""
    from safetensors.torch import save_file

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    save_file(
        {"mu": mu.double().contiguous(), "sigma": sigma.double().contiguous()},
        str(tmp),
        metadata={"n": str(n), "features": features, "kind": "imgalign-fid-stats"},
    )
    os.replace(tmp, path)


def load_stats(path: str | Path) -> tuple[torch.Tensor, torch.Tensor, int, str]:
    """Read statistics written by :func:`save_stats` -> (mu, sigma, n, features)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata() or {}
        if meta.get("kind") != "imgalign-fid-stats":
            raise ValueError(f"{path} is not an imgalign FID stats file (write one with save_stats)")
        return fh.get_tensor("mu"), fh.get_tensor("sigma"), int(meta["n"]), meta["features"]


def shapes_reference_images(n: int, seed: int = 0) -> torch.Tensor:
    """Exact renders of `n` seeded training prompts: the shapes world's "real" data. -> (n, 3, 64, 64)."""
    from imgalign import shapes as W
    from imgalign.prompts.shapes import sample_training_specs

    return W.render_tensor(sample_training_specs(n, seed=seed), seed=seed)


@register_reward("fid", "Fréchet-distance subset-replace reward vs reference stats (per-sample or group)")
class FIDReward(Reward):
    name = "fid"
    description = "FD(before) - FD(after replacing set members); ref=shapes|DIR|stats.safetensors; exact|fast"
    stateful = True
    needs_prompt = False  # read by `imgalign score`: scores images without a prompt

    def __init__(
        self,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        features: str = "shapes-clip",
        ref: str = "shapes",
        ref_size: int = 2000,
        set_size: int = 512,
        mode: str = "sample",
        exact: bool = False,
        order: int = 2,
        init: str | None = None,
    ) -> None:
        super().__init__(device, dtype)
        if mode not in ("sample", "group"):
            raise ValueError(f"fid reward: mode must be 'sample' or 'group', got {mode!r}")
        if set_size < 2:
            raise ValueError(f"fid reward: set_size must be at least 2, got {set_size}")
        from imgalign.rewards.features import build_features

        self.features_name, self.mode, self.exact, self.set_size = (
            str(features),
            mode,
            bool(exact),
            int(set_size),
        )
        self.order = int(order)
        self.encoder = build_features(self.features_name, self.device, dtype)
        self.mu_ref, self.sigma_ref = self._reference(str(ref), int(ref_size))
        self.sqrt_ref = psd_sqrt(self.sigma_ref)
        d = self.mu_ref.shape[0]
        self.buffer = torch.zeros(0, d, dtype=torch.float64)  # FIFO: oldest first
        self.sum1 = torch.zeros(d, dtype=torch.float64)
        self.sum2 = torch.zeros(d, d, dtype=torch.float64)
        if init:
            from imgalign.rewards.io import load_image_folder

            self._push(self.encoder(load_image_folder(init)))

    def _reference(self, ref: str, ref_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        if ref == "shapes":
            return stats_of(self.encoder(shapes_reference_images(ref_size)))
        p = Path(ref)
        if p.is_file():
            mu, sigma, _n, feats = load_stats(p)
            if feats != self.features_name:
                raise ValueError(
                    f"fid reward: stats file {ref} was computed with features {feats!r}, not "
                    f"{self.features_name!r}; pass features={feats} or recompute the stats"
                )
            return mu, sigma
        if p.is_dir():
            from imgalign.rewards.io import load_image_folder

            return stats_of(self.encoder(load_image_folder(p)))
        raise FileNotFoundError(
            f"fid reward: ref={ref!r} is neither 'shapes', a stats file nor an image folder"
        )

    # ---- state ------------------------------------------------------------------------------------------
    def _push(self, feats: torch.Tensor) -> None:
        """Append features (N, d) to the set, dropping the oldest beyond set_size; sums updated in O(N d²)."""
        for f in feats.double():
            if self.buffer.shape[0] >= self.set_size:
                old = self.buffer[0]
                self.sum1 -= old
                self.sum2 -= torch.outer(old, old)
                self.buffer = self.buffer[1:]
            self.sum1 += f
            self.sum2 += torch.outer(f, f)
            self.buffer = torch.cat([self.buffer, f[None]])

    def update(self, images: Any, prompts: Any = None, metadata: Any = None) -> dict[str, float]:
        """Add current samples to the generated reference set (oldest dropped); returns the set's FD."""
        from imgalign.rewards.base import to_tensor

        self._push(self.encoder(to_tensor(images)))
        out = {"fid/set_size": float(self.buffer.shape[0])}
        if self.buffer.shape[0] >= 2:
            out["fid/fd"] = self.current_fd()
        return out

    def current_fd(self) -> float:
        mu, cov = mean_cov(self.sum1, self.sum2, self.buffer.shape[0])
        return frechet_distance(self.mu_ref, self.sigma_ref, mu, cov, self.sqrt_ref)

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": self.buffer.clone(), "features": self.features_name}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("features") != self.features_name:
            raise ValueError(
                f"fid reward: state was saved with features {state.get('features')!r}, not {self.features_name!r}"
            )
        buf = state["buffer"].double()
        self.buffer = buf[-self.set_size :]
        self.sum1 = self.buffer.sum(0)
        self.sum2 = self.buffer.T @ self.buffer

    # ---- scoring ----------------------------------------------------------------------------------------
    def score(
        self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]] | None
    ) -> RewardOutput:
        feats = self.encoder(images).double()  # (B, d)
        if self.buffer.shape[0] < 2:
            log.info("fid reward: the generated reference set is empty; seeding it with the first batch")
            self._push(feats)
        n = self.buffer.shape[0]
        before = self.current_fd()
        if self.mode == "group":
            k = min(feats.shape[0], n)
            s1 = self.sum1 - self.buffer[:k].sum(0) + feats[:k].sum(0)
            s2 = self.sum2 - self.buffer[:k].T @ self.buffer[:k] + feats[:k].T @ feats[:k]
            mu, cov = mean_cov(s1, s2, n)
            after = frechet_distance(self.mu_ref, self.sigma_ref, mu, cov, self.sqrt_ref)
            r = torch.full((feats.shape[0],), before - after, dtype=torch.float64)
            return RewardOutput(r.float(), [{"fd_before": before, "fd_after": after}] * feats.shape[0])
        args = (self.sum1, self.sum2, n, self.buffer[0], feats, self.mu_ref, self.sigma_ref, self.sqrt_ref)
        after = replace_one_fd_exact(*args) if self.exact else replace_one_fd_fast(*args, order=self.order)
        r = before - after
        return RewardOutput(r.float(), [{"fd_before": before, "fd_after": float(a)} for a in after])
