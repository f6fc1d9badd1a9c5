"""``discriminator``: a real-vs-generated classifier on frozen features; reward = its logit (algorithms.md §9).

* DRL: trained once (``imgalign rewards fit-discriminator``) with the logistic loss, the logit estimates
  log p_data(x) / p_model(x), the optimal reward for KL-regularised RL towards the data.
* Adv-GRPO (``online=true``): the trainer calls :meth:`DiscriminatorReward.update` with the current samples
  (negatives); positives are drawn from a reference pool (``ref=shapes`` renders or an image folder). Feature
  standardisation lives inside the head (fixed from the reference pool), identical in training and scoring.
* ``patch_weight=0.3`` with a ``dinov2:`` encoder (Adv-GRPO): the head also scores patch tokens; the loss adds
  0.3 x the loss on 64 random patch tokens per image, the reward is 0.7·logit(CLS) + 0.3·mean patch logit.
* IRRL (``reward=clipped``): reward = clamp(logit, −clip, clip), a clipped linear reward that tames the noisy
  logits of a discriminator that is still being trained.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from imgalign.rewards.base import Reward, RewardOutput, as_bool, check_at_least, register_reward, to_tensor
from imgalign.rewards.heads import (
    FeatureHead,
    check_head_fits,
    fit_head,
    head_features,
    head_loss,
    load_head,
    save_head,
)

log = logging.getLogger(__name__)


def clipped_linear(logits: torch.Tensor, clip: float) -> torch.Tensor:
    """IRRL's clipped linear reward: clamp(logit, −clip, clip). (B,) -> (B,)."""
    return logits.clamp(-clip, clip)


def reference_pool(ref: str, n: int) -> torch.Tensor:
    """Positive images for online training: ``shapes`` (renders of seeded training prompts) or a folder."""
    if ref == "shapes":
        from imgalign.rewards.fid import shapes_reference_images

        return shapes_reference_images(n, seed=12345)
    from imgalign.rewards.io import load_image_folder

    return load_image_folder(ref, limit=n)


def reference_features(ref: str, n: int, encode: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``encode`` of the images :func:`reference_pool` gives, [N, ...]; a folder's are read and encoded a batch at
    a time (its pool of 512 photos of 1024x1024 was 6.4 GB of float32 pixels at once)."""
    if ref == "shapes":
        return encode(reference_pool(ref, n))
    from imgalign.rewards.io import encode_image_folder

    return encode_image_folder(ref, encode, limit=n)


def fit_discriminator(
    real: str | Path,
    fake: str | Path,
    features: str,
    out: str | Path,
    hidden: int = 256,
    epochs: int = 300,
    lr: float = 1e-3,
    val_frac: float = 0.2,
    device: str = "cpu",
    size: int | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """Fit a DRL discriminator (real = positive) on folder images and save it; returns the metrics."""
    from imgalign.rewards.features import build_features
    from imgalign.rewards.heads import check_class_folder
    from imgalign.rewards.io import encode_image_folder

    enc = build_features(features, device)
    # a batch of pixels at a time: a class folder of 10,000 images no longer needs its pixels in memory at once
    pos = check_class_folder(encode_image_folder(real, enc, size), real, "--real")
    neg = check_class_folder(encode_image_folder(fake, enc, size), fake, "--fake")
    res = fit_head(pos, neg, hidden=hidden, epochs=epochs, lr=lr, val_frac=val_frac, seed=seed)
    save_head(
        out,
        res.head,
        features,
        "discriminator",
        {"metrics": res.metrics, "real": str(real), "fake": str(fake)},
    )
    return res.metrics


@register_reward(
    "discriminator", "real-vs-generated logit on frozen features (DRL; online Adv-GRPO; clipped IRRL)"
)
class DiscriminatorReward(Reward):
    name = "discriminator"
    description = (
        "logit of a real-vs-generated head on frozen features; head=PATH or online=true; reward=logit|clipped"
    )
    stateful = True
    needs_prompt = False  # read by `imgalign score`: scores images without a prompt
    not_ready_help = "give head=FILE (a head fitted with `imgalign rewards fit-discriminator`)"

    def __init__(
        self,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        head: str | None = None,
        features: str | None = None,
        online: bool | None = None,
        ref: str = "shapes",
        ref_size: int = 512,
        hidden: int = 256,
        lr: float = 1e-3,
        loss: str = "bce",
        steps: int = 1,
        reward: str = "logit",
        clip: float = 1.0,
        patch_weight: float = 0.0,
        n_patches: int = 64,
    ) -> None:
        super().__init__(device, dtype)
        from imgalign.rewards.features import build_features, local_name

        if reward not in ("logit", "clipped"):
            raise ValueError(f"discriminator reward: reward must be 'logit' or 'clipped', got {reward!r}")
        head_loss(torch.zeros(1), torch.zeros(1), loss)  # validate the name before any model loads
        if not 0.0 <= float(patch_weight) < 1.0:
            raise ValueError(f"discriminator reward: patch_weight must be in [0, 1), got {patch_weight}")
        # n_patches=0 made the patch loss a mean over no tokens (nan)
        self.patch_weight = float(patch_weight)
        self.n_patches = int(check_at_least(n_patches, 1, "discriminator reward: n_patches"))
        self.online = head is None if online is None else as_bool(online, "discriminator reward: online")
        if self.online:
            # 0 was an empty reference pool (numpy's 'need at least one array to stack'); one reference image has no
            # spread, so the head's standardisation was NaN and every reward with it
            check_at_least(ref_size, 2, "discriminator reward: ref_size")
        self.stateful = self.online  # a fitted head is frozen: trainers neither update nor checkpoint it
        if head is None and not self.online:
            raise ValueError(
                "discriminator reward: online=false needs head=FILE (imgalign rewards fit-discriminator)"
            )
        check_at_least(steps, 1, "discriminator reward: steps")
        check_at_least(hidden, 0, "discriminator reward: hidden")
        if reward == "clipped" and not float(clip) > 0:
            raise ValueError(f"discriminator reward: clip must be > 0 with reward=clipped, got {clip!r}")
        self.reward_mode, self.clip, self.loss, self.steps = reward, float(clip), loss, int(steps)
        if head is not None:
            self.head, meta = load_head(head, task="discriminator")
            features = head_features(
                meta["features"], features, f"discriminator reward: head {head!r}", "leave features= out"
            )
        features = features or "shapes-clip"
        # a local encoder by its absolute path, as heads record it: a state saved with a relative name was refused
        # when resumed with the absolute one, and the other way round
        self.features_name = local_name(str(features))
        self.encoder = build_features(self.features_name, self.device, dtype)
        if head is not None:
            check_head_fits(self.head, self.encoder, f"discriminator reward: head {head!r}")
        if self.patch_weight > 0 and not self.encoder.has_tokens:
            raise ValueError(
                f"discriminator reward: patch_weight needs patch tokens; {features!r} has none (dinov2:)"
            )
        self.pos_pool: torch.Tensor | None = None  # (N, D) CLS / pooled features of the reference images
        self.pos_patches: torch.Tensor | None = None  # (N, K, D) a fixed random subset of their patch tokens
        self.gen = torch.Generator().manual_seed(0)
        if self.online:
            if self.patch_weight > 0:  # the CLS token and K patch tokens per image: (N, 1 + K, D)
                feats = reference_features(str(ref), int(ref_size), self._cls_and_some_patches)
                self.pos_pool, self.pos_patches = feats[:, 0], feats[:, 1:]
            else:
                self.pos_pool = reference_features(str(ref), int(ref_size), self.encoder)  # (N, D)
            if self.pos_pool.shape[0] < 2:
                from imgalign.rewards.io import other_files_note

                raise ValueError(
                    f"discriminator reward: ref={ref!r} holds {self.pos_pool.shape[0]} readable image"
                    f"{other_files_note(str(ref))}; online training needs at least 2 reference images: add images "
                    "to it, or use ref=shapes"
                )
            if head is None:
                with torch.random.fork_rng(devices=[]):  # the same fresh head in every run (resume is exact)
                    torch.manual_seed(0)
                    self.head = FeatureHead(self.encoder.dim, int(hidden))
                norm = (
                    self.pos_pool
                    if self.pos_patches is None
                    else torch.cat([self.pos_pool, self.pos_patches.flatten(0, 1)])
                )
                self.head.set_normalisation(norm)
                log.info(
                    "discriminator: online mode with a fresh head; rewards are uninformative until update()"
                )
        self.head = self.head.to(self.device).eval()
        self.trained = head is not None  # a fresh online head scores noise until update()
        self.lr = float(lr)
        self.opt = torch.optim.AdamW(self.head.parameters(), lr=self.lr) if self.online else None

    def _cls_and_some_patches(self, images: torch.Tensor) -> torch.Tensor:
        """The CLS token and `n_patches` random patch tokens of each image: (B, 3, H, W) -> (B, 1 + K, D)."""
        tok = self.encoder.tokens(images)
        return torch.cat([tok[:, :1], self._some_patches(tok[:, 1:])], 1)

    def _some_patches(self, patches: torch.Tensor) -> torch.Tensor:
        """A random subset of `n_patches` patch tokens per image: (B, P, D) -> (B, K, D)."""
        b, p, _ = patches.shape
        k = min(self.n_patches, p)
        idx = torch.rand(b, p, generator=self.gen).argsort(1)[:, :k]  # (B, K)
        return patches.gather(1, idx[..., None].expand(-1, -1, patches.shape[-1]))

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        """Head logits (B,); with patch_weight w (Adv-GRPO): (1 − w)·logit(CLS) + w·mean over patches of logit."""
        with torch.no_grad():
            if self.patch_weight == 0:
                return self.head(self.encoder(images).to(self.device)).float().cpu()
            tok = self.encoder.tokens(images).to(self.device)  # (B, 1 + P, D)
            cls = self.head(tok[:, 0])
            patch = self.head(tok[:, 1:].flatten(0, 1)).view(tok.shape[0], -1).mean(1)
            return ((1 - self.patch_weight) * cls + self.patch_weight * patch).float().cpu()

    def score(
        self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]] | None
    ) -> RewardOutput:
        lg = self.logits(images)
        r = clipped_linear(lg, self.clip) if self.reward_mode == "clipped" else lg
        return RewardOutput(r, [{"logit": float(v)} for v in lg])

    def ready(self) -> bool:
        """Whether the head has been fitted or updated (a fresh online head's scores carry no information)."""
        return self.trained

    def update(self, images: Any, prompts: Any = None, metadata: Any = None) -> dict[str, float]:
        """Adv-GRPO step(s): current samples are negatives, a same-sized draw from the reference pool positives."""
        if not self.online or self.opt is None or self.pos_pool is None:
            raise RuntimeError("discriminator: update() needs online=true (a fitted head is frozen)")
        x = to_tensor(images)
        if self.patch_weight > 0:
            tok = self.encoder.tokens(x)
            neg, neg_p = (
                tok[:, 0].to(self.device),
                self._some_patches(tok[:, 1:]).flatten(0, 1).to(self.device),
            )
        else:
            neg = self.encoder(x).to(self.device)
        idx = torch.randint(0, self.pos_pool.shape[0], (neg.shape[0],), generator=self.gen)
        pos = self.pos_pool[idx].to(self.device)
        self.head.train()
        for _ in range(self.steps):
            self.opt.zero_grad()
            lp, ln = self.head(pos), self.head(neg)
            loss = head_loss(lp, ln, self.loss)
            if self.patch_weight > 0 and self.pos_patches is not None:
                # Adv-GRPO: the CLS loss plus w x the same loss on random patch tokens
                pos_p = self.pos_patches[idx].flatten(0, 1).to(self.device)
                loss = loss + self.patch_weight * head_loss(self.head(pos_p), self.head(neg_p), self.loss)
            loss.backward()
            self.opt.step()
        self.trained = True  # after its steps: an update that failed left a fresh head marked ready
        self.head.eval()
        lp, ln = lp.detach(), ln.detach()
        acc = float(((lp > 0).float().mean() + (ln <= 0).float().mean()) / 2)
        return {"disc/loss": loss.item(), "disc/acc": acc, "disc/logit_fake": ln.mean().item()}

    def state_dict(self) -> dict[str, Any]:
        """A copy (not views of the live tensors), so a saved state is not changed by later updates."""
        state: dict[str, Any] = {
            "head": copy.deepcopy(self.head.state_dict()),
            "features": self.features_name,
            "gen": self.gen.get_state(),  # positives and patch subsets drawn after a resume follow on exactly
            "trained": self.trained,
        }
        if self.opt is not None:
            state["opt"] = copy.deepcopy(self.opt.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from imgalign.rewards.features import local_name, moved_encoder

        saved = state.get("features")
        if isinstance(saved, str) and moved_encoder(saved, self.features_name):
            # the encoder folder moved between the save and the resume: the advice named the gone folder
            log.warning(
                "discriminator: the saved state's features %r are no longer there; resuming with %r as given (the "
                "same encoder, moved)",
                saved,
                self.features_name,
            )
        elif (local_name(saved) if isinstance(saved, str) else saved) != self.features_name:
            raise ValueError(
                f"discriminator: the saved state uses features {state.get('features')!r}, not "
                f"{self.features_name!r}; resume with features={state.get('features')}, or start a new run"
            )
        try:
            self.head.load_state_dict(state["head"])
        except RuntimeError as e:  # another hidden size: torch's size-mismatch report
            first = str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else str(e)
            raise ValueError(
                f"discriminator: the saved head does not fit this one's shape ({first}); resume with the options it "
                "was trained with (hidden=...), or start a new run"
            ) from None
        self.trained = bool(state.get("trained", True))
        if "gen" in state:
            self.gen.set_state(state["gen"])
        if self.opt is not None and "opt" in state:
            self.opt.load_state_dict(state["opt"])
            for group in self.opt.param_groups:  # the saved optimizer carries its lr: this run's lr= holds
                group["lr"] = self.lr
