"""Tiny random pipelines and toy rewards for tests (built the way diffusers' own tests build dummy components:
2 heads, one layer, 8×8 images), saved with ``save_pretrained`` so they load back through ``from_pretrained``.

Tokenizers cannot be downloaded in tests: a character-level CLIP BPE vocabulary (no merges) and a tiny Unigram T5
vocabulary are written here instead.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from imgalign.rewards.base import Reward, RewardOutput, to_tensor


def tiny_clip_tokenizer() -> Any:
    from transformers import CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1, "!": 2}
    for c in string.ascii_lowercase + string.digits:
        vocab.setdefault(c, len(vocab))
        vocab.setdefault(c + "</w>", len(vocab))
    return CLIPTokenizer(vocab=vocab, merges=[], pad_token="!", model_max_length=77)


def tiny_transformers_clip(
    out_dir: str | Path, image_size: int = 32, seed: int = 0, processor: bool = True, crop: int | None = None
) -> Path:
    """A tiny random transformers ``CLIPModel`` (the class of openai/clip-vit-* and PickScore) saved with its
    ``CLIPProcessor`` (shortest edge `image_size`, centre crop `crop` or `image_size`); without `processor`, the
    weights and config only, as PickScore is published."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    tok = tiny_clip_tokenizer()
    text = dict(
        vocab_size=len(tok), hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
        max_position_embeddings=77, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    )  # fmt: skip
    vision = dict(
        hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2, image_size=crop or image_size,
        patch_size=8,
    )  # fmt: skip
    torch.manual_seed(seed)
    out = Path(out_dir)
    CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)).eval().save_pretrained(
        out
    )
    if processor:
        side = crop or image_size
        image_processor = CLIPImageProcessor(
            size={"shortest_edge": image_size}, crop_size={"height": side, "width": side}
        )
        CLIPProcessor(image_processor=image_processor, tokenizer=tok).save_pretrained(out)
    return out


def tiny_t5_tokenizer() -> Any:
    from transformers import T5TokenizerFast

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -1.0)]
    pieces += [(c, -2.0) for c in string.ascii_lowercase + string.digits]
    return T5TokenizerFast(vocab=pieces, extra_ids=0, model_max_length=77)


def _clip_encoder(seed: int, projection: bool) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    cfg = CLIPTextConfig(
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        hidden_size=32,
        intermediate_size=37,
        layer_norm_eps=1e-05,
        num_attention_heads=4,
        num_hidden_layers=2,
        vocab_size=80,
        hidden_act="gelu",
        projection_dim=32,
        max_position_embeddings=77,
    )
    torch.manual_seed(seed)
    return (CLIPTextModelWithProjection if projection else CLIPTextModel)(cfg)


def _tiny_vae(latent_channels: int, sample_size: int) -> Any:
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    return AutoencoderKL(
        sample_size=sample_size,
        in_channels=3,
        out_channels=3,
        block_out_channels=(4,),
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=1,
        use_quant_conv=False,
        use_post_quant_conv=False,
        shift_factor=0.0609,
        scaling_factor=1.5035,
    )


def tiny_sd3_transformer(size: int = 8, patch_size: int = 1, **config: Any) -> Any:
    """A random one-layer ``SD3Transformer2DModel`` for 4-channel latents and 64-d text features (seed 0); `config`
    sets other constructor arguments (``pos_embed_max_size=None``)."""
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(0)
    return SD3Transformer2DModel(
        sample_size=size,
        patch_size=patch_size,
        in_channels=4,
        num_layers=1,
        attention_head_dim=8,
        num_attention_heads=2,
        caption_projection_dim=16,
        joint_attention_dim=64,
        pooled_projection_dim=64,
        out_channels=4,
        **config,
    )


def tiny_sd3_pipeline(out_dir: str | Path, size: int = 8) -> Path:
    """A random ``StableDiffusion3Pipeline`` (two tiny CLIPs, no T5, 8×8 images), saved to `out_dir`."""
    from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline

    transformer = tiny_sd3_transformer(size)
    pipe = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=_tiny_vae(4, size),
        text_encoder=_clip_encoder(1, True),
        text_encoder_2=_clip_encoder(2, True),
        text_encoder_3=None,
        tokenizer=tiny_clip_tokenizer(),
        tokenizer_2=tiny_clip_tokenizer(),
        tokenizer_3=None,
    )
    pipe.save_pretrained(str(out_dir))
    return Path(out_dir)


def stub_pipeline_folder(path: Path, components: dict[str, list[str]]) -> Path:
    """A pipeline folder that checks but does not load: ``model_index.json`` lists `components` (plus an absent
    ``text_encoder_3``, as the shapes model has), each a subfolder holding the named files, each file reading "x"."""
    import json

    index = {"_class_name": "StableDiffusion3Pipeline", "text_encoder_3": [None, None]}
    index.update({name: ["diffusers", "X"] for name in components})
    path.mkdir(parents=True)
    (path / "model_index.json").write_text(json.dumps(index))
    for name, files in components.items():
        (path / name).mkdir()
        for f in files:
            (path / name / f).write_text("x")
    return path


def tiny_flux_pipeline(out_dir: str | Path, size: int = 8, guidance_embeds: bool = True) -> Path:
    """A random ``FluxPipeline`` (tiny CLIP + tiny T5, 1-channel VAE latents packed 2×2), saved to `out_dir`."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=4,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        axes_dims_rope=[4, 4, 8],
        guidance_embeds=guidance_embeds,
    )
    torch.manual_seed(3)
    t5 = T5EncoderModel(
        T5Config(
            vocab_size=40, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, decoder_start_token_id=0
        )
    )
    pipe = FluxPipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True),
        vae=_tiny_vae(1, size),
        text_encoder=_clip_encoder(1, False),
        text_encoder_2=t5,
        tokenizer=tiny_clip_tokenizer(),
        tokenizer_2=tiny_t5_tokenizer(),
    )
    pipe.save_pretrained(str(out_dir))
    return Path(out_dir)


class ClosedFormFlow:
    """A flow adapter of closed form for rollout tests (no model): v = -x/2 plus 0.1 times the prompt's code (its
    length), latents [4, 4, 4], sigmas from 1 to 0, CFG counting 2 evaluations."""

    def init_noise(self, gens: list[torch.Generator]) -> torch.Tensor:
        return torch.stack([torch.randn(4, 4, 4, generator=g) for g in gens])

    def sigmas(self, n: int) -> torch.Tensor:
        return torch.linspace(1.0, 0.0, n + 1)

    def encode(self, prompts: list[str]) -> Any:
        from imgalign.adapters import Cond

        code = torch.tensor([float(len(p)) for p in prompts])
        return Cond(code.view(-1, 1, 1), code.view(-1, 1))

    def velocity(
        self, x: torch.Tensor, sigma: Any, cond: Any, scale: float, transformer: Any = None
    ) -> torch.Tensor:
        return -0.5 * x + 0.1 * cond.pooled.view(-1, 1, 1, 1)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x[:, :3])

    def nfe_per_step(self, scale: float) -> int:
        return 2 if scale > 1 else 1


def brightness_reward(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    """Toy reward for tests: mean brightness of each image [B, 3, H, W] -> [B]."""
    return images.float().mean(dim=(1, 2, 3))


def red_reward(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    """Toy reward for tests: mean red minus mean green/blue."""
    x = images.float()
    return x[:, 0].mean(dim=(1, 2)) - 0.5 * (x[:, 1] + x[:, 2]).mean(dim=(1, 2))


def blue_reward(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    """Toy reward for tests: mean blue minus mean red (conflicts with red_reward)."""
    x = images.float()
    return x[:, 2].mean(dim=(1, 2)) - x[:, 0].mean(dim=(1, 2))


def nan_every_third_reward(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    """Toy reward for tests: brightness, but NaN for every third image (tests the masking path)."""
    r = brightness_reward(images, prompts)
    r[::3] = float("nan")
    return r


class RunningMeanReward(Reward):
    """Toy stateful reward for tests: brightness minus the running mean brightness of every image it was updated
    with (its state must survive checkpoints for a resume to be exact)."""

    name = "running_mean"
    stateful = True

    def __init__(self, device: Any = "cpu", dtype: torch.dtype = torch.float32) -> None:
        super().__init__(device, dtype)
        self.total = 0.0
        self.count = 0

    def score(self, images: torch.Tensor, prompts: list[str], metadata: Any) -> RewardOutput:
        mean = self.total / self.count if self.count else 0.0
        return RewardOutput(brightness_reward(images, prompts) - mean)

    def update(self, images: Any, prompts: Any, metadata: Any = None) -> dict[str, float]:
        x = to_tensor(images)
        self.total += float(x.mean(dim=(1, 2, 3)).sum())
        self.count += x.shape[0]
        return {"count": float(self.count)}

    def state_dict(self) -> dict[str, Any]:
        return {"total": torch.tensor(self.total, dtype=torch.float64), "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total = float(state["total"])
        self.count = int(state["count"])


def tree_sampling(group_size: int = 4, guidance: float = 1.0, **tree: Any) -> Any:
    """A validated tree-rollout SamplingConfig of two prompt groups per step: 5 steps, batches of 3, `group_size`
    leaves per tree, `tree` the TreeConfig's fields."""
    from imgalign.trainers.config import SamplingConfig
    from imgalign.trainers.tree import TreeConfig

    s = SamplingConfig(
        num_steps=5,
        group_size=group_size,
        samples_per_step=2 * group_size,
        batch_size=3,
        rollout="tree",
        guidance_scale=guidance,
        tree=TreeConfig(**tree),
    )
    s.validate()
    return s


def counting_grpo(cfg: Any, sampling: Any) -> Any:
    """Toy plug-in objective for tests (given as ``objective.name: imgalign.trainers.testing:counting_grpo``):
    GRPO that counts optimizer steps through the ``after_update`` hook and checkpoints the count."""
    from imgalign.trainers.objectives import GRPOObjective

    class CountingGRPO(GRPOObjective):
        def __init__(self) -> None:
            super().__init__(cfg, sampling)
            self.updates = 0

        def after_update(self, params: list[torch.nn.Parameter]) -> None:
            self.updates += 1

        def state_dict(self) -> dict[str, Any]:
            return {"updates": self.updates}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.updates = int(state["updates"])

    return CountingGRPO()


def first_rollout(tr: Any, step: int = 0) -> tuple[Any, torch.Tensor]:
    """The rollout of training step `step` (default 0) of a set-up ``FlowGRPOTrainer`` (no grad) and its group ids
    [N], for tests and benches that exercise the update on real rollouts."""
    from imgalign.trainers.rollout import RolloutContext

    cfg = tr.cfg
    g = cfg.sampling.group_size
    batch = tr.sampler.for_step(step, cfg.sampling.prompts_per_step)
    prompts = [p for p in batch.prompts for _ in range(g)]
    meta = [m for m in batch.metadata for _ in range(g)]
    ids = torch.arange(len(prompts))
    ctx = RolloutContext(
        tr.adapter, tr.model, cfg.sampling, cfg.train.seed, step, cfg.objective.logprob_reduce
    )
    with torch.no_grad():
        ro = tr.rollout_fn(ctx, prompts, meta, ids, ids // g)
    return ro, ids // g


# settings a bench's trainer runs with: no evaluation, sample images or trackers
BENCH_OVERRIDES = ["eval.every=-1", "eval.at_start=false", "log.sample_every=0", "log.trackers=none"]


def bench_config(config: str | Path, overrides: list[str]) -> Any:
    """A bench's ``FlowGRPOConfig``: the config with :data:`BENCH_OVERRIDES`, then `overrides`, validated (a bad
    setting is a ``ConfigError`` before any model loads)."""
    from imgalign.config import load_config
    from imgalign.trainers.config import EvalConfig, FlowGRPOConfig

    cfg = load_config(FlowGRPOConfig, config, BENCH_OVERRIDES + list(overrides))
    # the evaluation is off: its other settings (the default config's eval.guidance_scale) would be warned about as
    # unread at every bench's start; eval.suite stays, as it decides which prompts are held out of training
    cfg.eval = EvalConfig(every=-1, suite=cfg.eval.suite)
    return cfg


def bench_trainer(config: str | Path, overrides: list[str], output_dir: str | Path) -> Any:
    """A set-up ``FlowGRPOTrainer`` for a bench: the config with :data:`BENCH_OVERRIDES`, then `overrides`."""
    from imgalign.trainers.trainer import FlowGRPOTrainer

    tr = FlowGRPOTrainer(bench_config(config, overrides), output_dir)
    tr.setup()
    return tr


def positive_int(text: str) -> int:
    """argparse ``type=`` for a bench's size arguments (batches, repeats, ...): an integer >= 1."""
    return int_at_least(1)(text)


def int_at_least(low: int) -> Callable[[str], int]:
    """argparse ``type=`` for a bench's size with a least value `low` (a set needs 2 members for a covariance, a
    tree rollout 2 steps): ``int_at_least(2)('1')`` raises argparse's error naming the least value."""
    import argparse

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
        if n < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {n}")
        return n

    return parse


def scored_rollout(tr: Any, step: int) -> tuple[Any, torch.Tensor, Any, torch.Tensor, torch.Tensor, Any]:
    """The rollout of `step` (sampled in eval mode), its reward scores [K, N], the balancer's result, the
    advantages and valid mask the update trains with (the trainer's :func:`~imgalign.trainers.trainer.update_advantages`:
    the balancer's [N], or a tree rollout's per-edge credit [M, k]) and the update's ``TrainContext``; leaves the
    model in train mode, ready for the objective's backward passes."""
    from imgalign.trainers.objectives import TrainContext
    from imgalign.trainers.rewarding import balancer_inputs, score_all
    from imgalign.trainers.trainer import update_advantages

    o = tr.cfg.objective
    tr.model.eval()
    ro, gid = first_rollout(tr, step)
    scores = score_all(tr.rewards, ro.images, ro.prompts, ro.metadata)  # [K, N]
    scores, finite = balancer_inputs(scores, torch.isfinite(scores), tr.reward_weights)
    bal = tr.balancer(scores, tr.reward_weights, gid, finite, o.std_mode, o.adv_clip)
    adv, valid = update_advantages(ro, scores, bal)
    tr.model.train()
    return ro, scores, bal, adv, valid, TrainContext(tr.adapter, tr.model, step)


# ---- helpers shared by the training tests -------------------------------------------------------------------------
def one_step_config(model: str | Path, out: str | Path, **sections: dict[str, Any]) -> dict[str, Any]:
    """A one-step training config dict of a tiny pipeline at `model` into `out`: the shapes prompts, 4 samples in
    groups of 2, 3 sampling steps, the red reward, no evaluation, samples or trackers; each of `sections` (e.g.
    ``prompts={"source": FILE}``) updates its section."""
    cfg: dict[str, Any] = {
        "model": {"path": str(model)},
        "prompts": {"source": "shapes", "tasks": ["single_object", "colors"]},
        "sampling": {"num_steps": 3, "group_size": 2, "samples_per_step": 4, "batch_size": 4},
        "rewards": {"names": ["imgalign.trainers.testing:red_reward"]},
        "train": {"max_steps": 1, "lr": 1e-3, "micro_batch_size": 2, "updates_per_step": 1},
        "eval": {"every": -1},
        "log": {"output_dir": str(out), "sample_every": 0, "trackers": "none", "progress": False},
    }
    for name, values in sections.items():
        cfg[name].update(values)
    return cfg


def write_config(cfg: dict[str, Any], path: Path) -> Path:
    """Write a training config dict as YAML to `path` and return the path."""
    import yaml

    path.write_text(yaml.safe_dump(cfg))
    return path


def metric_rows(out: Path) -> list[dict[str, Any]]:
    """The rows of a run folder's metrics.jsonl."""
    import json

    return [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def transformer_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a saved pipeline's transformer (all safetensors shards)."""
    from safetensors.torch import load_file

    sd: dict[str, torch.Tensor] = {}
    for f in (Path(model_dir) / "transformer").glob("*.safetensors"):
        sd.update(load_file(str(f)))
    return sd
