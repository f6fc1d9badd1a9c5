"""``imgalign report RUN_DIR``: plots (per-reward curves, KL, clip fraction, norm inflation when logged) and a short
markdown summary of a training run's ``metrics.jsonl``."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="plots and a markdown summary of a training run's metrics.jsonl")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a training run folder holding metrics.jsonl")
    p.add_argument("--out", help="output folder (default: RUN_DIR/report)")
    p.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    from imgalign.eval.reports import write_run_report

    md, plots = write_run_report(args.run_dir, args.out)
    print(md.read_text(), end="")
    print(f"wrote {md} and {len(plots)} plot(s): {', '.join(p.name for p in plots) or 'none'}")
    return 0
