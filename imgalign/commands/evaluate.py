"""``imgalign eval``: GenEval-style evaluation suites."""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from imgalign import shapes as W
from imgalign.commands import check_output_folder, seed_arg
from imgalign.commands.world import check_shapes_metadata, refuse_empty_options, render_folder
from imgalign.eval.geneval import GENEVAL_CLIP
from imgalign.eval.suite import (
    copy_folder,
    judge_folder,
    read_folder,
    read_folder_index,
    short_prompt_folders,
)
from imgalign.files import atomic_write_text
from imgalign.prompts.io import load_geneval_metadata
from imgalign.prompts.shapes import EVAL_SET_PATH

SUITES = ("shapes", "geneval")
GENEVAL_DETECTOR = "facebook/mask2former-swin-small-coco-instance"

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate images or a model on a GenEval-style suite")
    p.add_argument("--suite", default="shapes", help=f"suite name ({', '.join(SUITES)})")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--ground-truth", action="store_true", help="judge exact renders of the suite's prompts")
    src.add_argument("--images", help="judge an existing folder in the GenEval layout")
    src.add_argument(
        "--model",
        help="generate with a model and judge: an embedded name such as 'shapes', a pipeline folder, a trainer "
        "checkpoint (full or LoRA) or BASE+OVERLAY",
    )
    p.add_argument(
        "--prompts",
        help="GenEval metadata JSONL (default: the shapes suite's own set; the geneval suite needs one, e.g. the "
        "official evaluation_metadata.jsonl -- scores are comparable with papers only on that file -- or "
        "generate:SEED)",
    )
    p.add_argument(
        "--images-per-prompt", type=int, help="images per prompt with --model / --ground-truth (default 4)"
    )
    p.add_argument(
        "--seed", type=seed_arg, help="seed of the images with --model / --ground-truth (default 0)"
    )
    p.add_argument(
        "--steps",
        type=int,
        help="sampler steps with --model (default: the shapes model's evaluation setting in the shapes suite, and for "
        "a shapes-family model in the geneval suite; else the pipeline's own)",
    )
    p.add_argument(
        "--guidance-scale",
        type=float,
        help="guidance scale with --model (default: as --steps): classifier-free guidance for SD3 (1 turns it off), "
        "the distilled-guidance value for FLUX.1-dev",
    )
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bars (the libraries' loading bars included)"
    )
    p.add_argument(
        "--baseline", help="an earlier eval --out folder: write a per-task delta table and a failure gallery"
    )
    real = p.add_argument_group("geneval suite (real models)")
    # defaults filled in by run_eval: given with the shapes suite (which judges exactly) they are refused
    real.add_argument(
        "--detector",
        help="transformers detector: folder or cached Hub id (DETR, Mask2Former, OWLv2, Grounding DINO) "
        f"(default: {GENEVAL_DETECTOR})",
    )
    real.add_argument(
        "--clip",
        help=f"CLIP colour classifier: open_clip ARCH:TAG or folder, or a transformers CLIP folder or Hub id "
        f"(default: {GENEVAL_CLIP})",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="where --model samples (both suites) and the geneval suite's judge runs (cpu, cuda, cuda:N)",
    )
    p.set_defaults(func=run_eval)


def refresh_copy(src: Path, images: Path) -> None:
    """``OUT/images`` as a fresh copy of the user's folder (cheap next to judging), so an image or metadata file the
    user has since fixed or removed is not judged from an old copy; verdicts are reused only for identical bytes."""
    if src.resolve() == images.resolve():
        return
    if images.exists():
        shutil.rmtree(images)
    copy_folder(src, images)


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


def shapes_sampler_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Every setting the shapes suite samples a model with (:func:`imgalign.sampling.generate`'s keywords): the
    shapes model's evaluation settings, with --steps / --guidance-scale on top; recorded in summary.json."""
    from imgalign import sampling as S

    sampler: dict[str, Any] = {
        "num_inference_steps": S.NUM_INFERENCE_STEPS,
        "guidance_scale": S.GUIDANCE_SCALE,
        "height": S.IMAGE_SIZE,
        "width": S.IMAGE_SIZE,
        "max_sequence_length": S.MAX_SEQUENCE_LENGTH,
    }
    sampler.update(sampler_overrides(args, "num_inference_steps", "guidance_scale"))
    return sampler


def eval_identity(args: argparse.Namespace) -> dict[str, Any]:
    """What an ``--out`` folder's images and verdicts depend on: a rerun with the same identity resumes there, any
    other is refused (it would judge the earlier run's images or reuse its verdicts)."""
    ident: dict[str, Any] = {"suite": args.suite}
    if args.suite == "geneval":  # the judges decide the verdicts, whatever the images' source
        ident["detector"], ident["clip"] = judge_name(args.detector), judge_name(args.clip)
    if args.images:
        ident["images"] = str(Path(args.images).resolve())
        return ident
    if args.model:
        m = Path(args.model)
        ident["model"] = str(m.resolve()) if m.exists() else args.model
        ident["steps"], ident["guidance_scale"] = args.steps, args.guidance_scale
    else:
        ident["ground_truth"] = True
    prompts = args.prompts or str(EVAL_SET_PATH)
    pf = Path(prompts)
    ident["prompts"] = hashlib.sha256(pf.read_bytes()).hexdigest() if pf.is_file() else prompts
    ident["images_per_prompt"], ident["seed"] = args.images_per_prompt, args.seed
    return ident


def judge_name(spec: str | None) -> str | None:
    """A judge (--detector, --clip) as an ``--out`` folder records it: a local folder or file by its absolute path,
    anything else as given. Recorded as typed, one folder named relatively and absolutely was two evaluations (the
    rerun refused), and one relative name run from two folders one (the other judge's verdicts reused). An embedded
    name (shapes-clip) is the embedded model whatever folder of that name the working folder holds, as the judges
    load it (:func:`imgalign.hub.resolve`)."""
    from imgalign.hub import EMBEDDED

    return str(Path(spec).resolve()) if spec and spec not in EMBEDDED and Path(spec).exists() else spec


def _is_digest(value: Any) -> bool:
    """Whether `value` is a SHA-256 hex digest, as :func:`eval_identity` records a prompt file."""
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def setting_change(key: str, there: Any, now: Any) -> str:
    """How a setting recorded in an ``--out`` folder differs from this evaluation's. Prompt files are recorded by
    the SHA-256 of their bytes: two digests said "prompts: '53f81dcc...' there, 'c52499cf...' now", which names
    neither file nor what differs."""
    if key == "prompts" and _is_digest(there) and _is_digest(now):
        return (
            f"prompts: the --prompts file's content differs from the one evaluated there (SHA-256 {there[:12]}... "
            f"there, {now[:12]}... now)"
        )
    return f"{key}: {there!r} there, {now!r} now"


def claim_out_folder(out: Path, ident: dict[str, Any]) -> None:
    """Record `ident` in ``OUT/eval_args.json``; refuse an ``--out`` that holds another evaluation's outputs (or is a
    file). One whose evaluation wrote nothing but eval_args.json (its model failed to load) is taken over."""
    path = out / "eval_args.json"
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} is a file; give a folder for the evaluation's outputs")
    out.mkdir(parents=True, exist_ok=True)
    from imgalign.trainers.checkpoint import lock_output_dir

    # Two evaluations started into one empty --out both took it: the second took over while the first's model
    # loaded, and both said they had written it. The folder itself is locked (no file added) until run_eval ends.
    if not lock_output_dir(out, "imgalign eval", lock_file=None):
        raise ValueError(
            f"--out {str(out)!r} is being written by another imgalign eval (the same command started twice?): "
            "wait for it to end, or give another --out folder"
        )
    if path.is_file():
        try:
            old = json.loads(path.read_text())
            if not isinstance(old, dict):  # valid JSON but not a record (`null`, a list): damaged as well
                raise json.JSONDecodeError("not a JSON object", "", 0)
        except (json.JSONDecodeError, UnicodeDecodeError):
            # read as {} beside other files, every setting was reported as 'None there', as if another evaluation
            # had run; alone, it is taken over below
            if not any(p.name != "eval_args.json" for p in out.iterdir()):
                old = {}
            else:
                raise ValueError(
                    f"--out {str(out)!r}: {path} is damaged (not a valid JSON object), so what evaluation the folder "
                    "holds is unknown; give a new --out folder, or delete that one"
                ) from None
        # judges recorded as typed (before judge_name), read from this folder as they were run
        old.update({k: judge_name(old[k]) for k in ("detector", "clip") if isinstance(old.get(k), str)})
        # a folder holding nothing but eval_args.json (the model failed to load) has no images or verdicts to mix
        if old != ident and any(p.name != "eval_args.json" for p in out.iterdir()):
            keys = sorted(k for k in set(old) | set(ident) if old.get(k) != ident.get(k))
            diff = "; ".join(setting_change(k, old.get(k), ident.get(k)) for k in keys)
            raise ValueError(
                f"--out {str(out)!r} holds another evaluation ({diff}); its images and verdicts would be mixed "
                "with this one's. Give a new --out folder, or delete that one"
            )
        if old == ident:
            return
    elif out.is_dir() and any(out.iterdir()):
        raise ValueError(
            f"--out {str(out)!r} is not empty and was not written by this evaluation (no eval_args.json); give a "
            "new or empty --out folder"
        )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(ident, indent=2) + "\n")


def run_eval(args: argparse.Namespace) -> int:
    try:
        return _run_eval(args)
    finally:
        if getattr(args, "out", None):
            from imgalign.trainers.checkpoint import unlock_output_dir

            unlock_output_dir(Path(args.out))


def _run_eval(args: argparse.Namespace) -> int:
    refuse_empty_options(
        args,
        {
            "suite": f"one of {', '.join(SUITES)}",
            "images": "the image folder to judge",
            "model": "a model: an embedded name such as shapes, a pipeline folder or a checkpoint",
            "prompts": "a GenEval metadata .jsonl, or leave --prompts out for the suite's own set",
            "out": "an output folder",
            "baseline": "an earlier eval --out folder, or leave --baseline out",
            "detector": f"a detector, or leave --detector out for {GENEVAL_DETECTOR}",
            "clip": f"a colour classifier, or leave --clip out for {GENEVAL_CLIP}",
            "device": "cpu, cuda or cuda:N",
        },
    )
    if args.suite not in SUITES:
        raise ValueError(f"unknown suite {args.suite!r}; valid suites: {', '.join(SUITES)}")
    if args.images and (args.prompts or args.images_per_prompt is not None or args.seed is not None):
        raise ValueError(
            "--prompts, --images-per-prompt and --seed apply to --model and --ground-truth; --images judges every "
            "image of the folder against its metadata.jsonl files"
        )
    if args.suite != "geneval" and (args.detector or args.clip):
        raise ValueError(
            f"--detector and --clip apply to --suite geneval; the {args.suite} suite judges with its own exact "
            "detector (drop them, or add --suite geneval)"
        )
    args.detector = args.detector or GENEVAL_DETECTOR
    args.clip = args.clip or GENEVAL_CLIP
    args.images_per_prompt = 4 if args.images_per_prompt is None else args.images_per_prompt
    args.seed = 0 if args.seed is None else args.seed
    if args.images_per_prompt < 1:
        raise ValueError("--images-per-prompt must be at least 1")
    if (args.steps is not None or args.guidance_scale is not None) and not args.model:
        raise ValueError("--steps and --guidance-scale apply to --model (images are judged as they are)")
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps must be at least 1 (got {args.steps})")
    # inf sampled every image as NaN latents (all black), judged after the whole run
    if args.guidance_scale is not None and not 0 <= args.guidance_scale < float("inf"):
        raise ValueError(f"--guidance-scale must be >= 0 and finite (got {args.guidance_scale})")
    check_output_folder(Path(args.out))  # before the images are read, a judge loads or a model samples
    if args.baseline:
        from imgalign.eval.reports import load_summary

        given = Path(args.baseline)
        # EVAL/summary.json (or EVAL/results.jsonl) for EVAL: it said "EVAL/summary.json/summary.json does not exist"
        if given.is_file() and (given.parent / "summary.json").is_file():
            args.baseline = str(given.parent)
        elif given.is_file():
            raise ValueError(
                f"--baseline {args.baseline!r} is a file; give the --out folder of an earlier `imgalign eval` (the "
                "folder that holds its summary.json)"
            )
        # the same folder: compared with itself, every delta 0, without a word
        if Path(args.baseline).resolve() == Path(args.out).resolve():
            raise ValueError(
                f"--baseline {args.baseline!r} is the --out folder: this evaluation would be compared with itself; "
                "give the --out folder of another, earlier evaluation"
            )
        load_summary(Path(args.baseline))  # fail before any model loads
    if args.images:
        # a missing folder or bad metadata fails before --out is touched
        if short := short_prompt_folders(read_folder_index(Path(args.images))):
            log.warning("--images %s: %s", args.images, short)
    if args.suite == "geneval":
        return run_real_eval(args)
    from imgalign.eval.shapes_detector import ShapesDetector

    if args.device != "cpu" and not (args.model and not args.images):
        # nothing samples: the shapes judge is exact and runs on the CPU (it was ignored without a word)
        log.warning("--device %s is unused: the shapes suite only samples with --model", args.device)
    out = Path(args.out)
    images = out / "images"
    progress = not args.no_progress
    sampler = None  # the settings of images generated by this run
    if args.prompts and args.prompts.startswith("generate:") and not Path(args.prompts).exists():
        raise ValueError(
            f"--prompts {args.prompts}: generate:SEED draws GenEval's real-object prompts, for --suite geneval; "
            "the shapes suite takes a .jsonl of shapes prompts (default: its own set)"
        )
    metas = None if args.images else load_geneval_metadata(args.prompts or EVAL_SET_PATH)
    # prompts the shapes world cannot draw fail with their line, before --out is claimed
    if metas is not None:
        check_shapes_metadata(metas, args.prompts or EVAL_SET_PATH)
    spec = None
    if args.model and not args.images:  # a mistyped model fails before --out is claimed for it
        from imgalign.commands import check_device
        from imgalign.pipelines import check_model_spec, parse_model_arg

        spec = check_model_spec(parse_model_arg(args.model))
        check_device(args.device)
    claim_out_folder(out, eval_identity(args))
    if args.images:
        refresh_copy(Path(args.images), images)
        model = f"images:{args.images}"
    else:
        assert metas is not None
        if args.ground_truth:
            render_folder(metas, images, args.images_per_prompt, args.seed, progress=progress)
            model = "ground-truth"
        else:
            from imgalign import sampling as S
            from imgalign.eval.models import is_shapes_family

            sampler = shapes_sampler_settings(args)
            if spec is not None and not is_shapes_family(spec):
                log.warning(
                    "%s is not a shapes-family model, but the shapes suite samples every model with the shapes "
                    "model's settings (%s); its score reflects these settings, not the pipeline's own defaults "
                    "(--steps and --guidance-scale change the first two)",
                    args.model,
                    ", ".join(f"{k} {v}" for k, v in sampler.items()),
                )
            # on --device (it sampled on the CPU whatever --device said)
            S.generate_folder(
                args.model,
                metas,
                images,
                args.images_per_prompt,
                args.seed,
                progress=progress,
                device=args.device,
                **sampler,
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
        sampler=sampler,
        extra={"eval_args": eval_identity(args)},
        source_dir=Path(args.images) if args.images else None,
    )
    return finish(args, summary, out)


def finish(args: argparse.Namespace, summary: dict, out: Path) -> int:
    shown = (
        "overall",
        "tasks",
        "n_images",
        "sampler",
    )  # the sampler settings when this run generated the images
    print(json.dumps({k: summary[k] for k in shown if k in summary}, indent=2))
    if args.baseline:
        from imgalign.eval.reports import write_comparison

        print(write_comparison(out, Path(args.baseline)))
    if summary["n_errors"]:
        print(f"{summary['n_errors']} images could not be judged; see {out / 'results.jsonl'}")
        return 1
    return 0


def run_real_eval(args: argparse.Namespace) -> int:
    """The geneval suite: a transformers detector and an open_clip colour classifier (imgalign.eval.real)."""
    from imgalign.commands import check_device
    from imgalign.eval.real import check_judge_specs, evaluate_folder

    if args.ground_truth:
        raise ValueError("--ground-truth exists only for the shapes suite; give --images or --model")
    check_device(args.device)
    out = Path(args.out)
    images = out / "images"
    progress = not args.no_progress
    sampler = None  # the settings of images generated by this run (None: the pipeline's)
    if not args.images and not args.prompts:
        raise ValueError(
            "the geneval suite needs --prompts: GenEval's evaluation_metadata.jsonl, your own, or "
            "generate:SEED for a fresh set drawn from the task definitions"
        )
    from imgalign.eval.real import build_judge

    metas = spec = None
    if not args.images:  # the prompts and the model are checked before --out is claimed for them
        from imgalign.eval.real import load_prompt_set
        from imgalign.pipelines import check_model_spec, parse_model_arg

        metas = load_prompt_set(args.prompts)
        spec = check_model_spec(parse_model_arg(args.model))
        judge_metas = metas
    else:
        judge_metas = [f.metadata for f in read_folder(Path(args.images))]
    # (after the prompts' checks: a mistake in the user's file is said before the detector's config is fetched)
    check_judge_specs(args.detector, args.clip)  # before any generation
    # the judge's weights load before --out is claimed and before any generation: a judge that cannot load (weights
    # not downloaded, a folder without them) fails now, not after hours of sampling. Before generation it loads on
    # the CPU and is let go (the pipeline needs the device), and loads on the device once the pipeline is gone.
    judge = build_judge(args.detector, args.clip, judge_metas, device=args.device if args.images else "cpu")
    if not args.images:
        _, _, validate = judge
        # a prompt the judge cannot judge fails now, not after sampling
        for i, meta in enumerate(judge_metas, 1):
            try:
                validate(meta)
            except ValueError as e:
                raise ValueError(
                    f"--prompts {args.prompts}: prompt {i} ({meta.get('prompt')!r}): {e}"
                ) from None
        judge = None
    claim_out_folder(out, eval_identity(args))
    if args.images:
        refresh_copy(Path(args.images), images)
        model = f"images:{args.images}"
    else:
        from imgalign.eval.models import sampling_defaults
        from imgalign.pipelines import load_pipeline
        from imgalign.sampling import generate_folder, generate_images

        assert metas is not None and spec is not None
        pipe = load_pipeline(spec, device=args.device)
        settings = sampling_defaults(spec)  # the shapes family's trained settings, else the pipeline's
        settings.update(sampler_overrides(args, "steps", "guidance"))
        generate_folder(
            pipe,
            metas,
            images,
            args.images_per_prompt,
            args.seed,
            progress=progress,
            batch_size=8,
            sample=generate_images,
            **settings,
        )
        del pipe
        model = args.model
        sampler = settings
    summary = evaluate_folder(
        images,
        out,
        args.detector,
        args.clip,
        device=args.device,
        model=model,
        progress=progress,
        sampler=sampler,
        extra={"eval_args": eval_identity(args)},
        judge=judge,
        source_dir=Path(args.images) if args.images else None,
    )
    return finish(args, summary, out)
