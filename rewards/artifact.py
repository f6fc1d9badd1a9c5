"""``artifact``: a light clean-vs-artifact classifier on frozen features; reward = log p(clean | image)
(algorithms.md §11), a regulariser next to the main rewards against reward hacking.

Also the synthetic artifact generator for the shapes world (:func:`add_artifact`: noise blotches, smears, broken
and doubled edges, grid textures, colour bleeding, over-saturation) and :func:`build_shapes_artifact`, which trains
the shipped ``shapes-artifact`` model from renders (``imgalign rewards build-shapes-artifact``).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from imgalign.files import atomic_write_text
from imgalign.rewards.base import Reward, RewardOutput, register_reward
from imgalign.rewards.heads import check_head_fits, fit_head, head_features, load_head, save_head

ARTIFACT_KINDS = ("noise", "smear", "broken_edges", "doubled_edges", "grid", "colour_bleed", "oversaturate")


# ---- synthetic artifacts --------------------------------------------------------------------------------------
def _region_mask(h: int, w: int, rng: random.Random, frac: tuple[float, float] = (0.3, 0.7)) -> torch.Tensor:
    """A soft elliptical mask (H, W) in [0, 1] covering a random part of the image."""
    cy, cx = rng.uniform(0.2, 0.8) * h, rng.uniform(0.2, 0.8) * w
    ry, rx = rng.uniform(*frac) * h / 2 + 2, rng.uniform(*frac) * w / 2 + 2
    yy, xx = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    d = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2
    return (1.5 - d).clamp(0, 1)


def _edges(x: torch.Tensor) -> torch.Tensor:
    """Edge mask (H, W) of an image (3, H, W): where the colour changes between neighbouring pixels."""
    g = x.mean(0)
    e = torch.zeros_like(g)
    e[:, 1:] += (g[:, 1:] - g[:, :-1]).abs()
    e[1:, :] += (g[1:, :] - g[:-1, :]).abs()
    return (e > 0.05).float()


def add_artifact(x: torch.Tensor, kind: str, rng: random.Random) -> torch.Tensor:
    """Apply one synthetic artifact to an image (3, H, W) in [0, 1]; returns a new image (3, H, W)."""
    _, h, w = x.shape
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    if kind == "noise":  # blotches of strong noise
        m = sum(_region_mask(h, w, rng, (0.2, 0.5)) for _ in range(rng.randint(1, 3))).clamp(0, 1)
        y = x + m * torch.randn(x.shape, generator=g) * rng.uniform(0.12, 0.3)
    elif kind == "smear":  # motion blur inside a region
        k = rng.choice([5, 7, 9])
        ang = rng.uniform(0, math.pi)
        ker = torch.zeros(k, k)
        for t in torch.linspace(-(k // 2), k // 2, 4 * k):
            ker[
                int(round(k // 2 + t.item() * math.sin(ang))), int(round(k // 2 + t.item() * math.cos(ang)))
            ] = 1
        ker = (ker / ker.sum()).expand(3, 1, k, k)
        blurred = F.conv2d(F.pad(x[None], (k // 2,) * 4, mode="replicate"), ker, groups=3)[0]
        m = _region_mask(h, w, rng, (0.5, 0.9))
        y = x * (1 - m) + blurred * m
    elif kind == "broken_edges":  # edge pixels replaced by the background in random chunks
        e = _edges(x)
        blocks = (torch.rand(h // 4 + 1, w // 4 + 1, generator=g) < rng.uniform(0.35, 0.6)).float()
        cut = F.interpolate(blocks[None, None], scale_factor=4, mode="nearest")[0, 0, :h, :w] * e
        cut = F.max_pool2d(cut[None, None], 3, 1, 1)[0, 0]
        bg = x[:, :2, :2].reshape(3, -1).median(1).values.view(3, 1, 1)
        y = x * (1 - cut) + bg * cut
    elif kind == "doubled_edges":  # ghost copy shifted by a few pixels
        dy, dx = rng.choice([-3, -2, 2, 3]), rng.choice([-3, -2, 0, 2, 3])
        ghost = torch.roll(x, (dy, dx), (1, 2))
        y = torch.maximum(x, ghost * rng.uniform(0.45, 0.7))
    elif kind == "grid":  # periodic texture
        p = rng.choice([2, 3, 4])
        yy, xx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        pattern = (((yy // p) + (xx // p)) % 2).float() * 2 - 1
        m = _region_mask(h, w, rng, (0.6, 1.0)) if rng.random() < 0.5 else torch.ones(h, w)
        y = x + pattern * m * rng.uniform(0.06, 0.14)
    elif kind == "colour_bleed":  # chroma blurred and shifted away from the luma
        luma = x.mean(0, keepdim=True)
        chroma = x - luma
        k = rng.choice([5, 7])
        chroma = F.avg_pool2d(F.pad(chroma[None], (k // 2,) * 4, mode="replicate"), k, 1)[0]
        chroma = torch.roll(chroma, (rng.choice([-3, -2, 2, 3]), rng.choice([-3, -2, 2, 3])), (1, 2))
        y = luma + chroma * rng.uniform(1.2, 1.8)
    elif kind == "oversaturate":  # colours pushed away from grey and brightened
        luma = x.mean(0, keepdim=True)
        y = (luma + (x - luma) * rng.uniform(1.8, 2.6)) * rng.uniform(1.1, 1.3) + rng.uniform(0.02, 0.08)
    else:
        raise ValueError(f"unknown artifact kind {kind!r}; valid: {', '.join(ARTIFACT_KINDS)}")
    return y.clamp(0, 1)


def artifact_dataset(
    n: int, seed: int = 0, kinds: tuple[str, ...] = ARTIFACT_KINDS
) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """`n` clean renders of seeded training prompts and `n` artifact images made from *other* renders (so the
    classifier cannot pair them up), kinds cycling through `kinds`. -> (clean, artifact, kind per artifact)."""
    from imgalign.rewards.fid import shapes_reference_images

    clean = shapes_reference_images(n, seed=seed)
    base = shapes_reference_images(n, seed=seed + 1)
    rng = random.Random(seed)
    names = [kinds[i % len(kinds)] for i in range(n)]
    art = torch.stack([add_artifact(base[i], names[i], rng) for i in range(n)])
    return clean, art, names


# ---- fitting --------------------------------------------------------------------------------------------------
def fit_artifact(
    clean: torch.Tensor | str | Path,
    artifact: torch.Tensor | str | Path,
    features: str,
    out: str | Path,
    hidden: int = 0,
    epochs: int = 500,
    lr: float = 1e-2,
    val_frac: float = 0.2,
    device: str = "cpu",
    extra: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Fit the clean(positive)-vs-artifact head on features of two image batches [N, 3, H, W] or two image folders
    (``imgalign rewards fit-artifact``) and save it; returns the metrics. Folders are read and encoded a batch at a
    time (their pixels were held at once: 10,000 images of 512x512 are 31 GB as float32, as
    :func:`~imgalign.rewards.discriminator.fit_discriminator` found), the artifact images resized to the clean
    images' size; a folder of fewer than 2 readable images is named by its flag."""
    from imgalign.rewards.features import build_features
    from imgalign.rewards.heads import check_class_folder
    from imgalign.rewards.io import encode_image_folder, folder_image_size

    enc = build_features(features, device)
    if isinstance(clean, torch.Tensor) and isinstance(artifact, torch.Tensor):
        pos, neg = enc(clean), enc(artifact)
    elif isinstance(clean, (str, Path)) and isinstance(artifact, (str, Path)):
        size = folder_image_size(clean)
        pos = check_class_folder(encode_image_folder(clean, enc, size), clean, "--clean")
        neg = check_class_folder(encode_image_folder(artifact, enc, size), artifact, "--artifact")
    else:
        raise TypeError("fit_artifact: give clean and artifact both as image batches or both as folders")
    res = fit_head(pos, neg, hidden=hidden, epochs=epochs, lr=lr, val_frac=val_frac, weight_decay=1e-4)
    save_head(out, res.head, features, "artifact", {"metrics": res.metrics, **(extra or {})})
    return res.metrics


def build_shapes_artifact(
    out_dir: str | Path, n: int = 1400, features: str = "stats", test_n: int = 350, hidden: int = 32
) -> dict[str, Any]:
    """Train the shipped shapes artifact model on `n` clean + `n` synthetic artifact renders; measure accuracy on a
    fresh held-out set (other seeds), per artifact kind; write ``head.safetensors`` and ``README.md``."""
    from imgalign.rewards.features import build_features

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    clean, art, _ = artifact_dataset(n, seed=0)
    metrics = fit_artifact(
        clean, art, features, out_dir / "head.safetensors", hidden=hidden, extra={"n_train": n}
    )
    head, _ = load_head(out_dir / "head.safetensors")
    enc = build_features(features)
    tc, ta, kinds = artifact_dataset(test_n, seed=1000)
    with torch.no_grad():
        pc, pa = head(enc(tc)) > 0, head(enc(ta)) <= 0
    per_kind = {
        k: float(pa[[i for i, kk in enumerate(kinds) if kk == k]].float().mean()) for k in ARTIFACT_KINDS
    }
    result = {
        "features": features,
        "hidden": hidden,
        "n_train_per_class": n,
        "fit_metrics": metrics,
        "test_accuracy": float(torch.cat([pc, pa]).float().mean()),
        "test_clean_accuracy": float(pc.float().mean()),
        "test_artifact_recall_per_kind": per_kind,
    }
    atomic_write_text(out_dir / "README.md", _model_card(result))
    return result


def _model_card(r: dict[str, Any]) -> str:
    kinds = "\n".join(f"| {k} | {v:.3f} |" for k, v in r["test_artifact_recall_per_kind"].items())
    return f"""# shapes-artifact

Clean-vs-artifact classifier for the imgalign shapes world, used by the `artifact` reward
(`imgalign.rewards.artifact`, reward = log p(clean | image)).

- **Features**: `{r["features"]}` (frozen; see `imgalign.rewards.features`), standardised inside the head.
- **Head**: {"an MLP with one hidden layer of " + str(r["hidden"]) + " units" if r["hidden"] else "a linear layer"}
  (logistic loss), `head.safetensors` (metadata names the encoder and the head size).
- **Training data**: {r["n_train_per_class"]} exact renders of seeded training prompts (clean) and
  {r["n_train_per_class"]} renders of other prompts with one synthetic artifact each (`add_artifact`: noise blotches,
  motion smears, broken edges, doubled/ghost edges, grid textures, colour bleeding, over-saturation), 20% held out
  while fitting (validation accuracy {r["fit_metrics"].get("val_acc", float("nan")):.3f}).
- **Test** (fresh renders, other seeds, {r["test_clean_accuracy"]:.3f} of clean images kept as clean):
  accuracy **{r["test_accuracy"]:.3f}**.

| artifact kind | recall |
| --- | --- |
{kinds}

- **Limits**: it knows only these synthetic artifacts on 64x64 shapes renders; it has never seen model samples, so
  a generator can still find artifacts it does not flag. Regenerate with `imgalign rewards build-shapes-artifact`.

```json
{json.dumps(r, indent=2)}
```
"""


# ---- the reward ---------------------------------------------------------------------------------------------
@register_reward(
    "artifact", "log p(clean) from a clean-vs-artifact head on frozen features (default: shapes-artifact)"
)
class ArtifactReward(Reward):
    name = "artifact"
    description = (
        "log p(clean | image) from a light classifier on frozen features; model=shapes-artifact|PATH; "
        "features=KIND:NEW_PATH for a head whose encoder folder moved"
    )
    needs_prompt = False  # read by `imgalign score`: scores images without a prompt

    def __init__(
        self,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        model: str = "shapes-artifact",
        features: str | None = None,
    ) -> None:
        super().__init__(device, dtype)
        from imgalign.rewards.features import build_features

        path = Path(model)
        if str(model) == "shapes-artifact":
            from imgalign.hub import embedded_path

            path = embedded_path("shapes-artifact")
        if path.is_dir():
            path = path / "head.safetensors"
        self.head, meta = load_head(path, task="artifact")
        self.head = self.head.to(self.device)
        what = f"artifact reward: head {str(model)!r}"
        name = head_features(
            meta["features"], features, what, "give features= only for an encoder that moved"
        )
        self.encoder = build_features(name, self.device, dtype)
        check_head_fits(self.head, self.encoder, what)

    def score(
        self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]] | None
    ) -> RewardOutput:
        with torch.no_grad():
            logit = self.head(self.encoder(images).to(self.device)).float().cpu()
        logp = F.logsigmoid(logit)  # log p(clean)
        return RewardOutput(logp, [{"p_clean": float(p)} for p in logp.exp()])
