"""``imgalign world``: the shapes world (ground-truth renders; pretraining of the embedded models)."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from tqdm.auto import tqdm

from imgalign import shapes as W
from imgalign.eval.suite import write_prompt_folder
from imgalign.prompts.io import load_geneval_metadata


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("world", help="the shapes world: render prompt sets, pretrain the embedded models")
    wsub = p.add_subparsers(dest="world_command", metavar="WORLD_COMMAND")
    wsub.required = True
    r = wsub.add_parser(
        "render", help="ground-truth renders of a GenEval-format prompt set, in the GenEval layout"
    )
    r.add_argument(
        "--prompts", required=True, help="GenEval metadata JSONL (e.g. prompts/shapes_geneval.jsonl)"
    )
    r.add_argument("--images-per-prompt", type=int, default=4)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", required=True, help="output folder")
    r.set_defaults(func=run_render)


def image_seed(seed: int, index: int, j: int) -> int:
    """The seed of image `j` of prompt `index` (shared by renders and model sampling)."""
    return (seed * 1_000_003 + index * 1009 + j) & 0x7FFFFFFF


def render_folder(
    metas: list[dict], out: Path, images_per_prompt: int, seed: int, progress: bool = True
) -> None:
    specs = [W.Spec.from_metadata(m) for m in metas]  # validate every line before writing anything
    for i, (meta, spec) in enumerate(tqdm(list(zip(metas, specs)), desc="rendering", disable=not progress)):
        imgs = [W.render(spec, random.Random(image_seed(seed, i, j)))[0] for j in range(images_per_prompt)]
        write_prompt_folder(out, i, meta, imgs)


def run_render(args: argparse.Namespace) -> int:
    if args.images_per_prompt < 1:
        raise ValueError("--images-per-prompt must be at least 1")
    metas = load_geneval_metadata(args.prompts)
    for n, m in enumerate(metas, start=1):
        try:
            W.Spec.from_metadata(m)
        except W.SpecError as e:
            raise ValueError(f"{args.prompts}:{n}: {e}") from None
    render_folder(metas, Path(args.out), args.images_per_prompt, args.seed)
    print(f"wrote {len(metas)} prompts x {args.images_per_prompt} images to {args.out}")
    return 0
