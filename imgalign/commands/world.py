"""``imgalign world``: the shapes world (ground-truth renders; pretraining of the embedded models)."""

from __future__ import annotations

import argparse
import contextlib
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from imgalign import shapes as W
from imgalign.commands import check_output_folder, counted, seed_arg
from imgalign.eval.suite import write_prompt_folder, write_sample
from imgalign.prompts.io import load_geneval_metadata
from imgalign.sampling import image_seed


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
    r.add_argument("--seed", type=seed_arg, default=0)
    r.add_argument("--out", required=True, help="output folder")
    r.add_argument(
        "--no-progress", action="store_true", help="no progress bars (the libraries' loading bars included)"
    )
    r.set_defaults(func=run_render)
    pt = wsub.add_parser("pretrain", help="train the embedded models on shapes data (seeded, resumable)")
    pt.add_argument(
        "--component",
        required=True,
        choices=["t2i", "clip", "vlm", "all"],
        help="the model to train: t2i (the shapes text-to-image pipeline), clip, vlm, or all three",
    )
    pt.add_argument(
        "--out", help="output folder; one sub-folder per component (required unless --print-config)"
    )
    pt.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override; with --component all, prefix the key with its component (t2i.steps=12000)",
    )
    pt.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="components trained at once, each in its own process with its config's `threads` (default: 2 for "
        "--component all on a machine with at least 2 CPUs, so the t2i model trains beside the CLIP, then the VLM)",
    )
    pt.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    pt.add_argument(
        "--no-progress", action="store_true", help="no progress bars (the libraries' loading bars included)"
    )
    pt.set_defaults(func=run_pretrain)


def refuse_empty_options(args: argparse.Namespace, wanted: dict[str, str]) -> None:
    """Refuse an option given as "" ("$VAR" with VAR unset), naming it and what it takes (`wanted`: dest -> what to
    give). Read as no value or as the current folder, it changed the run silently: eval --prompts "" judged the
    suite's own 360 prompts, --baseline "" wrote no comparison, --out "" wrote into the current folder and
    eval --images "" fell through to sampling with no model (a traceback)."""
    for dest, what in wanted.items():
        value = getattr(args, dest, None)
        if isinstance(value, str) and not value.strip():
            raise ValueError(f"--{dest.replace('_', '-')} is empty (an unset shell variable?): give {what}")


def render_folder(
    metas: list[dict], out: Path, images_per_prompt: int, seed: int, progress: bool = True
) -> None:
    """Render image j of prompt i from ``image_seed(seed, i, j)`` into `out` in the GenEval layout. Each image is
    written as soon as it is drawn: a prompt's images were kept in memory until its last one (about 17 KB each:
    20,000 images per prompt held 340 MB more), and the bar counted prompts (0/1 for all of a one-prompt render)."""
    specs = [W.Spec.from_metadata(m) for m in metas]  # validate every line before writing anything
    with tqdm(
        total=len(metas) * images_per_prompt, desc="rendering", unit="img", disable=not progress
    ) as bar:
        for i, (meta, spec) in enumerate(zip(metas, specs)):
            write_prompt_folder(out, i, meta, [])
            for j in range(images_per_prompt):
                write_sample(out, i, j, W.render(spec, random.Random(image_seed(seed, i, j)))[0])
                bar.update()


def check_shapes_metadata(metas: list[dict], source: str | Path) -> None:
    """Every prompt is one the shapes world can draw and judge; the error names `source` and the line."""
    for n, m in enumerate(metas, start=1):
        try:
            W.Spec.from_metadata(m)
        except W.SpecError as e:
            raise ValueError(f"{source}:{n}: {e}") from None


def run_render(args: argparse.Namespace) -> int:
    refuse_empty_options(args, {"prompts": "a GenEval metadata .jsonl", "out": "an output folder"})
    if args.images_per_prompt < 1:
        raise ValueError("--images-per-prompt must be at least 1")
    metas = load_geneval_metadata(args.prompts)
    check_shapes_metadata(metas, args.prompts)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "is a file" if not out.is_dir() else "is not empty (its prompt folders would mix with these)"
        raise ValueError(f"--out {str(out)!r} {what}; give a new or empty folder")
    check_output_folder(out)
    try:
        render_folder(metas, out, args.images_per_prompt, args.seed, progress=not args.no_progress)
    except KeyboardInterrupt:
        # it said only "interrupted": the folder left behind is judged by eval --images as if it were whole, and
        # the same command again is refused ("not empty")
        from imgalign.cli import Interrupted

        started = sum(1 for d in out.iterdir() if d.is_dir() and d.name.isdigit()) if out.is_dir() else 0
        raise Interrupted(
            f"interrupted; --out {str(out)!r} holds an incomplete render ({started} of {len(metas)} prompt folders "
            "begun, the last may lack images): delete it and run the same command again"
        ) from None
    print(f"wrote {counted(len(metas), 'prompt')} x {counted(args.images_per_prompt, 'image')} to {args.out}")
    return 0


def split_component_overrides(
    names: list[str], overrides: list[str], others: tuple[str, ...] | None = None
) -> dict[str, list[str]]:
    """``--set`` values per component: plain ``key=value`` for one component, ``component.key=value`` for several.
    A key prefixed with a component not among `names` (one of `others`, by default every component) is refused:
    that component is not trained."""
    if others is None:
        from imgalign.pretrain import COMPONENTS

        others = tuple(COMPONENTS)
    per: dict[str, list[str]] = {n: [] for n in names}
    for o in overrides:
        head = o.split("=", 1)[0]
        comp, dot, _ = head.partition(".")
        if dot and comp in per:
            per[comp].append(o[len(comp) + 1 :])
        # another component's setting: it said "unknown config key 'clip'" of a --set meant for the clip component
        elif dot and comp in others:
            raise ValueError(
                f"--set {o!r} is a setting of the {comp} component, which --component {' '.join(names)} does not "
                f"train: drop it, or train {comp} too (--component {comp}, or all)"
            )
        elif len(names) == 1:
            per[names[0]].append(o)
        elif dot:  # a misspelt component: `t3i.steps` is not `t2i.t3i.steps`
            raise ValueError(
                f"--set {o!r}: {comp!r} is not a component; with --component all, prefix the key with one of "
                f"{names} (e.g. --set {names[0]}.{head.partition('.')[2]}=...)"
            )
        else:
            raise ValueError(
                f"--set {o!r}: with --component all, prefix the key with its component, one of {names} "
                f"(e.g. --set {names[0]}.{head}=...)"
            )
    return per


def _pretrain_one(module: str, cfg: Any, out: str, progress: bool) -> dict[str, float]:
    """One component's pretraining (module level, so a worker process can run it)."""
    import importlib

    return importlib.import_module(module).pretrain(cfg, Path(out), progress=progress)


_worker_interrupted = False  # set in a worker process that Ctrl-C stopped in the middle of a component


def _pretrain_in_worker(module: str, cfg: Any, out: str, progress: bool) -> dict[str, float]:
    """:func:`_pretrain_one` in a worker process of ``--component all``. Ctrl-C reaches the workers too, but the
    pool has already handed them the queued component (the VLM), and leaving the pool waits for it: a worker that
    was interrupted starts no other component, so Ctrl-C stops the run at once instead of after the whole VLM."""
    global _worker_interrupted
    if _worker_interrupted:
        raise KeyboardInterrupt
    import multiprocessing
    import sys

    from imgalign.cli import DiagnosticsStream, library_bars_off

    if multiprocessing.parent_process() is not None and not isinstance(sys.stderr, DiagnosticsStream):
        # a spawned worker's stderr is the bare stream, not the program's (whose failed writes are dropped): with
        # `2>/dev/full` the t2i worker's progress bar failed its pretraining with "[Errno 28] No space left on
        # device", naming no file, while the same command with one component finished
        sys.stderr = DiagnosticsStream(sys.stderr)

    try:
        if progress:
            return _pretrain_one(module, cfg, out, progress)
        # a worker process starts with the libraries' bars on: --no-progress printed transformers' "Writing model
        # shards" bars, and with stderr on /dev/full that write failed the export as "No space left on device"
        with library_bars_off():
            return _pretrain_one(module, cfg, out, progress)
    except KeyboardInterrupt:
        _worker_interrupted = True
        raise


@contextlib.contextmanager
def component_locks(out: Path, works: dict[str, str]) -> Iterator[None]:
    """Hold the lock of each component's work folder (name -> folder under `out`; ``WORK/.lock``, as ``imgalign
    train`` locks its output folder) while it trains. A second start of the same pretraining into --out wrote the
    same checkpoint files as the first: one failed with "No such file ... checkpoint.pt.tmp", and a checkpoint
    written by both at once could be published with their bytes mixed. Other components into the same --out (another
    terminal) are not held up. A work folder (and --out) this call made that holds only the lock at the end (a
    run refused before it wrote anything, e.g. for a bad ``init_from``) is removed again."""
    from imgalign.trainers.checkpoint import lock_output_dir, unlock_output_dir

    made = [f for f in (out, *(out / w for w in works.values())) if not f.exists()]
    held: list[Path] = []
    try:
        for n, work in works.items():
            folder = out / work
            folder.mkdir(parents=True, exist_ok=True)
            if not lock_output_dir(folder, command="imgalign world pretrain"):
                raise ValueError(
                    f"--out {str(out)!r}: {n} is being trained into it by another imgalign world pretrain (the same "
                    "command started twice?): wait for it to end, then run the same command again (every component "
                    "resumes from its last checkpoint), or give another --out"
                )
            held.append(folder)
        yield
    finally:
        for folder in held:
            # removed while still locked: another start that opened the lock file meanwhile is refused by it
            if folder in made and [f.name for f in folder.iterdir()] == [".lock"]:
                with contextlib.suppress(OSError):
                    (folder / ".lock").unlink()
                    folder.rmdir()
            unlock_output_dir(folder)
        if out in made:
            with contextlib.suppress(OSError):
                out.rmdir()  # only when empty


def stop_workers(pool: Any) -> None:
    """End the worker processes of a ProcessPoolExecutor now, and start no queued component. Ctrl-C in a terminal
    reaches the workers as well, but an interrupt of the main process alone (``kill -INT PID``, or SIGTERM, which
    the program turns into one) did not: leaving the pool waited for the workers to train their components to the
    end, and a main process killed by SIGTERM left them training on, orphaned, into --out. Their checkpoints are
    written atomically, so a rerun resumes from the last one."""
    # (the pool has no public way to end its workers)
    workers = list((getattr(pool, "_processes", None) or {}).values())
    for w in workers:
        w.terminate()
    for w in workers:
        w.join()
    pool.shutdown(wait=True, cancel_futures=True)


def pretrain_in_pool(
    components: dict[str, tuple[str, Any]], out: Path, workers: int, progress: bool = True
) -> dict[str, BaseException]:
    """Train `components` (name -> (module, config)) in `workers` processes, in their order, the first with a
    progress bar (unless not `progress`); prints each one's result and returns the failures. Interrupted, the
    workers end with it."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    failed: dict[str, BaseException] = {}
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))
    try:
        futs = {
            n: pool.submit(_pretrain_in_worker, module, cfg, str(out), progress and i == 0)
            for i, (n, (module, cfg)) in enumerate(components.items())
        }
        for n, f in futs.items():
            try:
                print(f"{n}: {f.result()}")
            except BrokenProcessPool as e:
                # a worker killed (SIGKILL, the kernel's out-of-memory killer) breaks the whole pool: Python's
                # "A process in the process pool was terminated abruptly ..." said neither why nor what to do
                failed[n] = BrokenProcessPool(
                    "a worker process was killed (by a signal: kill -9, or the system's out-of-memory killer, see "
                    "dmesg), which stops every component not finished"
                )
                failed[n].__cause__ = e
                print(f"{n}: FAILED: {failed[n]}")
            except Exception as e:  # the others keep training; report every failure at the end
                failed[n] = e
                print(f"{n}: FAILED: {type(e).__name__}: {e}")
    except KeyboardInterrupt:
        stop_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return failed


# files at the top of a saved model folder (diffusers pipeline, transformers model, open_clip model)
MODEL_MARKERS = ("model_index.json", "config.json", "open_clip_config.json")


def run_pretrain(args: argparse.Namespace) -> int:
    import importlib
    import os

    from imgalign.config import load_config, to_dict
    from imgalign.pretrain import COMPONENTS

    refuse_empty_options(args, {"out": "the pretraining folder (new, or an earlier run's to resume)"})
    names = list(COMPONENTS) if args.component == "all" else [args.component]
    per = split_component_overrides(names, args.set)
    mods = {n: importlib.import_module(COMPONENTS[n]) for n in names}
    cfgs = {}
    for n, m in mods.items():  # validate all before training
        try:
            cfgs[n] = load_config(m.Config, None, per[n])
        except ValueError as e:  # with --component all: whose key ("unknown config key 'stepz'" of which?)
            if len(names) == 1 or str(e).startswith(f"{n}:"):
                raise
            msg = str(e).replace("--set ", f"--set {n}.")  # the component's own hint, prefixed as --set needs
            raise ValueError(f"{n}: {msg}" + ("" if "--set" in msg else f" (--set {n}.KEY=VALUE)")) from None
    jobs = args.jobs if args.jobs is not None else min(2, os.cpu_count() or 1)
    if jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs}")
    if len(names) == 1 and jobs > 1 and args.jobs is not None:  # it was ignored without a word
        raise ValueError(
            f"--jobs {jobs} is how many components train at once (with --component all); one component trains in "
            f"one process: leave --jobs out, and give it more threads with --set threads={jobs}"
        )
    if args.print_config:  # reads no folder: --out is not needed to see a config
        import yaml

        print(yaml.safe_dump({n: to_dict(c) for n, c in cfgs.items()}, sort_keys=False))
        return 0
    if args.out is None:
        raise ValueError(
            "--out is required: the pretraining folder (new, or an earlier run's to resume); --print-config "
            "alone shows the config"
        )
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(
            f"--out {str(out)!r} is a file; give a folder (new, or one from an earlier pretraining run to resume: "
            f"each component trains in its own sub-folder)"
        )
    check_output_folder(out)
    # a model folder given as --out (e.g. a finished shapes-clip/): the run would nest its own folders inside it
    marker = next((f for f in MODEL_MARKERS if (out / f).is_file()), None)
    # a component's work folder (e.g. t2i-work/, with its config.json) was called "a model folder"; the CLIP's and
    # the VLM's (shapes-clip.train/: a checkpoint.pt, no model file) had a new pretraining nested inside them
    works = {importlib.import_module(m).WORK: n for n, m in COMPONENTS.items()}
    if out.name in works and out.is_dir() and any(out.iterdir()):
        raise ValueError(
            f"--out {str(out)!r} is the work folder of pretraining {works[out.name]} (checkpoints and caches); "
            f"give the folder above it ({str(out.parent)!r}), which holds the work and model folders"
        )
    if marker is not None:
        raise ValueError(
            f"--out {str(out)!r} is a model folder (it holds {marker}); give the folder that holds, or will hold, "
            f"the pretrained sub-folders ({', '.join(f'shapes-{n}' for n in names)})"
        )
    # a file where a component writes a folder failed with a bare Errno (the CLIP's after training)
    for n in names:
        mod = mods[n]
        for sub in (mod.FOLDER, f"{mod.FOLDER}.tmp", f"{mod.FOLDER}.old", mod.WORK):
            if (out / sub).exists() and not (out / sub).is_dir():
                raise ValueError(
                    f"--out {str(out)!r} holds a file named {sub!r}, where pretraining {n} writes a folder: move "
                    "it away, or give another --out"
                )
    bars = not args.no_progress
    with component_locks(out, {n: mods[n].WORK for n in names}):
        if len(names) == 1:
            print(f"{names[0]}: {_pretrain_one(COMPONENTS[names[0]], cfgs[names[0]], str(out), bars)}")
            return 0
        failed: dict[str, BaseException] = {}
        if jobs == 1:  # one after the other; a failure stops only its component, as in the pool below
            for n in names:
                try:
                    print(f"{n}: {_pretrain_one(COMPONENTS[n], cfgs[n], str(out), bars)}")
                except Exception as e:
                    failed[n] = e
                    print(f"{n}: FAILED: {type(e).__name__}: {e}")
        else:
            # Several processes, each with its component's `threads` (1 by default). The components are
            # independent and each seeds itself, so the folders equal those of sequential runs. They are submitted
            # longest first (t2i), so one worker trains the t2i model while the other trains the CLIP, then the
            # VLM. Only the first shows a progress bar: bars from two processes would overwrite each other.
            workers = min(jobs, len(names))
            bar_of = f"; progress bar: {names[0]}" if bars else ""
            # --jobs 5 for three components: the other two would have nothing to train
            one_each = f" (one per component; --jobs {jobs} asked for more)" if jobs > workers else ""
            print(f"training {', '.join(names)} in {workers} processes{one_each}{bar_of}")
            failed = pretrain_in_pool({n: (COMPONENTS[n], cfgs[n]) for n in names}, out, workers, bars)
    if failed:
        from imgalign.cli import CLIError

        # "the other components finished" was said when every component had failed (a killed worker)
        others = "; the other components finished" if len(failed) < len(names) else ""
        raise CLIError(
            f"pretraining failed for {', '.join(failed)} (first error: {next(iter(failed.values()))}){others}. Fix "
            f"the cause and run the same command again: every component resumes from its last checkpoint in {out}"
        ) from next(iter(failed.values()))
    return 0
