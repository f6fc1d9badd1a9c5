"""Tree vs flat rollouts: NFEs and wall time per trained sample, side by side, on a tiny random SD3 transformer.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python bench/bench_tree.py [--prompts 2] [--leaves 8] [--steps 10]

Flat = Flow-GRPO: `leaves` independent SDE trajectories per prompt; every step but the last is trained
(leaves·(steps-1) transitions per prompt), and the update re-evaluates v_theta on every trained transition.
Tree = TreeGRPO/BranchGRPO: one shared initial noise per prompt, binary SDE branches at the given steps (ODE
elsewhere), only branching edges trained; siblings share their parent's x, so the update evaluates v_theta once per
parent row. Reported per method: rollout NFEs (counted by the driver, checked against the formula), rollout wall
time, trained samples (transitions), update forward rows, NFE / seconds per leaf image and per trained sample, and
the update's forward + backward time over its rows, so the last column is the whole step's wall time per trained sample.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from imgalign.trainers.testing import int_at_least, positive_int
from imgalign.trainers.tree import TreeSpec, flat_nfe, flow_sde_step, restrict_to_window, tree_rollout


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
    ).eval()


class SD3Velocity:
    """velocity_fn(x [N, 4, H, W], sigma [N], root [N]) for a diffusers SD3 transformer (timestep = 1000·sigma)."""

    def __init__(self, model, text: torch.Tensor, pooled: torch.Tensor, cfg_scale: float = 1.0) -> None:
        self.model, self.text, self.pooled, self.cfg_scale = model, text, pooled, cfg_scale
        self.rows = 0  # transformer rows evaluated (= NFE, CFG included)

    @torch.no_grad()
    def __call__(self, x: torch.Tensor, sigma: torch.Tensor, root: torch.Tensor) -> torch.Tensor:
        text, pooled = self.text[root], self.pooled[root]
        if self.cfg_scale != 1.0:  # one batched [uncond; cond] forward
            x = torch.cat([x, x])
            text = torch.cat([torch.zeros_like(text), text])
            pooled = torch.cat([torch.zeros_like(pooled), pooled])
            sigma = torch.cat([sigma, sigma])
        self.rows += x.shape[0]
        v = self.model(
            hidden_states=x, encoder_hidden_states=text, pooled_projections=pooled, timestep=sigma * 1000.0
        ).sample
        if self.cfg_scale != 1.0:
            v_u, v_c = v.chunk(2)
            v = v_u + self.cfg_scale * (v_c - v_u)
        return v


def flat_rollout(vf: SD3Velocity, noise: torch.Tensor, root: torch.Tensor, sigmas: torch.Tensor, a: float, g):
    """Independent SDE trajectories (Flow-GRPO); returns the final latents."""
    x = noise
    for i in range(sigmas.numel() - 1):
        s = sigmas[i].expand(x.shape[0])
        sn = sigmas[i + 1].expand(x.shape[0])
        x, _, _ = flow_sde_step(x, vf(x, s, root), s, sn, a, g)
    return x


def update_seconds(vf: SD3Velocity, rows: int, size: int, micro: int, gen: torch.Generator) -> float:
    """Wall time of the update's forward + backward over `rows` transformer rows (v_theta with grad, in micro-batches
    of `micro`): flat re-evaluates every trained transition, the tree one row per parent."""
    model = vf.model
    t0 = time.perf_counter()
    for s in range(0, rows, micro):
        n = min(micro, rows - s)
        x = torch.randn(n, 4, size, size, generator=gen)
        root = torch.zeros(n, dtype=torch.long)
        v = model(
            hidden_states=x,
            encoder_hidden_states=vf.text[root],
            pooled_projections=vf.pooled[root],
            timestep=torch.full((n,), 500.0),
        ).sample
        v.square().mean().backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=positive_int, default=2)
    ap.add_argument(
        "--leaves", type=int, default=8, help="images per prompt (power of two for the binary tree)"
    )
    ap.add_argument("--steps", type=int_at_least(2), default=10)
    ap.add_argument("--size", type=positive_int, default=16, help="latent height/width")
    ap.add_argument("--repeats", type=positive_int, default=3)
    ap.add_argument(
        "--micro", type=positive_int, default=16, help="update micro-batch (rows per forward + backward)"
    )
    ap.add_argument("--noise-level", type=float, default=0.7)
    ap.add_argument(
        "--cfg", type=float, default=1.0, help="guidance scale; != 1 runs CFG (every NFE counts twice)"
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    depth = args.leaves.bit_length() - 1
    if args.leaves < 2 or 2**depth != args.leaves:
        raise SystemExit(f"--leaves must be a power of two >= 2 for binary branching (got {args.leaves})")
    t_steps = args.steps
    stride = max(1, (t_steps - 1) // depth)
    branch = tuple(range(0, stride * depth, stride))
    specs = {
        f"tree {list(branch)}x2": TreeSpec(t_steps, branch, (2,) * depth),
        f"tree-late (B2 window at {t_steps - 2})": restrict_to_window(
            TreeSpec(t_steps, branch, (2,) * depth), t_steps - 2
        ),
    }
    model = tiny_sd3(sample_size=args.size)
    gen = torch.Generator().manual_seed(0)
    text = torch.randn(args.prompts, 8, 32, generator=gen)
    pooled = torch.randn(args.prompts, 32, generator=gen)
    sigmas = torch.linspace(1.0, 0.0, t_steps + 1)
    p, g_size = args.prompts, args.leaves
    print(
        f"tiny SD3: {sum(q.numel() for q in model.parameters())} params, latent 4x{args.size}x{args.size}, "
        f"{t_steps} steps, {p} prompts x {g_size} images, 1 thread, CFG {'x2 NFE' if args.cfg != 1.0 else 'off'}"
    )

    rows = []
    # flat
    use_cfg = args.cfg != 1.0
    vf = SD3Velocity(model, text, pooled, args.cfg)
    times = []
    for _ in range(args.repeats):
        vf.rows = 0
        noise = torch.randn(p * g_size, 4, args.size, args.size, generator=gen)
        root = torch.arange(p).repeat_interleave(g_size)
        t0 = time.perf_counter()
        flat_rollout(vf, noise, root, sigmas, args.noise_level, gen)
        times.append(time.perf_counter() - t0)
    assert vf.rows == flat_nfe(p * g_size, t_steps, cfg=use_cfg)
    trained = p * g_size * (t_steps - 1)
    rows.append(("flat Flow-GRPO", vf.rows, statistics.median(times), p * g_size, trained, trained))
    for name, spec in specs.items():
        vf = SD3Velocity(model, text, pooled, args.cfg)
        times = []
        for _ in range(args.repeats):
            noise = torch.randn(p, 4, args.size, args.size, generator=gen)
            t0 = time.perf_counter()
            vf.rows = 0
            roll = tree_rollout(
                vf,
                noise,
                sigmas,
                spec,
                noise_level=args.noise_level,
                generator=gen,
                cfg_multiplier=1 + use_cfg,
            )
            times.append(time.perf_counter() - t0)
        assert roll.nfe == spec.nfe(num_trees=p, cfg=use_cfg) == vf.rows, (roll.nfe, vf.rows)
        rows.append(
            (
                name,
                roll.nfe,
                statistics.median(times),
                roll.leaves.shape[0],
                roll.edge_child.numel(),
                roll.parent_x.shape[0],
            )
        )

    # the update: forward + backward of v_theta over the rows each method re-evaluates (CFG doubles them)
    upd_s = [update_seconds(vf, r[5] * (1 + use_cfg), args.size, args.micro, gen) for r in rows]
    hdr = (
        f"{'method':34s} {'NFE':>5s} {'wall s':>7s} {'leaves':>6s} {'trained':>7s} {'upd rows':>8s} "
        f"{'NFE/leaf':>8s} {'NFE/trained':>11s} {'ms/leaf':>8s} {'ms/trained':>10s} {'upd s':>6s} "
        f"{'NFE+upd/trained':>15s} {'total ms/trained':>16s}"
    )
    print(hdr)
    for (name, nfe, wall, leaves, trained, upd), us in zip(rows, upd_s):
        upd_nfe = upd * (1 + use_cfg)
        print(
            f"{name:34s} {nfe:5d} {wall:7.3f} {leaves:6d} {trained:7d} {upd:8d} {nfe / leaves:8.2f} "
            f"{nfe / trained:11.2f} {1000 * wall / leaves:8.2f} {1000 * wall / trained:10.2f} {us:6.2f} "
            f"{(nfe + upd_nfe) / trained:15.2f} {1000 * (wall + us) / trained:16.2f}"
        )
    flat_nfe_leaf = rows[0][1] / rows[0][3]
    for name, nfe, wall, leaves, *_ in rows[1:]:
        print(
            f"flat/tree per leaf image, {name}: NFE {flat_nfe_leaf / (nfe / leaves):.2f}x, "
            f"wall {(rows[0][2] / rows[0][3]) / (wall / leaves):.2f}x"
        )
    print(
        "trained = transitions carrying a policy-gradient term; upd rows = v_theta rows the update evaluates "
        "(tree: one per parent, shared by its children); upd s = forward + backward over them; total = rollout + "
        "update wall time per trained sample"
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
