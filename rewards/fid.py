"""``fid``: distribution-wise Fréchet-distance rewards with subset replacement (algorithms.md §8).

Math (all float64):

* FD(μ1, Σ1; μ2, Σ2) = ‖μ1 − μ2‖² + tr Σ1 + tr Σ2 − 2 tr((Σ1 Σ2)^½), and with S = Σ1^½ (precomputed once for the
  fixed reference) tr((Σ1 Σ2)^½) = Σ sqrt(eigvalsh(S Σ2 S)): a symmetric eigenproblem, cheaper and stabler than
  ``sqrtm`` of the non-symmetric product (whose eigvalsh would be wrong).
* The generated reference set (the last ``set_size`` samples passed to :meth:`FIDReward.update`) is kept as running
  float64 sums Σf and Σffᵀ, so adding or removing one sample costs O(d²).
* Per-sample reward (subset replace, "distribution-wise rewards" paper): r_i = FD(set) − FD(set with its oldest
  member replaced by sample i). Every sample of a batch replaces the same member, so rewards are comparable.
  ``mode=group`` replaces the B oldest members with the whole batch and gives every sample the same reward: a
  score of the batch as a whole, which group-relative advantages cannot learn from (the trainer refuses it).
  With fewer than 2 members there is nothing to compare with: a batch scored then gets NaN. Scoring never changes
  the set; :meth:`FIDReward.update` adds samples (the trainer calls it once per step on the global batch, so the
  first step's samples are masked and that step trains nothing, beside other rewards too); ``init=FOLDER`` starts
  from a set, and ``imgalign score`` asks for it. A NaN image gets NaN and never enters the set.
* ``exact=true`` solves one eigenproblem per sample (O(B d³)). The default fast mode (:func:`replace_one_fd_fast`)
  writes each replacement as a rank-one update of the covariance of the kept samples and gets the change of
  tr((S Σ S)^½) from a Sherman–Morrison integral: one eigenproblem per batch plus O(d²) per sample, and the same
  value as the exact mode up to round-off (a second-order Taylor expansion, tried first, ranks samples badly when
  the set size is not much larger than d, because one sample moves the covariance a lot along its direction).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import torch

from imgalign.files import library_write, replacing
from imgalign.rewards.base import Reward, RewardOutput, as_bool, register_reward
from imgalign.rewards.features import local_name, moved_encoder, recorded_encoder_gone
from imgalign.rewards.heads import HEAD_KIND

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
    if 2 <= f.shape[0] <= f.shape[1]:  # printed as a plain number before, with nothing said
        log.warning(
            "FID statistics of %d images in %d-d features: the covariance is singular (rank < %d), so the FD is "
            "biased high and noisy; use more images than feature dimensions",
            f.shape[0],
            f.shape[1],
            f.shape[1],
        )
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


def trace_sqrt_rank_one_delta(
    lam: torch.Tensor, z: torch.Tensor, rho: float, step: float = 0.25
) -> torch.Tensor:
    """tr (diag(λ) + ρ z zᵀ)^½ − Σ √λ for a PSD diagonal (λ ≥ 0) and ρ > 0, without an eigensolve.

    From √x = (1/π) ∫₀^∞ x / (x + t) t^{-1/2} dt and Sherman–Morrison,
        Δ = (1/π) ∫₀^∞ t^{1/2} ρ q₂(t) / (1 + ρ q₁(t)) dt,   q_k(t) = Σ_j z_j² / (λ_j + t)^k,
    integrated with the trapezoid rule in s = log t (the integrand is analytic in a strip of half-width π, so the
    rule converges geometrically) over [log top − 80, log top + 60] plus the analytic tail 2ρ‖z‖² e^{−s_max/2}.
    lam (d,), z (C, d) -> (C,) float64; cost O(C · d · nodes)."""
    z2 = z.double() ** 2  # (C, d)
    zz = z2.sum(1)  # (C,)
    top = float(lam.max()) + rho * float(zz.max())
    # no spread and no update (a collapsed set scored on its own sample): Δ = 0, and no scale for the window
    if top == 0.0:
        return torch.zeros(z.shape[0], dtype=torch.float64)
    s = torch.arange(math.log(top) - 80.0, math.log(top) + 60.0, step, dtype=torch.float64)  # (Q,)
    t = s.exp()  # (Q,)
    inv = 1.0 / (lam[None, :] + t[:, None])  # (Q, d)
    q1 = z2 @ inv.T  # (C, Q)
    q2 = z2 @ (inv * inv).T  # (C, Q)
    f = t**1.5 * rho * q2 / (1 + rho * q1)  # integrand in s: t^{1/2} (...) dt/ds, dt/ds = t  (C, Q)
    tail = 2 * rho * zz * math.exp(-float(s[-1]) / 2)
    return (f.sum(1) * step + tail) / math.pi


def replace_one_fd_fast(
    sum1: torch.Tensor,
    sum2: torch.Tensor,
    n: int,
    removed: torch.Tensor,
    added: torch.Tensor,
    mu_ref: torch.Tensor,
    sigma_ref: torch.Tensor,
    sqrt_ref: torch.Tensor,
) -> torch.Tensor:
    """:func:`replace_one_fd_exact` through an exact rank-one update, one eigensolve per batch.

    Removing `removed` leaves n − 1 samples with mean m and covariance Σ1 (shared by the whole batch); adding f
    gives Σ' = Σ1 + g gᵀ / n with g = f − m (the scatter update), so M' = S Σ' S = M1 + (S g)(S g)ᵀ / n. With
    M1 = V diag(λ) Vᵀ, tr M'^½ = Σ √λ + :func:`trace_sqrt_rank_one_delta` (λ, Vᵀ S g, 1/n): O(d²) per sample
    after one O(d³) eigh, and equal to the exact value up to quadrature round-off. -> (B,) float64."""
    s1 = sum1 - removed
    s2 = sum2 - torch.outer(removed, removed)
    m = s1 / (n - 1)
    sigma1 = (s2 - (n - 1) * torch.outer(m, m)) / (n - 1)  # covariance of the n − 1 kept samples (d, d)
    m1 = sqrt_ref @ sigma1 @ sqrt_ref
    lam, v = torch.linalg.eigh((m1 + m1.T) / 2)
    lam = lam.clamp(min=0)
    f = added.double()  # (B, d)
    g = f - m  # (B, d)
    z = g @ (sqrt_ref @ v)  # Vᵀ S g per row (B, d)
    cross = lam.sqrt().sum() + torch.cat(
        [trace_sqrt_rank_one_delta(lam, z[i : i + 16], 1.0 / n) for i in range(0, z.shape[0], 16)]
    )  # tr (S Σ' S)^½ (B,)
    tr_new = sigma1.trace() + (g * g).sum(1) / n
    diff = mu_ref - (s1 + f) / n  # (B, d)
    return (diff * diff).sum(1) + sigma_ref.trace() + tr_new - 2 * cross


# ---- reference statistics ------------------------------------------------------------------------------------
STATS_KIND = "imgalign-fid-stats"
"""The ``kind`` in the metadata of a file :func:`save_stats` writes (a feature head's is ``HEAD_KIND``)."""


def save_stats(
    path: str | Path,
    mu: torch.Tensor,
    sigma: torch.Tensor,
    n: int,
    features: str,
    image_size: tuple[int, int] | None = None,
) -> None:
    """Write reference statistics to a safetensors file (atomically), tagged with the encoder name and, when given,
    the (width, height) the images were encoded at (:func:`stats_image_size`)."""
    from safetensors.torch import save_file

    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(
            f"{str(path)!r} is a folder; give a file name for the statistics (.safetensors)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    with library_write(path, "the FID statistics"), replacing(path) as tmp:
        save_file(
            {"mu": mu.double().contiguous(), "sigma": sigma.double().contiguous()},
            str(tmp),
            metadata={
                "n": str(n),
                "features": local_name(features),
                "kind": STATS_KIND,
                **({"image_size": f"{image_size[0]}x{image_size[1]}"} if image_size else {}),
            },
        )


def stats_image_size(path: str | Path) -> tuple[int, int] | None:
    """The (width, height) of the images the statistics file `path` (read by :func:`load_stats`) was computed
    from, as `imgalign rewards fid-stats` records it; None for a file without one (written before it was)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        value = (fh.metadata() or {}).get("image_size")
    if value is None:
        return None
    w, x, h = str(value).partition("x")
    if not (x and w.isdecimal() and h.isdecimal() and int(w) > 0 and int(h) > 0):
        raise ValueError(
            f"{path}: its image_size metadata {value!r} is not WIDTHxHEIGHT (e.g. 64x64); recompute the statistics "
            "with `imgalign rewards fid-stats`"
        )
    return (int(w), int(h))


def load_stats(path: str | Path) -> tuple[torch.Tensor, torch.Tensor, int, str]:
    """Read statistics written by :func:`save_stats` -> (mu, sigma, n, features)."""
    from safetensors import SafetensorError, safe_open

    not_stats = f"{path} is not an imgalign FID stats file (write one with `imgalign rewards fid-stats`)"
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
            if meta.get("kind") == HEAD_KIND:  # was only "not an imgalign FID stats file"
                raise ValueError(
                    f"{path} is a {meta.get('task', 'feature')} head (`imgalign rewards fit-...`), not FID "
                    "statistics: give it to that reward's head=, or FID statistics from `imgalign rewards fid-stats`"
                )
            if meta.get("kind") != STATS_KIND:
                raise ValueError(not_stats)
            mu, sigma = fh.get_tensor("mu"), fh.get_tensor("sigma")
    except SafetensorError as e:
        raise ValueError(f"{not_stats}: {e}") from None
    # a damaged or hand-edited file: shapes that do not fit, metadata missing, NaN/inf (a traceback deep in the
    # matrix square root, or an FD of nan printed as a result)
    d = mu.shape[0] if mu.ndim == 1 else -1
    # n: the image count, at least the 2 a covariance needs (save_stats is given it by folder_features)
    n = str(meta.get("n", ""))
    if tuple(sigma.shape) != (d, d) or not meta.get("features") or not n.isdecimal() or int(n) < 2:
        raise ValueError(
            f"{not_stats}: mu {tuple(mu.shape)}, sigma {tuple(sigma.shape)}, metadata {meta} (want mu (d,), "
            "sigma (d, d), n of at least 2 images and features)"
        )
    if not (torch.isfinite(mu).all() and torch.isfinite(sigma).all()):
        raise ValueError(
            f"{path}: its FID statistics hold NaN or inf values; recompute them with `imgalign rewards fid-stats`"
        )
    # a covariance is symmetric (save_stats writes it so); the matrix square root reads one triangle, so an edited
    # or foreign file's other triangle was ignored without a word
    asym = float((sigma - sigma.T).abs().max())
    if asym > 1e-5 * max(float(sigma.abs().max()), 1e-30):
        raise ValueError(
            f"{path}: its FID covariance sigma is not symmetric (|sigma - sigma.T| up to {asym:.3g}), so it is no "
            "covariance; recompute the statistics with `imgalign rewards fid-stats`"
        )
    return mu, sigma, int(meta["n"]), meta["features"]


def folder_features(
    path: str | Path,
    encoder: Callable[[torch.Tensor], torch.Tensor],
    size: int | tuple[int, int] | None = None,
) -> torch.Tensor:
    """`encoder`'s features [N, D] of the images of a folder, read a batch at a time
    (:func:`~imgalign.rewards.io.encode_image_folder`; resized to `size` when given); a covariance needs at least 2
    (the error names the folder)."""
    from imgalign.rewards.io import encode_image_folder, other_files_note

    feats = encode_image_folder(path, encoder, size)
    if feats.shape[0] < 2:  # the files skipped for their suffix named too, as with none readable
        raise ValueError(
            f"{str(path)!r} holds {feats.shape[0]} readable image{other_files_note(path)}; FID statistics need at "
            "least 2"
        )
    return feats


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
    not_ready_help = "its set of generated images is empty: give init=FOLDER (e.g. init=runs/base_samples)"

    def __init__(
        self,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        features: str = "shapes-clip",
        ref: str = "shapes",
        ref_size: int = 2000,
        set_size: int = 512,
        mode: Literal["sample", "group"] = "sample",
        exact: bool = False,
        init: str | None = None,
    ) -> None:
        super().__init__(device, dtype)
        if mode not in ("sample", "group"):
            raise ValueError(f"fid reward: mode must be 'sample' or 'group', got {mode!r}")
        if set_size < 2:
            raise ValueError(f"fid reward: set_size must be at least 2, got {set_size}")
        # it said "need at least 2 samples for a covariance", naming no option
        if str(ref) == "shapes" and ref_size < 2:
            raise ValueError(
                "fid reward: ref_size must be at least 2 (renders for ref=shapes; a covariance needs 2), got "
                f"{ref_size}"
            )
        from imgalign.rewards.features import build_features

        self.features_name, self.mode, self.exact, self.set_size = (
            str(features),
            mode,
            as_bool(exact, "fid reward: exact"),
            int(set_size),
        )
        self.encoder = build_features(self.features_name, self.device, dtype)
        # stats features depend on the image size (gradients, Laplacian, spectrum): the same images at 32 and 64 px
        # scored -109 apart, another set at one size -0.02, without a word. Every image is encoded at the
        # reference's (width, height), as `rewards fd` reads its second folder; the model encoders resize every
        # image to their own input size
        self.mu_ref, self.sigma_ref = self._reference(str(ref), int(ref_size))
        self.ref_wh = self._reference_size(str(ref)) if self.encoder.name == "stats" else None
        self._warned_sizes: set[tuple[int, int]] = set()
        self.sqrt_ref = psd_sqrt(self.sigma_ref)
        d = self.mu_ref.shape[0]
        # as stats_of warns of a reference set this small (768-d DINOv2 features with the default 512)
        if self.set_size <= d:
            log.warning(
                "fid reward: set_size %d <= the %d-d %s features: the generated set's covariance is singular "
                "(rank < %d), so its FD is biased high and noisy; give set_size > %d",
                self.set_size,
                d,
                self.features_name,
                d,
                d,
            )
        self.buffer = torch.zeros(0, d, dtype=torch.float64)  # FIFO: oldest first
        self.sum1 = torch.zeros(d, dtype=torch.float64)
        self.sum2 = torch.zeros(d, d, dtype=torch.float64)
        if init:
            if self.ref_wh is not None:
                from imgalign.rewards.io import folder_image_size

                init_wh = folder_image_size(init) if Path(init).is_dir() else None
                if init_wh is not None:
                    self._warn_resize(f"the images of init={str(init)!r}", init_wh)
            self._push(folder_features(init, self.encoder, self.ref_wh))

    @staticmethod
    def _reference_size(ref: str) -> tuple[int, int] | None:
        """The (width, height) of the reference images: the renders' for 'shapes', an image folder's own (the size
        its images are read at), a stats file's recorded one (None for a file without one: no resize)."""
        from imgalign.rewards.io import folder_image_size
        from imgalign.shapes import IMAGE_SIZE

        if ref == "shapes":
            return (IMAGE_SIZE, IMAGE_SIZE)
        if Path(ref).is_file():
            return stats_image_size(ref)
        return folder_image_size(ref) if Path(ref).is_dir() else None

    def _warn_resize(self, what: str, wh: tuple[int, int]) -> None:
        """Warn once per reward and size that images of (width, height) `wh` are resized to the reference's."""
        if self.ref_wh is None or wh == self.ref_wh or wh in self._warned_sizes:
            return
        self._warned_sizes.add(wh)
        log.warning(
            "fid reward: %s are %dx%d and the reference images %dx%d: stats features depend on the image size, so "
            "they are resized to %dx%d (bicubic) to compare the images, not their sizes",
            what,
            *wh,
            *self.ref_wh,
            *self.ref_wh,
        )

    def _at_ref_size(self, images: torch.Tensor) -> torch.Tensor:
        """`images` (B, 3, H, W) resized to the reference's size where stats features are used and it differs."""
        if self.ref_wh is None:
            return images
        from imgalign.rewards.features import resize

        w, h = self.ref_wh
        if tuple(images.shape[-2:]) == (h, w):
            return images
        self._warn_resize(
            "the images scored or added to the set", (int(images.shape[-1]), int(images.shape[-2]))
        )
        return resize(images, (h, w)).clamp(0, 1)

    def _reference(self, ref: str, ref_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        if ref == "shapes":
            return stats_of(self.encoder(shapes_reference_images(ref_size)))
        p = Path(ref)
        if p.is_file():
            mu, sigma, _n, feats = load_stats(p)
            # the encoder named as recorded (or moved) but of another size: refused here, not when the first
            # samples are added, after the model loaded and a rollout was drawn
            other_size = mu.shape[0] != self.encoder.dim and (
                local_name(feats) == local_name(self.features_name)
                or moved_encoder(feats, self.features_name)
            )
            if other_size:
                raise ValueError(
                    f"fid reward: stats file {ref} holds {mu.shape[0]}-d features; {self.features_name!r} gives "
                    f"{self.encoder.dim}-d ones: it is not the encoder the stats were computed with; recompute "
                    f"them with `imgalign rewards fid-stats --features {self.features_name}`"
                )
            if local_name(feats) != local_name(self.features_name):
                if moved_encoder(feats, self.features_name):
                    log.warning(
                        "fid reward: stats file %s was computed with features %r, which are no longer there; "
                        "using %r as given (the same encoder, moved)",
                        ref,
                        feats,
                        self.features_name,
                    )
                    return mu, sigma
                gone = recorded_encoder_gone(feats, f"fid reward: stats file {ref}", "features")
                raise ValueError(
                    gone
                    or f"fid reward: stats file {ref} was computed with features {feats!r}, not "
                    f"{self.features_name!r}; pass features={feats} or recompute the stats"
                )
            return mu, sigma
        if p.is_dir():
            return stats_of(folder_features(p, self.encoder))
        raise FileNotFoundError(
            f"fid reward: ref={ref!r} is neither 'shapes', a stats file nor an image folder"
        )

    @classmethod
    def training_error(cls, options: Mapping[str, Any]) -> str | None:
        # every sample of a batch gets one value: group-centred advantages are 0
        if options.get("mode") == "group":
            return (
                "mode=group gives every sample of a batch the same reward, which no group-relative advantage can "
                "learn from; train with fid (mode=sample, the default), and keep mode=group for scoring a batch "
                "with `imgalign score`"
            )
        return None

    # ---- state ------------------------------------------------------------------------------------------
    def ready(self) -> bool:
        """Whether there is a generated set to score against (``init=`` or earlier updates)."""
        return self.buffer.shape[0] >= 2

    def _push(self, feats: torch.Tensor) -> None:
        """Append features (N, d) to the set, dropping the oldest beyond set_size; sums updated in O(N d²). Rows
        that are not finite (a NaN image) are left out: one would make the running sums NaN for good."""
        feats = feats.double()
        # a stats file of another model saved under this features name
        if feats.shape[-1] != self.sum1.shape[0]:
            raise ValueError(
                f"fid reward: the reference statistics are {self.sum1.shape[0]}-d but the {self.features_name!r} "
                f"features of the images are {feats.shape[-1]}-d; recompute the stats with `imgalign rewards "
                f"fid-stats --features {self.features_name}`"
            )
        finite = torch.isfinite(feats).all(1)
        if not bool(finite.all()):
            log.warning("fid reward: %d non-finite feature row(s) left out of the set", int((~finite).sum()))
            feats = feats[finite]
        for f in feats:
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

        self._push(self.encoder(self._at_ref_size(to_tensor(images))))
        out = {"fid/set_size": float(self.buffer.shape[0])}
        if self.buffer.shape[0] >= 2:
            out["fid/fd"] = self.current_fd()
        return out

    def current_fd(self) -> float:
        mu, cov = mean_cov(self.sum1, self.sum2, self.buffer.shape[0])
        return frechet_distance(self.mu_ref, self.sigma_ref, mu, cov, self.sqrt_ref)

    def state_dict(self) -> dict[str, Any]:
        # the running sums too: rebuilt from the buffer they differ in the last bits, and a resumed run would not
        # score exactly as an uninterrupted one
        return {
            "buffer": self.buffer.clone(),
            "sum1": self.sum1.clone(),
            "sum2": self.sum2.clone(),
            "features": self.features_name,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("features") != self.features_name:
            raise ValueError(
                f"fid reward: state was saved with features {state.get('features')!r}, not {self.features_name!r}; "
                f"resume with features={state.get('features')}, or start a new run"
            )
        buf = state["buffer"].double()
        self.buffer = buf[-self.set_size :]
        if "sum1" in state and len(buf) <= self.set_size:  # the sums of exactly this buffer
            self.sum1, self.sum2 = state["sum1"].double().clone(), state["sum2"].double().clone()
        else:  # an older state, or a smaller set_size now
            self.sum1 = self.buffer.sum(0)
            self.sum2 = self.buffer.T @ self.buffer

    # ---- scoring ----------------------------------------------------------------------------------------
    def score(
        self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]] | None
    ) -> RewardOutput:
        all_feats = self.encoder(self._at_ref_size(images)).double()  # (B, d)
        finite = torch.isfinite(all_feats).all(1)
        if not self.ready():
            # no set to compare with: no reward (scored against itself, every sample would get ~0). Scoring
            # leaves the set alone: update() adds samples (the trainer calls it once per step, on the global
            # batch; scoring also runs for evaluations and on each process's share)
            log.warning(
                "fid reward: the generated set has fewer than 2 members, so these %d samples get no reward (NaN; "
                "the trainer masks them, so that step trains nothing); update() adds samples to the set (the "
                "trainer does after each step), or give init=FOLDER of generated images to start from a set",
                len(all_feats),
            )
            nan = torch.full((len(all_feats),), float("nan"))
            return RewardOutput(nan, [{"fd_before": float("nan"), "fd_after": float("nan")}] * len(all_feats))
        feats = all_feats[finite]
        n = self.buffer.shape[0]
        before = self.current_fd()
        if self.mode == "group":
            k = min(feats.shape[0], n)
            s1 = self.sum1 - self.buffer[:k].sum(0) + feats[:k].sum(0)
            s2 = self.sum2 - self.buffer[:k].T @ self.buffer[:k] + feats[:k].T @ feats[:k]
            mu, cov = mean_cov(s1, s2, n)
            after = frechet_distance(self.mu_ref, self.sigma_ref, mu, cov, self.sqrt_ref)
            r = torch.where(finite, before - after, float("nan")).double()
            return RewardOutput(r.float(), [{"fd_before": before, "fd_after": after}] * len(all_feats))
        args = (self.sum1, self.sum2, n, self.buffer[0], feats, self.mu_ref, self.sigma_ref, self.sqrt_ref)
        after = torch.full((len(all_feats),), float("nan"), dtype=torch.float64)
        if len(feats):
            after[finite] = (
                replace_one_fd_exact(*args) if self.exact else replace_one_fd_fast(*args)
            ).double()
        r = before - after  # NaN for a non-finite image: masked by the trainer
        return RewardOutput(r.float(), [{"fd_before": before, "fd_after": float(a)} for a in after])
