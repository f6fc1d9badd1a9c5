"""``imgalign rewards``: list rewards, fit discriminator and artifact heads, build the shapes artifact model,
and write FID reference statistics."""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path
from typing import Any

from imgalign.cli import CLIError
from imgalign.commands import check_device, check_rewards_once, counted, seed_arg

log = logging.getLogger(__name__)

FEATURES_HELP = "feature encoder (stats, shapes-clip, open_clip:..., dinov2:..., clip:...)"
"""The --features help of every subcommand that encodes images."""
HEAD_NEEDS = "a head needs at least 2 per class (and more for a useful held-out val_acc): add images to it"
STATS_NEED = "FID statistics need at least 2"
SHAPES_RENDERS = 2000
"""The renders 'shapes' stands for in `fd` and `fid-stats` (--n)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rewards",
        help="list rewards; fit discriminator / artifact heads; FID reference stats and distances; check a reward",
    )
    rs = p.add_subparsers(dest="rewards_command", metavar="ACTION")
    rs.required = True

    q = rs.add_parser("list", help="every registered reward with a one-line description")
    q.set_defaults(func=run_list)

    q = rs.add_parser("fit-discriminator", help="fit a real-vs-generated head on frozen features (DRL)")
    q.add_argument("--real", required=True, help="folder of real (reference) images")
    q.add_argument("--fake", required=True, help="folder of base-model samples")
    q.add_argument(
        "--features",
        default="shapes-clip",
        help=FEATURES_HELP,
    )
    q.add_argument("--out", required=True, help="output head file (.safetensors)")
    q.add_argument("--hidden", type=int, default=256, help="MLP hidden units (0: linear)")
    q.add_argument("--epochs", type=int, default=300)
    q.add_argument("--lr", type=float, default=1e-3)
    q.add_argument(
        "--val-frac", type=float, default=0.2, help="held-out share per class, reported as val_acc"
    )
    q.add_argument("--device", default="cpu")
    q.set_defaults(func=run_fit_discriminator)

    q = rs.add_parser("fit-artifact", help="fit a clean-vs-artifact head on frozen features")
    q.add_argument("--clean", required=True, help="folder of artifact-free images")
    q.add_argument("--artifact", required=True, help="folder of images with artifacts")
    q.add_argument(
        "--features",
        default="stats",
        help=FEATURES_HELP,
    )
    q.add_argument("--out", required=True, help="output head file (.safetensors)")
    q.add_argument("--hidden", type=int, default=32, help="MLP hidden units (0: linear)")
    q.add_argument("--epochs", type=int, default=500)
    q.add_argument("--val-frac", type=float, default=0.2)
    q.add_argument("--device", default="cpu")
    q.set_defaults(func=run_fit_artifact)

    q = rs.add_parser(
        "build-shapes-artifact", help="(re)train the shipped shapes artifact model from renders"
    )
    q.add_argument(
        "--out", help="output folder (default: the embedded imgalign/assets/models/shapes-artifact)"
    )
    q.add_argument("--n", type=int, default=1400, help="training images per class")
    q.add_argument(
        "--features",
        default="stats",
        help=FEATURES_HELP,
    )
    q.set_defaults(func=run_build_shapes_artifact)

    q = rs.add_parser(
        "fd", help="Fréchet distance between two image folders (or stats files) in a feature space"
    )
    q.add_argument("a", help="image folder, stats file (.safetensors from fid-stats), or 'shapes' (renders)")
    q.add_argument("b", help="image folder, stats file, or 'shapes'")
    q.add_argument(
        "--features",
        default="shapes-clip",
        help=FEATURES_HELP,
    )
    q.add_argument("--n", type=int, default=SHAPES_RENDERS, help="number of renders for 'shapes'")
    q.add_argument("--device", default="cpu")
    q.set_defaults(func=run_fd)

    q = rs.add_parser("check", help="shapes sanity check: true prompt scored above a corrupted one?")
    q.add_argument(
        "--reward",
        action="append",
        required=True,
        metavar="NAME[:key=value,...]",
        help="a reward that reads the prompt (repeatable), e.g. clip, vlm_loglik; see `imgalign rewards list`",
    )
    q.add_argument("--n", type=int, default=240, help="number of rendered prompt pairs")
    q.add_argument("--seed", type=seed_arg, default=0)
    q.add_argument(
        "--kinds",
        default="shape,colour,count,relation,swap",
        help="corruption kinds to draw from (comma-separated): shape, colour, count, relation, swap; the prompts come "
        "from the tasks they apply to (count: counting prompts only)",
    )
    q.add_argument("--device", default="cpu")
    q.set_defaults(func=run_check)

    q = rs.add_parser(
        "fid-stats", help="write FID reference statistics (mean, covariance) of an image folder"
    )
    q.add_argument("--images", required=True, help="folder of reference images, or 'shapes' for renders")
    q.add_argument(
        "--features",
        default="shapes-clip",
        help=FEATURES_HELP,
    )
    q.add_argument("--n", type=int, default=SHAPES_RENDERS, help="number of renders when --images shapes")
    q.add_argument("--out", required=True, help="output stats file (.safetensors)")
    q.add_argument("--device", default="cpu")
    q.set_defaults(func=run_fid_stats)


def run_list(args: argparse.Namespace) -> int:
    from imgalign.rewards.base import list_rewards

    rows = list_rewards()
    width = max(len(k) for k in rows)
    for k, v in rows.items():
        print(f"{k:<{width}}  {v}")
    return 0


def _check_dir(path: str, flag: str) -> None:
    if not Path(path).is_dir():
        raise CLIError(f"{flag} {path!r} is not a folder")


def _same_folder_names(first: str, second: str, resolved: Path) -> str:
    """One folder given to both flags, as the refusal names it: once when both name it alike (``'a'``), else both
    names and where they lead (``'a' and 'link', both '/data/a'``; a symlink was named by the first name only)."""
    if Path(first) == Path(second):
        return repr(first)
    return f"{first!r} and {second!r}, both {str(resolved)!r}"


def _check_distinct(first: str, first_flag: str, second: str, second_flag: str) -> None:
    """The two classes of a fitted head come from two different folders (one folder as both fits a head on noise),
    neither inside the other: a folder is read with its subfolders, so the outer class held the inner one's images
    too (``--real data --fake data/fake``). A hidden subfolder is not read, so it may lie inside."""
    a, b = Path(first).resolve(), Path(second).resolve()
    if a == b:
        raise CLIError(
            f"{first_flag} and {second_flag} are the same folder ({_same_folder_names(first, second, a)}): the head "
            f"learns to tell the two apart, so give {second_flag} the other class's images"
        )
    for outer, inner, outer_flag, inner_flag, given in (
        (a, b, first_flag, second_flag, second),
        (b, a, second_flag, first_flag, first),
    ):
        if inner.is_relative_to(outer) and not any(p.startswith(".") for p in inner.relative_to(outer).parts):
            raise CLIError(
                f"{inner_flag} {given!r} lies inside the {outer_flag} folder, whose subfolders are read too, so its "
                f"images would be in both classes: move them out of the {outer_flag} folder"
            )


def _check_not_image_name(out: str, what: str) -> None:
    """--out of a safetensors result must not have an image suffix: ``--out real/0001.png`` overwrote one of the
    images just read with the result (a file no image reader opens); nor end in a slash: ``--out heads/`` of a new
    folder wrote the result as a file named ``heads``."""
    import os

    from imgalign.rewards.io import IMAGE_SUFFIXES

    if out.endswith(("/", os.sep)):
        raise CLIError(
            f"--out {out!r} ends in a slash, so it names a folder, but the {what} is one file: give a file name "
            "(.safetensors)"
        )
    if Path(out).suffix.lower() in IMAGE_SUFFIXES:
        raise CLIError(
            f"--out {out!r} is an image name, but the {what} is written as a safetensors file (it would replace "
            "an image there): give a .safetensors name"
        )


def existing_result(path: Path) -> tuple[str, str] | None:
    """(kind, task) in the safetensors metadata of the existing file `path` (each "" when missing); None when it is
    not a safetensors file."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
    except (SafetensorError, OSError, ValueError):
        return None
    return meta.get("kind", ""), meta.get("task", "")


def other_result(path: Path, kind: str, task: str = "") -> str | None:
    """What the existing file `path` holds, when a result of `kind` (and `task`, a head's reward) written there would
    replace something else; None when it is free, empty, or an earlier result of the same kind (a fit run again)."""
    from imgalign.rewards.fid import STATS_KIND
    from imgalign.rewards.heads import HEAD_KIND

    if not path.is_file() or path.stat().st_size == 0:
        return None
    found = existing_result(path)
    if found is None:
        return "a file that is not safetensors (imgalign wrote no result there)"
    found_kind, found_task = found
    if (found_kind, found_task) == (kind, task):
        return None
    if found_kind == STATS_KIND:
        return "FID reference statistics (`imgalign rewards fid-stats`)"
    if found_kind == HEAD_KIND:
        return f"a head of the {found_task!r} reward (`imgalign rewards fit-{found_task}`)"
    return "a safetensors file imgalign did not write (a model's weights?)"


def _check_not_other_result(out: str, kind: str, task: str, what: str) -> None:
    """--out may replace an earlier result of its own kind only: ``fid-stats --out model/model.safetensors``
    replaced a model's weights with the statistics, and a fit replaced FID statistics or another reward's head,
    without a word."""
    held = other_result(Path(out), kind, task)
    if held is not None:
        raise CLIError(
            f"--out {out!r} already holds {held}; the {what} written there would replace it: give a new file "
            "name, or delete that file first if it is no longer needed"
        )


def _check_image_files(folder: str, what: str, why: str, noun: str) -> None:
    """`folder` (an image folder: `what`, e.g. "--fake 'gen'") holds at least 2 image files, the fewest `why` needs:
    counted by name, before any encoder loads, and named as the error on reading them names them (`noun`: "image(s)",
    or a noun made plural as needed). One image was refused only once it was read, after the encoder had loaded and
    the other folder's images were encoded (minutes for a reference folder)."""
    from imgalign.rewards.io import find_images, other_files_note

    found = len(find_images([folder]))
    if found < 2:
        count = f"{found} {noun}" if noun.endswith("(s)") else counted(found, noun)
        raise CLIError(f"{what} holds {count}{other_files_note(folder)}; {why}")


def _warn_if_shapes_is_a_path(src: str, what: str) -> None:
    """'shapes' names the shapes world's renders, so a file or folder of that name in the working folder is not
    read: say so (``fd shapes gen`` with a folder ./shapes of the user's images compared gen with renders, with no
    word of the folder)."""
    if src == "shapes" and Path(src).exists():
        log.warning(
            "%s 'shapes' means renders of the shapes world, not the %s named 'shapes' in this folder; to read that, "
            "give it as ./shapes",
            what,
            "folder" if Path(src).is_dir() else "file",
        )


def _check_renders(n: int, why: str) -> None:
    """--n renders: at least 2 (one image has no covariance), before any encoder loads or image renders."""
    if n < 2:
        raise CLIError(f"--n must be at least 2 ({why}), got {n}")


def _check_fit_sizes(args: argparse.Namespace) -> None:
    """--hidden >= 0, --epochs >= 1, 0 < --lr < inf and 0 <= --val-frac < 1, before any image is read."""
    if args.hidden < 0:
        raise CLIError(f"--hidden must be 0 (a linear head) or more, got {args.hidden}")
    if args.epochs < 1:
        raise CLIError(f"--epochs must be at least 1, got {args.epochs}")
    if not 0 < getattr(args, "lr", 1.0) < math.inf:  # inf fitted a head of NaN weights and wrote it
        raise CLIError(f"--lr must be > 0 and finite, got {args.lr}")
    if not 0 <= args.val_frac < 1:  # the fitter's own check came after every image was read and encoded
        raise CLIError(
            f"--val-frac must be in [0, 1) (the held-out share of each class), got {args.val_frac}"
        )


def _refuse_empty_paths(args: argparse.Namespace, *folders: str) -> None:
    """--real "" ("$DIR" with DIR unset) was the current folder: every image under it read as that class (or as
    the FID reference set); --out "" was called a folder."""
    from imgalign.commands.world import refuse_empty_options

    refuse_empty_options(
        args,
        {**dict.fromkeys(folders, "an image folder"), "out": "a file name for the result (.safetensors)"},
    )


def run_fit_discriminator(args: argparse.Namespace) -> int:
    check_device(args.device)  # a GPU this machine lacks fails before any work
    from imgalign.commands import check_output_file
    from imgalign.rewards.discriminator import fit_discriminator
    from imgalign.rewards.heads import HEAD_KIND

    _refuse_empty_paths(args, "real", "fake")
    _check_fit_sizes(args)
    _check_dir(args.real, "--real")
    _check_dir(args.fake, "--fake")
    _check_distinct(args.real, "--real", args.fake, "--fake")
    _check_not_image_name(args.out, "head")
    check_output_file(Path(args.out))  # before any image is read or a head fitted
    _check_not_other_result(args.out, HEAD_KIND, "discriminator", "discriminator head")
    for flag, folder in (("--real", args.real), ("--fake", args.fake)):
        _check_image_files(folder, f"{flag} {folder!r}", HEAD_NEEDS, "image(s)")
    metrics = fit_discriminator(
        args.real,
        args.fake,
        args.features,
        args.out,
        hidden=args.hidden,
        epochs=args.epochs,
        lr=args.lr,
        val_frac=args.val_frac,
        device=args.device,
    )
    print(json.dumps(metrics, indent=2))
    print(f"wrote {args.out}; use it with --reward discriminator:head={args.out}")
    return 0


def run_fit_artifact(args: argparse.Namespace) -> int:
    check_device(args.device)  # a GPU this machine lacks fails before any work
    from imgalign.commands import check_output_file
    from imgalign.rewards.artifact import fit_artifact
    from imgalign.rewards.heads import HEAD_KIND

    _refuse_empty_paths(args, "clean", "artifact")
    _check_fit_sizes(args)
    _check_dir(args.clean, "--clean")
    _check_dir(args.artifact, "--artifact")
    _check_distinct(args.clean, "--clean", args.artifact, "--artifact")
    _check_not_image_name(args.out, "head")
    check_output_file(Path(args.out))
    _check_not_other_result(args.out, HEAD_KIND, "artifact", "artifact head")
    for flag, folder in (("--clean", args.clean), ("--artifact", args.artifact)):
        _check_image_files(folder, f"{flag} {folder!r}", HEAD_NEEDS, "image(s)")
    # (fit_artifact builds the encoder before it reads a folder: a mistyped --features fails first)
    metrics = fit_artifact(
        args.clean,
        args.artifact,
        args.features,
        args.out,
        hidden=args.hidden,
        epochs=args.epochs,
        val_frac=args.val_frac,
        device=args.device,
        extra={"clean": args.clean, "artifact": args.artifact},
    )
    print(json.dumps(metrics, indent=2))
    print(f"wrote {args.out}; use it with --reward artifact:model={args.out}")
    return 0


ARTIFACT_CARD = "# shapes-artifact"
"""The first line of the README.md the shapes artifact model is written with (rewards.artifact._model_card)."""


def artifact_folder_clash(out: Path) -> str | None:
    """What in the folder `out` the shapes artifact model (``head.safetensors`` and ``README.md``) would replace that
    is not an earlier build of it; None when nothing would be lost."""
    from imgalign.rewards.heads import HEAD_KIND

    held = other_result(out / "head.safetensors", HEAD_KIND, "artifact")
    if held is not None:
        return f"head.safetensors ({held})"
    card = out / "README.md"
    if card.is_file() and card.stat().st_size:
        first = card.read_text(encoding="utf-8", errors="replace").splitlines()[:1]
        if first != [ARTIFACT_CARD]:
            return "a README.md that is not the shapes artifact model's card"
    return None


def _check_artifact_folder(out: Path) -> None:
    """``build-shapes-artifact --out .`` in a project replaced its README.md with the model card (and a model folder's
    head.safetensors with the head) without a word: a folder holding either, not from an earlier build, is refused
    before the renders and the fit."""
    clash = artifact_folder_clash(out)
    if clash is not None:
        raise CLIError(
            f"--out {str(out)!r} already holds {clash}, which the model would replace (it writes head.safetensors "
            "and README.md): give a new or empty folder, or one an earlier build-shapes-artifact wrote"
        )


def run_build_shapes_artifact(args: argparse.Namespace) -> int:
    from imgalign.commands import check_output_folder
    from imgalign.commands.world import refuse_empty_options
    from imgalign.hub import ASSETS, EMBEDDED
    from imgalign.rewards.artifact import build_shapes_artifact

    # --out "" ("$OUT" with OUT unset) was read as not given: the shipped model was overwritten
    refuse_empty_options(args, {"out": "a folder for the model, or leave it out for the shipped one"})
    _check_renders(args.n, "training images per class")
    out = Path(args.out) if args.out is not None else ASSETS / EMBEDDED["shapes-artifact"]
    check_output_folder(out)  # before the renders and the fit
    _check_artifact_folder(out)
    result = build_shapes_artifact(out, n=args.n, features=args.features)
    print(json.dumps(result, indent=2))
    print(f"wrote {out}")
    return 0


def _stats(src: str, enc, n: int, seed: int, size: tuple[int, int] | None = None):
    from imgalign.rewards.fid import folder_features, load_stats, shapes_reference_images, stats_of

    if src == "shapes":
        return stats_of(enc(shapes_reference_images(n, seed=seed)))
    if Path(src).is_file():  # its features checked by _check_source
        mu, sigma, _n, _feats = load_stats(src)
        return mu, sigma
    _check_dir(src, "path")
    return stats_of(folder_features(src, enc, size))


def _fd_resize(a: str, b: str, features: str) -> dict[str, tuple[int, int]]:
    """{folder: (width, height)} for the side whose images are resized in `stats` features, where the two sides'
    sizes differ; else {}. Those features depend on the image size (its gradients, Laplacian and spectrum): the same
    40 images at 32x32 and at 64x64 were 107 apart, two independent sets at one size 0.02, without a word. A folder
    is resized to the renders' 64x64 ('shapes') or to a stats file's recorded size, else `b` to `a`'s size, as
    fit-discriminator and fit-artifact resize their second folder to the first's (a stats file written before
    `fid-stats` recorded the size is used as it is)."""
    if features != "stats":  # the model encoders resize every image to their own input size
        return {}
    from imgalign.rewards.fid import stats_image_size
    from imgalign.rewards.io import folder_image_size
    from imgalign.shapes import IMAGE_SIZE

    def size(src: str) -> tuple[int, int] | None:
        if src == "shapes":
            return (IMAGE_SIZE, IMAGE_SIZE)
        return folder_image_size(src) if Path(src).is_dir() else stats_image_size(src)

    size_a, size_b = size(a), size(b)
    if size_a is None or size_b is None or size_a == size_b:
        return {}
    # the side read from images (a folder) is resized: renders and a stats file have their size
    resized, target = (b, size_a) if b != "shapes" and Path(b).is_dir() else (a, size_b)
    if not Path(resized).is_dir():  # renders against a stats file, or two stats files: nothing can be resized
        log.warning(
            "the statistics of %r are of %dx%d images and those of %r of %dx%d: stats features depend on the "
            "image size, so the FD measures the sizes too; compute both at one size",
            a,
            *size_a,
            b,
            *size_b,
        )
        return {}
    log.warning(
        "the images of %r are %dx%d and those of %r %dx%d: stats features depend on the image size, so those of "
        "%r are resized to %dx%d (bicubic) to compare the images, not their sizes",
        a,
        *size_a,
        b,
        *size_b,
        resized,
        *target,
    )
    return {resized: target}


def _check_source(src: str, features: str) -> None:
    """An ``fd`` argument is 'shapes', an image folder or a readable stats file of `features`."""
    from imgalign.rewards.features import local_name, moved_encoder
    from imgalign.rewards.fid import load_stats

    if src == "shapes":
        _warn_if_shapes_is_a_path(src, "fd argument")
        return
    if not src.strip():  # Path('') is the current folder: every image under it was read
        raise CLIError(
            "an fd argument is empty ('', an unset shell variable?): give an image folder, a stats file or 'shapes'"
        )
    if Path(src).is_file():
        from imgalign.rewards.io import IMAGE_SUFFIXES

        # an image was "not an imgalign FID stats file: header too large"
        if Path(src).suffix.lower() in IMAGE_SUFFIXES:
            raise CLIError(
                f"{src!r} is an image file; fd compares two image folders or stats files: give the folder that holds "
                f"it ({str(Path(src).parent)!r}), or its stats from `imgalign rewards fid-stats`"
            )
        # not a stats file (a head), or one of other features: named before any work (the other argument's
        # features were computed first)
        feats = load_stats(src)[3]
        if moved_encoder(feats, features):  # as the fid reward takes it: the encoder folder moved since
            log.warning(
                "%s was made with features %r, which are no longer there; comparing with %r as given (the same "
                "encoder, moved)",
                src,
                feats,
                features,
            )
        elif local_name(feats) != local_name(features):
            raise CLIError(
                f"{src} holds {feats!r} statistics, not {local_name(features)!r}; pass --features {feats}"
            )
    elif not Path(src).is_dir():
        raise CLIError(
            f"{src!r} is not a folder, a stats file or 'shapes': give an image folder, a .safetensors file from "
            "`imgalign rewards fid-stats`, or 'shapes' for renders"
        )


def _check_n_applies(n: int, sources: tuple[str, ...], why: str) -> None:
    """--n counts the renders of 'shapes' only: ``fd gen ref --n 500`` read both folders whole, and the FD was of
    every image, without a word that --n was not used."""
    if "shapes" not in sources and n != SHAPES_RENDERS:
        raise CLIError(
            f"--n {n} counts the renders of 'shapes', but {why}: an image folder is read whole (every image under "
            "it) and a stats file as written; leave --n out, or make a folder of the images to use"
        )


def run_fd(args: argparse.Namespace) -> int:
    check_device(args.device)  # a GPU this machine lacks fails before any work
    from imgalign.rewards.features import build_features
    from imgalign.rewards.fid import frechet_distance

    if "shapes" in (args.a, args.b):
        _check_renders(args.n, "renders for 'shapes'; a covariance needs 2")
    for src in (args.a, args.b):  # both before any encoder loads: b was read after a's features were computed
        _check_source(src, args.features)
    _check_n_applies(args.n, (args.a, args.b), "neither side is 'shapes'")
    for src in (args.a, args.b):
        if src != "shapes" and Path(src).is_dir():
            _check_image_files(src, repr(src), STATS_NEED, "readable image")
    enc = build_features(args.features, args.device)
    resize = _fd_resize(args.a, args.b, args.features)  # {the folder resized: its size} or {}
    mu_a, sig_a = _stats(args.a, enc, args.n, 0, resize.get(args.a))
    # ('shapes' twice gives two independent render sets)
    mu_b, sig_b = _stats(args.b, enc, args.n, 1, resize.get(args.b))
    if mu_a.shape != mu_b.shape:  # a stats file from another model saved under the same --features name
        raise CLIError(
            f"{args.a} has {mu_a.shape[0]}-d features and {args.b} {mu_b.shape[0]}-d: they come from different "
            f"feature extractors; recompute the stats file with `imgalign rewards fid-stats --features "
            f"{args.features}`"
        )
    # an FD is >= 0: a folder against itself printed round-off such as -1.35e-10
    fd = max(frechet_distance(mu_a, sig_a, mu_b, sig_b), 0.0)
    print(f"FD({args.a}, {args.b}) in {args.features} features: {fd:.6g}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    check_device(args.device)  # a GPU this machine lacks fails before any work
    from imgalign.rewards.base import (
        build_reward,
        check_reward_options,
        list_rewards,
        parse_reward_spec,
        reward_target,
        unknown_reward,
    )
    from imgalign.rewards.sanity import KINDS, true_vs_corrupted

    if args.n < 1:
        raise CLIError(f"--n must be at least 1 (got {args.n})")
    check_rewards_once(args.reward)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not kinds:  # an empty tuple fell back to shape corruptions silently
        raise CLIError(f"--kinds {args.kinds!r} names no corruption kind; give some of: {', '.join(KINDS)}")
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise CLIError(f"unknown corruption kind(s) {bad}; valid: {', '.join(KINDS)}")
    # every --reward is known, with options it takes, and one whose Reward class declares it reads no prompt is
    # refused, before the first loads: a mistyped second --reward was named after the first had scored every pair
    known = list_rewards()
    for spec in args.reward:
        name = parse_reward_spec(spec)[0]
        if name not in known and ":" not in name:
            raise CLIError(unknown_reward(name))
        check_reward_options(spec)
        target = reward_target(name)
        if isinstance(target, type) and not getattr(target, "needs_prompt", True):
            raise CLIError(_prompt_free(spec))
    for spec in args.reward:
        reward = build_reward(spec, device=args.device)
        if not getattr(reward, "needs_prompt", True):  # a function reward, once built
            raise CLIError(_prompt_free(spec))
        if hasattr(reward, "ready") and not reward.ready():
            raise CLIError(f"{spec} cannot score yet: {getattr(reward, 'not_ready_help', 'it is not ready')}")
        # -v: the reward's own error and traceback, not the one-line summary
        scored = reward if args.verbose else _reporting_failures(reward, spec)
        res = true_vs_corrupted(scored, n=args.n, seed=args.seed, kinds=kinds)
        if res.n_nonfinite == res.n:
            raise CLIError(
                f"{spec} returned non-finite scores (NaN or inf) for all {res.n} pairs, so there is no verdict; "
                "the reward must return a finite score for every image"
            )
        tasks = ", ".join(f"{k} {v:.2f}" for k, v in res.per_task.items())
        tasks += "; by corruption: " + ", ".join(f"{k} {v:.2f}" for k, v in res.per_kind.items())
        nonfinite = (
            f"; {res.n_nonfinite} of {res.n} pairs had a non-finite score (counted as failures, left out of the "
            "means)"
            if res.n_nonfinite
            else ""
        )
        print(
            f"{spec}: true > corrupted in {res.accuracy:.3f} of {res.n} pairs ({tasks}); "
            f"mean true {res.mean_true:.4f}, corrupted {res.mean_corrupted:.4f}{nonfinite}"
        )
    return 0


def _prompt_free(spec: str) -> str:
    """The refusal of a reward that does not read the prompt."""
    return (
        f"{spec} does not read the prompt, so it scores an image the same under the true and the corrupted prompt: "
        "this check (prompt sensitivity) does not apply to it"
    )


def _reporting_failures(reward: Any, spec: str) -> Any:
    """`reward` as a callable whose failure becomes one line naming the reward (-v shows the traceback)."""

    def call(images: Any, prompts: list[str], metadata: Any = None) -> Any:
        try:
            return reward(images, prompts, metadata)
        except Exception as e:  # noqa: BLE001 -- a user's reward may raise anything
            raise CLIError(
                f"{spec} failed while scoring the check's images: {type(e).__name__}: {e} (run with -v for the "
                "traceback)"
            ) from e

    return call


def run_fid_stats(args: argparse.Namespace) -> int:
    check_device(args.device)  # a GPU this machine lacks fails before any work
    from imgalign.commands import check_output_file
    from imgalign.rewards.features import build_features
    from imgalign.rewards.fid import (
        STATS_KIND,
        folder_features,
        save_stats,
        shapes_reference_images,
        stats_of,
    )

    _refuse_empty_paths(args, "images")
    if Path(args.out).is_dir():
        raise CLIError(f"--out {args.out!r} is a folder; give a file name for the statistics (.safetensors)")
    _check_not_image_name(args.out, "statistics")
    check_output_file(Path(args.out))  # before the features are extracted
    _check_not_other_result(args.out, STATS_KIND, "", "statistics")
    if args.images == "shapes":
        _check_renders(args.n, "renders for --images shapes; a covariance needs 2")
        _warn_if_shapes_is_a_path(args.images, "--images")
    else:
        _check_dir(args.images, "--images")  # before the encoder loads
        _check_n_applies(args.n, (args.images,), "--images is not 'shapes'")
        _check_image_files(args.images, f"--images {args.images!r}", STATS_NEED, "readable image")
    enc = build_features(args.features, args.device)
    if args.images == "shapes":
        images = shapes_reference_images(args.n)
        feats, size = enc(images), (int(images.shape[-1]), int(images.shape[-2]))
    else:
        from imgalign.rewards.io import folder_image_size

        # the size the folder's images are read at: the fid reward reads its images at it in stats features
        feats, size = folder_features(args.images, enc), folder_image_size(args.images)
    mu, sigma = stats_of(feats)
    save_stats(args.out, mu, sigma, feats.shape[0], args.features, size)
    print(f"wrote {args.out} ({feats.shape[0]} images, {mu.shape[0]}-d {args.features} features)")
    return 0
