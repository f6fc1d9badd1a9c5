"""``imgalign report RUN_DIR``: plots (per-reward curves, KL, clip fraction, norm inflation when logged) and a short
markdown summary of a training run's ``metrics.jsonl``, and of its in-loop evaluations (``eval.jsonl``)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report", help="plots and a markdown summary of a training run's metrics.jsonl and eval.jsonl"
    )
    p.add_argument(
        "run_dir", metavar="RUN_DIR", nargs="?", help="a training run folder holding metrics.jsonl"
    )
    p.add_argument("--out", help="output folder (default: RUN_DIR/report)")
    p.add_argument(
        "--compare",
        nargs="+",
        metavar="LABEL=RUN[,RUN...]",
        help="instead of one run: overlay groups of runs (e.g. the seeds of each config); writes OUT/compare.png "
        "and OUT/compare.md",
    )
    p.add_argument("--keys", nargs="+", help="metric keys to compare (with --compare)")
    p.add_argument(
        "--x",
        default="step",
        help="x axis with --compare: step, or a cumulative counter such as perf/nfe_total",
    )
    p.add_argument(
        "--target",
        metavar="KEY=VALUE",
        help="with --compare: report the x at which each run's trailing mean of KEY first reaches VALUE",
    )
    p.add_argument("--window", type=int, default=10, help="trailing-mean window for --target (logged points)")
    p.set_defaults(func=run_report)


def compare_only_flags(args: argparse.Namespace) -> dict[str, bool]:
    """Whether each --compare option is set (away from its default)."""
    return {
        "--keys": bool(args.keys),
        "--x": args.x != "step",
        "--target": args.target is not None,
        "--window": args.window != 10,
    }


def run_report(args: argparse.Namespace) -> int:
    from imgalign.commands.world import refuse_empty_options
    from imgalign.eval.reports import compare_runs, write_run_report

    # --out "" ("$OUT" with OUT unset) was read as not given: the report went into the run folder, without a word
    refuse_empty_options(
        args,
        {
            "out": "an output folder, or leave it out (RUN_DIR/report)",
            "x": "step, or a counter the runs log such as perf/nfe_total, or leave --x out",
        },
    )
    if args.compare and args.run_dir:
        raise ValueError(
            f"RUN_DIR ({args.run_dir}) and --compare are exclusive: name every run in --compare LABEL=RUN[,RUN...]"
        )
    if args.compare:
        groups = {}
        for item in args.compare:
            label, sep, runs = item.partition("=")
            # " base =RUN" was a group of its own beside "base=RUN", with the spaces in the legend
            label = label.strip()
            # "a= run1, run2" (spaces as a shell user types them) named the folders ' run1' and ' run2'; a folder
            # whose name does hold the space is taken as it is
            names = [r if Path(r).exists() else r.strip() for r in runs.split(",")]
            if not sep or not label or not runs or "" in names:
                raise ValueError(f"--compare takes LABEL=RUN[,RUN...], got {item!r}")
            if label in groups:
                raise ValueError(f"--compare: label {label!r} is used twice; give each group one label")
            # its curve would count twice in the group's mean (also spelt run/ or /abs/run)
            folders = [Path(r).resolve() for r in names]
            dup = [r for r, f in zip(names, folders) if folders.count(f) > 1]
            if dup:
                spelt = f" ({' and '.join(map(repr, dup))})" if len(set(dup)) > 1 else ""
                raise ValueError(
                    f"--compare {item!r} names run {dup[0]!r} twice{spelt}; give each run of a group once"
                )
            groups[label] = names
        if not args.keys or not args.out:
            raise ValueError("--compare needs --keys KEY [KEY ...] and --out DIR")
        if any(not k.strip() for k in args.keys):  # it said "no run logs ''"
            raise ValueError(
                "--keys has an empty key (an unset shell variable?): give metric keys such as reward/NAME/mean"
            )
        twice = sorted({k for k in args.keys if args.keys.count(k) > 1})
        if twice:  # it drew the same panel and table rows twice
            raise ValueError(f"--keys names {twice[0]!r} twice; give each key once")
        if args.window < 1:
            raise ValueError(
                f"--window must be 1 or more (logged points in the trailing mean), got {args.window}"
            )
        if args.target is None and args.window != 10:  # it was ignored: only a target reads the trailing mean
            raise ValueError(
                f"--window {args.window} applies to --target only (the trailing mean that must reach the target): "
                "give --target KEY=VALUE, or leave --window out"
            )
        target = None
        if args.target is not None:  # (an empty one, from an unset shell variable, was ignored)
            key, sep, value = args.target.rpartition("=")
            if not sep or not key:
                raise ValueError(f"--target takes KEY=VALUE, got {args.target!r}")
            try:
                target = (key, float(value))
            except ValueError:
                raise ValueError(f"--target takes KEY=VALUE with a number, got {args.target!r}") from None
            # nan is never reached and inf only by an infinite mean: no answer
            if not math.isfinite(target[1]):
                raise ValueError(f"--target takes a finite VALUE, got {args.target!r}")
        md, png = compare_runs(groups, args.keys, args.out, x_key=args.x, target=target, window=args.window)
        print(md.read_text(), end="")
        print(f"wrote {md} and {png}")
        return 0
    if not args.run_dir:
        raise ValueError("give RUN_DIR, or --compare LABEL=RUN[,RUN...] --keys ... --out DIR")
    given = [f for f, on in compare_only_flags(args).items() if on]
    if given:  # they were ignored: a report of every known metric against the step
        raise ValueError(
            f"{', '.join(given)} {'apply' if len(given) > 1 else 'applies'} to --compare only; `imgalign report RUN_DIR` plots every known metric against "
            "the step: leave them out, or give --compare LABEL=RUN_DIR --keys KEY ... --out DIR"
        )
    md, plots = write_run_report(args.run_dir, args.out)
    print(md.read_text(), end="")
    print(f"wrote {md} and {len(plots)} plot(s): {', '.join(p.name for p in plots) or 'none'}")
    return 0
