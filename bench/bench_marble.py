"""Amortised MARBLE step vs single-reward DiffusionNFT step on a tiny random SD3 transformer, side by side.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python bench/bench_marble.py [--rewards 3] [--batch 8] [--reps 12]

One step = fresh noise and t, v_theta forward (with grad), old-policy forward (EMA weights, no grad), NFT loss,
backward, AdamW step, EMA update. MARBLE adds: per-reward group advantages -> r [B, K], the per-reward gradient Gram
matrix, the min-norm solve, the EMA on alpha, r_mix, diagnostics (cosines); still ONE backward. Gram sources timed:
``output`` (gradients w.r.t. v_theta through the loss head only: the default), ``params-subset`` (K autograd calls
to the final projection's parameters), ``params-all`` (K full extra backward passes) and ``params-all/every-10``
(refreshed every 10th step). Variants run round-robin so shared-CPU noise hits them alike; medians are printed with
the ratio to the single-reward step (target <= 1.10x).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from imgalign.trainers.balance import MarbleBalancer, group_normalize, nft_output_gram, param_gram
from imgalign.trainers.nft import EmaParams, nft_combine, nft_loss_terms, noisy_latent, optimality_probability


def tiny_sd3(seed: int = 0, sample_size: int = 16):
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(seed)
    return SD3Transformer2DModel(
        sample_size=sample_size,
        patch_size=2,
        in_channels=4,
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        caption_projection_dim=32,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        out_channels=4,
        pos_embed_max_size=sample_size,
    )


class Step:
    """One NFT update; `variant` is 'single' or 'marble:<gram source>[:refresh]'."""

    def __init__(self, variant: str, args, data) -> None:
        self.variant = variant
        self.model = tiny_sd3(sample_size=args.size)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=1e-4)
        self.ema = EmaParams.from_module(self.model, decay=0.9)
        self.data = data
        self.k = args.rewards
        self.balancer = MarbleBalancer(
            self.k, ema=0.9, refresh_every=10 if variant.endswith("every-10") else 1
        )
        self.subset = [p for n, p in self.model.named_parameters() if n.startswith("proj_out")]
        self.n = 0
        self.gen = torch.Generator().manual_seed(1)

    def velocity(self, x, t, old: bool = False):
        _, text, pooled, _, _ = self.data
        kw = {
            "hidden_states": x,
            "encoder_hidden_states": text,
            "pooled_projections": pooled,
            "timestep": t * 1000.0,
        }
        return (self.ema.functional(self.model, **kw) if old else self.model(**kw)).sample

    def __call__(self) -> dict[str, float]:
        x0, text, pooled, rewards, groups = self.data
        b = x0.shape[0]
        t = torch.rand(b, generator=self.gen)
        x_t = noisy_latent(x0, t, torch.randn(x0.shape, generator=self.gen))
        v = self.velocity(x_t, t)
        with torch.no_grad():
            v_old = self.velocity(x_t, t, old=True)
        metrics: dict[str, float] = {}
        loss_plus, loss_minus = nft_loss_terms(v, v_old, x0, x_t, t, beta=1.0)  # [B] each
        if self.variant == "single":
            r = optimality_probability(group_normalize(rewards[:, 0], groups))
            loss = nft_combine(r, loss_plus, loss_minus, 1.0)
        else:
            r_k = optimality_probability(group_normalize(rewards, groups))  # [B, K]
            source = self.variant.split(":")[1]
            if self.balancer.needs_refresh(self.n):
                if source == "output":
                    gram = nft_output_gram(v, loss_plus, loss_minus, r_k, beta=1.0)
                else:
                    losses = [nft_combine(r_k[:, j], loss_plus, loss_minus, 1.0) for j in range(self.k)]
                    gram, _ = param_gram(losses, self.subset if source == "params-subset" else self.params)
                self.balancer.update(gram)
                metrics = self.balancer.diagnostics(gram)
            loss = nft_combine(self.balancer.mix(r_k), loss_plus, loss_minus, 1.0)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.ema.update()
        self.n += 1
        return metrics


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rewards", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--reps", type=int, default=12)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    data = (
        torch.randn(args.batch, 4, args.size, args.size, generator=g),
        torch.randn(args.batch, 8, 32, generator=g),
        torch.randn(args.batch, 32, generator=g),
        torch.rand(args.batch, args.rewards, generator=g) * torch.tensor([1.0, 10.0, 0.1])[: args.rewards],
        torch.arange(args.batch) // args.group,
    )
    variants = [
        "single",
        "marble:output",
        "marble:params-subset",
        "marble:params-all",
        "marble:params-all/every-10",
    ]
    steps = {v: Step(v, args, data) for v in variants}
    for s in steps.values():  # warm-up
        s()
    times: dict[str, list[float]] = {v: [] for v in variants}
    last: dict[str, dict[str, float]] = {}
    for _ in range(args.reps):
        for v, s in steps.items():
            t0 = time.perf_counter()
            m = s()
            times[v].append(time.perf_counter() - t0)
            last[v] = m or last.get(v, {})
    base = statistics.median(times["single"])
    n_params = sum(p.numel() for p in steps["single"].params)
    print(
        f"tiny SD3 ({n_params} params), batch {args.batch}, latent 4x{args.size}x{args.size}, K={args.rewards} "
        f"rewards, {args.reps} round-robin reps, 1 thread"
    )
    base_min = min(times["single"])
    print(f"{'step':30s} {'median ms':>10s} {'ratio':>7s} {'min ms':>8s} {'ratio':>7s}")
    for v in variants:
        med, best = statistics.median(times[v]), min(times[v])
        print(f"{v:30s} {1000 * med:10.2f} {med / base:7.3f}x {1000 * best:8.2f} {best / base_min:7.3f}x")
    cos = {k: round(x, 3) for k, x in last["marble:output"].items()}
    print(f"marble:output diagnostics (last step): {cos}")
    ratio = statistics.median(times["marble:output"]) / base
    ratio_min = min(times["marble:output"]) / base_min
    print(
        f"amortised MARBLE (output Gram) / single-reward NFT step: {ratio:.3f}x median, {ratio_min:.3f}x min "
        "(target <= 1.10x; the extra cost is a fixed few ms per step, independent of the model size)"
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
