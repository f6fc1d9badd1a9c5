"""Sampling throughput of a T2I pipeline at the default evaluation sampler settings.

Measures, side by side in one run on the same prompts and seeds:

* batched: ``imgalign.sampling.generate`` with batch 32 (one pipeline call per 32 prompts);
* one at a time: one ``pipe(prompt, ...)`` call per prompt, the way a naive loop calls the pipeline;

and prints images/s for each and the ratio batched / one-at-a-time.

    python bench/bench_sampling.py [--model shapes] [--n 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import time


def main(argv: list[str] | None = None) -> int:
    import torch

    from imgalign.prompts.io import load_geneval_metadata
    from imgalign.prompts.shapes import EVAL_SET_PATH
    from imgalign.sampling import (
        GUIDANCE_SCALE,
        MAX_SEQUENCE_LENGTH,
        NUM_INFERENCE_STEPS,
        generate,
        load_pipeline,
    )
    from imgalign.trainers.testing import positive_int

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="shapes", help="embedded name or pipeline folder")
    p.add_argument(
        "--n", type=positive_int, default=64, help="images per measurement (a multiple of --batch)"
    )
    p.add_argument("--batch", type=positive_int, default=32)
    p.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads")
    p.add_argument("--steps", type=positive_int, default=NUM_INFERENCE_STEPS)
    p.add_argument("--guidance", type=float, default=GUIDANCE_SCALE)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    pipe = load_pipeline(args.model)
    metas = load_geneval_metadata(EVAL_SET_PATH)
    prompts = [metas[i % len(metas)]["prompt"] for i in range(args.n)]
    seeds = list(range(args.n))
    kw = dict(num_inference_steps=args.steps, guidance_scale=args.guidance)

    generate(pipe, prompts[:2], seeds[:2], batch_size=2, **kw)  # warm-up
    t0 = time.perf_counter()
    generate(pipe, prompts, seeds, batch_size=args.batch, **kw)
    batched = time.perf_counter() - t0

    t0 = time.perf_counter()
    for prompt, seed in zip(prompts, seeds):
        pipe(
            prompt=prompt,
            height=64,
            width=64,
            generator=torch.Generator().manual_seed(seed),
            max_sequence_length=MAX_SEQUENCE_LENGTH,
            **kw,
        )
    single = time.perf_counter() - t0

    result = {
        "model": args.model,
        "images": args.n,
        "steps": args.steps,
        "guidance_scale": args.guidance,
        "threads": args.threads,
        f"batched_{args.batch}_images_per_s": round(args.n / batched, 2),
        "one_at_a_time_images_per_s": round(args.n / single, 2),
        "ratio_batched_over_one_at_a_time": round(single / batched, 2),
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
