"""Typed training config (``imgalign train``): every field has help text; ``validate()`` checks run before any model
loads, so a bad combination fails in a second with a message that says what to change.

Batch sizes (all *global*, i.e. over every process, so a config means the same thing on 1 or N processes):

- ``sampling.samples_per_step`` images per step = ``samples_per_step / group_size`` prompts × ``group_size``
  images each (the group size must divide it);
- samples per step must divide evenly over processes; each process rolls out its share in forward batches of
  ``sampling.batch_size``;
- ``train.updates_per_step`` optimizer steps per rollout batch, each over an equal share of the samples and every
  trained denoising step, in micro-batches of ``train.micro_batch_size`` samples (gradient accumulation).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from imgalign.config import ConfigError, check_seed, field
from imgalign.trainers.nft import NFTConfig
from imgalign.trainers.tree import TreeConfig, tree_spec_for_step

FLOAT32_MAX = 3.4028234663852886e38
"""The largest float32 (rewards and their weights are float32 in the trainer)."""


@dataclass
class ModelConfig:
    path: str = field("shapes", help="embedded model name (shapes) or a diffusers pipeline folder / Hub id")
    family: str = field("auto", help="adapter family: auto (from model_index.json), sd3 or flux")
    dtype: Literal["float32", "bfloat16", "float16"] = field(
        "float32", help="dtype the frozen weights are held in (trainable weights stay float32)"
    )
    resolution: int = field(0, help="image side in pixels; 0 = the model's default")
    max_sequence_length: int = field(
        0, help="text tokens (T5); 0 = the shapes architecture's trained 1, else the pipeline's default"
    )
    lora_rank: int = field(0, help="LoRA rank on the transformer; 0 = full fine-tuning of the transformer")
    lora_alpha: float = field(0.0, help="LoRA alpha; 0 = 2 x rank")
    lora_targets: list[str] = field(
        default_factory=lambda: ["to_k", "to_q", "to_v", "to_out.0"], help="module names LoRA attaches to"
    )
    gradient_checkpointing: bool = field(False, help="recompute activations in backward (large models)")
    trainable_modules: list[str] = field(
        default_factory=list,
        help="regular expressions (re.search) over the transformer's parameter names: only matching weights train "
        "(full fine-tune), or only matching LoRA weights; empty = all. E.g. the SD3 text stream: "
        '["context_embedder", "norm1_context", "add_[qkv]_proj", "to_add_out", "ff_context", "text_embedder"]',
    )

    def validate(self) -> None:
        if self.family not in ("auto", "sd3", "flux"):
            raise ConfigError(f"model.family: unknown model family {self.family!r}; valid: auto, sd3, flux")
        for pat in self.trainable_modules:
            try:
                re.compile(pat)
            except re.error as e:
                raise ConfigError(
                    f"model.trainable_modules: {pat!r} is not a valid regular expression ({e}); give patterns "
                    "that re.search matches against parameter names, e.g. 'context_embedder'"
                ) from None
        if self.lora_rank < 0:
            raise ConfigError("model.lora_rank must be >= 0 (0 = full fine-tuning)")
        for name in ("resolution", "max_sequence_length"):  # a negative size failed after the model loaded
            if getattr(self, name) < 0:
                raise ConfigError(
                    f"model.{name} must be >= 0 (0 = the model's default), got {getattr(self, name)}"
                )
        # more trained silently, on a length no pipeline samples the checkpoint with (`grid` refuses it too)
        if self.max_sequence_length > 512:
            raise ConfigError(
                f"model.max_sequence_length={self.max_sequence_length}: the SD3 and FLUX pipelines take at most 512 "
                "T5 tokens (and refuse more when sampling); set 512 or less (0 = the model's default)"
            )
        # a negative alpha scales the LoRA update by a negative factor; inf times the zero-initialised B made
        # every LoRA layer's output NaN from the first rollout
        if not 0 <= self.lora_alpha < math.inf:
            raise ConfigError(
                f"model.lora_alpha must be >= 0 and finite (got {self.lora_alpha}); give a positive scale, or 0 for "
                "2 x rank"
            )
        # the adapter would fall back to its defaults while config.yaml says []
        if self.lora_rank > 0 and not self.lora_targets:
            raise ConfigError(
                "model.lora_targets is empty: name the Linear layers LoRA attaches to, e.g. "
                "[to_k, to_q, to_v, to_out.0] (the default)"
            )
        if not self.path:
            raise ConfigError(
                "model.path is empty: give an embedded name such as 'shapes' or a pipeline folder"
            )


@dataclass
class PromptConfig:
    source: str = field(
        "shapes",
        help="'shapes' (the shapes-world generator), a .txt (a prompt per line; no comment lines) / .jsonl "
        "(prompt + metadata, GenEval metadata included) file, or generate:SEED (553 GenEval-style prompts drawn "
        "from the task definitions; a draw other than the official evaluation file)",
        also=("path", "file", "prompt_file", "prompts_file", "prompt_path"),
    )
    tasks: list[str] = field(
        default_factory=lambda: [
            "single_object",
            "two_object",
            "counting",
            "colors",
            "position",
            "color_attr",
        ],
        help="shapes generator only: GenEval tasks to draw training prompts from",
    )
    test_fraction: float = field(
        0.1,
        help="prompt files and generate:SEED: share of distinct prompts held out for eval.suite=reward (seeded "
        "split; with other suites every prompt trains); the shapes generator holds out colour pairs instead",
    )
    seed: int = field(0, help="seed of the split and of the per-step prompt sequence")

    def validate(self) -> None:
        check_seed("prompts.seed", self.seed)
        if not self.source.strip():  # Path("") is the working folder: it said "'' is a folder"
            raise ConfigError(
                "prompts.source is empty: give 'shapes', a .txt/.jsonl prompt file or generate:SEED"
            )
        if (
            self.source.strip().lower() == "shapes"
            and self.source != "shapes"
            and not Path(self.source).exists()
        ):
            raise ConfigError(
                f"prompts.source {self.source!r} is no file; the shapes-world generator is spelt 'shapes'"
            )
        if self.source.startswith("generate:"):  # --print-config showed generate:abc, which the run refused
            from imgalign.eval.real import generate_seed

            try:
                generate_seed(self.source)
            except ValueError as e:
                raise ConfigError(f"prompts.source: {e}") from None
        if not 0.0 <= self.test_fraction < 1.0:
            raise ConfigError("prompts.test_fraction must be in [0, 1)")
        if self.source == "shapes" and not self.tasks:
            raise ConfigError("prompts.tasks is empty: name at least one GenEval task to draw prompts from")
        if self.source == "shapes":  # was checked only when the sampler was built (--print-config passed it)
            from imgalign.shapes import TASKS

            bad = [t for t in self.tasks if t not in TASKS]
            if bad:
                raise ConfigError(f"prompts.tasks: unknown task(s) {bad}; valid tasks: {', '.join(TASKS)}")


@dataclass
class SamplingConfig:
    num_steps: int = field(10, help="denoising steps per rollout (train with few, evaluate with more)")
    guidance_scale: float = field(
        1.0,
        help="policy CFG scale, used identically in rollouts and in the training forward (so the ratio is 1 "
        "on-policy); <= 1 disables CFG and halves the NFEs; FLUX: the guidance-embedding value",
    )
    kernel: Literal["sde", "cps"] = field(
        "sde", help="stochastic step: Flow-GRPO SDE or coefficients-preserving"
    )
    noise_level: float = field(
        0.7, help="SDE noise level a (0.7 SD3, 0.9 FLUX; the cps kernel takes (0, 1]); 0 would be the ODE"
    )
    noise_block: int = field(
        1,
        help="sde kernel: SDE noise constant over noise_block x noise_block latent patches (a low-frequency "
        "subspace with noise_block^2 times fewer dimensions; the ODE's marginals are kept), meant to lower the "
        "policy gradient's variance for layout-level rewards (on the shapes model it did not measurably help: "
        "examples/shapes/README.md); 1 = ordinary noise",
    )
    sde_window: int = field(
        0,
        help="train a random window of this many consecutive SDE steps (ODE elsewhere); 0 = all but the last",
    )
    sde_window_max_start: int = field(
        -1,
        help="with sde_window: the window starts uniformly in [0, this]; -1 = the first half; 0 = always the first "
        "steps (high noise, where the composition is decided); unused when sde_window is 0",
    )
    group_size: int = field(8, help="images per prompt (G); advantages are computed within each group")
    shared_init_noise: bool = field(
        False,
        help="flat rollouts: every image of a prompt's group starts from the same initial noise and only the SDE "
        "noise differs (DanceGRPO), so reward differences within a group come from the trained transitions",
    )
    antithetic: bool = field(
        False,
        help="flat rollouts: the images of a group come in mirrored pairs, the second drawing every noise (initial "
        "and SDE) of the first with its sign flipped (antithetic variates); needs an even group_size",
    )
    samples_per_step: int = field(
        32,
        help="images per step over all processes (= prompts per step x group_size; a multiple of group_size)",
    )
    batch_size: int = field(8, help="samples per forward pass during rollouts (per process)")
    rollout: str = field(
        "flat",
        help="rollout strategy: flat (G independent trajectories per prompt), tree (one shared noise per prompt, "
        "SDE branches at sampling.tree.branch_steps; TreeGRPO/BranchGRPO) or package.module:attr",
    )
    tree: TreeConfig = field(
        default_factory=TreeConfig,
        help="tree rollouts (sampling.rollout: tree): branch steps and factors (leaves = group_size), per-edge "
        "credit and the B2-DiffuRL backward-progressive schedule",
    )

    def validate(self) -> None:
        if self.num_steps < 2:
            raise ConfigError("sampling.num_steps must be at least 2 (the last step is never trained)")
        if self.group_size < 2:
            raise ConfigError(
                "sampling.group_size must be at least 2: advantages compare images of one prompt"
            )
        for name in ("samples_per_step", "batch_size"):  # (one message for both named neither the bad one)
            if getattr(self, name) < 1:
                raise ConfigError(f"sampling.{name} must be >= 1 (got {getattr(self, name)})")
        if self.samples_per_step % self.group_size:
            raise ConfigError(
                f"sampling.group_size={self.group_size} does not divide sampling.samples_per_step="
                f"{self.samples_per_step}: every prompt needs a full group; make samples_per_step a multiple of "
                "group_size"
            )

        if not 0 < self.noise_level < math.inf:
            raise ConfigError(
                f"sampling.noise_level must be > 0 and finite (got {self.noise_level}): the policy needs a density "
                "to train"
            )
        if self.kernel == "cps" and self.noise_level > 1:
            raise ConfigError(
                f"sampling.noise_level={self.noise_level} with sampling.kernel=cps: the CPS std is sigma' x "
                "sin(noise_level x pi/2), which shrinks again above 1 and vanishes at 2 (nothing trains); set "
                "sampling.noise_level in (0, 1]"
            )
        if not math.isfinite(self.guidance_scale):
            raise ConfigError(
                f"sampling.guidance_scale must be finite (got {self.guidance_scale}); <= 1 disables CFG"
            )
        if self.noise_block < 1:
            raise ConfigError(f"sampling.noise_block must be >= 1, got {self.noise_block}")
        if self.noise_block > 1 and (self.kernel != "sde" or self.rollout != "flat"):
            raise ConfigError(
                "sampling.noise_block > 1 is implemented for the sde kernel with flat rollouts; got "
                f"kernel={self.kernel!r}, rollout={self.rollout!r}: set sampling.noise_block=1"
            )
        if self.sde_window < 0 or self.sde_window > self.num_steps - 1:
            raise ConfigError(f"sampling.sde_window must be in [0, num_steps - 1 = {self.num_steps - 1}]")
        if self.sde_window_max_start < -1:
            raise ConfigError(
                "sampling.sde_window_max_start must be -1 (the first half) or a step index >= 0"
            )
        last_start = self.num_steps - 1 - self.sde_window
        if 0 < self.sde_window < self.num_steps - 1 and self.sde_window_max_start > last_start:
            raise ConfigError(
                f"sampling.sde_window_max_start={self.sde_window_max_start}: a window of {self.sde_window} trained "
                f"steps among num_steps={self.num_steps} starts at step {last_start} at the latest; give 0..{last_start}"
                " (or -1 for the first half)"
            )
        if self.shared_init_noise and self.rollout != "flat":
            raise ConfigError(
                "sampling.shared_init_noise applies to flat rollouts; tree rollouts already start each prompt's "
                "tree from one noise: remove sampling.shared_init_noise or set sampling.rollout=flat"
            )
        if self.antithetic and (self.rollout != "flat" or self.group_size % 2):
            raise ConfigError(
                "sampling.antithetic pairs the images of a group: it needs sampling.rollout=flat and an even "
                f"sampling.group_size (got rollout={self.rollout!r}, group_size={self.group_size})"
            )
        if self.rollout == "tree":  # ---- tree rollouts (issue 6)
            self._validate_tree()

    def _validate_tree(self) -> None:
        t = self.tree
        if self.sde_window:
            raise ConfigError(
                "sampling.sde_window must be 0 with sampling.rollout=tree: the SDE (trained) steps of a tree are "
                "its branch steps, sampling.tree.branch_steps"
            )
        try:
            spec = t.spec(self.num_steps)
        except ValueError as e:
            raise ConfigError(
                f"sampling.tree.branch_steps {t.branch_steps}: every branch step must lie in the trainable SDE "
                f"range [0, num_steps - 2 = {self.num_steps - 2}] and be strictly increasing ({e})"
            ) from None
        if spec.num_leaves != self.group_size:
            raise ConfigError(
                f"sampling.tree: {spec.num_leaves} leaves per tree (the product of branch_factors "
                f"{list(spec.branch_factors)}) but sampling.group_size={self.group_size}: every prompt's group is "
                "one tree, so make the product of the branching factors equal group_size"
            )

    @property
    def prompts_per_step(self) -> int:
        return self.samples_per_step // self.group_size


# ---- multi-reward balancing (owner: marble) ------------------------------------------------------------------------
@dataclass
class MarbleConfig:
    """MARBLE settings (``rewards.balancer: marble``; :mod:`imgalign.trainers.balance`)."""

    gram: Literal["output", "params"] = field(
        "output",
        help="where per-reward gradients are compared: output = w.r.t. the network output v_theta (through the loss "
        "head only, ~free; the MGDA-UB bound), params = w.r.t. the trainable weights (K extra backward passes); "
        "also the space of rewards.diagnose_cosines",
    )
    ema: float = field(
        0.9, help="EMA on alpha: alpha <- ema*alpha + (1-ema)*alpha* (0 = each update's alpha*)"
    )
    refresh_every: int = field(
        1,
        help="solve alpha* every N optimizer updates, keeping the EMA'd alpha between; alpha* is solved on the "
        "update's first micro-batch (train.micro_batch_size = the samples per update lets it see them all)",
    )
    all_terms: bool = field(
        False,
        help="solve alpha* on every loss term of that micro-batch (GRPO: every trained SDE step; NFT: every noise "
        "draw) at one extra forward per term after the first on each refresh (bench/bench_marble.py: 1.45x a "
        "single-reward update on examples/shapes/marble.yaml, against 1.01x); false: its first term only",
    )
    solver: Literal["auto", "projected_gradient"] = field(
        "auto",
        help="min-norm solver for K >= 3: auto (exact face enumeration for K <= 8) or projected_gradient",
    )

    def validate(self) -> None:
        if not 0.0 <= self.ema < 1.0:
            raise ConfigError(f"rewards.marble.ema must be in [0, 1) (got {self.ema})")
        if self.refresh_every < 1:
            raise ConfigError(f"rewards.marble.refresh_every must be >= 1 (got {self.refresh_every})")


@dataclass
class RewardConfig:
    names: list[str] = field(
        default_factory=lambda: ["geneval:mode=partial"],
        reward_specs=True,
        help="reward specs from the reward registry ('name:key=value,...') or paths to your own "
        "('package.module:attr[:key=value,...]', or 'module:attr' for a single-file module on the import path, "
        "e.g. PYTHONPATH=.); each reward once. "
        "Metrics are reward/<its name>/..., or reward/<its spec>/... when rewards share a name (geneval:mode_strict: "
        "characters other than letters, digits, . - : and space become _)",
    )
    weights: list[float] = field(
        default_factory=list,
        help="one weight per reward, in the order of rewards.names (>= 0, at least one > 0); empty = all 1; not "
        "with rewards.balancer=marble. A reward of weight 0 is only logged: its NaN scores mask no sample",
    )
    balancer: str = field(
        "group_norm_weighted",
        help="how rewards combine into advantages: group_norm_weighted (each reward normalised within its group, "
        "then the weighted sum), weighted_sum (raw scores), gdpo (per-reward group norm, weighted sum, batch norm), "
        "marble (min-norm balancing of the per-reward gradients, rewards.marble); or package.module:attr",
    )
    diagnose_cosines: bool = field(
        False,
        help="log each reward's gradient cosine with the update and the share of updates whose worst cosine is "
        "negative (balance/*), for any balancer; costs K+1 gradient probes per micro-batch (rewards.marble.gram)",
    )
    marble: MarbleConfig = field(
        default_factory=MarbleConfig, help="MARBLE settings (rewards.balancer: marble)"
    )

    def validate(self) -> None:
        if not self.names:
            raise ConfigError("rewards.names is empty: name at least one reward (e.g. geneval:mode=partial)")
        if self.weights and len(self.weights) != len(self.names):
            raise ConfigError(
                f"rewards.weights has {len(self.weights)} entries for {len(self.names)} rewards; give one per reward"
            )
        if not all(0 <= w < math.inf for w in self.weights):
            raise ConfigError(f"rewards.weights must be non-negative and finite (got {self.weights})")
        if any(w > FLOAT32_MAX for w in self.weights):  # it was inf there: every step "no valid sample"
            raise ConfigError(
                f"rewards.weights ({self.weights}): the trainer weighs rewards in float32, where a weight over "
                f"{FLOAT32_MAX:.4g} is infinite and nothing would train; scale them down (the built-in balancers "
                "read only their ratios)"
            )
        if self.weights and not any(w > 0 for w in self.weights):
            raise ConfigError(
                f"rewards.weights are all 0 ({self.weights}): every advantage would be 0 and nothing would train; "
                "give at least one weight > 0"
            )
        if self.weights and self.balancer == "marble":
            raise ConfigError(
                f"rewards.weights ({self.weights}) have no effect with rewards.balancer=marble, which weighs the "
                "rewards by their gradients itself: remove rewards.weights, or use another rewards.balancer "
                "(group_norm_weighted, weighted_sum, gdpo)"
            )


# ---- end multi-reward balancing ------------------------------------------------------------------------------------


@dataclass
class ObjectiveConfig:
    name: str = field("grpo", help="training objective: grpo, nft (DiffusionNFT) or package.module:attr")
    clip_range: float = field(
        0.2,
        help="PPO clip ε on the ratio. Log-densities are summed over latent dims (true density), so the usual "
        "0.1-0.3 applies; with logprob_reduce=mean use about log(1+ε)/D (the reference code's 1e-4)",
    )
    logprob_reduce: Literal["sum", "mean"] = field(
        "sum", help="sum (the true Gaussian log-density) or mean over latent dims (the reference code)"
    )
    adv_clip: float = field(5.0, help="advantages are clipped to ±adv_clip (0 = no clip)")
    std_mode: Literal["group", "batch"] = field(
        "group", help="advantage denominator: the group's std or the whole batch's (the reference global_std)"
    )
    step_weight: Literal["uniform", "velocity"] = field(
        "uniform",
        help="weight of each trained step's surrogate: uniform (Flow-GRPO), or velocity: ∝ std/|∂μ/∂v| so every "
        "step's gradient has the same scale on the velocity (the low-noise steps otherwise dominate it)",
    )
    kl_beta: float = field(
        0.0,
        help="grpo: weight β of the closed-form KL to the frozen base model on the trained SDE steps (0 = off; "
        "nft has objective.nft.ref_weight)",
    )
    anchor_beta: float = field(
        0.0,
        help="grpo with an SDE window: weight of the closed-form KL to the frozen base model at one untrained (ODE) "
        "step per sample and update (cycled over them), taken as if that step were an SDE step of the same kernel "
        "and noise level. The policy gradient says nothing about those steps, so any change there is collateral "
        "drift of shared weights; 0 = off",
    )
    penalty: str = field("", help="velocity penalty fn(v_theta, v_ref) -> [B] by name or package.module:attr")
    penalty_weight: float = field(0.0, help="weight λ of the velocity penalty")
    vnorm_log: bool = field(
        False,
        help="log the norm inflation ‖v_θ‖/‖v_ref‖ per step bucket (vnorm/norm_ratio/early|middle|late|all) even "
        "without KL or penalty: one extra no-grad reference forward per micro-batch (always logged when the "
        "reference is evaluated anyway)",
    )
    terms_per_sample: int = field(
        2, help="x0-based objectives (nft): fresh-noise draws per stored sample per update"
    )
    nft: NFTConfig = field(default_factory=NFTConfig, help="DiffusionNFT settings (objective.name: nft)")

    def validate(self) -> None:
        if not 0 < self.clip_range < math.inf:
            raise ConfigError(f"objective.clip_range must be > 0 and finite (got {self.clip_range})")
        if not 0 <= self.adv_clip < math.inf:
            raise ConfigError(
                f"objective.adv_clip must be >= 0 and finite (0 = no clip; got {self.adv_clip})"
            )
        for name in ("kl_beta", "anchor_beta", "penalty_weight"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ConfigError(f"objective.{name} must be >= 0 and finite (got {getattr(self, name)})")
        if self.penalty_weight > 0 and not self.penalty:
            raise ConfigError("objective.penalty_weight > 0 needs objective.penalty (its name)")
        if self.terms_per_sample < 1:
            raise ConfigError(
                f"objective.terms_per_sample must be >= 1 (got {self.terms_per_sample}): with no fresh-noise draw "
                "per sample an x0-based objective (nft) trains nothing; set it to 1 or more (the fresh (t, eps) "
                "draws per stored sample and update)"
            )


@dataclass
class TrainConfig:
    max_steps: int = field(100, help="training steps (one rollout batch each)")
    lr: float = field(1e-4, help="AdamW learning rate")
    weight_decay: float = field(1e-4, help="AdamW weight decay")
    adam_beta1: float = field(0.9, help="AdamW beta1")
    adam_beta2: float = field(0.999, help="AdamW beta2")
    adam_eps: float = field(1e-8, help="AdamW epsilon")
    warmup_steps: int = field(0, help="linear LR warm-up, in optimizer steps")
    lr_schedule: Literal["constant", "cosine"] = field("constant", help="LR schedule after warm-up")
    grad_clip: float = field(1.0, help="max gradient norm (0 = no clipping)")
    updates_per_step: int = field(
        1, help="optimizer steps per rollout batch (each on its share of the samples)"
    )
    micro_batch_size: int = field(8, help="samples per training forward (per process); the rest accumulates")
    ema_decay: float = field(0.0, help="EMA of trainable weights for evaluation and export (0 = off)")
    mixed_precision: Literal["no", "bf16", "fp16"] = field("no", help="accelerate mixed precision")
    seed: int = field(
        0,
        help="seed of the rollout noise, LoRA init and torch's global RNG (the prompt sequence has its own: "
        "prompts.seed); a resumed run continues the sequence",
    )
    time_budget_min: float = field(
        0.0,
        help="stop early (with the final eval and checkpoint) when the next step would pass this many minutes "
        "of training wall time; 0 = no limit; `--resume auto` continues toward max_steps",
    )
    unscored_stop_steps: int = field(
        5,
        help="stop with an error after this many steps of a run (or of a resumed run) none of which trained, when a "
        "reward of weight > 0 has given no finite score to any of their samples (a broken reward); 0 = run on and "
        "raise the error at the end",
    )

    def validate(self) -> None:
        check_seed("train.seed", self.seed)
        if self.max_steps < 1:
            raise ConfigError(f"train.max_steps must be >= 1 (got {self.max_steps})")
        if not 0 < self.lr < math.inf:
            raise ConfigError(f"train.lr must be > 0 and finite (got {self.lr})")
        if self.adam_beta1 < 1 and self.lr / (1 - self.adam_beta1) > FLOAT32_MAX:  # beta1 is checked below
            # AdamW's first step is lr / (1 - beta1) per weight: past float32's range torch raised "value cannot
            # be converted to type float without overflow" at the first update, a traceback after the model loaded
            raise ConfigError(
                f"train.lr={self.lr:g}: AdamW's first update moves a float32 weight by up to lr / (1 - "
                f"train.adam_beta1) = {self.lr / (1 - self.adam_beta1):.3g}, beyond float32's largest value "
                f"{FLOAT32_MAX:.4g}; give train.lr below {FLOAT32_MAX * (1 - self.adam_beta1):.3g} (usual: 1e-5 to 1e-3)"
            )
        if not 0 <= self.weight_decay < math.inf:
            raise ConfigError(f"train.weight_decay must be >= 0 and finite (got {self.weight_decay})")
        for name in ("adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                value = getattr(self, name)
                raise ConfigError(f"train.{name} must be in [0, 1) (got {value}); AdamW defaults: 0.9, 0.999")
        if not 0 < self.adam_eps < math.inf:
            raise ConfigError(f"train.adam_eps must be > 0 and finite (got {self.adam_eps})")
        if not 0 <= self.grad_clip < math.inf:
            raise ConfigError(
                f"train.grad_clip must be >= 0 and finite (0 = no clipping; got {self.grad_clip})"
            )
        for name in ("updates_per_step", "micro_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"train.{name} must be >= 1 (got {getattr(self, name)})")
        if self.warmup_steps < 0:  # a negative warm-up meant none, silently
            raise ConfigError(f"train.warmup_steps must be >= 0 (0 = no warm-up), got {self.warmup_steps}")
        if self.time_budget_min < 0:  # a negative budget meant no limit, silently
            raise ConfigError(
                f"train.time_budget_min must be >= 0 (0 = no limit), got {self.time_budget_min}"
            )
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(f"train.ema_decay must be in [0, 1) (0 = off; got {self.ema_decay})")
        if self.unscored_stop_steps < 0:
            raise ConfigError(
                f"train.unscored_stop_steps must be >= 0 (0 = check only at the end), got {self.unscored_stop_steps}"
            )


@dataclass
class EvalConfig:
    every: int = field(0, help="evaluate every N steps and at the end (0 = only at the end; -1 = never)")
    suite: str = field(
        "shapes", help="eval suite: shapes (GenEval on the shapes world) or reward (test prompts)"
    )
    prompts_per_task: int = field(10, help="shapes suite: prompts per task taken from the eval set")
    images_per_prompt: int = field(2, help="images per evaluation prompt")
    num_steps: int = field(20, help="ODE steps for evaluation samples")
    guidance_scale: float = field(
        -1.0, help="evaluation CFG scale; -1 = the policy's sampling.guidance_scale"
    )
    seed: int = field(1234, help="seed of the evaluation noise (fixed, so evaluations are comparable)")
    use_ema: bool = field(True, help="evaluate the EMA weights when train.ema_decay > 0")
    at_start: bool = field(False, help="also evaluate the untrained model before step 1 (a fresh run only)")
    vnorm_images: int = field(
        8,
        help="evaluation images whose ODE trajectories measure the norm inflation ‖v_θ‖/‖v_ref‖ against the frozen "
        "base per step bucket (eval/vnorm/norm_ratio/early|middle|late|all); 0 = off. Full fine-tuning keeps a "
        "frozen copy of the transformer for it",
    )
    prompt_dependence_prompts: int = field(
        6,
        help="prompts x prompt_dependence_seeds extra evaluation images measuring how much a changed prompt moves "
        "the image against a changed seed (eval/prompt_dependence/ratio; near 0: the prompt is ignored, the mark of "
        "reward hacking by a prompt-independent texture); 0 = off",
    )
    prompt_dependence_seeds: int = field(
        4, help="seeds per prompt of the prompt-dependence measurement (>= 2)"
    )

    def validate(self) -> None:
        check_seed("eval.seed", self.seed)
        if self.suite not in ("shapes", "reward"):
            raise ConfigError(f"eval.suite: unknown suite {self.suite!r}; valid: shapes, reward")
        if self.every < -1:  # any negative value meant never, silently
            raise ConfigError(f"eval.every must be -1 (never), 0 (at the end) or N >= 1, got {self.every}")
        # -3 meant the policy's scale silently (as -1); inf sampled the final evaluation with infinite CFG
        if self.guidance_scale != -1 and not 0 <= self.guidance_scale < math.inf:
            raise ConfigError(
                f"eval.guidance_scale must be -1 (the policy's sampling.guidance_scale) or a finite scale >= 0, got "
                f"{self.guidance_scale}"
            )
        for name in ("prompts_per_task", "images_per_prompt", "num_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"eval.{name} must be >= 1 (eval.every=-1 turns the evaluation off)")
        if self.vnorm_images < 0:
            raise ConfigError("eval.vnorm_images must be >= 0 (0 = no inflation measurement)")
        if self.prompt_dependence_prompts < 0 or self.prompt_dependence_prompts == 1:
            raise ConfigError("eval.prompt_dependence_prompts must be 0 (off) or >= 2")
        seeds = self.prompt_dependence_seeds
        # a negative count passed while prompt_dependence_prompts=0 (off), to fail once it was turned on
        if seeds < 0 or (self.prompt_dependence_prompts and seeds < 2):
            raise ConfigError(
                f"eval.prompt_dependence_seeds must be >= 2 (distances between seeds are compared), got {seeds}"
            )


# accelerate trackers `log.trackers` may name (each a module of that name the trainer checks is installed)
TRACKERS = (
    "tensorboard",
    "wandb",
    "comet_ml",
    "mlflow",
    "aim",
    "clearml",
    "dvclive",
)  # the common ones, for help


def tracker_names() -> tuple[str, ...]:
    """Every tracker name accelerate accepts (its ``LoggerType``: the common ones plus e.g. all, trackio)."""
    try:
        from accelerate.utils import LoggerType
    except ImportError:  # pragma: no cover - accelerate is a dependency
        return TRACKERS
    return tuple(t.value for t in LoggerType)


@dataclass
class LogConfig:
    output_dir: str = field(
        "runs/flow_grpo", help="run folder: config.yaml, metrics.jsonl, checkpoints/, samples/"
    )
    checkpoint_every: int = field(0, help="checkpoint every N steps (0 = only at the end)")
    keep_last: int = field(2, help="checkpoints kept (older ones deleted after a successful save)")
    sample_every: int = field(10, help="save a grid of rollout images every N steps (0 = never)")
    trackers: str = field(
        "auto",
        help="accelerate trackers: auto (tensorboard if installed), none, or a comma list of "
        + ", ".join(TRACKERS),
    )
    save_rollouts: bool = field(False, help="append per-sample rewards and advantages to rollouts.jsonl")
    progress: bool = field(True, help="progress bar with ETA (main process only)")

    def validate(self) -> None:
        if not self.output_dir.strip():  # "" wrote the run's files into the working folder
            raise ConfigError("log.output_dir is empty: give a run folder, e.g. runs/my_run")
        from imgalign.hub import names_env_var, tilde_hint

        # a folder named ~ (or $HOME) in the working folder
        if self.output_dir == "~" or self.output_dir.startswith("~/") or names_env_var(self.output_dir):
            part = next(p for p in Path(self.output_dir).parts if p == "~" or names_env_var(p))
            where = "" if Path(self.output_dir).is_absolute() else " in the working folder"
            raise ConfigError(
                f"log.output_dir {self.output_dir!r} would be written under a folder named {part!r}{where}"
                f"{tilde_hint(self.output_dir)}"
            )
        if self.keep_last < 1:
            raise ConfigError("log.keep_last must be >= 1")
        # step % -N == 0 acted as every N steps, silently
        for name, zero in (("checkpoint_every", "only at the end"), ("sample_every", "never")):
            if getattr(self, name) < 0:
                raise ConfigError(f"log.{name} must be >= 0 (0 = {zero}), got {getattr(self, name)}")
        names = [x.strip() for x in self.trackers.split(",")]
        valid = tracker_names()
        if self.trackers not in ("auto", "none") and not (all(names) and set(names) <= set(valid)):
            raise ConfigError(
                f"log.trackers: {self.trackers!r} is not auto, none or a comma list of {', '.join(valid)}"
            )


@dataclass
class FlowGRPOConfig:
    model: ModelConfig = field(default_factory=ModelConfig, help="the model and what of it trains")
    prompts: PromptConfig = field(default_factory=PromptConfig, help="training and evaluation prompts")
    sampling: SamplingConfig = field(default_factory=SamplingConfig, help="rollouts")
    rewards: RewardConfig = field(default_factory=RewardConfig, help="rewards and their combination")
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig, help="the loss")
    train: TrainConfig = field(default_factory=TrainConfig, help="optimisation")
    eval: EvalConfig = field(default_factory=EvalConfig, help="evaluation during training")
    log: LogConfig = field(default_factory=LogConfig, help="outputs")

    def validate(self) -> None:
        from imgalign.trainers.registry import BALANCERS, OBJECTIVES, PENALTIES, ROLLOUTS

        if self.eval.suite == "reward" and self.prompts.source == "shapes" and self.eval.every >= 0:
            raise ConfigError(
                "eval.suite=reward scores the held-out test prompts of a prompt file, and prompts.source=shapes has "
                "none: use eval.suite=shapes, a prompt file as prompts.source, or eval.every=-1"
            )
        if self.eval.suite == "reward" and self.prompts.test_fraction == 0 and self.eval.every >= 0:
            raise ConfigError(
                "eval.suite=reward scores the held-out test prompts, and prompts.test_fraction=0 holds out none: "
                "set prompts.test_fraction (e.g. 0.1), or eval.every=-1"
            )

        for reg, name, key in (
            (OBJECTIVES, self.objective.name, "objective.name"),
            (ROLLOUTS, self.sampling.rollout, "sampling.rollout"),
            (BALANCERS, self.rewards.balancer, "rewards.balancer"),
        ):
            try:
                reg.check(name)
            except ValueError as e:
                raise ConfigError(f"{key}: {e}") from None
        if self.objective.penalty:
            try:
                PENALTIES.check(self.objective.penalty)
            except ValueError as e:
                raise ConfigError(f"objective.penalty: {e}") from None
            if self.objective.penalty_weight == 0:  # the penalty was never computed, silently
                raise ConfigError(
                    f"objective.penalty={self.objective.penalty!r} with objective.penalty_weight=0 adds nothing to the "
                    "loss: set objective.penalty_weight (lambda, e.g. 1.0), or remove objective.penalty "
                    "(objective.vnorm_log: true logs the norm inflation without a penalty)"
                )
        if self.objective.step_weight != "uniform" and (
            self.objective.name != "grpo" or self.sampling.rollout != "flat"
        ):
            raise ConfigError(
                f"objective.step_weight={self.objective.step_weight} weighs the SDE steps of flat rollouts under "
                "objective.name=grpo; set objective.step_weight=uniform for other objectives and rollouts"
            )
        if self.objective.anchor_beta > 0 and (
            self.objective.name != "grpo" or self.sampling.rollout != "flat" or not self.sampling.sde_window
        ):
            raise ConfigError(
                "objective.anchor_beta anchors the untrained (ODE) steps of flat rollouts with an SDE window under "
                "objective.name=grpo: set sampling.sde_window (e.g. 4), or objective.anchor_beta=0"
            )
        if self.model.lora_rank == 0 and self.model.dtype != "float32" and self.train.mixed_precision == "no":
            amp = "bf16" if self.model.dtype == "bfloat16" else "fp16"
            raise ConfigError(
                f"model.dtype={self.model.dtype} with full fine-tuning (model.lora_rank=0): the trained transformer "
                f"weights are float32 and would get {self.model.dtype} inputs. Set train.mixed_precision={amp} (the "
                "frozen weights stay in model.dtype), or model.dtype=float32, or train LoRA (model.lora_rank > 0)"
            )
        if self.objective.name == "nft" and self.objective.kl_beta > 0:
            raise ConfigError(
                "objective.kl_beta is the closed-form KL between the SDE transitions of objective.name=grpo, and "
                "objective.name=nft trains on final samples without them: set objective.kl_beta=0 (nft's pull toward "
                "the base model is objective.nft.ref_weight), or objective.name=grpo"
            )
        if self.sampling.rollout == "tree" and (
            self.rewards.balancer == "marble" or self.rewards.diagnose_cosines
        ):
            raise ConfigError(
                "rewards.balancer=marble and rewards.diagnose_cosines need one advantage per reward and sample, and "
                "sampling.rollout=tree assigns its own per-edge credit: use sampling.rollout=flat with them, or "
                "another rewards.balancer (weighted_sum, gdpo) and rewards.diagnose_cosines=false"
            )
        if self.sampling.rollout == "tree" and self.objective.name == "nft":
            raise ConfigError(
                "sampling.rollout=tree trains per-edge SDE transitions with the GRPO objective; objective.name=nft "
                "uses only the final samples, so use sampling.rollout=flat with it (or objective.name=grpo)"
            )


def ignored_settings(cfg: FlowGRPOConfig) -> list[str]:
    """Settings changed from their defaults that the chosen methods never read: a section of another method (kept
    when the method is switched with ``--set``), one method's option, LoRA's options under full fine-tuning, or the
    evaluation's options with the evaluation off (``eval.every=-1``), ``prompts.tasks`` with a prompt file, or
    ``prompts.test_fraction`` where no prompt is held out.
    Each as ``key (read with KEY=VALUE)``. Only built-in methods are judged: a plug-in (``package.module:attr``) may
    read any setting."""
    from dataclasses import fields

    o, s, r = cfg.objective, cfg.sampling, cfg.rewards
    # MARBLE with one reward trains on it alone and reads none of its settings (RewardBalancing warns of it)
    one_marbled = r.balancer == "marble" and len(r.names) == 1
    unmarbled = r.balancer in ("weighted_sum", "gdpo", "group_norm_weighted") or one_marbled
    marble_reader = (
        "rewards.balancer=marble and two or more rewards" if one_marbled else "rewards.balancer=marble"
    )
    # (key prefix, section, its defaults, ignored, what reads it); rewards.marble.gram is also the space of
    # rewards.diagnose_cosines
    groups = [
        ("model.", cfg.model, ModelConfig(), cfg.model.lora_rank == 0, "model.lora_rank > 0"),
        ("objective.", o, ObjectiveConfig(), o.name == "grpo", "objective.name=nft"),
        ("objective.nft.", o.nft, NFTConfig(), o.name == "grpo", "objective.name=nft"),
        ("sampling.tree.", s.tree, TreeConfig(), s.rollout == "flat", "sampling.rollout=tree"),
        ("rewards.marble.", r.marble, MarbleConfig(), unmarbled, marble_reader),
        ("eval.", cfg.eval, EvalConfig(), cfg.eval.every == -1, "eval.every >= 0"),
    ]
    out = []
    for prefix, section, default, ignored, reader in groups:
        for f in fields(section) if ignored else ():
            if section is o and f.name != "terms_per_sample":  # the objective's other keys serve both
                continue
            # the model's other keys serve full fine-tuning too
            if section is cfg.model and f.name not in ("lora_alpha", "lora_targets"):
                continue
            if section is r.marble and f.name == "gram" and r.diagnose_cosines:
                continue
            # eval.suite=reward also holds the test prompts out of training
            if section is cfg.eval and f.name in ("every", "suite"):
                continue
            if getattr(section, f.name) != getattr(default, f.name):
                out.append(f"{prefix}{f.name} (read with {reader})")
    # a file trained on every line whatever prompts.tasks named (no filter by 'tag'), silently
    p, p_default = cfg.prompts, PromptConfig()
    if p.source != "shapes" and p.tasks != p_default.tasks:
        out.append("prompts.tasks (read with prompts.source=shapes)")
    if p.test_fraction != p_default.test_fraction and (p.source == "shapes" or cfg.eval.suite != "reward"):
        out.append("prompts.test_fraction (read with eval.suite=reward and a prompt file or generate:SEED)")
    return out


def check_batch_layout(cfg: FlowGRPOConfig, num_processes: int) -> dict[str, int]:
    """The derived batch sizes; raise :class:`ConfigError` when the global batch cannot be split evenly."""
    s, t = cfg.sampling, cfg.train
    total = s.samples_per_step
    if total % num_processes:
        raise ConfigError(
            f"sampling.samples_per_step={total} does not split over {num_processes} processes; make it a multiple "
            f"of {num_processes}"
        )
    local = total // num_processes
    if local % t.updates_per_step:
        raise ConfigError(
            f"{local} samples per process do not split into train.updates_per_step={t.updates_per_step} equal "
            "updates; change one of them"
        )
    # loss terms per sample and update: one per trained SDE step (grpo), one per fresh (t, eps) draw (nft)
    nft = cfg.objective.name == "nft"
    trained = cfg.objective.terms_per_sample if nft else s.sde_window or (s.num_steps - 1)
    per_update = local // t.updates_per_step
    common = {
        "processes": num_processes,
        "prompts_per_step": s.prompts_per_step,
        "group_size": s.group_size,
        "samples_per_step": total,
        "samples_per_process": local,
    }
    if s.rollout == "tree":  # ---- tree rollouts: every tree (prompt group) lives on one process
        if local % s.group_size:
            raise ConfigError(
                f"sampling.rollout=tree: {local} samples per process is not a whole number of trees of "
                f"group_size={s.group_size}; make samples_per_step a multiple of group_size x {num_processes} "
                "processes"
            )
        trees = local // s.group_size
        spec = s.tree.spec(s.num_steps)
        rows = trees * sum(spec.alive(b) for b in spec.branch_steps)
        # the updates split the parent rows (one per node at a branch step), not the samples: more updates than
        # rows leave some without a row. A progressive tree starts with its fewest rows (one branch step).
        first = tree_spec_for_step(s.tree, s.num_steps, 0)
        fewest = trees * sum(first.alive(b) for b in first.branch_steps)
        if t.updates_per_step > fewest:
            when = " at the first step (sampling.tree.progressive)" if fewest < rows else ""
            raise ConfigError(
                f"sampling.rollout=tree: train.updates_per_step={t.updates_per_step} is more than the {fewest} "
                f"parent rows per process the updates share{when} ({trees} tree(s) per process), so some updates "
                f"would get no row: set train.updates_per_step <= {fewest}, or raise sampling.samples_per_step"
            )
        largest = -(-rows // t.updates_per_step)  # the first updates take the rows that do not divide evenly
        return {
            **common,
            "tree_parent_rows_per_process": rows,
            "tree_trained_edges_per_tree": spec.num_edges(),
            "tree_rollout_nfe_per_tree": spec.nfe(),
            "micro_batches_per_update": -(-largest // t.micro_batch_size),
        }
    return {
        **common,
        "samples_per_update_per_process": per_update,
        ("terms_per_sample" if nft else "trained_steps_per_sample"): trained,
        "micro_batches_per_update": -(-per_update // t.micro_batch_size) * trained,
    }
