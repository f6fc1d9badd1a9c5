"""The online-RL trainer for flow-matching T2I models, readable top to bottom:

    for step in steps:
        prompts   <- the step's prompts (a pure function of (seed, step)); this process's share of the samples
        rollout   <- the rollout strategy (flat Flow-GRPO SDE sampling; tree later) with the current policy
        rewards   <- every reward on this process's images, gathered over processes (groups span processes)
        advantage <- the balancer (per-reward group normalisation + weighted sum, then GRPO advantages)
        update    <- the objective (GRPO clipped surrogate + closed-form KL; NFT later) over trained terms,
                     gradient accumulation, clipping, AdamW, LR schedule, EMA
        log / sample grid / eval / checkpoint

Model-family differences live in :mod:`imgalign.adapters`; the objective, rollout strategy, balancer and velocity
penalty are looked up by name in :mod:`imgalign.trainers.registry`, so new ones plug in through configuration.
Distribution, mixed precision and trackers come from accelerate (``accelerate launch --num_processes N -m imgalign
train ...``; DeepSpeed ZeRO-2 / FSDP through ``accelerate config``; see ``examples/README.md``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors import SafetensorError

from imgalign.config import ConfigError, leaves, to_dict
from imgalign.files import atomic_write_text, replacing
from imgalign.launch import launched_processes, launched_rank, world_size
from imgalign.pipelines import TRUNCATION_NOTICE, MessageFilter, length_warning_said
from imgalign.trainers import checkpoint as C
from imgalign.trainers.config import FlowGRPOConfig, check_batch_layout, ignored_settings
from imgalign.trainers.grpo import off_policy_warning
from imgalign.trainers.objectives import TrainContext, build_objective, check_loss
from imgalign.trainers.prompting import (
    PromptSampler,
    _mix,
    check_prompt_source,
    long_prompts_warning,
    over_limit,
    token_limits,
)
from imgalign.trainers.registry import ROLLOUTS
from imgalign.trainers.rewarding import (
    balance,
    balancer_inputs,
    build_balancer,
    build_rewards,
    reward_means_by_tag,
    reward_stats,
    same_reward_twice,
    score_all,
)
from imgalign.trainers.rollout import Rollout, RolloutContext, check_rollout

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


QUIET_TRUNCATION = MessageFilter(TRUNCATION_NOTICE)
"""Drops diffusers' per-prompt truncation notice while a run with long prompts lasts (the trainer has said which
prompts are truncated, once)."""


def horizon_warnings(t: Any, total_updates: int) -> list[str]:
    """Warm-up or EMA settings far longer than the run's `total_updates` optimizer updates: the learning rate never
    reached a tenth of train.lr (warmup_steps=100000), or the exported and evaluated EMA weights stayed over 90% the
    base model's (ema_decay=0.999999) while the run said 'done', with nothing said of either. A short run of a
    recipe (``--max-steps 2``: 0.2 x train.lr, 66% of the base) is not warned of."""
    out = []
    if t.warmup_steps > 10 * total_updates:
        out.append(
            f"train.warmup_steps={t.warmup_steps} is longer than this run's {total_updates} optimizer update(s) "
            f"(train.max_steps x train.updates_per_step): the learning rate reaches only "
            f"{total_updates / t.warmup_steps:.3g} x train.lr; lower train.warmup_steps (or raise train.max_steps)"
        )
    kept = t.ema_decay**total_updates
    if t.ema_decay > 0 and kept > 0.9:
        out.append(
            f"train.ema_decay={t.ema_decay:g} over this run's {total_updates} optimizer update(s): the EMA weights, "
            f"which the checkpoints export and the evaluation uses, stay {kept:.4%} the base model's (decay^updates); "
            f"raise train.max_steps, lower train.ema_decay (below {0.5 ** (1 / total_updates):.4g} keeps under half "
            "of the base), or train.ema_decay=0 (off)"
        )
    return out


class EMA:
    """Exponential moving average of the trainable weights (float32 shadow copies), for evaluation and export."""

    def __init__(self, params: list[torch.nn.Parameter], decay: float) -> None:
        self.params = params
        self.decay = decay
        self.shadow = [p.detach().float().clone() for p in params]

    @torch.no_grad()
    def update(self) -> None:
        for s, p in zip(self.shadow, self.params):
            s.lerp_(p.detach().float(), 1.0 - self.decay)

    @contextlib.contextmanager
    def swapped_in(self):  # noqa: ANN201 - context manager
        backup = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for s, p in zip(self.shadow, self.params):
                p.copy_(s.to(p.dtype))
        try:
            yield
        finally:
            with torch.no_grad():
                for b, p in zip(backup, self.params):
                    p.copy_(b)


def lr_lambda_factory(warmup: int, total: int, schedule: str):  # noqa: ANN201
    def fn(k: int) -> float:
        if warmup and k < warmup:
            return (k + 1) / warmup
        if schedule == "cosine":
            progress = min(1.0, (k - warmup) / max(1, total - warmup))
            return 0.5 * (1 + math.cos(math.pi * progress))
        return 1.0

    return fn


IGNORED_ON_RESUME = ("train.max_steps", "train.time_budget_min", "train.unscored_stop_steps")
"""Settings a resumed run may change without changing what the steps compute (besides the ``log`` section);
``train.max_steps`` only while the LR schedule does not depend on it (:func:`ignored_on_resume`)."""


def ignored_on_resume(cfg: FlowGRPOConfig | dict[str, Any]) -> tuple[str, ...]:
    """The :data:`IGNORED_ON_RESUME` keys for this config: a cosine schedule decays over ``train.max_steps``, so
    changing it on resume changes every later step's learning rate and is reported."""
    train = cfg["train"] if isinstance(cfg, dict) else to_dict(cfg)["train"]
    if train.get("lr_schedule") == "cosine":
        return tuple(k for k in IGNORED_ON_RESUME if k != "train.max_steps")
    return IGNORED_ON_RESUME


def apply_optimizer_settings(optimizer: Any, scheduler: Any, settings: list[dict[str, Any]]) -> None:
    """Put the hyper-parameters `settings` (each param group's entries but ``params``, read before a state dict
    loaded) back into `optimizer`, keeping the loaded moments and step counts, and make `scheduler` (a LambdaLR
    whose state dict loaded) scale the settings' ``initial_lr``: the learning rate of the next update is then the
    configured one at the loaded schedule position."""
    for group, kept in zip(optimizer.param_groups, settings):
        group.update(kept)
    scheduler.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
    for group, base, fn in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["lr"] = base * fn(scheduler.last_epoch)
    scheduler._last_lr = [g["lr"] for g in optimizer.param_groups]


def config_hash(cfg: FlowGRPOConfig) -> str:
    d = to_dict(cfg)
    d.pop("log", None)  # where a run writes does not change what it computes
    for key in ignored_on_resume(cfg):
        d[key.split(".")[0]].pop(key.split(".")[1], None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def check_launch(world_size_env: str | None, num_processes: int) -> None:
    """The launcher's process count (torchrun's ``WORLD_SIZE``) is the one accelerate runs with. When they differ
    (torchrun with a GPU config on a machine without GPUs), every process would train the whole batch alone and
    write the same run folder. A value that is not a process count is refused naming it (int()'s message did not)."""
    try:
        launched = world_size(world_size_env)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if launched != num_processes:
        raise ConfigError(
            f"the launcher started {launched} processes (WORLD_SIZE), but accelerate runs each as {num_processes} "
            "of its own, so each would train alone into the same output folder. On CPUs set ACCELERATE_USE_CPU=true "
            "(ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes N -m imgalign train ...); on "
            "GPUs check that every process sees one (CUDA_VISIBLE_DEVICES)"
        )


def single_cpu_launch(env: Mapping[str, str], num_processes: int) -> str | None:
    """The warning for ``accelerate launch --cpu --num_processes N`` (or ``--num_processes N`` on a machine without
    GPUs, or a config file's ``distributed_type: MULTI_CPU``): accelerate 1.x starts a single process for it without
    mpirun, and the run trained the whole batch in it without a word. accelerate's own launcher (it sets
    ``ACCELERATE_DYNAMO_BACKEND``) sets ``MASTER_PORT`` only when asked for several processes or machines, and its
    torchrun launcher sets ``WORLD_SIZE``: a lone process that has the one and not the other was asked for more."""
    if num_processes != 1 or "WORLD_SIZE" in env or "ACCELERATE_DYNAMO_BACKEND" not in env:
        return None
    if "MASTER_PORT" not in env:
        return None
    return (
        "accelerate launch was asked for several processes (--num_processes N with --cpu or on a machine without "
        "GPUs, or distributed_type: MULTI_CPU) but started one, as it does on CPUs without mpirun: this run trains "
        "the whole batch in 1 process. For N CPU processes launch with ACCELERATE_USE_CPU=true accelerate launch "
        "--multi_gpu --num_processes N -m imgalign train ... (or --config_file examples/accelerate/cpu_2proc.yaml)"
    )


def rendezvous_notice(env: Mapping[str, str], pid: int = 0) -> str | None:
    """The line said before joining a process group that no torchrun started: ``WORLD_SIZE``/``RANK`` left in the
    shell with a ``MASTER_ADDR`` (accelerate launch --cpu sets one) made the run wait without a word for processes
    that never come (until torch's process-group timeout). The wait answers neither Ctrl-C nor SIGTERM (it is
    inside torch's C++ store), so the line names the process id to kill. Only under accelerate's single-process
    launcher (it sets ``ACCELERATE_USE_CPU``; its torchrun launcher sets ``TORCHELASTIC_RUN_ID``): a cluster's own
    launcher that sets the variables by hand (DeepSpeed's, srun, mpirun) is not told to kill its processes."""
    try:
        launched = world_size(env.get("WORLD_SIZE"))
    except ValueError:
        return None  # refused by name by check_launch / accelerator_failure
    if launched < 2 or "TORCHELASTIC_RUN_ID" in env or "MASTER_ADDR" not in env:
        return None
    if "ACCELERATE_USE_CPU" not in env:
        return None
    return (
        f"joining a process group of WORLD_SIZE={launched} as RANK={env.get('RANK', '?')} at "
        f"{env['MASTER_ADDR']}:{env.get('MASTER_PORT', '?')}, which waits until all {launched} processes have "
        "joined. No torchrun started this process: if WORLD_SIZE and RANK are left over in the shell, stop it (the "
        f"wait answers neither Ctrl-C nor SIGTERM: kill -9 {pid or os.getpid()}) and unset WORLD_SIZE, RANK and "
        "LOCAL_RANK"
    )


def check_accumulation_env(value: str | None) -> None:
    """``ACCELERATE_GRADIENT_ACCUMULATION_STEPS`` that is not a whole number (``abc``, ``2.5``): accelerate's int()
    inside ``Accelerator()`` said only "invalid literal for int() with base 10: 'abc'", naming nothing. A whole
    number other than 1 is refused later, by :func:`check_accelerator`, with what to do."""
    if value is not None and not value.strip().removeprefix("-").isdecimal():
        raise ConfigError(
            f"ACCELERATE_GRADIENT_ACCUMULATION_STEPS={value!r} is not a whole number; imgalign accumulates its "
            "micro-batches itself (train.micro_batch_size, train.updates_per_step), so unset it (and give accelerate "
            "launch no --gradient_accumulation_steps)"
        )


def _env_flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").lower() in ("1", "true", "yes")


def accelerator_failure(err: Exception, env: Mapping[str, str]) -> ConfigError:
    """accelerate refusing the launch it was given (FSDP on CPUs, DeepSpeed not installed) as one error that names
    the launch and what to do, instead of a traceback from inside ``Accelerator()`` on every process."""
    if _env_flag(env, "ACCELERATE_USE_FSDP"):
        kind, hint = (
            "FSDP",
            "examples/accelerate/fsdp.yaml is set up for GPUs; on CPUs launch with "
            "examples/accelerate/cpu_2proc.yaml and ACCELERATE_USE_CPU=true (or set fsdp_sync_module_states: false "
            "and fsdp_cpu_ram_efficient_loading: false in the file's fsdp_config)",
        )
    elif _env_flag(env, "ACCELERATE_USE_DEEPSPEED"):
        kind, hint = (
            "DeepSpeed",
            "examples/accelerate/deepspeed_zero2.yaml is for GPUs with deepspeed installed (pip install deepspeed); "
            "on CPUs launch with examples/accelerate/cpu_2proc.yaml and ACCELERATE_USE_CPU=true",
        )
    elif "rendezvous" in str(err):
        # WORLD_SIZE and RANK left in a shell: torch's line said no more than the missing MASTER_ADDR
        kind, hint = (
            "the process group",
            f"WORLD_SIZE={env.get('WORLD_SIZE')} and RANK in the environment ask for one of several processes, as "
            "accelerate launch (or torchrun) starts them; start the run that way, or unset WORLD_SIZE, RANK and "
            "LOCAL_RANK to train in one process",
        )
    else:
        kind, hint = "the launch", "check the accelerate launch flags or its --config_file"
    return ConfigError(f"accelerate could not set up {kind}: {str(err).rstrip('.')}. {hint}")


def check_accelerator(
    configured: str, device_type: str, grad_accum: int, deepspeed: bool, launched: str | None
) -> str | None:
    """What accelerate made of the run's settings and the launcher's: an error for what would silently train
    otherwise than asked, a warning (returned) for launcher settings the training config overrides.

    ``configured`` is ``train.mixed_precision``, ``launched`` the launcher's (``ACCELERATE_MIXED_PRECISION``, from
    ``accelerate launch --mixed_precision`` or its config file), ``grad_accum`` accelerate's gradient accumulation
    steps (``ACCELERATE_GRADIENT_ACCUMULATION_STEPS``)."""
    if configured == "fp16" and device_type == "cpu":
        raise ConfigError(
            "train.mixed_precision=fp16 does nothing on the CPU (accelerate autocasts to float16 on GPUs only), so "
            "the run would train in float32, and a model.dtype=float16 model would fail in its first forward: "
            "set train.mixed_precision=bf16 (CPU autocast, with model.dtype bfloat16 or float32) or no"
        )
    if grad_accum != 1 and not deepspeed:
        raise ConfigError(
            f"accelerate's gradient accumulation is set (ACCELERATE_GRADIENT_ACCUMULATION_STEPS={grad_accum}) and "
            f"would divide every gradient by {grad_accum}: imgalign accumulates its micro-batches itself "
            "(train.micro_batch_size, train.updates_per_step), so unset it (unset "
            "ACCELERATE_GRADIENT_ACCUMULATION_STEPS, no --gradient_accumulation_steps)"
        )
    if launched in ("bf16", "fp16") and launched != configured:
        todo = (
            "fp16 does nothing on the CPU (train.mixed_precision=bf16 autocasts there)"
            if launched == "fp16" and device_type == "cpu"
            else f"add --set train.mixed_precision={launched} to train in {launched}"
        )
        return (
            f"the launch asks for mixed precision {launched} (accelerate launch --mixed_precision or its "
            f"--config_file), and the run trains with the training config's train.mixed_precision={configured}; "
            + todo
        )
    return None


def guidance_settings(cfg: FlowGRPOConfig) -> dict[str, float]:
    """The guidance scales the config sets to other than "no guidance" (1; eval's -1 takes the policy's)."""
    found = {
        "sampling.guidance_scale": cfg.sampling.guidance_scale,
        "eval.guidance_scale": cfg.eval.guidance_scale,
    }
    return {k: v for k, v in found.items() if v not in (1.0, -1.0)}


def check_reward_names(cfg: FlowGRPOConfig) -> None:
    """Every reward of ``rewards.names`` is known, allowed in training with its options, and given once (no model
    loads; ``train --print-config`` runs it too)."""
    from imgalign.rewards.base import (
        check_reward_options,
        list_rewards,
        parse_reward_spec,
        reward_target,
        unknown_reward,
    )

    known = list_rewards()
    for spec in cfg.rewards.names:
        try:  # an option without '=' (geneval:mode) was refused naming no key
            name, opts = parse_reward_spec(spec)
        except ValueError as e:
            raise ConfigError(f"rewards.names: {spec!r}: {e}") from None
        if name not in known and ":" not in name:
            raise ConfigError(f"rewards.names: {unknown_reward(name)}")
        try:  # a misspelt or ill-typed option failed when the rewards were built (--print-config showed it)
            check_reward_options(spec)
        except ValueError as e:
            raise ConfigError(f"rewards.names: {spec!r}: {e}") from None
        why = getattr(reward_target(name), "training_error", lambda _: None)(opts)
        if why:
            raise ConfigError(f"rewards.names: {spec!r}: {why}")
    twice = same_reward_twice(cfg.rewards.names)
    if twice:
        raise ConfigError(
            f"rewards.names: {twice[0]!r} and {twice[1]!r} are the same reward with the same options (written "
            "another way, or defaults spelled out), so it would train twice: give each reward once"
        )


RUN_FILES = ("config.yaml", "metrics.jsonl", "eval.jsonl", "rollouts.jsonl")
"""The files a run writes at the top of its folder (appended to, or replaced through a temporary file)."""
RUN_FOLDERS = ("checkpoints", "samples")
"""The folders a run writes at the top of its folder."""


def wrong_run_entry(out: Path) -> str | None:
    """Why run folder `out` cannot take a run's files, or None: one of :data:`RUN_FILES` is a folder there, or one of
    :data:`RUN_FOLDERS` is a file. Such a run failed with Python's own line: "[Errno 21] Is a directory:
    'OUT/.config.yaml.PID-XXXX.tmp' -> 'OUT/config.yaml'" (the hidden temporary named first), or, for a file
    named samples, "[Errno 17] File exists: 'OUT/samples'" after the first step had been computed."""
    for name in RUN_FILES:
        if (out / name).is_dir():
            return (
                f"--output-dir {str(out)!r} holds a folder named {name!r}, where a run writes its {name} file: move "
                "that folder away (or give another --output-dir)"
            )
    for name in RUN_FOLDERS:
        # (a link to nothing: exists() is False, and the run's mkdir failed with "[Errno 17] File exists")
        if ((out / name).exists() or (out / name).is_symlink()) and not (out / name).is_dir():
            kind = "file" if (out / name).exists() else "broken link"
            return (
                f"--output-dir {str(out)!r} holds a {kind} named {name!r}, where a run writes its {name}/ folder: "
                f"move that {kind} away (or give another --output-dir)"
            )
    return None


def preflight(cfg: FlowGRPOConfig, num_processes: int = 1, output_dir: str | Path | None = None) -> str:
    """Cheap checks that must fail before any model loads: the batch layout, the output folder (`output_dir`, else
    ``log.output_dir``), reward names, prompt source, model path, and the LoRA targets and trainable_modules
    patterns (against a local model's weight names, read from its files' headers). Returns the resolved model
    path."""
    from imgalign import adapters as A
    from imgalign import hub
    from imgalign.commands import check_output_folder
    from imgalign.pipelines import ModelSpec, check_model_spec

    check_batch_layout(cfg, num_processes)
    try:  # a file, a path through a file, or a folder that takes no new file (as `eval --out` is checked)
        check_output_folder(Path(output_dir or cfg.log.output_dir), "--output-dir")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    out = Path(output_dir or cfg.log.output_dir)
    wrong = wrong_run_entry(out)
    if wrong is not None:
        raise ConfigError(wrong)
    part = C.inside_run(out)
    if part is not None:
        run = out.parent.parent if part == "a checkpoint folder" else out.parent
        raise ConfigError(
            f"--output-dir {str(out)!r} is {part}, not a run folder: continue the run with --output-dir "
            f"{str(run)!r} --resume auto, or start a new run from a checkpoint with --resume CHECKPOINT and a new "
            "--output-dir"
        )
    check_reward_names(cfg)
    check_prompt_source(cfg.prompts.source)
    base_part, plus, overlay_part = cfg.model.path.partition("+")
    if plus and not Path(cfg.model.path).exists() and Path(overlay_part).exists():  # eval/grid's syntax
        raise ConfigError(
            f"model.path {cfg.model.path!r}: training takes one model, not BASE+OVERLAY; give the base model "
            f"({base_part!r}; with --resume DIR to continue the run that wrote the overlay), or merge the "
            "fine-tuned part into a pipeline folder first"
        )
    # a missing or incomplete folder, or an embedded model whose files are missing, raises here
    model = check_model_spec(ModelSpec("model.path", cfg.model.path))
    if model.overlay is not None:
        raise ConfigError(
            f"model.path {cfg.model.path!r} is a LoRA checkpoint of base model {model.base!r}; training starts "
            "from a full pipeline: give the base model (and --resume DIR to continue that run), or merge the LoRA first"
        )
    base = hub.resolve(model.base)
    # a wrong family failed in the adapter with a traceback
    if cfg.model.family != "auto" and Path(base).is_dir():
        from imgalign.adapters import detect_family

        try:
            found = detect_family(base)
        # a pipeline class imgalign does not know: model.family picks the adapter
        except (OSError, ValueError):
            found = cfg.model.family
        if found != cfg.model.family:
            raise ConfigError(
                f"model.family={cfg.model.family}, but model.path {cfg.model.path!r} holds a {found} pipeline (its "
                f"model_index.json): set model.family=auto (or {found})"
            )
    # a size the model cannot take was refused only once the model had loaded (minutes for SD3.5 or FLUX)
    if cfg.model.resolution and Path(base).is_dir():
        error = resolution_error(Path(base), cfg.model.resolution, cfg.model.path)
        if error is not None:
            raise ConfigError(error)
    # a misspelt LoRA target or trainable_modules pattern was refused only once the model had loaded (minutes for
    # SD3.5 or FLUX): a local model's weight names are read from its files' headers
    lora = cfg.model.lora_targets if cfg.model.lora_rank > 0 else None
    checked = lora is not None or bool(cfg.model.trainable_modules)  # else no header is read at start-up
    saved = A.read_saved_weights(Path(base) / "transformer") if checked and Path(base).is_dir() else None
    if saved is not None:
        error = A.saved_lora_targets_error(saved, lora) if lora else None
        if error is None and cfg.model.trainable_modules:
            names = A.saved_trainable_names(saved, lora)
            error = A.trainable_modules_error(cfg.model.trainable_modules, names)
        if error is not None:
            raise ConfigError(error)
    # a local folder as an absolute path: LoRA checkpoints record it as their base, and must load from anywhere
    return str(Path(base).resolve()) if Path(base).is_dir() else base


def resolution_error(folder: Path, side: int, label: str) -> str | None:
    """Why the pipeline saved in `folder` (model.path `label`) cannot take `side` as model.resolution, read from its
    configs as the trainer's adapter checks it once loaded (a multiple of VAE factor x patch size; at most SD3's
    positional-embedding grid, FLUX has no bound), or None when it can or the configs cannot tell."""
    from imgalign.sampling import _sd3_setting, folder_sizes

    found = folder_sizes(folder)
    if found is None:
        return None
    step = found[0][0]
    if side % step:
        return (
            f"model.resolution={side} does not fit model {label!r}: use a multiple of {step} (VAE factor x "
            f"patch size), e.g. {max(step, side // step * step)}; 0 = the model's default"
        )
    if json.loads((folder / "model_index.json").read_text()).get("_class_name", "").startswith("Flux"):
        return None
    grid = _sd3_setting(
        json.loads((folder / "transformer" / "config.json").read_text()), "pos_embed_max_size"
    )
    if grid and side > grid * step:
        return (
            f"model.resolution={side} is larger than model {label!r} can take: at most {grid * step} (its "
            f"positional-embedding grid of {grid} patches of {step} pixels); 0 = the model's default"
        )
    return None


def recorded_base_name(configured: str, resolved: str) -> str:
    """The base model a checkpoint records in its imgalign_model.json: an embedded model by its name (``shapes``),
    which loads wherever imgalign is installed, not by its folder inside this install (a checkpoint copied to
    another machine or virtual environment, or read after imgalign moved, named a folder that was gone); any other
    model by `resolved` (an absolute folder or a Hub id)."""
    from imgalign.hub import EMBEDDED

    return configured if configured in EMBEDDED else resolved


def update_advantages(
    ro: Rollout, scores: torch.Tensor, bal: Any, sl: slice = slice(None)
) -> tuple[torch.Tensor, torch.Tensor]:
    """The advantages and valid mask the update of this process's rollout `ro` trains with: the balancer's result
    `bal` (over all N samples, reward scores [K, N]) on the slice `sl`, or, for strategies with their own credit
    assignment (``ro.extras["credit"]``; tree rollouts: per edge, [M, k]), theirs."""
    if "credit" in ro.extras:
        return ro.extras["credit"](scores, bal)
    return bal.advantages[sl], bal.valid[sl]


def _step_rows(path: Path) -> list[tuple[int, str]]:
    """(step, line) of each complete row of a JSON-lines log (every row names the step it ends, 1-based); a line cut
    short by a crash is skipped. Empty when the file does not exist."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append((int(json.loads(line)["step"]), line))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    return rows


def missing_log_rows(logged: list[int], step: int, exists: bool) -> str | None:
    """Why the rows of metrics.jsonl (`logged`: their steps; `exists`: whether the file is there) do not reach
    `step`, the step of the run's own checkpoint a resume starts from, or None when they do. A run logs each step
    before it saves its checkpoint, so rows missing at the end were cut, replaced or deleted since: the resumed run
    went on without a word and its log had a gap (steps 1 and 3 of 3)."""
    last = max((k for k in logged if k <= step), default=0)
    if last >= step:
        return None
    has = f"its rows end at step {last}" if last else ("it holds no rows" if exists else "it is not there")
    steps = f"step {step}" if last + 1 == step else f"steps {last + 1} to {step}"
    return (
        f"resuming from step {step}, but {has} (cut, replaced or deleted since the checkpoint was written): {steps} "
        "will be missing from the log and from the curves of `imgalign report` (to keep them, stop this run, put "
        "back the run's own metrics.jsonl and resume again)"
    )


class NothingTrained(ValueError):
    """A run that trained nothing because a reward scored none of its samples (the CLI's one-line error, exit 2)."""


class DivergedWeights(ValueError):
    """Trained weights holding NaN/inf (an optimizer update that overflowed): no checkpoint is written of them (the
    CLI's one-line error, exit 2)."""


def unscored_rewards(names: list[str], finite: torch.Tensor, scorable: int) -> list[str]:
    """The rewards of `names` that gave no finite score over a run: `finite` [K] counts each reward's finite scores
    of the `scorable` samples that did not diverge. None when no sample could be scored (a diverged policy is not a
    reward's fault)."""
    if scorable == 0:
        return []
    return [n for n, c in zip(names, finite.tolist()) if c == 0]


def nothing_trained_error(names: list[str], steps: int, samples: int, early: bool = False) -> NothingTrained:
    """The error of a run whose every step had no sample to train on because rewards `names` were never finite;
    `early`: raised after train.unscored_stop_steps steps, before the run's end (and its last checkpoint)."""
    which = f"reward {names[0]!r}" if len(names) == 1 else "rewards " + ", ".join(repr(n) for n in names)
    kept = (
        "the run stopped there (train.unscored_stop_steps) rather than run on without training"
        if early
        else "the checkpoints hold the weights the run started from"
    )
    return NothingTrained(
        f"{which} gave no finite score (each was NaN or inf) to any of the {samples} sample(s) of the {steps} step(s) "
        f"this run trained, so every sample was masked and no weight was updated: {kept}. Fix the reward (the "
        "warnings above name the prompts), then train again with a new --output-dir (or delete this run folder)"
    )


def any_process(acc: Any, flag: bool) -> bool:
    """Whether `flag` is true on any process (a collective: every process must call it at the same point)."""
    t = torch.tensor([float(flag)], device=acc.device)
    return bool(acc.reduce(t, reduction="sum").item() > 0)


def start_another_run_hint(ckpt: Path, out: Path) -> str:
    """How to start a new run in `out` instead of resuming checkpoint `ckpt` (RUN/checkpoints/step-N): "give a new
    --output-dir" was the advice also where the run already had one (``--resume OTHER/checkpoints/step-N
    --output-dir NEW``), where leaving out --resume is what starts it."""
    if ckpt.parent.parent.resolve() == out.resolve():
        return "leave out --resume and give a new --output-dir to start another run"
    return f"leave out --resume to start another run in {out}"


class FlowGRPOTrainer:
    """Builds everything from a :class:`FlowGRPOConfig` and runs :meth:`train`."""

    def __init__(self, cfg: FlowGRPOConfig, output_dir: str | Path | None = None) -> None:
        self.cfg = cfg
        self.out = Path(output_dir or cfg.log.output_dir)
        self._warned_off_policy = False

    # ------------------------------------------------------------------------------------------------ setup
    def setup(self, resume: str | None = None) -> None:
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs, DistributedType

        from imgalign.adapters import load_adapter
        from imgalign.config import check_built

        cfg = self.cfg
        # a config built or changed in Python: its values read as a file's, before anything loads
        check_built(cfg)
        trackers = self._trackers()
        check_accumulation_env(os.environ.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"))
        notice = rendezvous_notice(os.environ)
        if notice:
            log.warning("%s", notice)
        try:
            self.acc = Accelerator(
                mixed_precision=cfg.train.mixed_precision,
                log_with=trackers or None,
                project_dir=str(self.out),
                kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=False)],
            )
        except (RuntimeError, ImportError, ValueError) as e:
            raise accelerator_failure(e, os.environ) from e
        check_launch(os.environ.get("WORLD_SIZE"), self.acc.num_processes)
        launch_warning = check_accelerator(
            cfg.train.mixed_precision,
            self.acc.device.type,
            self.acc.gradient_accumulation_steps,
            self.acc.distributed_type == DistributedType.DEEPSPEED,
            os.environ.get("ACCELERATE_MIXED_PRECISION"),
        )
        if launch_warning and self.acc.is_main_process:
            log.warning("%s", launch_warning)
        alone = single_cpu_launch(os.environ, self.acc.num_processes)
        if alone:
            log.warning("%s", alone)
        self.layout = check_batch_layout(cfg, self.acc.num_processes)
        self.is_main = self.acc.is_main_process
        self.rank, self.world = self.acc.process_index, self.acc.num_processes
        # fail on bad names before any weights load
        self.objective = build_objective(cfg.objective.name, cfg.objective, cfg.sampling)
        self.rollout_fn = ROLLOUTS.get(cfg.sampling.rollout)
        self.balancer = build_balancer(cfg.rewards.balancer)
        # held-out prompts are scored by eval.suite=reward only; with any other suite every prompt trains
        self.sampler = PromptSampler(cfg.prompts, hold_out=cfg.eval.suite == "reward")
        model_path = preflight(cfg, output_dir=self.out)
        unread = ignored_settings(cfg)
        if self.is_main and unread:  # a method switched with --set keeps the old method's settings, unused
            log.warning("these settings are not used by this run's methods: %s", "; ".join(unread))
        if self.is_main and self.sampler.conflict:
            prompt, first, other = self.sampler.conflict
            log.warning(
                "prompts.source %r: prompt %r is at lines %d and %d with other GenEval fields (tag, include, "
                "exclude); the line drawn decides how its images are judged, so the reward judges the prompt two "
                "ways: give it one set of fields, or reword one line",
                cfg.prompts.source,
                prompt,
                first,
                other,
            )
        if self.is_main and cfg.eval.suite == "shapes" and cfg.eval.every >= 0:
            from imgalign.eval.models import is_shapes_family
            from imgalign.pipelines import ModelSpec

            # eval.suite's default: an SD3.5 run evaluated with it logged meaningless eval/shapes/* numbers, silently
            if not is_shapes_family(ModelSpec("model.path", model_path)):
                log.warning(
                    "eval.suite=shapes judges coloured shapes drawn by a shapes-world model with the shapes detector, "
                    "and model.path %r is not a shapes-family model: its eval/shapes/* numbers will not mean much. "
                    "Use eval.suite=reward (the run's rewards on held-out prompts of a prompt file) or eval.every=-1",
                    cfg.model.path,
                )
        self.resume_from = self._resolve_resume(resume)
        self._check_output_dir(resume)
        self._check_resume_fits()
        # anything that draws from torch's global RNG (a reward's fresh head, a plug-in) does so reproducibly; a
        # resumed run restores this RNG from the checkpoint
        torch.manual_seed(_mix(cfg.train.seed, 0, 41, self.rank))
        self.rewards = build_rewards(cfg.rewards.names, device=self.acc.device)
        self._check_prompts()
        self._check_plugin_states()
        self.reward_weights = torch.tensor(
            cfg.rewards.weights or [1.0] * len(self.rewards), dtype=torch.float32
        )
        self.balancing = self._build_balancing()
        # over the steps of train(), this process's: each reward's finite scores of samples that did not diverge,
        # then the number of those samples; and the steps that had no sample to train on (on every process alike)
        self.scored = torch.zeros(len(self.rewards) + 1)
        self.idle_steps = 0

        self.out.mkdir(parents=True, exist_ok=True)
        self._lock_output_dir()
        # again, under the lock: a run that ended since the first check wrote here
        self._check_output_dir(resume)
        self.model_path = model_path
        self.adapter = load_adapter(
            model_path,
            family=None if cfg.model.family == "auto" else cfg.model.family,
            device=self.acc.device,
            dtype=DTYPES[cfg.model.dtype],
            height=cfg.model.resolution or None,
            width=cfg.model.resolution or None,
            # 0: the model's own (the shapes family's trained context; load_adapter reads it)
            max_sequence_length=cfg.model.max_sequence_length or None,
        )
        a = self.adapter
        self._check_prompt_lengths()
        unread = [f"{k}={v}" for k, v in guidance_settings(cfg).items()] if not a.reads_guidance() else []
        if self.is_main and unread:  # FluxPipeline ignores them too, silently
            log.warning(
                "model.path %r has no guidance embedding (a FLUX.1-schnell-like transformer), so %s changes "
                "nothing: it samples and evaluates without guidance",
                cfg.model.path,
                " and ".join(unread),
            )
        if cfg.model.lora_rank > 0:
            a.add_lora(
                cfg.model.lora_rank,
                cfg.model.lora_alpha or 2.0 * cfg.model.lora_rank,
                cfg.model.lora_targets,
                cfg.train.seed,
            )
        else:
            # the frozen copy also serves the evaluation's norm-inflation measurement (eval.vnorm_images), when the
            # run evaluates
            measures = cfg.eval.vnorm_images > 0 and cfg.eval.every >= 0
            a.enable_full_finetune(
                keep_reference=getattr(self.objective, "needs_reference", False) or measures
            )
        if cfg.model.trainable_modules:  # the count is in the "trainable parameters" line below
            a.restrict_trainable(cfg.model.trainable_modules)
        # trainable weights in float32 (frozen ones may be bf16/fp16)
        for _, p in a.trainable_named_parameters():
            p.data = p.data.float()
        if cfg.model.gradient_checkpointing:
            a.enable_gradient_checkpointing()
        self.param_names = [n for n, _ in a.trainable_named_parameters()]
        self.params = [p for _, p in a.trainable_named_parameters()]
        if not self.params:
            raise RuntimeError("nothing to train: the model has no trainable parameters")
        opt = torch.optim.AdamW(
            self.params,
            lr=cfg.train.lr,
            betas=(cfg.train.adam_beta1, cfg.train.adam_beta2),
            eps=cfg.train.adam_eps,
            weight_decay=cfg.train.weight_decay,
        )
        total_updates = cfg.train.max_steps * cfg.train.updates_per_step
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            opt, lr_lambda_factory(cfg.train.warmup_steps, total_updates, cfg.train.lr_schedule)
        )
        if self.is_main:
            for line in horizon_warnings(cfg.train, total_updates):
                log.warning("%s", line)
        self.model, self.optimizer = self.acc.prepare(a.transformer, opt)
        self.ema = EMA(self.params, cfg.train.ema_decay) if cfg.train.ema_decay > 0 else None
        self.start_step = 0
        self.nfe_total = 0
        if self.resume_from is not None:
            self._load(self.resume_from)
        if self.is_main:
            if self.resume_from is not None:
                self._branch_off()
            self._truncate_logs()
            self._write_config()
            if trackers:
                self.acc.init_trackers("imgalign", config=_flat(to_dict(cfg)))
        if "tree_rollout_nfe_per_tree" in self.layout:
            # CFG counts 2, as in the perf/ metrics; only the adapter knows whether this guidance scale uses CFG
            self.layout["tree_rollout_nfe_per_tree"] *= a.nfe_per_step(cfg.sampling.guidance_scale)
        log.info("batch layout: %s", json.dumps(self.layout))
        if cfg.prompts.source != "shapes":
            trained = len({p for p, _ in self.sampler.train})
            log.info(
                "prompts.source %r: %d distinct training prompt%s, %d held out for eval.suite=reward",
                cfg.prompts.source,
                trained,
                "" if trained == 1 else "s",
                len(self.sampler.test),
            )
        log.info(
            "trainable parameters: %d tensors, %.3fM values (%s)",
            len(self.params),
            sum(p.numel() for p in self.params) / 1e6,
            f"LoRA r={cfg.model.lora_rank}" if cfg.model.lora_rank else "full fine-tune",
        )

    def _check_prompt_lengths(self) -> None:
        """Say once, before training, how many of the prompt file's prompts the text encoders truncate, naming the
        first one's line, and quiet the libraries' own notices: transformers' once per tokenizer spoke of
        "indexing errors" and diffusers' came per prompt and encoder, and neither named a file or line."""
        limits = token_limits(self.adapter.pipe, self.adapter.max_sequence_length)
        over = over_limit(list(self.sampler.lines), limits)
        if not over:
            return
        if self.is_main:
            log.warning("%s", long_prompts_warning(self.cfg.prompts.source, self.sampler.lines, over, limits))
        logging.getLogger(type(self.adapter.pipe).__module__).addFilter(QUIET_TRUNCATION)
        length_warning_said(self.adapter.pipe)  # the deduplicated tokenizers too

    def _check_prompts(self) -> None:
        """Before any model loads: every reward can score the prompt file's rows (a GenEval class the judge cannot
        find, a .txt file under the geneval reward), and eval.suite=reward has test prompts to score."""
        rows = [m for _, m in self.sampler.train + self.sampler.test]
        for name, r in self.rewards.items():
            try:
                getattr(r, "check_metadata", lambda _: None)(rows)
            except ValueError as e:
                raise ConfigError(
                    f"prompts.source {self.cfg.prompts.source!r} and reward {name!r}: {e}"
                ) from None
        ev = self.cfg.eval
        if (
            ev.suite == "reward"
            and ev.every >= 0
            and self.cfg.prompts.source != "shapes"
            and not self.sampler.test
        ):
            raise ConfigError(
                f"eval.suite=reward scores held-out test prompts, and prompts.source {self.cfg.prompts.source!r} has "
                "a single distinct prompt (it stays in training): give more prompts, eval.suite=shapes or eval.every=-1"
            )

    # ---- multi-reward balancing (owner: marble) -----------------------------------------------------------------
    def _build_balancing(self) -> Any:
        """MARBLE / gradient-cosine state (:class:`imgalign.trainers.balance.RewardBalancing`), or None."""
        from imgalign.trainers.balance import RewardBalancing

        rc = self.cfg.rewards
        marble = rc.balancer == "marble"
        if not (marble or rc.diagnose_cosines):
            return None
        if not hasattr(self.objective, "head"):
            raise ConfigError(
                f"rewards.balancer=marble / rewards.diagnose_cosines need an objective with a head() (grpo, nft); "
                f"{self.cfg.objective.name!r} has none"
            )
        return RewardBalancing(
            list(self.rewards),
            marble=marble,
            diagnose=rc.diagnose_cosines,
            space=rc.marble.gram,
            ema=rc.marble.ema,
            refresh_every=rc.marble.refresh_every,
            solver=rc.marble.solver,
            quiet=not self.is_main,  # the one-reward warning once per run, not once per process
        )

    def _reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world == 1:
            return t
        return self.acc.reduce(t.to(self.acc.device), reduction="sum").cpu()

    # ---- end multi-reward balancing -------------------------------------------------------------------------------

    def _trackers(self) -> list[str]:
        t = self.cfg.log.trackers
        if t == "none":
            return []
        if t == "auto":
            try:
                import tensorboard  # noqa: F401
            except ImportError:
                return []
            return ["tensorboard"]
        names = [x.strip() for x in t.split(",") if x.strip()]
        import importlib.util

        for name in names:  # accelerate only warns and logs nowhere when a named tracker is not installed
            if name != "all" and importlib.util.find_spec(name) is None:  # each tracker's module is its name
                raise ConfigError(
                    f"log.trackers: {name} is not installed (pip install {name}); or log.trackers=auto (tensorboard "
                    "when installed) or none"
                )
        # accelerate only warns of its log_with=all and logs nowhere when no tracker is installed
        if set(names) == {"all"}:
            from accelerate.tracking import get_available_trackers

            if not get_available_trackers():
                raise ConfigError(
                    "log.trackers: all names every installed tracker, and none is (pip install tensorboard, or wandb, "
                    "...); or log.trackers=none (metrics.jsonl is written either way)"
                )
        return names

    def _lock_output_dir(self) -> None:
        """Take the output folder's lock (the main process; again is a no-op), or refuse a folder another run holds."""
        if self.is_main and not C.lock_output_dir(self.out):
            raise ConfigError(
                f"--output-dir {str(self.out)!r} is being written by another imgalign train (the same job started "
                "twice?): wait for it to end, then continue it with --resume auto, or give another --output-dir"
            )

    def _resolve_resume(self, resume: str | None) -> Path | None:
        if not resume:
            return None
        if resume == "auto":
            # a step-N.old left by a save killed between its renames is the only copy: put back. Under the lock: the
            # leftovers of a run still training are its checkpoint being written (a second start of the same job
            # deleted it, and that run failed in its save with "is the disk full?")
            if self.is_main and self.out.is_dir():
                self._lock_output_dir()
                C.remove_leftovers(self.out)
            self.acc.wait_for_everyone()
            found = C.latest_checkpoint(self.out)
            skipped = C.incomplete_after(self.out, found)
            if self.is_main and skipped:  # (a user's deletion, or a copy of the run still being made)
                log.warning(
                    "--resume auto: %s has no trainer_state/state.json, so it is not a checkpoint to resume from "
                    "(files deleted, or the folder still being copied?); resuming from %s, and this run's save of step "
                    "%d will replace it",
                    skipped[-1],
                    found if found is not None else "the start",
                    C.step_of(skipped[-1]),
                )
            if found is None:
                log.info("--resume auto: no checkpoint under %s, starting fresh", self.out)
            return found
        p = Path(resume)
        if not p.is_dir():
            raise FileNotFoundError(
                f"--resume {resume!r} {'is a file' if p.exists() else 'does not exist'}: give 'auto' (the newest "
                "checkpoint in the output folder), a run folder or a checkpoint folder (RUN/checkpoints/step-N)"
            )
        if (p / "trainer_state" / "state.json").is_file():
            return p
        if p.name == "trainer_state" and (p / "state.json").is_file():  # a folder inside the checkpoint
            return p.parent
        found = C.latest_checkpoint(p.parent if p.name == "checkpoints" else p)
        if found is None:
            raise FileNotFoundError(
                f"--resume {resume!r}: no complete checkpoint there (trainer_state/state.json); give 'auto' (the "
                "newest checkpoint in the output folder), a run folder or a checkpoint folder (RUN/checkpoints/step-N)"
            )
        return found

    def _check_resume_fits(self) -> None:
        """Before rewards or weights load: a checkpoint written by another number of processes, or with another
        ``model.lora_rank`` (its saved config), cannot continue here. Other trainable-set changes
        (``lora_targets``, ``trainable_modules``) are named by :meth:`_load`, which compares the weights."""
        ckpt = self.resume_from
        if ckpt is None:
            return
        state = C.read_state(ckpt, ("step", "num_processes"))
        n = state["num_processes"]
        if n != self.world:
            # on CPUs `accelerate launch --num_processes N` starts one process: name the launch that starts N there
            acc = getattr(self, "acc", None)
            cpu = "ACCELERATE_USE_CPU=true " if acc is not None and acc.device.type == "cpu" else ""
            how = (
                "without accelerate launch (one process)"
                if n == 1
                else f"from `{cpu}accelerate launch {'--multi_gpu ' if cpu else ''}--num_processes {n} -m imgalign "
                "train ...`"
            )
            raise ConfigError(
                f"checkpoint {ckpt} was written by {n} processes; resume with the same number, {how} (this run "
                f"has {self.world})"
            )
        try:
            saved = yaml.safe_load((ckpt / "trainer_state" / "config.yaml").read_text())
            rank = int(saved["model"]["lora_rank"])
        except (OSError, yaml.YAMLError, TypeError, KeyError, ValueError):
            return  # no readable saved config (an older checkpoint): _load compares the weights
        if rank != self.cfg.model.lora_rank:
            raise ConfigError(
                f"checkpoint {ckpt} was trained with model.lora_rank={rank} and this run sets "
                f"{self.cfg.model.lora_rank}: resume with --set model.lora_rank={rank} (the settings it was trained "
                f"with are in its trainer_state/config.yaml), or {start_another_run_hint(ckpt, self.out)}"
            )

    def _check_output_dir(self, resume: str | None) -> None:
        """Refuse (without --resume) a folder that holds another run: the new run's metrics would be appended to its
        metrics.jsonl and its checkpoints overwritten. (:func:`preflight` has refused a file.)"""
        held = [n for n in ("metrics.jsonl", "checkpoints") if (self.out / n).exists()]
        if held and resume not in (None, "auto") and self.resume_from is not None:
            self._check_branch_target(resume)
        if resume:
            return
        if held:
            raise ConfigError(
                f"--output-dir {str(self.out)!r} already holds a training run ({', '.join(held)}); continue it with "
                "--resume auto, or give another --output-dir (or delete that folder)"
            )

    def _check_branch_target(self, resume: str) -> None:
        """A checkpoint of another run folder continues into the output folder: refuse when that folder holds a run
        this would overwrite (its own checkpoints, or log rows up to the checkpoint's step); logs only past that
        step are a retried branch that stopped before its first save, and are cut as a resume cuts them."""
        ckpt = self.resume_from
        assert ckpt is not None
        source = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else None
        own = self.out / "checkpoints"
        if (source is not None and os.path.samefile(source, self.out)) or (
            own.is_dir() and ckpt.resolve().parent == own.resolve()
        ):
            return  # an earlier checkpoint of this very run (by path, or through links): a branch within the folder
        if C.list_checkpoints(self.out):
            raise ConfigError(
                f"--output-dir {str(self.out)!r} holds a run with its own checkpoints, and --resume {resume!r} is a "
                "checkpoint of another run folder: continue the run in that folder with --resume auto, or give a new "
                "--output-dir to start another run from that checkpoint"
            )
        step = C.read_state(ckpt)["step"]
        logged = [k for k, _ in _step_rows(self.out / "metrics.jsonl")]
        if any(k <= step for k in logged):
            raise ConfigError(
                f"--output-dir {str(self.out)!r} holds the logs of another run (metrics.jsonl from step "
                f"{min(logged)}), and --resume {resume!r} is a checkpoint of another run folder at step {step}: give a "
                "new --output-dir to start a run from that checkpoint (or delete that folder)"
            )

    def _branch_off(self) -> None:
        """Resumed from an earlier checkpoint of this folder: its later checkpoints are set aside now, in the same act
        that cuts the logs back (:meth:`_truncate_logs`), so a crash before this run's first save cannot leave
        ``--resume auto`` continuing them with their log rows gone. Their logs travel with the newest of them."""
        moved = C.supersede_after(self.out, self.start_step)
        for name in ("metrics.jsonl", "eval.jsonl"):
            if moved and (self.out / name).is_file():
                shutil.copyfile(self.out / name, moved[-1] / name)

    def _truncate_logs(self) -> None:
        """metrics.jsonl, eval.jsonl and rollouts.jsonl keep only the steps up to the one this run starts from: a
        resumed run writes the later ones again (a fresh start, every one), so a step is never logged twice."""
        keep = self.start_step if self.resume_from is not None else -1
        metrics = self.out / "metrics.jsonl"
        own = (
            self.resume_from is not None
            and self.resume_from.resolve().parent == (self.out / "checkpoints").resolve()
        )
        # (a checkpoint of another run folder starts this folder's log after its step)
        why = missing_log_rows([k for k, _ in _step_rows(metrics)], keep, metrics.is_file()) if own else None
        if why is not None:
            log.warning("%s: %s", metrics, why)
        # every row names the step it ends (1-based), as the checkpoints do
        for name, last in (("metrics.jsonl", keep), ("eval.jsonl", keep), ("rollouts.jsonl", keep)):
            path = self.out / name
            if not path.is_file():
                continue
            lines = [line + "\n" for k, line in _step_rows(path) if k <= last]
            atomic_write_text(path, "".join(lines))

    def _write_config(self) -> None:
        atomic_write_text(self.out / "config.yaml", yaml.safe_dump(to_dict(self.cfg), sort_keys=False))

    # ------------------------------------------------------------------------------------------------ loop
    def train(self) -> dict[str, float]:
        from tqdm.auto import tqdm

        cfg = self.cfg
        last: dict[str, float] = {}
        bar = tqdm(
            total=cfg.train.max_steps,
            initial=self.start_step,
            desc="train",
            disable=not (self.is_main and cfg.log.progress),
            dynamic_ncols=True,
        )
        t_start = time.perf_counter()
        eval_cost = 0.0
        if self.start_step == 0 and cfg.eval.at_start and cfg.eval.every >= 0:
            eval_cost = self.evaluate(0).get("perf/sec_eval", 0.0)  # the base model, for before/after
        ran = 0  # the steps of this call
        stopped: NothingTrained | None = None  # train.unscored_stop_steps' early error
        for step in range(self.start_step, cfg.train.max_steps):
            t0 = time.perf_counter()
            # a reward or plug-in raising mid-run: its traceback alone said nothing of resuming
            try:
                metrics = self.train_step(step)
            except Exception:
                if self.is_main:
                    newest = C.latest_checkpoint(self.out)
                    log.error(
                        "step %d failed (the error follows); the checkpoints written so far are whole (the last: "
                        "%s): fix the cause, then add --resume auto to the same command to continue",
                        step + 1,
                        newest if newest is not None else "none yet, so the run starts again",
                    )
                raise
            ran += 1
            metrics["perf/sec_step"] = time.perf_counter() - t0
            done = step + 1
            final = done == cfg.train.max_steps or self._out_of_time(
                t_start, metrics["perf/sec_step"], eval_cost
            )
            if cfg.eval.every >= 0 and (final or (cfg.eval.every > 0 and done % cfg.eval.every == 0)):
                try:
                    metrics.update(self.evaluate(done))
                except Exception:  # the trained weights are not lost to a failing evaluation
                    log.error(
                        "the evaluation after step %d failed; saving checkpoint %d before stopping",
                        done,
                        done,
                    )
                    self._log(step, metrics)
                    self.save(done)  # on every process: evaluate() raised on all of them
                    raise
                eval_cost = metrics.get("perf/sec_eval", eval_cost)
            metrics["perf/sec_total"] = time.perf_counter() - t_start
            self._log(step, metrics)
            if (cfg.log.checkpoint_every and done % cfg.log.checkpoint_every == 0) or final:
                self.save(done)
            last = metrics
            bar.update(1)
            bar.set_postfix(
                {
                    k[len("reward/") : -len("/mean")]: f"{v:.3f}"  # a name may hold a /
                    for k, v in metrics.items()
                    if k.startswith("reward/") and k.endswith("/mean")
                }
            )
            if final:
                if done < cfg.train.max_steps:
                    log.info(
                        "stopping after step %d of %d: train.time_budget_min=%s reached (resume to continue)",
                        done,
                        cfg.train.max_steps,
                        cfg.train.time_budget_min,
                    )
                break
            # a broken reward: every later step would be masked whole too, and a long run spent its hours on them
            if ran == cfg.train.unscored_stop_steps and (stopped := self._nothing_trained(ran, early=True)):
                break
        bar.close()
        self.acc.wait_for_everyone()
        self.acc.end_training()
        if stopped is not None:
            raise stopped
        self._check_trained(ran)
        return last

    def _check_trained(self, steps: int) -> None:
        """After the loop: a run of `steps` steps none of which had a sample to train on, because a reward scored no
        sample finite, is an error naming the reward (it ended in success, exit status 0, having trained nothing)."""
        error = self._nothing_trained(steps)
        if error is not None:
            raise error

    def _nothing_trained(self, steps: int, early: bool = False) -> NothingTrained | None:
        """The error for a run of `steps` steps none of which trained because a reward of weight > 0 scored no sample
        finite, or None. Every process counts the same idle steps, so all of them reach the sum over processes, or
        none."""
        if steps == 0 or self.idle_steps < steps:
            return None
        totals = self._reduce_sum(self.scored)
        weighed = self.reward_weights > 0  # [K]; a reward of weight 0 is only logged and masks no sample
        names = [n for n, w in zip(self.rewards, weighed.tolist()) if w]
        names = unscored_rewards(names, totals[:-1][weighed], int(totals[-1]))
        return nothing_trained_error(names, steps, int(totals[-1]), early) if names else None

    def _out_of_time(self, t_start: float, step_sec: float, eval_sec: float) -> bool:
        """True when another step (plus the final evaluation and save) would overrun ``train.time_budget_min``;
        decided on the main process and shared, so every process stops at the same step."""
        budget = self.cfg.train.time_budget_min * 60.0
        if budget <= 0:
            return False
        elapsed = time.perf_counter() - t_start
        # reserve: one more step, the final evaluation (measured, or guessed as 3 steps) and a save
        stop = elapsed + step_sec + (eval_sec or 3.0 * step_sec) + 0.5 * step_sec > budget
        return any_process(self.acc, stop and self.is_main)

    def _local_slice(self) -> slice:
        n = self.layout["samples_per_process"]
        return slice(self.rank * n, (self.rank + 1) * n)

    def train_step(self, step: int) -> dict[str, float]:
        cfg, a = self.cfg, self.adapter
        m: dict[str, float] = {}
        G = cfg.sampling.group_size
        # ---- prompts: the global list of the step, this process's share of its samples
        batch = self.sampler.for_step(step, cfg.sampling.prompts_per_step)
        all_prompts = [p for p in batch.prompts for _ in range(G)]
        all_meta = [md for md in batch.metadata for _ in range(G)]
        sl = self._local_slice()
        sample_ids = torch.arange(cfg.sampling.samples_per_step)[sl]
        group_ids = sample_ids // G
        # ---- rollout
        t = time.perf_counter()
        self.model.eval()
        ctx = RolloutContext(a, self.model, cfg.sampling, cfg.train.seed, step, cfg.objective.logprob_reduce)
        with torch.no_grad(), self.acc.autocast():
            ro: Rollout = check_rollout(
                cfg.sampling.rollout,
                self.rollout_fn(ctx, all_prompts[sl], all_meta[sl], sample_ids, group_ids),
                len(all_prompts[sl]),
            )
        m["perf/sec_rollout"] = time.perf_counter() - t
        # ---- rewards, gathered over processes (group members live on different ranks)
        t = time.perf_counter()
        diverged = self._mask_diverged(ro, step)  # [b] bool; those samples' tensors are zeroed
        shown = ro.images
        # NaN images are never shown to a reward (a set-based one would take a black image in)
        if diverged.any():
            shown = ro.images.clone()
            shown[diverged] = float("nan")
        logged_only = [n for n, w in zip(self.rewards, self.reward_weights.tolist()) if w == 0]
        scores = score_all(self.rewards, shown, ro.prompts, ro.metadata, diverged, logged_only)  # [K, b]
        scores[:, diverged] = float("nan")  # masked like a non-finite reward
        self.scored += torch.cat([torch.isfinite(scores).sum(1), (~diverged).sum().reshape(1)]).float()
        scores_all = self.acc.gather(scores.to(self.acc.device).T.contiguous()).T.cpu()  # [K, N]
        self._update_stateful_rewards(ro, all_prompts, all_meta, m, diverged)
        m["perf/sec_reward"] = time.perf_counter() - t
        finite = torch.isfinite(scores_all)
        gid_all = torch.arange(cfg.sampling.samples_per_step) // G
        # a reward of weight 0 is only logged: its NaN scores mask no sample
        bal_scores, bal_finite = balancer_inputs(scores_all, finite, self.reward_weights)  # [K, N] each
        o = cfg.objective
        bal = balance(
            cfg.rewards.balancer,
            self.balancer,
            bal_scores,
            self.reward_weights,
            gid_all,
            bal_finite,
            o.std_mode,
            o.adv_clip,
        )
        adv_local, valid_local = update_advantages(ro, bal_scores, bal, sl)
        per_reward_local = None
        if self.balancing is not None:  # MARBLE / cosine diagnostics: each reward's own advantage [b, K]
            per_reward_local = self._per_reward_advantages(ro, bal_scores, gid_all, bal_finite)[:, sl].T
        m.update(ro.extras.get("metrics", {}))  # strategy metrics (tree: NFE report, edge credit statistics)
        m.update(reward_stats(scores_all, finite, list(self.rewards), self.reward_weights))
        m.update(reward_means_by_tag(scores_all, finite, list(self.rewards), all_meta))
        m["train/zero_std_ratio"] = bal.zero_std_ratio
        m["train/valid_ratio"] = float(bal.valid.float().mean())
        m["train/adv_abs_mean"] = float(bal.advantages[bal.valid].abs().mean()) if bal.valid.any() else 0.0
        m.update(bal.metrics)
        nfe = torch.tensor([float(ro.nfe)], device=self.acc.device)
        m["perf/nfe"] = float(self.acc.reduce(nfe, reduction="sum").item())
        self.nfe_total += int(m["perf/nfe"])
        m["perf/nfe_total"] = float(self.nfe_total)
        if self.is_main and cfg.log.save_rollouts:
            self._save_rollouts(step, batch, scores_all, bal)
        if self.is_main and cfg.log.sample_every and step % cfg.log.sample_every == 0:
            # named by the metrics row of this step (step + 1), as eval grids and checkpoints are
            self._save_grid(ro.images, ro.prompts, self.out / "samples" / f"step-{step + 1:06d}.png")
        # ---- update
        m["train/lr"] = float(self.scheduler.get_last_lr()[0])  # the rate of this step's (first) update
        t = time.perf_counter()
        m.update(self._update(step, ro, adv_local, valid_local, per_reward_local))
        m["perf/sec_train"] = time.perf_counter() - t
        self.idle_steps += m["train/empty_updates"] == cfg.train.updates_per_step
        return m

    def _mask_diverged(self, ro: Rollout, step: int) -> torch.Tensor:
        """[b] bool: samples whose images, trajectory or log-densities are not finite (a diverged policy). They are
        warned about and zeroed in place, so that rewards see valid images and a masked row's loss term is an exact
        0 (NaN·0 is NaN) if the update pads with it; the caller masks their scores."""
        bad = ~torch.isfinite(ro.images.flatten(1)).all(1)
        if ro.latents.shape[0] == len(bad):
            bad |= ~torch.isfinite(ro.latents.flatten(1)).all(1) | ~torch.isfinite(
                ro.log_probs.flatten(1)
            ).all(1)
        if bad.any():
            # before any update the weights are the model's own: "lower train.lr" blamed a learning rate that had
            # not acted yet, where sampling.noise_level or guidance_scale (1e30) made the base model's rollout blow up
            optimizer = getattr(self, "optimizer", None)
            if optimizer is None or optimizer.state:
                advice = "A policy that diverges: lower train.lr"
            else:
                s = self.cfg.sampling
                advice = (
                    "No update has been applied yet, so the model's own rollout diverges with these settings: lower "
                    f"sampling.noise_level ({s.noise_level:g}) or sampling.guidance_scale ({s.guidance_scale:g}), "
                    f"or check model.path ({self.cfg.model.path})"
                )
            log.warning(
                "step %d: %d sample(s) of the rollout are not finite (NaN/inf latents or images) for prompt(s) %s; "
                "they are masked like a NaN reward. %s",
                step + 1,  # the metrics.jsonl row of this step, as every message names it
                int(bad.sum()),
                sorted({ro.prompts[i] for i in bad.nonzero().flatten().tolist()})[:3],
                advice,
            )
            ro.images[bad] = 0.0
            if ro.latents.shape[0] == len(bad):
                ro.latents[bad] = 0.0
                ro.log_probs[bad] = 0.0
        return bad

    def _per_reward_advantages(
        self, ro: Rollout, scores: torch.Tensor, gid: torch.Tensor, finite: torch.Tensor
    ) -> torch.Tensor:
        """[K, N] group-normalised advantage of each reward (the same definition for every balancer)."""
        from imgalign.trainers.rewarding import per_reward_advantages

        if "credit" in ro.extras:
            raise ConfigError(
                "rewards.balancer=marble and rewards.diagnose_cosines do not support rollouts with their own credit "
                f"assignment ({self.cfg.sampling.rollout!r}); use sampling.rollout: flat"
            )
        o = self.cfg.objective
        return per_reward_advantages(scores, gid, finite, o.std_mode, o.adv_clip)[0]

    def _update_rows(self, perm: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """The rows the update trains on, in `perm`'s order. When the objective masks invalid samples (every
        loss term weighted by `valid`), the tied groups and non-finite rewards are left out: they would cost
        forwards and backwards for a zero gradient (a third of the rows at a typical zero_std_ratio). Every
        process keeps the same number of rows (the most valid rows of any process, padded with its own invalid
        ones, which contribute nothing), so all run the same micro-batches and synchronise alike; at least
        ``updates_per_step`` rows, so the number of optimizer updates never changes."""
        if not getattr(self.objective, "masks_invalid", False) or valid.dim() != 1:
            return perm
        keep = valid[perm].bool()
        target = torch.tensor([int(keep.sum())], device=self.acc.device)
        if self.world > 1:
            target = self.acc.reduce(target, reduction="max")
        n_rows = min(len(perm), max(int(target.item()), self.cfg.train.updates_per_step))
        return torch.cat([perm[keep], perm[~keep]])[:n_rows]

    def _update(
        self,
        step: int,
        ro: Rollout,
        adv: torch.Tensor,
        valid: torch.Tensor,
        per_reward: torch.Tensor | None = None,
    ) -> dict[str, float]:
        cfg = self.cfg
        self.model.train()
        n = ro.num_rows  # the samples, or a tree rollout's parent rows
        perm = torch.randperm(
            n, generator=torch.Generator().manual_seed(_mix(cfg.train.seed, step, 31, self.rank))
        )
        # exactly updates_per_step chunks (Tensor.chunk returns fewer when the rows do not divide evenly)
        chunks = torch.tensor_split(self._update_rows(perm, valid), cfg.train.updates_per_step)
        terms = self.objective.terms(ro)
        ctx = TrainContext(self.adapter, self.model, step, cfg.train.seed)
        # metrics of the update: means weighted by each micro-batch's valid samples (a micro-batch of padding rows
        # reports nothing), ..._max / ..._min keys as the max / min over micro-batches and processes
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, float] = defaultdict(float)
        extremes: dict[str, float] = {}
        grad_norms = []
        # every transformer evaluation of the update (trained forwards and no-grad ones: the reference, NFT's old
        # policy, MARBLE's probes), as the adapter counts them
        nfe_start = self.adapter.nfe_count
        bb = self.balancing if per_reward is not None else None  # MARBLE / cosine diagnostics
        skipped = 0  # updates skipped for a non-finite gradient
        empty = 0  # updates without a valid sample
        for chunk in chunks:
            micro = [(mb, term) for mb in chunk.split(cfg.train.micro_batch_size) for term in terms]
            # every loss is a mean over its micro-batch's valid samples (edges); weighting it by its share of the
            # update's valid samples on all processes (times the world size: DDP averages gradients) makes the update
            # the mean over every valid sample, whatever the micro-batch sizes and however the valid ones fall
            n_valid = self._reduce_sum(valid[chunk].float().sum().reshape(1)).item()
            scales = [
                self.world * float(valid[mb].float().sum()) / max(n_valid, 1.0) / len(terms)
                for mb, _ in micro
            ]
            if n_valid == 0:  # every process sees this: no sample of the update carries signal (all groups
                # tied, or only padding rows). AdamW would still move every weight (momentum, weight decay), and the
                # schedule and EMA would advance on no data, so the update is skipped as a whole.
                empty += 1
                continue
            if bb is not None:
                bb.start_update()
                # MARBLE solves alpha* on the first micro-batch; with rewards.marble.all_terms on all its terms
                # (trained steps / noise draws): those after the first add their per-reward gradients now (one extra
                # forward each, no backward)
                for j in range(1, len(terms) if bb.solving and cfg.rewards.marble.all_terms else 1):
                    mb, term = micro[j]
                    with self.acc.no_sync(self.model), self.acc.autocast():
                        head = self.objective.head(ctx, ro, mb, term, valid)
                        bb.probe(head, per_reward[mb], self.params, scales[j])
                    del head
            for k, (mb, term) in enumerate(micro):
                sync = k == len(micro) - 1
                ctx_mgr = contextlib.nullcontext() if sync else self.acc.no_sync(self.model)
                with ctx_mgr, self.acc.autocast():
                    if bb is not None:  # one forward; per-reward probes; the balanced loss; ONE backward
                        head = self.objective.head(ctx, ro, mb, term, valid)
                        loss, mm = bb.micro_loss(
                            head, per_reward[mb], adv[mb], self.params, self._reduce_sum, scales[k]
                        )
                    else:
                        loss, mm = check_loss(
                            cfg.objective.name, self.objective.loss(ctx, ro, mb, term, adv, valid)
                        )
                    self.acc.backward(loss * scales[k])
                w = float(valid[mb].float().sum())
                for key, val in mm.items():
                    if key.endswith(("_max", "_min")):
                        sign = 1.0 if key.endswith("_max") else -1.0  # a min is minus the max of minus
                        prev = extremes.get(key, -math.inf)
                        extremes[key] = max(prev, sign * val) if w > 0 else prev
                    else:
                        sums[key] += val * w if w > 0 else 0.0
                        counts[key] += w
            max_norm = cfg.train.grad_clip if cfg.train.grad_clip > 0 else float("inf")
            norm = self.acc.clip_grad_norm_(self.params, max_norm)
            # DeepSpeed clips and steps inside its own engine, and accelerate may then report no norm (None): the
            # update counts as taken and train/grad_norm leaves it out
            gn = float(norm) if norm is not None else float("nan")
            if norm is None or math.isfinite(gn):
                if norm is not None:
                    grad_norms.append(gn)
                self.optimizer.step()
                self.scheduler.step()
                if self.ema is not None:
                    self.ema.update()
                if hasattr(self.objective, "after_update"):  # e.g. NFT's EMA old policy
                    self.objective.after_update(self.params)
            else:  # never NaN weights: the norm is of the synchronised gradient, so every process skips alike
                skipped += 1
                # objective.kl_beta=1e30 overflowed the loss once the KL was > 0, every update after the first
                # skipped, and the warning named train.lr and the rewards only
                o = self.cfg.objective
                weights = [
                    f"objective.{k}={v:g}"
                    for k, v in (
                        ("kl_beta", o.kl_beta),
                        ("anchor_beta", o.anchor_beta),
                        ("penalty_weight", o.penalty_weight),
                        ("nft.ref_weight", o.nft.ref_weight),
                    )
                    if v > 0
                ]
                log.warning(
                    "step %d: the gradient is not finite (norm %s); this optimizer update is skipped. A rollout "
                    "with non-finite latents, a reward that breaks the loss, or a plug-in objective or penalty "
                    "with a non-finite loss would cause it; if it repeats, lower train.lr or check the rewards%s",
                    step + 1,
                    gn,
                    f", or lower the loss weights ({', '.join(weights)})" if weights else "",
                )
            self.optimizer.zero_grad(set_to_none=True)
            if bb is not None:
                bb.end_update(self._reduce_sum)
        keys, ext = sorted(sums), sorted(extremes)
        if self.world > 1 and (keys or ext):  # every process has the same keys (the same micro-batches)
            totals = self.acc.reduce(
                torch.tensor([sums[k] for k in keys] + [counts[k] for k in keys], device=self.acc.device),
                reduction="sum",
            ).tolist()
            sums, counts = dict(zip(keys, totals[: len(keys)])), dict(zip(keys, totals[len(keys) :]))
            if ext:
                top = self.acc.reduce(
                    torch.tensor([extremes[k] for k in ext], device=self.acc.device), reduction="max"
                )
                extremes = dict(zip(ext, top.tolist()))
        out = {k: sums[k] / counts[k] if counts[k] > 0 else float("nan") for k in keys}
        for k in ext:
            v = extremes[k] if k.endswith("_max") else -extremes[k]
            out[k] = v if math.isfinite(v) else float("nan")
        if bb is not None:
            out.update(bb.step_metrics())
        out["train/grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else float("nan")
        out["train/skipped_updates"] = float(skipped)
        out["train/empty_updates"] = float(empty)
        out["perf/nfe_train"] = float((self.adapter.nfe_count - nfe_start) * self.world)
        return out

    def _update_stateful_rewards(
        self, ro: Rollout, prompts: list[str], meta: list[dict], m: dict, diverged: torch.Tensor
    ) -> None:
        """Update stateful rewards (fid's generated set, the online discriminator) on the step's global batch,
        without the diverged samples (their images were zeroed: black images are not the policy's samples)."""
        stateful = {k: r for k, r in self.rewards.items() if getattr(r, "stateful", False)}
        if not stateful:
            return
        images = self.acc.gather(
            ro.images.to(self.acc.device)
        ).cpu()  # every process updates on the global batch
        keep = self.acc.gather(diverged.to(self.acc.device).long()).cpu() == 0  # [N]
        if not keep.all():
            images = images[keep]
            prompts = [p for p, k in zip(prompts, keep.tolist()) if k]
            meta = [md for md, k in zip(meta, keep.tolist()) if k]
        if not len(images):
            return
        for name, r in stateful.items():
            for key, val in (r.update(images, prompts, meta) or {}).items():
                m[f"reward/{name}/{key}"] = float(val)

    # ------------------------------------------------------------------------------------------------ eval
    def evaluate(self, step: int) -> dict[str, float]:
        """The eval suite on the main process (the others wait); its metrics there, {} elsewhere."""
        out: dict[str, float] = {}
        failure: Exception | None = None
        if self.is_main:
            try:
                out = self._evaluate_main(step)
            except Exception as e:
                failure = e
        # every process meets here, also when the evaluation failed, and learns whether it did: all of them then save
        # a checkpoint and stop together (a main process stopping alone left the others waiting in the next step's
        # gather), and the save's barriers pair across processes
        failed = any_process(self.acc, failure is not None)
        if failure is not None:
            raise failure
        if failed:
            raise RuntimeError(
                f"the evaluation after step {step} failed on the main process; its log says why"
            )
        return out

    def _evaluate_main(self, step: int) -> dict[str, float]:
        from imgalign.trainers.evaluation import eval_prompt_dependence, reward_suite, shapes_suite

        cfg = self.cfg
        t = time.perf_counter()
        gs = cfg.eval.guidance_scale if cfg.eval.guidance_scale >= 0 else cfg.sampling.guidance_scale
        model = self.acc.unwrap_model(self.model)
        model.eval()
        swap = (
            self.ema.swapped_in() if (self.ema is not None and cfg.eval.use_ema) else contextlib.nullcontext()
        )
        with torch.no_grad(), swap:
            if cfg.eval.suite == "shapes":
                out, images = shapes_suite(self.adapter, model, cfg.eval, gs)
            else:
                out, images = reward_suite(self.adapter, model, cfg.eval, gs, self.rewards, self.sampler.test)
            if cfg.eval.vnorm_images > 0:  # ‖v_θ‖/‖v_ref‖ per step bucket along the policy's ODE paths
                from imgalign.trainers.vnorm import eval_inflation

                out.update(eval_inflation(self.adapter, model, cfg.eval, gs, self.sampler.test))
            out.update(eval_prompt_dependence(self.adapter, model, cfg.eval, gs, self.sampler.test))
        if images.numel():
            self._save_grid(images[:16], None, self.out / "samples" / f"eval-step-{step:06d}.png")
        out["perf/sec_eval"] = time.perf_counter() - t
        log.info("eval at step %d: %s", step, {k: round(v, 4) for k, v in out.items()})
        self._warn_prompt_independence(step, out)
        with open(self.out / "eval.jsonl", "a") as f:  # every evaluation, step 0 (the base model) included
            f.write(json.dumps({"step": step, **out}) + "\n")
        return out

    def _warn_prompt_independence(self, step: int, out: dict[str, float]) -> None:
        """Warn when eval/prompt_dependence/ratio fell below half the base model's (the step-0 evaluation in
        eval.jsonl, written when eval.at_start is on): the policy is drawing the same picture whatever the prompt."""
        key = "eval/prompt_dependence/ratio"
        if step == 0 or key not in out:
            return
        base = None
        with contextlib.suppress(OSError, ValueError):
            for line in (self.out / "eval.jsonl").read_text().splitlines():
                row = json.loads(line)
                if row.get("step") == 0 and key in row:
                    base = float(row[key])
                    break
        if base is not None and out[key] < 0.5 * base:
            log.warning(
                "step %d: %s = %.3f, below half the base model's %.3f: a changed prompt now moves the image much "
                "less than a changed seed. The policy may be hacking the reward with a prompt-independent picture; "
                "look at %s before trusting the reward curve",
                step,
                key,
                out[key],
                base,
                self.out / "samples",
            )

    # ------------------------------------------------------------------------------------------------ logging
    def _log(self, step: int, metrics: dict[str, float]) -> None:
        if not self.is_main:
            return
        row = {"step": step + 1, **{k: float(v) for k, v in sorted(metrics.items())}}
        if "policy/approx_kl" in row and not self._warned_off_policy:
            msg = off_policy_warning(row["policy/approx_kl"], self.cfg.train.lr, self.cfg.train.warmup_steps)
            if msg:
                log.warning("step %d: %s", step + 1, msg)
                self._warned_off_policy = True  # once per run: the metric is in metrics.jsonl every step
        with open(self.out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        if self.acc.trackers:
            self.acc.log(metrics, step=step + 1)

    def _save_rollouts(self, step: int, batch: Any, scores: torch.Tensor, bal: Any) -> None:
        G = self.cfg.sampling.group_size
        with open(self.out / "rollouts.jsonl", "a") as f:
            for i in range(scores.shape[1]):
                f.write(
                    json.dumps(
                        {
                            "step": step + 1,  # the metrics.jsonl row of this step
                            "sample": i,
                            "prompt": batch.prompts[i // G],
                            "rewards": {n: float(scores[k, i]) for k, n in enumerate(self.rewards)},
                            "advantage": float(bal.advantages[i]),
                            "valid": bool(bal.valid[i]),
                        }
                    )
                    + "\n"
                )

    @staticmethod
    def _save_grid(images: torch.Tensor, prompts: list[str] | None, path: Path) -> None:
        from PIL import Image

        from imgalign.rewards.base import to_pil

        ims = to_pil(images[:16])
        if not ims:
            return
        cols = min(8, len(ims))
        rows = -(-len(ims) // cols)
        w, h = ims[0].size
        grid = Image.new("RGB", (cols * w, rows * h))
        for i, im in enumerate(ims):
            grid.paste(im, ((i % cols) * w, (i // cols) * h))
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path) as tmp:
            grid.save(tmp, format="PNG")
        if prompts is not None:
            C_txt = path.with_suffix(".txt")
            C_txt.write_text("\n".join(prompts[: len(ims)]) + "\n")

    # ------------------------------------------------------------------------------------------------ checkpoints
    @staticmethod
    def _checked_state(what: str, owner: Any, state: Any) -> Any:
        """`owner`'s `state`; a plug-in's (a class outside imgalign) is checked to go into a checkpoint and come back
        (:func:`imgalign.trainers.checkpoint.check_plain_state`). Built-in states fit by construction, and NFT's
        holds a copy of the trained weights: a round trip of it at every save would be a second copy in memory."""
        if not type(owner).__module__.startswith("imgalign."):
            C.check_plain_state(what, state)
        return state

    def _reward_states(self) -> dict[str, Any]:
        """Each stateful reward's state_dict() (a plug-in's checked: :meth:`_checked_state`)."""
        return {
            k: self._checked_state(f"reward {k!r}", r, r.state_dict())
            for k, r in self.rewards.items()
            if getattr(r, "stateful", False)
        }

    def _check_plugin_states(self) -> None:
        """Before any model loads: a plug-in objective's and stateful reward's state must fit a checkpoint (found at
        the first save, a lambda or a numpy array lost the steps before it, or the checkpoint failed to resume)."""
        if hasattr(self.objective, "state_dict"):
            self._checked_state(
                f"objective {self.cfg.objective.name!r}", self.objective, self.objective.state_dict()
            )
        self._reward_states()

    def save(self, step: int) -> Path:
        """Write checkpoint `step` atomically (every process writes its RNG state; the main process the rest)."""
        cfg = self.cfg
        self._check_finite_weights(step)  # on every process
        root = self.out / "checkpoints"
        final = root / C.checkpoint_name(step)
        tmp = root / f".tmp-{C.checkpoint_name(step)}"
        if self.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
            (tmp / "trainer_state").mkdir(parents=True)
        self.acc.wait_for_everyone()
        js, tens = C.rng_state()
        C.write_text(tmp / "trainer_state" / f"rng_{self.rank}.json", json.dumps(js))
        C.save_tensors(tmp / "trainer_state" / f"rng_{self.rank}.safetensors", tens)
        self.acc.wait_for_everyone()  # every process's RNG file is written before the folder is published
        if self.is_main:
            try:
                self._write_checkpoint(tmp, step)
            except BaseException:
                # a save cut short (a full disk): the half-written folder, a checkpoint's size, held the very space
                # the error asks the user to free, under a hidden name; a rerun writes it afresh anyway
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            C.finalize(tmp, final)
            C.prune(self.out, cfg.log.keep_last, newest=final)
            log.info("saved checkpoint %s", final)
        self.acc.wait_for_everyone()
        return final

    def _check_finite_weights(self, step: int) -> None:
        """Raise :class:`DivergedWeights` when a trainable weight (or its EMA) is NaN/inf after `step`: a learning
        rate or weight decay so large that an AdamW update overflowed float32 wrote a checkpoint of inf weights (and
        the run said 'done'), with only the rollouts' divergence warnings before it."""
        shadows = self.ema.shadow if self.ema is not None else []
        bad = [n for n, p in zip(self.param_names, self.params) if not torch.isfinite(p).all()]
        bad += [f"{n} (EMA)" for n, s in zip(self.param_names, shadows) if not torch.isfinite(s).all()]
        # a collective: with parameters sharded (FSDP) one process's shard may hold them alone, and a process that
        # raised alone left the others waiting in the save
        if not any_process(self.acc, bool(bad)):
            return
        t = self.cfg.train
        newest = C.latest_checkpoint(self.out)
        raise DivergedWeights(
            f"after step {step} trainable weight tensor(s) hold NaN/inf values "
            f"({f'{len(bad)} here, e.g. {bad[0]}' if bad else 'on another process'}): an "
            f"optimizer update overflowed float32 (train.lr={t.lr:g}, train.weight_decay={t.weight_decay:g}), so "
            f"checkpoint {C.checkpoint_name(step)} is not written (the last whole one: "
            f"{newest if newest is not None else 'none'}); lower train.lr (and train.weight_decay: lr x weight_decay "
            "well below 1) and train again"
        )

    def _write_checkpoint(self, tmp: Path, step: int) -> None:
        """The main process's part of :meth:`save`: every file of checkpoint `step` but the RNG states, into `tmp`."""
        cfg = self.cfg
        st = tmp / "trainer_state"
        C.save_tensors(st / "trainable.safetensors", dict(zip(self.param_names, self.params)))
        if self.ema is not None:
            C.save_tensors(st / "ema.safetensors", dict(zip(self.param_names, self.ema.shadow)))
        optimizer_state = self.optimizer.state_dict()
        C.torch_save(optimizer_state, st / "optimizer.pt")
        C.torch_save(self.scheduler.state_dict(), st / "scheduler.pt")
        if hasattr(self.objective, "state_dict"):
            state = self.objective.state_dict()
            C.torch_save(
                self._checked_state(f"objective {cfg.objective.name!r}", self.objective, state),
                st / "objective.pt",
            )
        if self.balancing is not None:
            C.torch_save(self.balancing.state_dict(), st / "balance.pt")
        C.torch_save(self._reward_states(), st / "rewards.pt")
        swap = self.ema.swapped_in() if self.ema is not None else contextlib.nullcontext()
        try:
            with swap:
                self.adapter.save(tmp, base_model=recorded_base_name(cfg.model.path, self.model_path))
        # a full disk in save_pretrained: one line, no traceback
        except (RuntimeError, SafetensorError) as e:
            raise C.unwritable(tmp, e) from e
        state = {
            "step": step,
            "prompt_position": self.sampler.position(step, cfg.sampling.prompts_per_step),
            "prompts_sha256": self.sampler.digest,
            "nfe_total": self.nfe_total,
            "num_processes": self.world,
            "config_hash": config_hash(cfg),
            "exported_weights": "ema" if self.ema is not None else "raw",
            # what optimizer.pt and scheduler.pt hold, so that one copied from another checkpoint is told apart
            "optimizer_updates": C.optimizer_updates(optimizer_state),
            "scheduler_steps": self.scheduler.last_epoch,
        }
        # the config these weights were trained with: a resume reports its changes against this one
        C.write_text(st / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False))
        tmp_state = st / "state.json.tmp"
        C.write_text(tmp_state, json.dumps(state, indent=2) + "\n")
        os.replace(tmp_state, st / "state.json")

    def _load(self, ckpt: Path) -> None:
        st = ckpt / "trainer_state"
        state = C.read_state(ckpt, ("step", "config_hash"))
        # (the config the checkpoint was trained with, where it is kept), copied once the weights fit
        lineage: tuple[Path, Path] | None = None
        if state["config_hash"] != config_hash(self.cfg):
            # the config the checkpoint was trained with (checkpoints before it was saved there: the run's, when
            # the checkpoint is still in its run's checkpoints/ folder; a moved one has none to compare with)
            old_path = st / "config.yaml"
            if not old_path.is_file() and ckpt.parent.name == "checkpoints":
                old_path = ckpt.parent.parent / "config.yaml"
            changed = (
                "see its config.yaml" if old_path.is_file() else "it holds no config.yaml to compare with"
            )
            keys = None
            if old_path.is_file():
                try:
                    old = _flat(yaml.safe_load(old_path.read_text()) or {})
                    new = _flat(to_dict(self.cfg))
                    ignored = ignored_on_resume(self.cfg)
                    # a setting added to imgalign after the checkpoint was written, at its default, is no change
                    defaults = _flat(to_dict(type(self.cfg)()))
                    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
                    keys = [k for k in keys if not k.startswith("log.") and k not in ignored]
                    keys = [k for k in keys if k in old or new.get(k) != defaults.get(k)]
                    changed = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys) or changed
                except (yaml.YAMLError, AttributeError):
                    keys = None
                keep = self.out / f"config.until-step-{int(state['step']):06d}.yaml"
                if self.is_main and not keep.exists():
                    # never overwritten: a later resume from the same step keeps it; kept in a new --output-dir
                    # too (a resume from another run's checkpoint wrote none, so the new run lost its lineage);
                    # copied once the checkpoint's weights fit (a refused resume left it in a new --output-dir)
                    lineage = (old_path, keep)
            if keys == []:  # the hash differs but no setting does (a checkpoint hashed by an older imgalign)
                log.debug("resuming %s: config hash differs, no setting changed", ckpt)
            else:
                log.warning("resuming %s with a changed config (%s)", ckpt, changed)
        weights = C.load_tensors(st / "trainable.safetensors")
        # the exported model (the folder's weights for from_pretrained or load_lora_weights) is not read here: a cut
        # copy of it resumed without a word, and the checkpoint kept looking whole to its user
        exported = [f for f in C.damaged_files(ckpt) if st not in f.parents] if self.is_main else []
        if exported:
            log.warning(
                "checkpoint %s: its exported model is damaged (%s); the resume reads trainer_state/ and goes on, "
                "but that folder no longer loads outside imgalign: use the next checkpoint this run writes",
                ckpt,
                exported[0],
            )
        # another trainable set (model.lora_rank, lora_targets or trainable_modules changed) failed inside torch's
        # optimizer.load_state_dict with a message that named no setting, or dropped the other weights' training
        missing = [n for n in self.param_names if n not in weights]
        extra = sorted(set(weights) - set(self.param_names))
        if missing or extra:
            which = f"lacks {missing[0]!r}" if missing else f"also trained {extra[0]!r}"
            # an older checkpoint holds no config of its own: its run's
            saved = (
                "its trainer_state/config.yaml" if (st / "config.yaml").is_file() else "its run's config.yaml"
            )
            raise ConfigError(
                f"checkpoint {ckpt} was trained with other trainable weights ({len(weights)} tensors there, "
                f"{len(self.params)} now; it {which}): resume with the settings it was trained with "
                f"(model.path, model.lora_rank, model.lora_targets, model.trainable_modules; see {saved}), or "
                "give a new --output-dir to start another run"
            )
        wrong = [
            f"{n} {tuple(weights[n].shape)} vs {tuple(p.shape)}"
            for n, p in zip(self.param_names, self.params)
            if weights[n].shape != p.shape
        ]
        if wrong:
            raise ConfigError(
                f"checkpoint {ckpt} holds trainable weights of other shapes ({wrong[0]}): resume with the settings "
                "it was trained with (model.lora_rank, model.path), or start a new run"
            )
        if lineage is not None:
            shutil.copy2(*lineage)
        with torch.no_grad():
            for n, p in zip(self.param_names, self.params):
                p.copy_(weights[n])
        if self.ema is not None:
            if state.get("exported_weights") == "raw" and not (st / "ema.safetensors").exists():
                # trained with train.ema_decay 0: not a damaged checkpoint (it said so, and to train again)
                log.warning("checkpoint %s was trained without an EMA: the EMA starts from its weights", ckpt)
                self.ema.shadow = [p.detach().float().clone() for p in self.params]
            else:
                ema = C.load_tensors(st / "ema.safetensors")
                with C.loading(st / "ema.safetensors", "EMA weights of this run's trainable set"):
                    self.ema.shadow = [ema[n].float().clone() for n in self.param_names]
        settings = [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
        # (a file of the checkpoint copied over another by hand: named, not a bare KeyError)
        with C.loading(st / "optimizer.pt", "optimizer state"):
            self.optimizer.load_state_dict(C.torch_load(st / "optimizer.pt"))
        with C.loading(st / "scheduler.pt", "learning-rate scheduler state"):
            self.scheduler.load_state_dict(C.torch_load(st / "scheduler.pt"))
        updates = C.optimizer_updates(self.optimizer.state_dict())
        C.check_update_count(st / "optimizer.pt", "optimizer state", updates, state.get("optimizer_updates"))
        C.check_update_count(
            st / "scheduler.pt",
            "learning-rate scheduler state",
            self.scheduler.last_epoch,
            state.get("scheduler_steps"),
        )
        # the loaded state dicts hold the checkpoint's train.lr and AdamW settings: the config's apply (a
        # resume warned of a changed train.lr and went on at the old one)
        apply_optimizer_settings(self.optimizer, self.scheduler, settings)
        if hasattr(self.objective, "load_state_dict") and (st / "objective.pt").is_file():
            self.objective.load_state_dict(C.torch_load(st / "objective.pt"))
        # MARBLE weights and cosine counters; a state of other rewards starts fresh
        if self.balancing is not None:
            saved = st / "balance.pt"
            why = (
                self.balancing.load_state_dict(C.torch_load(saved))
                if saved.is_file()
                else "it has none (trained without rewards.balancer=marble and rewards.diagnose_cosines)"
            )
            if why is not None:
                log.warning(
                    "checkpoint %s: its reward-balancing state does not fit this run: %s; MARBLE's weights and the "
                    "cosine counters (balance/*) start fresh",
                    ckpt,
                    why,
                )
        rstate = C.torch_load(st / "rewards.pt")
        for k, s in rstate.items():
            if k not in self.rewards:
                log.warning(
                    "checkpoint %s holds the state of reward %r, which this run does not use; ignored",
                    ckpt,
                    k,
                )
                continue
            # e.g. the discriminator now frozen (head=FILE)
            if not getattr(self.rewards[k], "stateful", False):
                log.warning(
                    "checkpoint %s holds a learned state of reward %r, which is not stateful in this run (its "
                    "options changed, e.g. a discriminator given head=FILE); the saved state is not used",
                    ckpt,
                    k,
                )
                continue
            self.rewards[k].load_state_dict(s)
        fresh = [k for k, r in self.rewards.items() if getattr(r, "stateful", False) and k not in rstate]
        if fresh:
            log.warning("stateful reward(s) %s are not in checkpoint %s: they start fresh", fresh, ckpt)
        C.restore_rng_state(st / f"rng_{self.rank}.json", st / f"rng_{self.rank}.safetensors")
        self.start_step = int(state["step"])
        self.nfe_total = int(state.get("nfe_total", 0))
        self.sampler.resume_at(
            self.start_step,
            int(state.get("prompt_position", self.start_step * self.cfg.sampling.prompts_per_step)),
        )
        if (
            state.get("prompts_sha256")
            and self.sampler.digest
            and state["prompts_sha256"] != self.sampler.digest
        ):
            log.warning(
                "prompts.source %r changed since checkpoint %s was written: its train/test split and prompt sequence "
                "are not the ones the run trained on (restore the file to continue that run exactly)",
                self.cfg.prompts.source,
                ckpt,
            )
        if self.start_step >= self.cfg.train.max_steps:
            log.warning(
                "checkpoint %s is at step %d and train.max_steps is %d: nothing to train; give a larger --max-steps "
                "to continue the run",
                ckpt,
                self.start_step,
                self.cfg.train.max_steps,
            )
        log.info("resumed from %s at step %d", ckpt, self.start_step)


def _flat(d: dict[str, Any]) -> dict[str, Any]:
    """A config dict's leaves by dotted key, each a number, string or bool (a list as its text): what trackers take
    as hyper-parameters, and what a resume compares."""
    return {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in leaves(d).items()}


def run(
    cfg: FlowGRPOConfig, output_dir: str | Path | None = None, resume: str | None = None
) -> dict[str, float]:
    """Build a trainer and train; returns the last step's metrics.

    accelerate keeps one process-wide state, fixed by the first ``Accelerator``: a one-process run that created it
    clears it when it ends, so a second run in the same process (``imgalign.cli.main`` twice, a notebook) may use
    another ``train.mixed_precision``. A state that existed before (the caller's) is left as it is."""
    from accelerate.state import AcceleratorState

    ours = not AcceleratorState._shared_state
    tr = FlowGRPOTrainer(cfg, output_dir)
    # the other processes' INFO lines repeat the main process's (batch layout, saved checkpoints): warnings only
    own = logging.getLogger("imgalign")
    level = own.level
    if launched_rank() > 0:
        own.setLevel(logging.WARNING)
    try:
        tr.setup(resume)
        return tr.train()
    finally:
        own.setLevel(level)
        C.unlock_output_dir(tr.out)
        # the long-prompt notices quieted for this run only: a later eval or grid in this process says its own
        pipe = getattr(getattr(tr, "adapter", None), "pipe", None)
        if pipe is not None:
            logging.getLogger(type(pipe).__module__).removeFilter(QUIET_TRUNCATION)
        if ours and launched_processes() == 1:
            AcceleratorState._reset_state(reset_partial_state=True)
