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
    pt = wsub.add_parser("pretrain", help="train the embedded models on shapes data (seeded, resumable)")
    pt.add_argument("--component", required=True, choices=["t2i", "clip", "vlm", "all"])
    pt.add_argument("--out", required=True, help="output folder; one sub-folder per component")
    pt.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    pt.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    pt.set_defaults(func=run_pretrain)


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


def run_pretrain(args: argparse.Namespace) -> int:
    import importlib

    from imgalign.config import load_config, to_dict
    from imgalign.pretrain import COMPONENTS

    names = list(COMPONENTS) if args.component == "all" else [args.component]
    if args.set and len(names) > 1:
        raise ValueError("--set applies to one component; run each --component separately to override")
    mods = {n: importlib.import_module(COMPONENTS[n]) for n in names}
    cfgs = {n: load_config(m.Config, None, args.set) for n, m in mods.items()}  # validate all before training
    if args.print_config:
        import yaml

        print(yaml.safe_dump({n: to_dict(c) for n, c in cfgs.items()}, sort_keys=False))
        return 0
    for n, m in mods.items():
        metrics = m.pretrain(cfgs[n], Path(args.out), progress=True)
        print(f"{n}: {metrics}")
    return 0
