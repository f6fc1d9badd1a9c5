"""Probe (not part of the package): direct reward fine-tuning (DRaFT / AlignProp) of the embedded shapes model.

Each step samples `--bs` training prompts with the evaluation sampler itself (20 Euler steps of the model's
flow-matching schedule, CFG `--cfg`, fresh noise), decodes with the autoencoder and scores the images with a
differentiable reward: the embedded shapes VLM's mean log p(prompt tokens | image) (`--reward vlm`, the
`vlm_loglik` reward computed on tensors), the log-probability that the VLM as a classifier picks the true prompt
among it and `--ncorrupt` minimal corruptions (`--reward vlm_contrast`), or the shapes CLIP's cosine (`--reward
clip`). The loss is the negative reward, backpropagated through the decoder and the last `--backprop` sampler steps
(all 20 by default) into the transformer (full fine-tuning, AdamW, clipped gradient norm); `--backprop 0` makes no
update and logs the base model on the same prompts and noise, the paired baseline for the other runs. `--kl B` adds
B times the mean squared difference between the trained and the frozen base model's guided velocities along the
differentiated steps. Each step's images are also judged by the strict GenEval judge (not trained on), so the log
shows whether the reward's rise is real. Writes `OUT.log` (one JSON row per step) and the pipeline to `OUT`, for
`imgalign eval --suite shapes --model OUT --out DIR`. Measured results: examples/shapes/README.md (stop 32)."""

import argparse
import copy
import json
import random
import time
from pathlib import Path

import torch
from PIL import Image

from imgalign import sampling as S
from imgalign.adapters import load_adapter
from imgalign.pipelines import quiet_absent_components
from imgalign.prompts.shapes import sample_training_specs
from imgalign.rewards.geneval import GenEvalReward
from imgalign.rewards.sanity import corrupt_spec
from imgalign.rewards.vlm import VLMLogLikReward, masked_mean_logprob

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--minutes", type=float, default=18.0)
ap.add_argument("--lr", type=float, default=2e-5)
ap.add_argument("--bs", type=int, default=8)
ap.add_argument("--cfg", type=float, default=S.GUIDANCE_SCALE)
ap.add_argument("--steps", type=int, default=S.NUM_INFERENCE_STEPS)
ap.add_argument(
    "--backprop", type=int, default=S.NUM_INFERENCE_STEPS, help="sampler steps the gradient flows through"
)
ap.add_argument("--reward", choices=("vlm", "vlm_contrast", "clip"), default="vlm")
ap.add_argument("--ncorrupt", type=int, default=3, help="vlm_contrast: corrupted prompts per image")
ap.add_argument("--kl", type=float, default=0.0)
ap.add_argument("--clip_grad", type=float, default=1.0)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--model", default="shapes")
args = ap.parse_args()

torch.manual_seed(args.seed)
ad = load_adapter(args.model, max_sequence_length=S.MAX_SEQUENCE_LENGTH)
tr = ad.transformer
tr.requires_grad_(True)
params = [p for p in tr.parameters() if p.requires_grad]
ref = copy.deepcopy(tr).requires_grad_(False).eval() if args.kl else None
opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
vae = ad.pipe.vae
sig = ad.sigmas(args.steps)
judge = GenEvalReward(mode="strict")
gen = torch.Generator().manual_seed(args.seed)
specs_iter = iter(sample_training_specs(10**6, seed=args.seed + 11))

crng = random.Random(args.seed + 5)
if args.reward.startswith("vlm"):
    vlm = VLMLogLikReward()
    ip = vlm.processor.image_processor
    mean = torch.tensor(ip.image_mean).view(1, 3, 1, 1)
    std = torch.tensor(ip.image_std).view(1, 3, 1, 1)

    def vlm_logp(img: torch.Tensor, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, sum) of log p(prompt tokens | image) [B] each; the images [B, 3, 64, 64] in [0, 1] need no resize
        (the VLM's processor resizes to 64 and centre-crops 64, an identity here), so pixel values are just
        normalised."""
        dummy = [Image.new("RGB", (64, 64))] * len(prompts)  # token ids do not depend on the image
        enc, mask = vlm.teacher_forced_inputs(prompts, dummy)
        logits = vlm.model(
            input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], pixel_values=(img - mean) / std
        ).logits
        m, tok = masked_mean_logprob(logits, enc["input_ids"], mask)
        return m, tok.sum(1)

    def reward_fn(img: torch.Tensor, prompts: list[str], specs: list) -> torch.Tensor:
        """vlm: mean log p(prompt | image) [B]. vlm_contrast: log-softmax of the true prompt's total log p among
        the true prompt and `--ncorrupt` minimal corruptions of it (another shape, colour, count, relation or the
        colours swapped; rewards/sanity.py), i.e. the log-probability that the VLM, used as a classifier, picks
        the true prompt for this image [B]."""
        if args.reward == "vlm":
            return vlm_logp(img, prompts)[0]
        k = args.ncorrupt
        wrong = [corrupt_spec(s, crng)[0].prompt() for s in specs for _ in range(k)]
        _, lp_true = vlm_logp(img, prompts)
        _, lp_wrong = vlm_logp(img.repeat_interleave(k, 0), wrong)
        logits = torch.cat([lp_true[:, None], lp_wrong.view(-1, k)], 1)  # (B, 1 + k)
        return torch.log_softmax(logits, 1)[:, 0]

else:
    from imgalign.rewards.clip import CLIPReward
    from imgalign.rewards.features import clip_preprocess

    clip = CLIPReward()
    clip.model.requires_grad_(False)

    def reward_fn(img: torch.Tensor, prompts: list[str], specs: list) -> torch.Tensor:
        """Cosine between the shapes CLIP's image and text embeddings [B]."""
        e_img = clip.model.encode_image(clip_preprocess(img, clip.size, clip.mean, clip.std, *clip.how))
        with torch.no_grad():
            e_txt = clip.model.encode_text(clip.tokenizer(prompts))
        return torch.nn.functional.cosine_similarity(e_img, e_txt, dim=-1)


log = open(Path(args.out + ".log"), "w")  # kept open for the whole run
t0 = time.time()
step = 0
while time.time() - t0 < args.minutes * 60:
    step += 1
    specs = [next(specs_iter) for _ in range(args.bs)]
    prompts = [s.prompt() for s in specs]
    cond = ad.encode(prompts)
    x = torch.randn((args.bs, *ad.latent_shape()), generator=gen)
    kl = torch.zeros(())
    for i in range(args.steps):
        with torch.set_grad_enabled(i >= args.steps - args.backprop):
            v = ad.velocity(x, sig[i], cond, args.cfg)
            if ref is not None and torch.is_grad_enabled():
                with torch.no_grad():
                    v_ref = ad.velocity(x, sig[i], cond, args.cfg, transformer=ref)
                kl = kl + ((v - v_ref) ** 2).mean() / min(args.backprop, args.steps)
            x = x + (sig[i + 1] - sig[i]) * v
    lat = x / vae.config.scaling_factor + (vae.config.shift_factor or 0.0)
    img = (vae.decode(lat, return_dict=False)[0] / 2 + 0.5).clamp(0, 1)
    r = reward_fn(img, prompts, specs)
    loss = -r.mean() + args.kl * kl
    gnorm = 0.0
    # `--backprop 0` leaves nothing to differentiate: the base model's rewards on the same prompts and noise
    if loss.requires_grad:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = float(torch.nn.utils.clip_grad_norm_(params, args.clip_grad))
        opt.step()
    acc = judge.score(img.detach(), prompts, [s.to_metadata() for s in specs]).scores
    row = {
        "step": step,
        "min": round((time.time() - t0) / 60, 2),
        "reward": float(r.detach().mean()),
        "strict": float(acc.mean()),
        "kl": float(kl.detach()),
        "grad_norm": gnorm,
        "tags": [s.to_metadata()["tag"] for s in specs],
        "acc": acc.tolist(),
    }
    print(json.dumps(row), file=log, flush=True)
tr.eval()
with quiet_absent_components():  # model_index.json declares T5 absent
    ad.pipe.save_pretrained(args.out)
print("saved", args.out, file=log, flush=True)
