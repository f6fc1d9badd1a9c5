"""Seconds per training phase and NFEs per step for a training config (default: the shapes default config).

    python bench/bench_train.py [CONFIG.yaml] [--steps 3] [--set key=value ...]

Runs a few steps in a temporary folder and prints per-phase wall time (rollout, reward, train, step), rollout and
training NFEs, and the projected time of the configured run."""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from imgalign.commands.train import DEFAULT_CONFIG
from imgalign.trainers.testing import positive_int


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("config", nargs="?", default=str(DEFAULT_CONFIG))
    p.add_argument("--steps", type=positive_int, default=3)
    p.add_argument("--set", action="append", default=[])
    a = p.parse_args()
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import run

    with tempfile.TemporaryDirectory() as tmp:
        full = load_config(FlowGRPOConfig, a.config, a.set).train
        planned, budget_min = full.max_steps, full.time_budget_min
        over = [
            *a.set,
            f"train.max_steps={a.steps}",
            "eval.every=-1",
            "log.sample_every=0",
            "log.trackers=none",
            "log.progress=false",
            f"log.output_dir={tmp}",
        ]
        cfg = load_config(FlowGRPOConfig, a.config, over)
        t0 = time.perf_counter()
        run(cfg, tmp)
        wall = time.perf_counter() - t0
        rows = [json.loads(x) for x in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    keys = [
        "perf/sec_rollout",
        "perf/sec_reward",
        "perf/sec_train",
        "perf/sec_step",
        "perf/nfe",
        "perf/nfe_train",
    ]
    steady = rows[1:] or rows  # the first step pays for prompt encoding and warm-up
    print(f"config: {a.config} {' '.join(a.set)}")
    for k in keys:
        print(f"{k:>20}: {statistics.mean(r[k] for r in steady):9.2f}")
    per_step = statistics.mean(r["perf/sec_step"] for r in steady)
    print(f"{'total wall':>20}: {wall:9.1f} s for {a.steps} steps (incl. model load)")
    minutes = planned * per_step / 60
    note = ""
    if budget_min and budget_min > 0 and minutes > budget_min:
        note = f"; train.time_budget_min={budget_min} stops it after about {int(budget_min * 60 / per_step)} steps"
    print(f"{'projected':>20}: {planned} steps x {per_step:.1f} s = {minutes:.1f} min (+ eval){note}")


if __name__ == "__main__":
    main()
