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

SUITES = ("shapes", "geneval")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate images or a model on a GenEval-style suite")
    p.add_argument("--suite", default="shapes", help=f"suite name ({', '.join(SUITES)})")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--ground-truth", action="store_true", help="judge exact renders of the suite's prompts")
    src.add_argument("--images", help="judge an existing folder in the GenEval layout")
    src.add_argument(
        "--model", help="generate with a model (embedded name such as 'shapes', or a path) and judge"
    )
    p.add_argument(
        "--prompts",
        help="GenEval metadata JSONL (default: the shapes suite's own set; the geneval suite needs one, e.g. the "
        "official evaluation_metadata.jsonl -- scores are comparable with papers only on that file -- or "
        "generate:SEED)",
    )
    p.add_argument("--images-per-prompt", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--steps",
        type=int,
        help="sampler steps with --model (default: the shapes model's evaluation setting, else the pipeline's own)",
    )
    p.add_argument(
        "--guidance-scale",
        type=float,
        help="classifier-free guidance scale with --model (default: the shapes model's evaluation setting, else the "
        "pipeline's own; 1 turns guidance off)",
    )
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--baseline", help="an earlier eval --out folder: write a per-task delta table and a failure gallery"
    )
    real = p.add_argument_group("geneval suite (real models)")
    real.add_argument(
        "--detector",
        default="facebook/mask2former-swin-small-coco-instance",
        help="transformers detector: folder or cached Hub id (DETR, Mask2Former, OWLv2, Grounding DINO)",
    )
    real.add_argument(
        "--clip", default="ViT-L-14:openai", help="open_clip colour classifier: ARCH:TAG or a folder"
    )
    real.add_argument("--device", default="cpu")
    p.set_defaults(func=run_eval)


def shapes_validate(meta: dict) -> None:
    W.Spec.from_metadata(meta)


def sampler_overrides(args: argparse.Namespace, steps_key: str, guidance_key: str) -> dict[str, float | int]:
    """The sampler settings given on the command line, under the generator's own keyword names."""
    out: dict[str, float | int] = {}
    if args.steps is not None:
        out[steps_key] = args.steps
    if args.guidance_scale is not None:
        out[guidance_key] = args.guidance_scale
    return out


def run_eval(args: argparse.Namespace) -> int:
    if args.suite not in SUITES:
        raise ValueError(f"unknown suite {args.suite!r}; valid suites: {', '.join(SUITES)}")
    if args.images_per_prompt < 1:
        raise ValueError("--images-per-prompt must be at least 1")
    if (args.steps is not None or args.guidance_scale is not None) and not args.model:
        raise ValueError("--steps and --guidance-scale apply to --model (images are judged as they are)")
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps must be at least 1 (got {args.steps})")
    if args.guidance_scale is not None and not args.guidance_scale >= 0:
        raise ValueError(f"--guidance-scale must be >= 0 (got {args.guidance_scale}); 1 turns guidance off")
    if args.baseline:
        from imgalign.eval.reports import load_summary

        load_summary(Path(args.baseline))  # fail before any model loads
    if args.suite == "geneval":
        return run_real_eval(args)
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

            generate_folder(
                args.model,
                metas,
                images,
                args.images_per_prompt,
                args.seed,
                progress=progress,
                **sampler_overrides(args, "num_inference_steps", "guidance_scale"),
            )
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
    return finish(args, summary, out)


def finish(args: argparse.Namespace, summary: dict, out: Path) -> int:
    print(json.dumps({k: summary[k] for k in ("overall", "tasks", "n_images")}, indent=2))
    if args.baseline:
        from imgalign.eval.reports import write_comparison

        print(write_comparison(out, Path(args.baseline)))
    if summary["n_errors"]:
        print(f"{summary['n_errors']} images could not be judged; see {out / 'results.jsonl'}")
        return 1
    return 0


def run_real_eval(args: argparse.Namespace) -> int:
    """The geneval suite: a transformers detector and an open_clip colour classifier (imgalign.eval.real)."""
    from imgalign.eval.real import check_judge_specs, evaluate_folder

    if args.ground_truth:
        raise ValueError("--ground-truth exists only for the shapes suite; give --images or --model")
    check_judge_specs(args.detector, args.clip)  # before any generation
    out = Path(args.out)
    images = out / "images"
    progress = not args.no_progress
    if args.images:
        src = Path(args.images)
        if src.resolve() != images.resolve():
            copy_folder(src, images)
        model = f"images:{args.images}"
    else:
        if not args.prompts:
            raise ValueError(
                "the geneval suite needs --prompts: GenEval's evaluation_metadata.jsonl, your own, or "
                "generate:SEED for a fresh set drawn from the task definitions"
            )
        from imgalign.eval.models import (
            check_model_spec,
            generate_folder,
            load_pipeline,
            parse_model_arg,
            sampling_defaults,
        )
        from imgalign.eval.real import load_prompt_set

        metas = load_prompt_set(args.prompts)
        spec = check_model_spec(parse_model_arg(args.model))
        pipe = load_pipeline(spec, device=args.device)
        settings = sampling_defaults(spec)  # the shapes family's trained settings, else the pipeline's
        settings.update(sampler_overrides(args, "steps", "guidance"))
        generate_folder(pipe, metas, images, args.images_per_prompt, args.seed, progress=progress, **settings)
        del pipe
        model = args.model
    summary = evaluate_folder(
        images, out, args.detector, args.clip, device=args.device, model=model, progress=progress
    )
    return finish(args, summary, out)
