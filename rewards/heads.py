"""Small classifier heads on frozen features, shared by the discriminator and artifact rewards.

A :class:`FeatureHead` owns its feature normalisation (buffers ``mean``/``std``, fixed when it is built), so the
same standardisation runs in training and in scoring -- Adv-GRPO's released code normalises features for the reward
but not for training (algorithms.md §9); keeping it inside the module makes that mistake impossible.
Heads are saved as safetensors with JSON metadata naming the feature encoder.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from imgalign.files import library_write, replacing

HEAD_KIND = "imgalign-feature-head"

log = logging.getLogger(__name__)


class FeatureHead(nn.Module):
    """(f − mean) / std, then a linear layer (hidden=0) or a one-hidden-layer MLP, to one logit per sample."""

    def __init__(self, dim: int, hidden: int = 0, dropout: float = 0.0) -> None:
        super().__init__()
        if hidden < 0:  # nn.Linear's own error names a tensor shape, not the option
            raise ValueError(f"hidden must be 0 (a linear head) or more, got {hidden}")
        self.dim, self.hidden = int(dim), int(hidden)
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))
        if hidden:
            self.net = nn.Sequential(
                nn.Linear(dim, hidden), nn.SiLU(), nn.Dropout(dropout), nn.Linear(hidden, 1)
            )
        else:
            self.net = nn.Sequential(nn.Linear(dim, 1))

    def set_normalisation(self, feats: torch.Tensor) -> None:
        """Fix the standardisation from features (N, D); called once, before any training."""
        self.mean.copy_(feats.float().mean(0))
        self.std.copy_(feats.float().std(0).clamp(min=1e-4))

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        """Features (B, D) -> logits (B,)."""
        return self.net((feats.float() - self.mean) / self.std).squeeze(-1)


def head_loss(logits_pos: torch.Tensor, logits_neg: torch.Tensor, loss: str = "bce") -> torch.Tensor:
    """Discriminator loss. ``bce``: logistic loss, whose optimum is logit = log p_pos/p_neg (DRL's reward);
    ``hinge``: mean(relu(1 − l_pos)) + mean(relu(1 + l_neg)) (Adv-GRPO)."""
    if loss == "bce":
        return F.softplus(-logits_pos).mean() + F.softplus(logits_neg).mean()
    if loss == "hinge":
        return F.relu(1 - logits_pos).mean() + F.relu(1 + logits_neg).mean()
    raise ValueError(f"unknown head loss {loss!r}; valid: bce, hinge")


@dataclass
class FitResult:
    head: FeatureHead
    metrics: dict[str, float]


def accuracy(head: FeatureHead, pos: torch.Tensor, neg: torch.Tensor) -> float:
    with torch.no_grad():
        right = (head(pos) > 0).sum() + (head(neg) <= 0).sum()
    return float(right) / max(1, pos.shape[0] + neg.shape[0])


def check_class_folder(images: torch.Tensor, folder: str | Path, label: str) -> torch.Tensor:
    """`images` (N, ...) read from `folder`, the class `label` names (a CLI flag such as ``--real``): at least 2,
    which :func:`fit_head` needs (it said "got 1 and 5", naming no folder). Returns `images`."""
    if images.shape[0] < 2:
        raise ValueError(
            f"{label} {str(folder)!r} holds {images.shape[0]} image(s); a head needs at least 2 per class (and "
            "more for a useful held-out val_acc): add images to it"
        )
    return images


def fit_head(
    pos: torch.Tensor,
    neg: torch.Tensor,
    hidden: int = 0,
    epochs: int = 300,
    lr: float = 1e-2,
    weight_decay: float = 1e-3,
    loss: str = "bce",
    val_frac: float = 0.2,
    seed: int = 0,
) -> FitResult:
    """Fit a head separating positives (N1, D) from negatives (N2, D), full-batch AdamW; a seeded `val_frac` of
    each class is held out and reported as ``val_acc`` (the head is trained on the rest)."""
    if pos.shape[0] < 2 or neg.shape[0] < 2:
        raise ValueError(f"need at least 2 examples per class, got {pos.shape[0]} and {neg.shape[0]}")
    if not 0.0 <= val_frac < 1.0:
        raise ValueError(f"val_frac must be in [0, 1), got {val_frac}")
    g = torch.Generator().manual_seed(seed)

    def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randperm(x.shape[0], generator=g)
        k = int(round(x.shape[0] * val_frac)) if val_frac > 0 else 0
        return x[idx[k:]], x[idx[:k]]

    (ptr, pva), (ntr, nva) = split(pos.float()), split(neg.float())
    if ptr.shape[0] < 2 or ntr.shape[0] < 2:
        raise ValueError(
            f"val_frac {val_frac} leaves {ptr.shape[0]} and {ntr.shape[0]} examples to train on (at least 2 per "
            "class needed): lower it or give more images"
        )
    torch.manual_seed(seed)
    head = FeatureHead(pos.shape[1], hidden)
    head.set_normalisation(torch.cat([ptr, ntr]))
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    # balance the classes: each term of head_loss is a per-class mean
    for _ in range(epochs):
        head.train()
        opt.zero_grad()
        head_loss(head(ptr), head(ntr), loss).backward()
        opt.step()
    head.eval()
    metrics = {
        "train_acc": accuracy(head, ptr, ntr),
        "n_pos": float(pos.shape[0]),
        "n_neg": float(neg.shape[0]),
    }
    if pva.shape[0] and nva.shape[0]:
        metrics["val_acc"] = accuracy(head, pva, nva)
    return FitResult(head, metrics)


def save_head(path: str | Path, head: FeatureHead, features: str, task: str, extra: dict[str, Any]) -> None:
    """Write the head atomically as safetensors; metadata records the encoder, sizes, task and metrics."""
    from safetensors.torch import save_file

    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{str(path)!r} is a folder; give a file name for the head (.safetensors)")
    path.parent.mkdir(parents=True, exist_ok=True)
    from imgalign.rewards.features import local_name

    meta = {
        "kind": HEAD_KIND,
        "task": task,
        "features": local_name(features),
        "dim": str(head.dim),
        "hidden": str(head.hidden),
        "extra": json.dumps(extra),
    }
    with library_write(path, "the reward head"), replacing(path) as tmp:
        save_file({k: v.detach().contiguous() for k, v in head.state_dict().items()}, str(tmp), metadata=meta)


def load_head(path: str | Path, task: str | None = None) -> tuple[FeatureHead, dict[str, Any]]:
    """Read a head written by :func:`save_head` -> (head in eval mode, metadata with ``extra`` decoded)."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    path = Path(path)
    if path.is_dir():  # it said "does not exist" of a folder that does
        raise FileNotFoundError(
            f"head file {str(path)!r} is a folder; give the .safetensors file `imgalign rewards fit-...` wrote"
        )
    if not path.is_file():
        from imgalign.hub import tilde_hint

        # a quoted ~ or $VAR (a YAML config, a quoted reward spec) named a file that exists once expanded
        made_by = f"imgalign rewards fit-{task}" if task else "imgalign rewards fit-..."
        # artifact:model= also takes the folder `imgalign rewards build-shapes-artifact --out` wrote
        also = " (or the folder `imgalign rewards build-shapes-artifact` wrote)" if task == "artifact" else ""
        raise FileNotFoundError(
            f"head file {str(path)!r} does not exist{tilde_hint(str(path))}; give the .safetensors file "
            f"`{made_by} --out` wrote{also}"
        )
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = dict(fh.metadata() or {})
    except SafetensorError as e:
        raise ValueError(
            f"{path} is not an imgalign feature head (make one with `imgalign rewards fit-...`): {e}"
        ) from None
    from imgalign.rewards.fid import STATS_KIND

    if meta.get("kind") == STATS_KIND:  # was only "not an imgalign feature head"
        raise ValueError(
            f"{path} holds FID reference statistics (`imgalign rewards fid-stats`), not a feature head: give it as "
            f"fid:ref={path}, or a head made with `imgalign rewards fit-...`"
        )
    if meta.get("kind") != HEAD_KIND:
        raise ValueError(f"{path} is not an imgalign feature head (make one with `imgalign rewards fit-...`)")
    if task is not None and meta.get("task") != task:
        raise ValueError(
            f"{path} is a head of the {meta.get('task')!r} reward, not of the {task!r} reward; give one made with "
            f"`imgalign rewards fit-{task}`"
        )
    # a damaged or hand-edited head: metadata missing or unreadable, tensors that do not fit it (a traceback from
    # load_state_dict, or a bare "dim"), NaN/inf weights (every image got a "non-finite score" row)
    try:
        if not meta.get("features"):
            raise KeyError("features")
        head = FeatureHead(int(meta["dim"]), int(meta["hidden"]))
        head.load_state_dict(load_file(str(path)))
        meta["extra"] = json.loads(meta.get("extra", "{}"))
    except (KeyError, ValueError, RuntimeError) as e:
        raise ValueError(
            f"{path} is a damaged imgalign feature head ({_reason(e)}); {_refit(meta)}"
        ) from None
    if not all(torch.isfinite(t).all() for t in head.state_dict().values()):
        raise ValueError(f"{path} is a damaged imgalign feature head (NaN or inf weights); {_refit(meta)}")
    if not (head.std > 0).all():  # set_normalisation keeps it >= 1e-4; 0 made every score NaN
        raise ValueError(
            f"{path} is a damaged imgalign feature head (a feature scale 'std' <= 0); {_refit(meta)}"
        )
    return head.eval(), meta


def _reason(error: Exception) -> str:
    """One line saying what is wrong with a head file, from the error reading it raised."""
    if isinstance(error, KeyError):
        return f"its metadata has no {error.args[0]!r}"
    lines = [line.strip().rstrip(".") for line in str(error).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("Error(s) in loading"):  # load_state_dict: one line per tensor
        lines = lines[1:]
    if not lines:  # an error without a message (an IndexError of its own, and the damage went unnamed)
        return f"{type(error).__name__} while reading it"
    return lines[0] + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else "")


def _refit(meta: dict[str, Any]) -> str:
    """What to do about a damaged head file: fit it again, with the command its metadata names when it can."""
    task = meta.get("task")
    command = (
        f"imgalign rewards fit-{task}"
        if task in ("discriminator", "artifact")
        else "imgalign rewards fit-..."
    )
    return f"fit it again with `{command}`"


def head_features(recorded: str, given: str | None, what: str, advice: str) -> str:
    """The encoder a head fitted on `recorded` features scores with: `recorded`, or `given` when it names the same
    encoder or stands in for a recorded folder that moved (warned). Anything else is refused, `advice` saying what
    to do instead; so is a recorded folder that is gone when nothing stands in for it. `what` names the head."""
    from imgalign.rewards.features import local_name, moved_encoder, names_an_encoder, recorded_encoder_gone

    if given is None or local_name(str(given)) == local_name(recorded):
        gone = recorded_encoder_gone(recorded, what, "features")
        if gone:
            raise ValueError(gone)
        # a hand-edited name was "unknown feature encoder 'x'", naming no head
        if not names_an_encoder(recorded):  # "dinov2:" with no folder too
            raise ValueError(
                f"{what} records features {recorded!r}, which names no feature encoder (its metadata was edited, "
                "or written by other code); fit the head again"
            )
        return recorded
    if moved_encoder(recorded, str(given)):
        log.warning(
            "%s was fitted on features %r, which are no longer there; scoring with %r as given (the same "
            "encoder, moved)",
            what,
            recorded,
            given,
        )
        return str(given)
    raise ValueError(
        f"{what} was fitted on features {recorded!r}, not {given!r}; {advice} (the head's are used)"
    )


def check_head_fits(head: FeatureHead, encoder: Any, what: str) -> None:
    """Refuse an encoder whose feature size is not the head's (another model given for a moved one): it failed at
    the first image with a matrix-shape error."""
    if int(encoder.dim) != head.dim:
        raise ValueError(
            f"{what} takes {head.dim}-d features; {encoder.name!r} gives {encoder.dim}-d ones: it is not the "
            "encoder the head was fitted on"
        )
