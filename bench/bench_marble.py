"""The amortised MARBLE update vs a single-reward update, side by side, through the trainer's own code paths.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python bench/bench_marble.py [--config examples/shapes/marble.yaml]
        [--samples 32] [--rewards 3] [--reps 30] [--set key=value ...]

Builds the trainer from the config (default: ``examples/shapes/marble.yaml``, the embedded shapes model with
Flow-GRPO since 2026-12-01; DiffusionNFT before), rolls out ONE batch and then times one optimizer update on it (the objective's
forwards, the loss, ONE backward, gradient clipping, AdamW, the old-policy EMA) in these variants, all on the same
model, rollout and K synthetic reward columns:

- ``single``: the objective's ``loss`` with the first reward's group advantages (a single-reward update);
- ``marble``: :class:`~imgalign.trainers.balance.RewardBalancing` with output-space Gram (K gradient probes through
  the loss head only, the min-norm solve, the EMA, the alpha-mixed signal), diagnostics off;
- ``marble+diag``: as above plus the gradient-cosine diagnostics (``rewards.diagnose_cosines``, on in the example
  configs: K+1 probes per micro-batch);
- ``marble:params``: parameter-space Gram on every trainable weight (K extra backward passes), for reference;
- ``marble:params/10``: the same, refreshed every 10 updates.

Rollouts and reward scoring (identical for every balancer with the same rewards) are not timed, so the ratios are
the strict ones. The variants run round-robin (one update each per round, after a warm-up round) so the shared
machine's noise hits them alike; printed: the median time of each, its ratio to ``single`` and the median of the
per-round paired ratios.

Measured 2026-12-04 with the current ``examples/shapes/marble.yaml``, ``--samples 24 --reps 8``, one thread, the machine
otherwise idle: ``--variants single,marble,marble+diag`` gave paired ratios 1.011x and 1.025x; with ``--set
rewards.marble.all_terms=true`` (alpha* on all 4 trained SDE steps: 3 extra forwards per refresh) ``--variants
single,marble`` gave 1.454x.

Measured 2026-12-02 with the current ``examples/shapes/marble.yaml`` (the first 4 SDE steps with velocity weights,
KL 0.04 to the base model, so every training forward has a reference forward beside it), ``--samples 24 --reps 8
--variants single,marble,marble+diag``, one thread, while a 2-thread training run shared the 2 cores (read the paired
ratio):

    update                median ms    ratio   paired   min ms
    single                   2490.8   1.000x   1.000x   2191.3
    marble                   2744.4   1.102x   1.058x   2287.5
    marble+diag              2713.2   1.089x   1.011x   2278.9

Measured 2026-12-01 with the Flow-GRPO ``examples/shapes/marble.yaml`` of that day (all 9 SDE steps, no KL) (the clipped surrogate over the 9 SDE
transitions of each sample, CFG-4 policy), ``--samples 24 --reps 8 --variants single,marble,marble+diag``, one thread,
with two training runs and an evaluation sharing the 2 cores (so read the paired ratio):

    update                median ms    ratio   paired   min ms
    single                   4557.0   1.000x   1.000x   3856.0
    marble                   4830.4   1.060x   0.979x   3795.9
    marble+diag              4678.6   1.027x   0.986x   3788.1

On Flow-GRPO the output-space Gram probes the per-reward gradients through the surrogate's head once per micro-batch
and transition; ``perf/sec_balance`` was 0.014 s of the ~4.6 s update.

Measured 2026-11-30 (evening) with the NFT ``examples/shapes/marble.yaml`` of that time
(``git show fe4f91e:examples/shapes/marble.yaml``; NFT loss on the CFG-4 velocity, so
every forward is a CFG pair), machine otherwise idle, 32 samples per update, ``--reps 30``
(``--variants single,marble,marble+diag``):

    update           median ms   ratio   paired
    single               483.3  1.000x   1.000x
    marble               479.1  0.991x   1.006x
    marble+diag          478.9  0.991x   1.012x

and ``--samples 8 --reps 12``: marble 1.032x, marble+diag 1.041x (paired).

Earlier measurement, with the previous example config (loss on the conditional velocity):

Measured 2026-11-30 on the shared 2-core machine under heavy load (load average ~12, the process got a small share
of a core, so single timings are noisy; the paired ratio is the figure to read), embedded shapes model (1.65M
trainable weights, full fine-tune), NFT, K = 3, ``--reps 3`` (32 samples per update, ~10 s per update):

    update           median ms   ratio   paired
    single             11149.0  1.000x   1.000x
    marble             10771.8  0.966x   0.966x
    marble+diag         9080.6  0.814x   0.921x
    marble:params      40894.4  3.668x   3.635x
    marble:params/10   10045.5  0.901x   0.937x

and ``--samples 8 --reps 12 --variants single,marble,marble+diag`` (~4.5 s per update under the same load):

    update           median ms   ratio   paired
    single              4518.3  1.000x   1.000x
    marble              4772.9  1.056x   1.061x
    marble+diag         4667.7  1.033x   1.054x

i.e. the amortised update is within about 6% of the single-reward update (target <= 1.10x); the time spent in the
balancing itself (``perf/sec_balance`` in metrics.jsonl: K probes through the loss head, the solve, the mix) was
0.45 s of ~10.7 s here, and 0.03 s then 0.007 s of 0.40 s and 0.37 s updates in the 2-step smoke run of
``examples/shapes/marble.yaml``. The parameter-space Gram on every weight costs K extra backward passes (3.6x);
refreshed every 10 updates it amortises to ~1.0x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

from imgalign.commands.train import EXAMPLES
from imgalign.config import ConfigError
from imgalign.trainers.testing import positive_int

# the update variants Update builds (the module docstring describes each)
VARIANTS = ("single", "marble", "marble+diag", "marble:params", "marble:params/10")


def build(args: argparse.Namespace, out: str):  # noqa: ANN201 - returns the trainer and its rollout
    """The trainer of `args.config` with the bench's overrides, its run folder `out`, set up, and its first
    rollout."""
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.testing import first_rollout
    from imgalign.trainers.trainer import FlowGRPOTrainer

    overrides = [
        f"sampling.samples_per_step={args.samples}",
        f"sampling.batch_size={args.samples}",
        f"train.micro_batch_size={args.samples}",
        "train.updates_per_step=1",
        "eval.every=-1",
        "log.trackers=none",
        "log.progress=false",
        f"log.output_dir={out}",
        "rewards.balancer=weighted_sum",  # the trainer's own balancing state is not used here
        "rewards.diagnose_cosines=false",
        *args.set,
    ]
    cfg = load_config(FlowGRPOConfig, args.config, overrides)
    if cfg.sampling.rollout == "tree":  # as the trainer's ConfigError for rewards.balancer=marble with trees
        raise SystemExit(
            f"bench_marble: {args.config} has sampling.rollout=tree, which assigns its own per-edge credit; MARBLE "
            "needs one advantage per reward and sample: use a flat config (or --set sampling.rollout=flat)"
        )
    tr = FlowGRPOTrainer(cfg, out)
    tr.setup()
    ro, gid = first_rollout(tr)
    return tr, ro, gid


class Update:
    """One optimizer update of variant `name` on the fixed rollout (the trainer's _update loop, one chunk)."""

    def __init__(self, name: str, tr, ro, per: torch.Tensor, valid: torch.Tensor, names: list[str]) -> None:
        from imgalign.trainers.balance import RewardBalancing

        self.name, self.tr, self.ro, self.per, self.valid = name, tr, ro, per, valid
        self.rb = None
        if name != "single":
            self.rb = RewardBalancing(
                names,
                marble=True,
                diagnose=name == "marble+diag",
                space="params" if name.startswith("marble:params") else "output",
                refresh_every=10 if name.endswith("/10") else 1,
            )
        self.metrics: dict[str, float] = {}
        self.n = 0

    def __call__(self) -> None:
        from imgalign.trainers.objectives import TrainContext

        tr, ro = self.tr, self.ro
        cfg = tr.cfg
        tr.model.train()
        ctx = TrainContext(tr.adapter, tr.model, self.n)
        idx = torch.arange(len(ro.prompts))
        micro = [(mb, t) for mb in idx.split(cfg.train.micro_batch_size) for t in tr.objective.terms(ro)]
        if self.rb is not None:
            self.rb.start_update()
            # as the trainer: with rewards.marble.all_terms, alpha* sees every term of the first micro-batch
            all_terms = self.rb.solving and cfg.rewards.marble.all_terms
            n_terms = len(tr.objective.terms(ro)) if all_terms else 1
            for mb, term in micro[1:n_terms]:
                self.rb.probe(tr.objective.head(ctx, ro, mb, term, self.valid), self.per[mb], tr.params)
        for mb, term in micro:
            if self.rb is None:
                loss, _ = tr.objective.loss(ctx, ro, mb, term, self.per[:, 0], self.valid)
            else:
                head = tr.objective.head(ctx, ro, mb, term, self.valid)
                loss, _ = self.rb.micro_loss(head, self.per[mb], self.per[mb, 0], tr.params)
            (loss / len(micro)).backward()
        torch.nn.utils.clip_grad_norm_(tr.params, cfg.train.grad_clip or float("inf"))
        tr.optimizer.step()
        tr.optimizer.zero_grad(set_to_none=True)
        if hasattr(tr.objective, "after_update"):
            tr.objective.after_update(tr.params)
        if self.rb is not None:
            self.rb.end_update()
            self.metrics = self.rb.step_metrics()
        self.n += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(EXAMPLES / "shapes" / "marble.yaml"))
    ap.add_argument("--samples", type=positive_int, default=32, help="samples per update (one micro-batch)")
    ap.add_argument("--rewards", type=positive_int, default=3, help="K synthetic reward columns")
    ap.add_argument("--reps", type=positive_int, default=30, help="round-robin rounds")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of {', '.join(VARIANTS)}")
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"bench_marble: unknown --variants {unknown}; choose from {', '.join(VARIANTS)}")
    if "single" not in variants:
        raise SystemExit("bench_marble: --variants must include 'single' (the reference)")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from imgalign.trainers.rewarding import per_reward_advantages

    # the trainer's run folder (its config.yaml), removed when the bench ends: mkdtemp left one per run in /tmp
    work = tempfile.TemporaryDirectory(prefix="bench_marble_")
    try:
        tr, ro, gid = build(args, work.name)
    except ConfigError as e:  # (--samples 4 with groups of 8: a traceback ending in the config's own line)
        work.cleanup()
        raise SystemExit(f"bench_marble: {e}") from None
    gen = torch.Generator().manual_seed(0)
    scales = torch.logspace(-1, 3, args.rewards)[:, None]  # rewards on very different scales
    scores = torch.randn(args.rewards, gid.numel(), generator=gen) * scales  # [K, N]
    per, valid, _ = per_reward_advantages(scores, gid, torch.isfinite(scores))
    per = per.T.contiguous()  # [N, K]
    names = [f"r{k}" for k in range(args.rewards)]
    runs = {v: Update(v, tr, ro, per, valid, names) for v in variants}
    for u in runs.values():  # warm-up
        u()
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.reps):
        for v, u in runs.items():
            t0 = time.perf_counter()
            u()
            times[v].append(time.perf_counter() - t0)
    n_params = sum(p.numel() for p in tr.params)
    print(
        f"{tr.cfg.model.path} ({n_params / 1e6:.2f}M trainable), objective {tr.cfg.objective.name}, "
        f"{gid.numel()} samples/update, K={args.rewards} rewards, {args.reps} round-robin rounds, "
        f"{torch.get_num_threads()} thread(s)"
    )
    base = times["single"]
    print(f"{'update':20s} {'median ms':>10s} {'ratio':>8s} {'paired':>8s} {'min ms':>8s}")
    for v in variants:
        paired = statistics.median(t / b for t, b in zip(times[v], base))
        med = statistics.median(times[v])
        print(
            f"{v:20s} {1000 * med:10.1f} {med / statistics.median(base):7.3f}x {paired:7.3f}x "
            f"{1000 * min(times[v]):8.1f}"
        )
    if "marble" in runs:
        paired = statistics.median(t / b for t, b in zip(times["marble"], base))
        print(
            f"marble diagnostics (last update): { {k: round(x, 3) for k, x in runs['marble'].metrics.items()} }"
        )
        print(
            f"amortised MARBLE update / single-reward update: {paired:.3f}x (median of paired ratios; "
            "target <= 1.10x)"
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
