"""``imgalign train``: online reward fine-tuning (Flow-GRPO) of a flow-matching T2I model.

    imgalign train [CONFIG.yaml] [--set key=value ...] [--output-dir DIR] [--resume auto|DIR] [--max-steps N]
                   [--print-config] [--describe]

With no CONFIG the embedded default ``examples/shapes/flow_grpo.yaml`` runs (the shapes model, the GenEval
partial-credit reward, sized for two CPU cores). Relative paths in a config or ``--set`` (model.path,
prompts.source, log.output_dir) are read from the working folder, not from the config file's folder; ``~`` and
``$HOME`` are not expanded there (give the full path). Multi-process: ``accelerate launch --num_processes N -m imgalign
train CONFIG``; on CPUs ``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes N ...`` (accelerate
starts one process for ``--cpu``). A run writes ``config.yaml``, ``metrics.jsonl``, ``eval.jsonl``
(its in-loop evaluations; none with ``eval.every=-1``), ``samples/`` and ``checkpoints/step-NNNNNN/`` (a
diffusers-loadable model folder plus ``trainer_state/``; how to load one: the README's "Using a checkpoint outside
imgalign"); ``imgalign report RUN`` plots and summarises the two JSONL files.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import yaml

from imgalign.launch import launched_processes, launched_rank

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEFAULT_CONFIG = EXAMPLES / "shapes" / "flow_grpo.yaml"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="fine-tune a flow-matching T2I model on rewards (Flow-GRPO)",
        description=__doc__,  # --help shows how to launch several processes (on CPUs --cpu starts only one)
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the usage lines above as they are written
    )
    p.add_argument(
        "config", nargs="?", help=f"YAML config (default: {DEFAULT_CONFIG.relative_to(EXAMPLES.parent)})"
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override, repeatable"
    )
    p.add_argument("--output-dir", help="run folder (overrides log.output_dir)")
    p.add_argument(
        "--resume",
        help="'auto' (latest checkpoint in the output dir, if any), or a run or checkpoint folder; the run goes on "
        "in --output-dir (log.output_dir), which must hold no other run, and later checkpoints of its own folder are "
        "set aside as superseded-step-N. To continue a run with its own settings, give its config: imgalign train "
        "RUN/config.yaml --resume auto",
    )
    p.add_argument("--max-steps", type=int, help="override train.max_steps")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (sets log.progress=false), as in the other commands",
    )
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.add_argument(
        "--describe",
        action="store_true",
        help="list every config key with its built-in default and help (with CONFIG or --set: the value they give, "
        "where it differs). `imgalign train` without CONFIG runs "
        f"{DEFAULT_CONFIG.relative_to(EXAMPLES.parent)}, which changes some defaults: name it to see its values",
    )
    p.set_defaults(func=run_train)


def load_train_config(args: argparse.Namespace):  # noqa: ANN201 - FlowGRPOConfig, imported lazily
    from imgalign.config import ConfigError, load_config
    from imgalign.trainers.config import FlowGRPOConfig

    path = args.config
    if path is None:
        if not DEFAULT_CONFIG.is_file():
            raise FileNotFoundError(
                f"the default config {DEFAULT_CONFIG} is missing (installed without examples/); pass a CONFIG.yaml"
            )
        path = DEFAULT_CONFIG
    overrides = list(args.set)
    if args.max_steps is not None:
        overrides.append(f"train.max_steps={args.max_steps}")
    if args.no_progress:
        overrides.append("log.progress=false")
    if args.output_dir is not None:
        if not args.output_dir.strip():  # "" (--output-dir "$RUN" with RUN unset) kept the config's folder
            raise ConfigError(
                "--output-dir is empty (an unset shell variable?): give a run folder, e.g. runs/my_run"
            )
        overrides.append(f"log.output_dir={args.output_dir}")
    try:
        return load_config(FlowGRPOConfig, path, overrides)
    except ConfigError as e:  # examples/accelerate/*.yaml given in CONFIG's place
        if getattr(e, "name", None) not in ("compute_environment", "distributed_type"):
            raise
        raise ConfigError(
            f"{path} is an accelerate config ({e.name}), not a training config: give it to accelerate and a "
            f"training config to train, e.g. accelerate launch --config_file {path} -m imgalign train "
            "examples/shapes/flow_grpo.yaml"
        ) from None


def run_train(args: argparse.Namespace) -> int:
    from imgalign.config import ConfigError, describe, leaves, to_dict
    from imgalign.trainers.config import FlowGRPOConfig, check_batch_layout

    if args.describe:
        # with a CONFIG, --set, --max-steps or --output-dir: each key as that config sets it, beside its default
        # where they differ (they were ignored, silently)
        given = (
            args.config
            or args.set
            or args.max_steps is not None
            or args.output_dir is not None
            or args.no_progress
        )
        values = leaves(to_dict(load_train_config(args))) if given else {}
        for key, default, text in describe(FlowGRPOConfig):
            shown = repr(values[key]) if key in values else default
            note = f"  (default {default})" if shown != default else ""
            print(f"{key} = {shown}{note}\n    {text}")
        return 0
    cfg = load_train_config(args)
    from imgalign.trainers.trainer import check_reward_names, preflight, run

    if args.print_config:
        check_reward_names(cfg)  # a misspelt reward is not a config to show (the model path may be elsewhere)
        # nor a batch that does not split over the processes it is launched on (`accelerate launch --num_processes
        # 3 ... --print-config` showed, three times, a config whose batch fails on 3 processes)
        check_batch_layout(cfg, launched_processes())
        if launched_rank() == 0:  # one copy, from the main process
            print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
        return 0

    # "" trained from the base model, as without --resume
    if args.resume is not None and not args.resume.strip():
        raise ConfigError(
            "--resume is empty (an unset shell variable?): give auto, or the run or checkpoint folder to continue"
        )
    folder_given = args.output_dir is not None or sets_output_dir(args.set)
    other = other_runs_config(args.config, cfg.log.output_dir, args.resume, folder_given)
    if args.config is None and args.resume not in (None, "auto") and not folder_given:
        other = other or default_config_resume(args.resume, cfg.log.output_dir)
    if other:
        raise ConfigError(other)
    # the run folder as the config gives it, for the CLI's error lines (a full disk named no folder without
    # --output-dir)
    args.output_dir = cfg.log.output_dir
    other = other_commands_output(Path(cfg.log.output_dir))
    if other:
        raise ConfigError(other)
    preflight(cfg)
    from imgalign.cli import library_bars_off

    # log.progress: false in a config left the libraries' bars (checkpoint shards at every save) to --no-progress
    bars = contextlib.nullcontext() if cfg.log.progress else library_bars_off()
    try:
        with bars:
            run(cfg, cfg.log.output_dir, args.resume)
    except KeyboardInterrupt:
        from imgalign.cli import Interrupted

        raise Interrupted(interrupted_line(Path(cfg.log.output_dir), args.resume)) from None
    if launched_rank() > 0:  # one summary, from the main process of `accelerate launch`
        return 0
    from imgalign.eval.reports import run_summary_lines

    print(f"done: {cfg.log.output_dir}")
    for line in run_summary_lines(Path(cfg.log.output_dir)):
        print(f"  {line}")
    if not (Path(cfg.log.output_dir) / "metrics.jsonl").is_file():
        # a --resume of a checkpoint at train.max_steps into a new folder trains no step: the report line sent the
        # user to a command that refuses the folder ("metrics.jsonl does not exist")
        print("  no step trained, so no metrics to report")
        return 0
    print(f"  curves and a summary: imgalign report {cfg.log.output_dir}")
    return 0


def sets_output_dir(items: list[str]) -> bool:
    """Whether ``--set`` items choose the run folder, read as the config reads them: ``log.output_dir=X``, also
    with spaces around its parts or ``=`` (read as ``log.output_dir``, it was not taken for a chosen folder, and a
    resume into it was refused with "add --output-dir NEW_FOLDER"), or ``log={output_dir: X}``."""
    from imgalign.config import parse_override

    for item in items:
        parts, value = parse_override(item)
        if parts == ["log", "output_dir"]:
            return True
        if parts == ["log"] and isinstance(value.parsed, dict) and "output_dir" in value.parsed:
            return True
    return False


def holds_run(folder: Path) -> bool:
    """Whether `folder` holds a training run (its checkpoints or its log)."""
    return (folder / "checkpoints").is_dir() or (folder / "metrics.jsonl").is_file()


OTHER_OUTPUTS = (
    ("eval_args.json", "an `imgalign eval` output"),
    ("model_index.json", "a diffusers model folder"),
    ("open_clip_config.json", "an open_clip model folder"),
    ("config.json", "a transformers model folder"),
)
"""Files that mark a folder as another command's output or a saved model, each with what it makes the folder."""


def other_commands_output(out: Path) -> str | None:
    """Why run folder `out` must not take a training run, or None: it holds another command's output or a saved model
    (an evaluation's results, a pipeline folder), which the run's config.yaml, metrics.jsonl and checkpoints/ would
    be mixed into (`imgalign eval --out RUN` is refused for the same reason)."""
    if not out.is_dir():
        return None
    for name, what in OTHER_OUTPUTS:
        if (out / name).is_file():
            return (
                f"--output-dir {str(out)!r} looks like {what} ({name}), not a run folder: the run's checkpoints and logs "
                "would be mixed into it; give a new or empty --output-dir"
            )
    return None


def other_runs_config(
    config: str | None, output_dir: str, resume: str | None, folder_given: bool
) -> str | None:
    """Why ``imgalign train RUN/config.yaml --resume auto`` (or ``--resume`` one of RUN's checkpoints) must not go
    on, or None: the config is a run folder's own and its ``log.output_dir`` names another folder (a copied or moved
    run folder keeps the folder of the run it was copied from, a hand edit may change it), so the resume would
    continue that other run, writing into it, or start afresh there, not continue RUN. Only when neither
    ``--output-dir`` nor ``--set log.output_dir`` chose the folder."""
    if resume is None or folder_given or config is None or Path(config).name != "config.yaml":
        return None
    run, out = Path(config).parent, Path(output_dir)
    if not holds_run(run) or run.resolve() == out.resolve():
        return None
    if resume == "auto":
        there = (
            "continue the run in that folder, writing into it" if holds_run(out) else "start a new run there"
        )
    else:  # a checkpoint of RUN's own (one of another run, for a new run in the config's folder, is meant)
        of = run_folder_of(resume)
        if of is None or of.resolve() != run.resolve():
            return None
        # (into a folder that holds a run, the trainer refuses a checkpoint of another folder)
        there = "start a new run there from that checkpoint"
    return (
        f"{config} is the config of run folder {str(run)!r}, but its log.output_dir is {output_dir!r}, so --resume "
        f"{resume} would {there}, not continue {str(run)!r} (a copied run folder keeps the log.output_dir of the run "
        f"it was copied from): add --output-dir {str(run)} to continue {str(run)!r}, or --output-dir {output_dir} to "
        "go on in that folder"
    )


def run_folder_of(resume: str) -> Path | None:
    """The run folder a ``--resume`` path lies in (the run itself, its checkpoints/, a checkpoint or a checkpoint's
    trainer_state/): the nearest of it and its three parents that holds a run and its config.yaml, or None."""
    for folder in [Path(resume), *Path(resume).parents][:4]:
        if holds_run(folder) and (folder / "config.yaml").is_file():
            return folder
    return None


def default_config_resume(resume: str, output_dir: str) -> str | None:
    """Why ``imgalign train --resume RUN`` without CONFIG must not go on, or None: it would train the default
    config's settings into the default's folder, branching RUN there, where its user expects RUN to continue with
    its own settings (the resume warned of a changed config, listing every setting the default differs in)."""
    run = run_folder_of(resume)
    if run is None or run.resolve() == Path(output_dir).resolve():
        return None
    return (
        f"--resume {resume} without CONFIG would train the default config's settings ({DEFAULT_CONFIG.name}) into "
        f"its folder {output_dir!r}, not continue {str(run)!r}: to continue that run with its own settings, give its "
        f"config: imgalign train {run / 'config.yaml'} --resume {resume}; to start a new run from it with the "
        "default's settings, add --output-dir NEW_FOLDER"
    )


def interrupted_line(out: Path, resume: str | None) -> str:
    """What an interrupted run kept and how to go on: the run folder's last checkpoint, if it has one. (The generic
    "add --resume auto" started a run begun with --resume CHECKPOINT of another folder over from the base model when
    it was interrupted before its first save: --resume auto finds no checkpoint in the new folder.)"""
    from imgalign.trainers.checkpoint import latest_checkpoint

    last = latest_checkpoint(out)
    if last is not None:
        return (
            f"interrupted; its last checkpoint, {last}, is whole: continue from it with --resume auto in the same "
            "command (the steps after it are trained again)"
        )
    if resume not in (None, "auto"):
        return (
            f"interrupted before the run's first checkpoint in {out}: run the same command again (with --resume "
            f"{resume}) to start it again from there"
        )
    return (
        f"interrupted before the run's first checkpoint in {out}: run the same command with --resume auto to start "
        "it again"
    )
