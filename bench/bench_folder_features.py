"""Peak memory of features of an image folder: the whole folder decoded at once vs a batch at a time.
    python bench/bench_folder_features.py [--images 500] [--side 256] [--features stats] [--batch 64]
Writes `--images` random `--side` x `--side` PNGs to a temporary folder, then runs two fresh Python processes one
after the other, each computing the features that ``imgalign rewards fid-stats`` / ``fit-discriminator`` compute:
``whole`` = ``encode(load_image_folder(folder))`` (every image as float32 pixels at once, how folders were read
before 2026-12-05), ``batched`` = :func:`imgalign.rewards.io.encode_image_folder` (``--batch`` images at a time).
Prints each process's peak resident memory (its own ru_maxrss) and seconds, the ratio whole / batched, and whether the two
feature matrices are equal.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time, torch
from imgalign.rewards.features import build_features
from imgalign.rewards.io import encode_image_folder, load_image_folder
mode, folder, features, batch, out = sys.argv[1:]
enc = build_features(features, "cpu")
t = time.perf_counter()
feats = enc(load_image_folder(folder)) if mode == "whole" else encode_image_folder(folder, enc, batch_size=int(batch))
torch.save(feats, out)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": time.perf_counter() - t, "peak_mib": peak}))
"""


def positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=positive, default=500)
    ap.add_argument("--side", type=positive, default=256)
    ap.add_argument("--features", default="stats")
    ap.add_argument("--batch", type=positive, default=64)
    args = ap.parse_args()
    import numpy as np
    import torch
    from PIL import Image

    from imgalign.rewards.features import build_features

    try:  # a mistyped --features fails here, not in both children after the images are written
        build_features(args.features, "cpu")
    except ValueError as e:
        ap.error(f"--features: {e}")

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "images"
        folder.mkdir()
        rng = np.random.default_rng(0)
        for i in range(args.images):
            px = rng.integers(0, 256, (args.side, args.side, 3), dtype=np.uint8)
            Image.fromarray(px).save(folder / f"{i:05d}.png")
        rows = {}
        for mode in ("whole", "batched"):
            out = Path(tmp) / f"{mode}.pt"
            argv = [sys.executable, "-c", CHILD, mode, str(folder), args.features, str(args.batch), str(out)]
            done = subprocess.run(argv, check=True, capture_output=True, text=True)
            rows[mode] = json.loads(done.stdout.splitlines()[-1])  # the child's own peak (ru_maxrss) and time
            rows[mode]["feats"] = torch.load(out)
        for mode, r in rows.items():
            print(f"{mode:8s} peak RSS {r['peak_mib']:8.0f} MiB   {r['seconds']:6.1f} s")
        w, b = rows["whole"], rows["batched"]
        print(
            f"whole / batched: peak memory {w['peak_mib'] / b['peak_mib']:.2f}x, time {w['seconds'] / b['seconds']:.2f}x; "
            f"features equal: {torch.equal(w['feats'], b['feats'])}"
        )


if __name__ == "__main__":
    main()
