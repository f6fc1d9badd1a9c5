"""Curves from a run's ``metrics.jsonl``: ``python -m imgalign.trainers.plots RUN_DIR [KEY ...] [--out PNG]``.

Defaults to every ``reward/<name>/mean`` and ``eval/shapes/overall`` key found, one panel each, against the training
step (cumulative NFEs are logged as ``perf/nfe_total``, which can be plotted as a key of its own)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def read_metrics(path: str | Path) -> list[dict[str, float]]:
    """A run's metrics.jsonl rows with its eval.jsonl merged in, read as `imgalign report` reads them (a cut-off last
    line skipped, a bad line elsewhere named); `path` is the run folder or its metrics.jsonl."""
    from imgalign.eval.reports import load_run_rows

    p = Path(path)
    # RUN/metrics.jsonl named though it is a folder, or not there yet: read as a run folder, it was
    # ".../metrics.jsonl/metrics.jsonl does not exist"
    run = p.parent if p.name == "metrics.jsonl" else p
    if p.is_file() and p.name != "metrics.jsonl":  # (RUN/old.jsonl: a file, but no metrics.jsonl)
        raise FileNotFoundError(
            f"{p} is a file, not a run's metrics.jsonl: point at a run folder or its metrics.jsonl (the curves are "
            "read from that name, with the eval.jsonl beside it)"
        )
    if (run / "metrics.jsonl").is_dir():  # it said "does not exist" of a folder that does
        raise IsADirectoryError(
            f"{run / 'metrics.jsonl'} is a folder, not the file a training run writes: point at a run folder or "
            "its metrics.jsonl"
        )
    if not (run / "metrics.jsonl").is_file():
        raise FileNotFoundError(
            f"{run / 'metrics.jsonl'} does not exist: point at a run folder or its metrics.jsonl"
        )
    return load_run_rows(run)


def plot_target(path: str | Path, out: str | Path | None) -> Path:
    """Where the curves are written: `out`, ``OUT/curves.png`` for a folder (one that exists, or a name ending in a
    slash), ``OUT.png`` for a name without a suffix (matplotlib adds it; the path printed lacked it); by default
    ``RUN/curves.png``."""
    if not out:
        return (Path(path) if Path(path).is_dir() else Path(path).parent) / "curves.png"
    target = Path(out)
    if target.is_dir() or str(out).endswith(("/", os.sep)):  # it wrote DIR.png beside the folder
        return target / "curves.png"
    return target if target.suffix else target.with_name(target.name + ".png")


def plot_metrics(
    path: str | Path, keys: list[str] | None = None, out: str | Path | None = None, smooth: int = 5
) -> Path:
    """One panel per key (raw and a `smooth`-step moving average) against the training step; returns the PNG."""
    import numpy as np

    from imgalign.eval.reports import agg_pyplot, series

    plt = agg_pyplot()

    # with every evaluation from eval.jsonl, the base model's at step 0 (eval.at_start) too
    rows = read_metrics(path)
    if not keys:  # None or [] (keys=[] was "none given and no reward/*/mean" beside a file that has them)
        found = sorted({k for r in rows for k in r})
        keys = [k for k in found if k.startswith("reward/") and k.endswith("/mean")]
        keys += [k for k in found if k == "eval/shapes/overall"]
    if not keys:
        # (it named reward/*/mean only, though eval/shapes/overall is plotted by default too)
        raise ValueError(
            "no metric keys to plot (none given, and the file has no reward/*/mean or eval/shapes/overall): "
            "name the keys to plot"
        )
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        # the report's points (a row without a step at its row index), in step order (stable on a repeated step)
        xs, ys = series(rows, key)
        if not len(xs):
            ax.set_title(f"{key} ({'no finite value' if any(key in r for r in rows) else 'absent'})")
            continue
        order = np.argsort(xs, kind="stable")
        xs, ys = tuple(xs[order].tolist()), tuple(ys[order].tolist())
        ax.plot(xs, ys, "o-" if len(xs) < 20 else "-", alpha=0.4 if len(xs) >= 20 else 1.0, label="per step")
        if len(ys) >= 20 and smooth > 1:
            avg = [
                sum(ys[max(0, i - smooth + 1) : i + 1]) / len(ys[max(0, i - smooth + 1) : i + 1])
                for i in range(len(ys))
            ]
            ax.plot(xs, avg, "-", label=f"{smooth}-step mean")
            ax.legend(fontsize=7)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    target = plot_target(path, out)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("run", help="run folder or metrics.jsonl")
    p.add_argument("keys", nargs="*", help="metric keys (default: reward means and eval overall)")
    p.add_argument("--out", help="PNG path, or a folder for FOLDER/curves.png (default: RUN/curves.png)")
    a = p.parse_args(argv)
    try:
        print(plot_metrics(a.run, a.keys or None, a.out))
    except (OSError, ValueError) as e:  # a missing run, no keys to plot, an --out that cannot be written
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
