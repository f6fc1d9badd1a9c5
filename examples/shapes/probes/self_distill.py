"""Probe (not part of the package): judge-filtered self-distillation (RAFT-style) on the embedded shapes model.

Each round samples `--nsample` training prompts with the evaluation sampler (20 Euler steps, CFG `--cfg`), keeps the
images the strict GenEval judge passes, and takes `--train_per_round` flow-matching steps on the kept latents (the
pretraining loss: logit-normal t, CFG dropout `--drop`). Variants: `--reencode` (decode, quantise to 8 bits and
re-encode the kept images, as real images would be), `--guided` (the loss on the CFG-guided velocity, the
unconditional branch detached), `--anchor B` (with --guided: the unconditional branch regressed onto the frozen
base model's), `--renders` (control: train on exact renders of every sampled prompt instead of the kept samples),
`--per_task` (draw training items task-uniformly instead of item-uniformly). It writes `OUT.log` (one JSON row per
round: the round's strict accuracy, its loss, the buffer sizes, per-task accuracy) and the pipeline to `OUT`, for
`imgalign eval --suite shapes --model OUT --out DIR`. Measured results: examples/shapes/README.md (stop 29)."""

import argparse
import copy
import json
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from imgalign import shapes as W
from imgalign.pipelines import load_pipeline, quiet_absent_components
from imgalign.pretrain.t2i import flow_matching_pair, logit_normal
from imgalign.prompts.shapes import sample_training_specs
from imgalign.rewards.geneval import GenEvalReward

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--minutes", type=float, default=18.0)
ap.add_argument("--lr", type=float, default=1e-4)
ap.add_argument("--cfg", type=float, default=4.0)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--nsample", type=int, default=64)
ap.add_argument("--train_per_round", type=int, default=16)
ap.add_argument("--bs", type=int, default=32)
ap.add_argument("--drop", type=float, default=0.1)
ap.add_argument("--ema", type=float, default=0.0)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--buffer", type=int, default=1500)
ap.add_argument("--mode", default="strict")
ap.add_argument("--guided", action="store_true")
ap.add_argument("--per_task", action="store_true")
ap.add_argument("--reencode", action="store_true")
ap.add_argument("--renders", action="store_true")
ap.add_argument("--anchor", type=float, default=0.0)
args = ap.parse_args()
torch.manual_seed(args.seed)
pipe = load_pipeline("shapes")
tr = pipe.transformer
for p in pipe.text_encoder.parameters():
    p.requires_grad_(False)
for p in pipe.text_encoder_2.parameters():
    p.requires_grad_(False)
params = list(tr.parameters())
ref = copy.deepcopy(tr).eval() if args.anchor else None
opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=1e-4)
ema = [p.detach().clone() for p in params] if args.ema else None
judge = GenEvalReward(mode=args.mode)
gen = torch.Generator().manual_seed(args.seed)
rng = random.Random(args.seed)
buf = {t: [] for t in W.TASKS}  # task -> list of (latent, prompt)
vae = pipe.vae
# the transformer's latent space: (z - shift_factor) * scaling_factor, as diffusers' SD3 pipelines encode
scale, shift = vae.config.scaling_factor, vae.config.shift_factor or 0.0
rnd = 0
log = open(Path(args.out + ".log"), "w")  # kept open for the whole run
# about 2 s: drawn before the clock starts
specs_iter = iter(sample_training_specs(10**6, seed=args.seed + 11))
t0 = time.time()
enc_cache = {}


def encode(prompts):
    out = []
    for p in prompts:
        if p not in enc_cache:
            with torch.no_grad():
                e, _, pooled, _ = pipe.encode_prompt(
                    prompt=[p],
                    prompt_2=None,
                    prompt_3=None,
                    do_classifier_free_guidance=False,
                    max_sequence_length=1,
                    device=torch.device("cpu"),
                )
            enc_cache[p] = (e[0], pooled[0])
        out.append(enc_cache[p])
    return torch.stack([o[0] for o in out]), torch.stack([o[1] for o in out])


while time.time() - t0 < args.minutes * 60:
    rnd += 1
    specs = [next(specs_iter) for _ in range(args.nsample)]
    prompts = [s.prompt() for s in specs]
    metas = [s.to_metadata() for s in specs]
    tr.eval()
    ts = time.time()
    with torch.no_grad():
        lat0 = torch.randn((len(prompts), 4, 16, 16), generator=gen)
        lat = pipe(
            prompt=prompts,
            num_inference_steps=args.steps,
            guidance_scale=args.cfg,
            latents=lat0,
            max_sequence_length=1,
            output_type="latent",
        ).images
        dec = vae.decode(lat / scale + shift).sample
        imgs = (dec / 2 + 0.5).clamp(0, 1)
    sc = judge.score(imgs, prompts, metas).scores
    if args.reencode:
        with torch.no_grad():
            q = (imgs * 255).round() / 255 * 2 - 1
            post = vae.encode(q).latent_dist
            lat = torch.stack([(post.mean - shift) * scale, post.std * scale], 1)
    tsamp = time.time() - ts
    keep = sc >= (1.0 if args.mode == "strict" else 0.999)
    if args.renders:
        r = (
            torch.stack(
                [torch.from_numpy(np.asarray(W.render(s, rng)[0])).permute(2, 0, 1) for s in specs]
            ).float()
            / 127.5
            - 1
        )
        with torch.no_grad():
            post = vae.encode(r).latent_dist
            lat = torch.stack([(post.mean - shift) * scale, post.std * scale], 1)
        keep = torch.ones_like(keep)
    for i in torch.nonzero(keep).flatten().tolist():
        b = buf[metas[i]["tag"]]
        b.append((lat[i].clone(), prompts[i]))
        if len(b) > args.buffer // 6:
            b.pop(0)
    tasks = [t for t in W.TASKS if buf[t]]
    tr.train()
    ltot = 0.0
    for _ in range(args.train_per_round if tasks else 0):
        if args.per_task:
            items = [rng.choice(buf[rng.choice(tasks)]) for _ in range(args.bs)]
        else:
            allb = [it for t in tasks for it in buf[t]]
            items = [rng.choice(allb) for _ in range(args.bs)]
        x0 = torch.stack([it[0] for it in items])
        if args.reencode or args.renders:  # encoded images are stored as (posterior mean, std): sample one
            x0 = x0[:, 0] + x0[:, 1] * torch.randn(x0[:, 0].shape, generator=gen)
        ps = ["" if rng.random() < args.drop else it[1] for it in items]
        emb, pooled = encode(ps)
        eps = torch.randn(x0.shape, generator=gen)
        t = logit_normal(args.bs, 0.0, 1.0, gen)
        xt, v = flow_matching_pair(x0, eps, t)
        pred = tr(
            hidden_states=xt, encoder_hidden_states=emb, pooled_projections=pooled, timestep=t * 1000
        ).sample
        if args.guided:
            ue, up = encode([""] * args.bs)
            if args.anchor:
                pu = tr(
                    hidden_states=xt, encoder_hidden_states=ue, pooled_projections=up, timestep=t * 1000
                ).sample
                with torch.no_grad():
                    pr = ref(
                        hidden_states=xt, encoder_hidden_states=ue, pooled_projections=up, timestep=t * 1000
                    ).sample
                aloss = F.mse_loss(pu, pr)
                pu = pu.detach()
            else:
                with torch.no_grad():
                    pu = tr(
                        hidden_states=xt, encoder_hidden_states=ue, pooled_projections=up, timestep=t * 1000
                    ).sample
            pred = pu + args.cfg * (pred - pu)
        loss = F.mse_loss(pred, v)
        if args.guided and args.anchor:
            loss = loss + args.anchor * aloss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        ltot += loss.item()
        if ema:
            with torch.no_grad():
                for e, p in zip(ema, params):
                    e.lerp_(p, 1 - args.ema)
    by = {}
    for m, score in zip(metas, sc.tolist()):
        by.setdefault(m["tag"], []).append(score)
    row = {
        "round": rnd,
        "min": round((time.time() - t0) / 60, 2),
        "acc": float(sc.mean()),
        "tsamp": round(tsamp, 1),
        "loss": ltot / max(1, args.train_per_round),
        "buf": {t: len(buf[t]) for t in W.TASKS},
        "by": {t: round(sum(v) / len(v), 2) for t, v in by.items()},
    }
    print(json.dumps(row), file=log, flush=True)
if ema:
    with torch.no_grad():
        for e, p in zip(ema, params):
            p.copy_(e)
with quiet_absent_components():  # model_index.json declares T5 absent
    pipe.save_pretrained(args.out)
print("saved", args.out, file=log, flush=True)
