"""``imgalign eval``: GenEval-style evaluation suites."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from imgalign import shapes as W
from imgalign.commands.world import render_folder
from imgalign.eval.suite import copy_folder, judge_folder
from imgalign.prompts.io import load_geneval_metadata
from imgalign.prompts.shapes import EVAL_SET_PATH

SUITES = ("shapes",)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate images or a model on a GenEval-style suite")
    p.add_argument("--suite", default="shapes", help=f"suite name ({', '.join(SUITES)})")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--ground-truth", action="store_true", help="judge exact renders of the suite's prompts")
    src.add_argument("--images", help="judge an existing folder in the GenEval layout")
    src.add_argument(
        "--model", help="generate with a model (embedded name such as 'shapes', or a path) and judge"
    )
    p.add_argument("--prompts", help="GenEval metadata JSONL (default: the suite's own prompt set)")
    p.add_argument("--images-per-prompt", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_eval)


def shapes_validate(meta: dict) -> None:
    W.Spec.from_metadata(meta)


def run_eval(args: argparse.Namespace) -> int:
    if args.suite not in SUITES:
        raise ValueError(f"unknown suite {args.suite!r}; valid suites: {', '.join(SUITES)}")
    if args.images_per_prompt < 1:
        raise ValueError("--images-per-prompt must be at least 1")
    from imgalign.eval.shapes_detector import ShapesDetector

    out = Path(args.out)
    images = out / "images"
    progress = not args.no_progress
    if args.images:
        src = Path(args.images)
        if src.resolve() != images.resolve():
            copy_folder(src, images)
        model = f"images:{args.images}"
    else:
        metas = load_geneval_metadata(args.prompts or EVAL_SET_PATH)
        if args.ground_truth:
            render_folder(metas, images, args.images_per_prompt, args.seed, progress=progress)
            model = "ground-truth"
        else:
            from imgalign.sampling import generate_folder

            generate_folder(args.model, metas, images, args.images_per_prompt, args.seed, progress=progress)
            model = args.model
    summary = judge_folder(
        images,
        out,
        ShapesDetector(),
        suite=args.suite,
        model=model,
        validate_metadata=shapes_validate,
        progress=progress,
    )
    print(json.dumps({k: summary[k] for k in ("overall", "tasks", "n_images")}, indent=2))
    if summary["n_errors"]:
        print(f"{summary['n_errors']} images could not be judged; see {out / 'results.jsonl'}")
        return 1
    return 0
