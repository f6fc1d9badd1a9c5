"""Torch threads on a busy CPU machine: sampling speed with one intra-op thread against torch's default, side by
side, while other processes keep the cores busy.

    python bench/bench_threads.py [--load 2] [--rounds 3] [--images 16] [--steps 10]

Starts `--load` busy processes (each spins one core, as another job on a shared machine would), then alternates, for
`--rounds` rounds, two fresh Python processes that sample the embedded `shapes` model (`--images` 64 px images, CFG
4, `--steps` Euler steps, the same prompts and seeds): one with ``OMP_NUM_THREADS=1``, one with torch's default
thread count. Prints each process's seconds and the median ratio (default threads / one thread); then the same
without the load. Torch's worker threads wait for each other at every operation, so on a machine whose cores are
taken by other work each wait lasts until the scheduler runs the straggler; one thread never waits.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from multiprocessing.synchronize import Event

from imgalign.trainers.testing import positive_int


def _spin(stop: Event) -> None:
    while not stop.is_set():
        for _ in range(100_000):
            pass


def sample_seconds(images: int, steps: int) -> float:
    """Seconds to sample `images` images from the shapes model, after one warm-up call (runs in a child)."""
    from imgalign.pipelines import load_pipeline
    from imgalign.sampling import generate_images

    pipe = load_pipeline("shapes")
    prompts = [f"{n} blue squares" for n in ("one", "two", "three", "four")] * (images // 4 + 1)
    generate_images(pipe, prompts[:2], [0, 1], steps=2, guidance=4.0, size=64)
    t0 = time.perf_counter()
    generate_images(pipe, prompts[:images], list(range(images)), steps=steps, guidance=4.0, size=64)
    return time.perf_counter() - t0


def child_seconds(threads: int | None, images: int, steps: int) -> tuple[float, int]:
    """(seconds, torch threads) of one fresh process; `threads` None keeps torch's default."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("OMP_NUM_THREADS", None)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    argv = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        "--images",
        str(images),
        "--steps",
        str(steps),
    ]
    out = subprocess.run(argv, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the sampling process failed:\n{out.stderr[-2000:]}")
    seconds, n = out.stdout.split()[-2:]
    return float(seconds), int(n)


def compare(rounds: int, images: int, steps: int) -> float:
    ratios = []
    for r in range(rounds):
        one, _ = child_seconds(1, images, steps)
        default, n = child_seconds(None, images, steps)
        ratios.append(default / one)
        print(
            f"  round {r + 1}: 1 thread {one:7.2f} s | torch's default ({n} threads) {default:7.2f} s",
            flush=True,
        )
    ratio = statistics.median(ratios)
    print(f"  median ratio (default / 1 thread): {ratio:.2f}", flush=True)
    return ratio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--load", type=int, default=2, help="busy processes running beside the sampler")
    ap.add_argument("--rounds", type=positive_int, default=3)
    ap.add_argument("--images", type=positive_int, default=16)
    ap.add_argument("--steps", type=positive_int, default=10)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one timed sampling process
    a = ap.parse_args()
    if a.child:
        import torch

        print(sample_seconds(a.images, a.steps), torch.get_num_threads())
        return
    if a.load < 0:
        raise SystemExit(f"--load must be 0 or more, got {a.load}")
    print(f"{os.cpu_count()} CPUs; {a.images} images of the shapes model, {a.steps} steps, CFG 4", flush=True)
    stop = mp.Event()
    spinners = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(a.load)]
    for p in spinners:
        p.start()
    try:
        print(f"with {a.load} busy processes:", flush=True)
        busy = compare(a.rounds, a.images, a.steps)
    finally:
        stop.set()
        for p in spinners:
            p.join()
    print("idle:", flush=True)
    idle = compare(a.rounds, a.images, a.steps)
    print(f"ratio default / 1 thread: {busy:.2f} busy, {idle:.2f} idle")


if __name__ == "__main__":
    main()
