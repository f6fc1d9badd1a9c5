"""``imgalign grid``: the same prompts and seeds through several models, side by side in one labelled PNG.

Rows are prompts, columns are models (each model's seeds side by side); an optional reward score is printed under
each image. Models: an embedded name (``shapes``), a pipeline folder, a Hub id already downloaded, or
``BASE+OVERLAY`` for a fine-tuned part on a base (a LoRA adapter folder or a transformer folder; a trainer LoRA
checkpoint alone finds its base in its imgalign_model.json), e.g.::

    imgalign grid --model base=shapes --model grpo=runs/grpo/checkpoints/step-000500 \\
        --model other=shapes+path/to/peft_adapter --prompts eval.jsonl --seeds 0,1 --reward geneval --out grid.png

Every input is checked before any model loads.
"""

from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path
from typing import Any

from imgalign.commands import counted

log = logging.getLogger(__name__)


MAX_PROMPTS = 16
"""The prompts of a --prompts file a grid shows unless --max-prompts says otherwise."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "grid",
        help="compare models on the same prompts and seeds in one labelled PNG",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        action="append",
        required=True,
        metavar="LABEL=PATH",
        help="a column: LABEL=PATH or LABEL=BASE+OVERLAY (repeat for each model)",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", action="append", metavar="TEXT", help="a row's prompt (repeatable)")
    src.add_argument(
        "--prompts", metavar="FILE", help="prompt file: .txt (one per line) or .jsonl (GenEval lines)"
    )
    p.add_argument("--seeds", default="0", help="comma-separated seeds, the same for every model (default 0)")
    p.add_argument("--reward", help="reward spec (e.g. geneval, clip:model=...) to print under each image")
    p.add_argument(
        "--steps",
        type=int,
        help="sampling steps (default: the pipeline's; the shapes model's evaluation setting for the shapes family)",
    )
    p.add_argument(
        "--guidance",
        type=float,
        help="guidance scale (default: the pipeline's; the shapes model's evaluation setting for the shapes family)",
    )
    p.add_argument("--size", type=int, help="image height and width (default: the pipeline's)")
    p.add_argument(
        "--max-sequence-length",
        type=int,
        help="SD3 text context length (default: the pipeline's; the shapes model's own for the shapes family)",
    )
    p.add_argument(
        "--max-prompts",
        type=int,
        help=f"use at most this many prompts of a --prompts file (default: {MAX_PROMPTS})",
    )
    p.add_argument("--cell", type=int, default=160, help="displayed image size in pixels")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    p.add_argument("--out", required=True, help="output PNG")
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bars (the libraries' loading bars included)"
    )
    p.set_defaults(func=run_grid)


def parse_seeds(text: str) -> list[int]:
    items = [s.strip() for s in text.split(",")]
    given = [i for i, s in enumerate(items) if s]
    # "0,$S,1" with S unset: two columns of seeds 0 and 1, and the missing seed not missed (a trailing comma is fine)
    if given and any(not s for s in items[given[0] : given[-1]]):
        raise ValueError(
            f"--seeds {text!r} has an empty item between two seeds (an unset shell variable?): give every seed, "
            "e.g. --seeds 0,1,2"
        )
    try:
        seeds = [int(s) for s in items if s]
    except ValueError:
        raise ValueError(f"--seeds {text!r}: expected comma-separated integers such as 0,1,2") from None
    if not seeds:
        raise ValueError("--seeds is empty; give at least one seed, e.g. --seeds 0")
    bad = [s for s in seeds if not 0 <= s < 2**63]
    if bad:
        raise ValueError(f"--seeds {bad[0]}: seeds are integers from 0 to 2**63 - 1")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ValueError(
            f"--seeds {text!r} repeats seed {repeated[0]}: its columns would be the same image twice"
        )
    return seeds


def check_reward_spec(spec: str) -> None:
    """Fail early on an unknown reward name (the reward itself is built after this check)."""
    from imgalign.rewards.base import list_rewards, parse_reward_spec, unknown_reward

    name, _ = parse_reward_spec(spec)
    if name not in list_rewards() and ":" not in name:
        raise ValueError(unknown_reward(name))


def check_size_before_loading(spec: Any, size: int) -> None:
    """Refuse a ``--size`` the model cannot take, from its configs, before any model loads. A model whose configs
    cannot be read up front (a Hub id, another pipeline class) is checked once it has loaded."""
    from imgalign.hub import EMBEDDED, embedded_path
    from imgalign.pipelines import overlay_kind
    from imgalign.sampling import folder_sizes, size_error

    base = embedded_path(spec.base) if spec.base in EMBEDDED else Path(spec.base)
    if not base.is_dir():
        return
    transformer = None  # the base's own, unless the overlay is a whole transformer
    if spec.overlay is not None:
        kind = overlay_kind(Path(spec.overlay))
        if kind == "transformer":
            transformer = Path(spec.overlay)
        elif kind == "transformer-subfolder":
            transformer = Path(spec.overlay) / "transformer"
    found = folder_sizes(base, transformer)
    if found is None:
        return
    message = size_error("--size", size, *found)
    if message:
        raise ValueError(f"model {spec.label!r}: {message}")


def _first_repeat(prompts: list[str]) -> str | None:
    """The first prompt that appears a second time, or None."""
    seen: set[str] = set()
    for p in prompts:
        if p in seen:
            return p
        seen.add(p)
    return None


def read_rows(args: argparse.Namespace) -> tuple[list[str], list[dict[str, Any] | None]]:
    """Prompts and their metadata (GenEval lines keep theirs; plain prompts have none)."""
    limit = MAX_PROMPTS if args.max_prompts is None else args.max_prompts
    if args.prompts:
        from imgalign.prompts.io import load_prompts

        if limit < 1:
            raise ValueError(f"--max-prompts must be at least 1 (got {limit})")

        records = load_prompts(args.prompts)
        firsts: dict[str, Any] = {}  # each prompt's first line, in file order
        for r in records:
            firsts.setdefault(r.prompt, r)
        if len(firsts) < len(records):  # a repeat drew the same images again as another row
            log.warning(
                "%s repeats %d prompt(s) (first: %r); the grid shows each once",
                args.prompts,
                len(records) - len(firsts),
                _first_repeat([r.prompt for r in records]),
            )
            records = list(firsts.values())
        if len(records) > limit:  # said, so that a long file is not taken for a short grid
            log.warning(
                "%s holds %d prompts; the grid shows its first %d (--max-prompts %d)",
                args.prompts,
                len(records),
                limit,
                limit,
            )
            records = records[:limit]
        return [r.prompt for r in records], [r.metadata if "include" in r.metadata else None for r in records]
    if args.max_prompts is not None:  # `--prompt x --max-prompts 0` was taken without a word
        raise ValueError(
            f"--max-prompts {args.max_prompts} applies to a --prompts file; the grid shows every --prompt given: "
            "leave --max-prompts out"
        )
    prompts = [p.strip() for p in args.prompt or []]
    if not prompts or any(not p for p in prompts):
        raise ValueError("--prompt needs non-empty text; give at least one prompt")
    for p in prompts:  # bytes that are not UTF-8 arrive as lone surrogates: the tokenizer raised a TypeError
        try:
            p.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"--prompt {ascii(p)} is not UTF-8 text (the shell passed bytes in another encoding); set a UTF-8 "
                "locale (e.g. LANG=C.UTF-8), or put the prompt in a UTF-8 --prompts file"
            ) from None
    repeated = _first_repeat(prompts)
    if repeated is not None:
        raise ValueError(f"--prompt {repeated!r} is given twice: its rows would be the same images twice")
    return prompts, [None] * len(prompts)


def check_grid_pixels(rows: int, columns: int, cell: int) -> None:
    """Refuse, before any model loads, a grid larger than Pillow opens (twice ``Image.MAX_IMAGE_PIXELS``, about
    179M pixels): a grid of some 3100 prompts was sampled and written, and then no reader (nor ``imgalign``) could
    open the PNG. The size counted is a lower bound: the row labels' column, cells and padding; no headers or
    captions."""
    from PIL import Image

    from imgalign.eval.gallery import LABEL_WIDTH, PAD

    width, height = LABEL_WIDTH + columns * (cell + PAD) + PAD, rows * (cell + PAD) + PAD
    limit = 2 * (Image.MAX_IMAGE_PIXELS or 0)
    if limit and width * height > limit:
        raise ValueError(
            f"the grid of {counted(rows, 'prompt')} x {counted(columns, 'image')} would be at least {width} x "
            f"{height} pixels, more than Pillow opens ({limit / 1e6:.0f}M pixels): give fewer prompts "
            "(--max-prompts), seeds or models, or a smaller --cell"
        )


def run_grid(args: argparse.Namespace) -> int:
    import torch

    from imgalign.commands import check_device, check_output_file
    from imgalign.eval.gallery import labelled_grid, save_png
    from imgalign.eval.models import sampling_defaults
    from imgalign.pipelines import check_model_spec, load_pipeline, parse_model_arg
    from imgalign.rewards.base import parse_reward_spec
    from imgalign.sampling import generate_images, long_prompts_said, warn_unread_guidance

    # ---- every check first, before any model loads ----
    specs = [parse_model_arg(m) for m in args.model]
    seen: dict[str, str] = {}
    for s, raw in zip(specs, args.model):
        if s.label in seen:
            raise ValueError(
                f"label {s.label!r} is used twice (--model {seen[s.label]!r} and --model {raw!r}); "
                "give each model a distinct LABEL="
            )
        seen[s.label] = raw
    specs = [check_model_spec(s) for s in specs]
    prompts, metas = read_rows(args)
    seeds = parse_seeds(args.seeds)
    if args.reward:
        check_reward_spec(args.reward)
        if parse_reward_spec(args.reward)[0] == "geneval" and any(m is None for m in metas):
            raise ValueError(
                "--reward geneval needs GenEval metadata: give --prompts FILE.jsonl with GenEval lines"
            )
    if not args.out.strip():  # "$OUT" with OUT unset: "use a .png name" said nothing of why
        raise ValueError("--out is empty (an unset shell variable?): give the output PNG, e.g. grid.png")
    out = Path(args.out)
    if out.name.lower() == ".png":  # Path('.png').suffix is '': it said "use a .png name"
        raise ValueError(f"--out {args.out!r} has no name before {out.name}: give one, e.g. grid{out.name}")
    if out.suffix.lower() != ".png":
        raise ValueError(f"--out {args.out!r}: the grid is written as PNG; use a .png name")
    check_output_file(out)
    check_device(args.device)
    for flag, v in (
        ("--steps", args.steps),
        ("--size", args.size),
        ("--cell", args.cell),
        ("--max-sequence-length", args.max_sequence_length),
    ):
        if v is not None and v < 1:
            raise ValueError(f"{flag} must be at least 1 (got {v})")
    check_grid_pixels(len(prompts), len(specs) * len(seeds), args.cell)
    if args.max_sequence_length is not None and args.max_sequence_length > 512:
        raise ValueError(
            f"--max-sequence-length {args.max_sequence_length}: the SD3 and FLUX pipelines take at most 512 T5 "
            "tokens; give 512 or less"
        )
    if args.guidance is not None and not 0 <= args.guidance < math.inf:  # inf sampled every image as NaN
        raise ValueError(f"--guidance must be >= 0 and finite (got {args.guidance})")
    if args.size is not None:
        for s in specs:
            check_size_before_loading(s, args.size)
    dtype = getattr(torch, args.dtype)
    reward = None
    if args.reward:  # built before generating: a row it can never score fails now, not after every model ran
        from imgalign.rewards.base import build_reward

        reward = build_reward(args.reward, device=args.device)
        # a reward that cannot score yet captioned every image nan (fid) or a fresh head's noise (discriminator)
        if hasattr(reward, "ready") and not reward.ready():
            why = getattr(reward, "not_ready_help", "it is not ready")
            raise ValueError(f"--reward {args.reward} cannot score yet: {why}")
        rows = [m for m in metas if m is not None]
        if rows:
            try:
                reward.check_metadata(rows)
            except ValueError as e:
                raise ValueError(f"--prompts {args.prompts!r}: {e}") from None

    # ---- generate: images[r][c] with c = model * len(seeds) + seed index ----
    images: list[list[Any]] = [[] for _ in prompts]
    for s in specs:
        log.info("generating with %s (%s)", s.label, s)
        pipe = load_pipeline(s, device=args.device, dtype=dtype)
        warn_unread_guidance(pipe, s.label, args.guidance)
        settings = sampling_defaults(s)  # the shapes family's trained settings, else the pipeline's
        given = {"steps": args.steps, "guidance": args.guidance, "size": args.size}
        given["max_sequence_length"] = args.max_sequence_length
        settings.update({k: v for k, v in given.items() if v is not None})
        with long_prompts_said(pipe, s.label, prompts, settings.get("max_sequence_length")):
            for r, prompt in enumerate(prompts):
                images[r] += generate_images(pipe, [prompt] * len(seeds), seeds, batch_size=8, **settings)
        del pipe
    captions = None
    if reward is not None:
        captions = []
        for r, row in enumerate(images):  # one image at a time: models may differ in image size
            meta = [metas[r]] if metas[r] is not None else None
            scores = [float(reward([im], [prompts[r]], meta).scores[0]) for im in row]
            captions.append([f"{reward.name}: {v:.3f}" for v in scores])
    grid = labelled_grid(
        images,
        prompts,
        [s.label for s in specs],
        captions=captions,
        group=len(seeds),
        sub_labels=[f"seed {x}" for x in seeds] if len(seeds) > 1 else None,
        cell=args.cell,
    )
    save_png(grid, out)
    sizes = [counted(len(prompts), "prompt"), counted(len(specs), "model"), counted(len(seeds), "seed")]
    print(f"wrote {out} ({' x '.join(sizes)})")
    return 0
