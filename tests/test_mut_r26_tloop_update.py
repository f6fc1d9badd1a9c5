"""trainers/trainer.py, mutation round 26: the optimizer-update loop (``FlowGRPOTrainer._update``) driven on a
stand-in trainer whose "model" is one weight per row, so every update's effect is known by hand.

The stand-in objective's loss of a micro-batch is -mean over its valid rows of adv_i·w_i; with plain SGD at lr 1 one
update moves w_i by adv_i·(the weight the loop gives row i). The loop weights each micro-batch's loss by its share of
the update's valid rows and divides by the number of loss terms, so that the update is the mean over every valid row:
w_i = adv_i / n_valid after one update whatever the micro-batches and terms."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from imgalign.trainers.trainer import FlowGRPOTrainer

torch.set_num_threads(1)


def _host(
    n: int,
    *,
    terms: int = 1,
    updates_per_step: int = 1,
    micro_batch_size: int = 8,
    grad_clip: float = 0.0,
    masks_invalid: bool = True,
    metrics: Any = None,
) -> SimpleNamespace:
    w = torch.nn.Parameter(torch.zeros(n))
    calls = {"step": 0, "sched": 0}

    def loss(ctx: Any, ro: Any, mb: torch.Tensor, term: int, adv: torch.Tensor, valid: torch.Tensor) -> Any:
        v = valid[mb].float()
        out = -(adv[mb] * w[mb] * v).sum() / v.sum().clamp_min(1.0)
        return out, (metrics(mb, valid) if metrics is not None else {})

    opt = torch.optim.SGD([w], lr=1.0)
    step, sched = opt.step, SimpleNamespace()

    def opt_step() -> None:
        calls["step"] += 1
        step()

    def sched_step() -> None:
        calls["sched"] += 1

    opt.step = opt_step  # type: ignore[method-assign]
    sched.step = sched_step
    host = SimpleNamespace(
        w=w,
        calls=calls,
        cfg=SimpleNamespace(
            train=SimpleNamespace(
                seed=0,
                updates_per_step=updates_per_step,
                micro_batch_size=micro_batch_size,
                grad_clip=grad_clip,
            ),
            objective=SimpleNamespace(name="stand_in"),
        ),
        model=SimpleNamespace(train=lambda: None),
        adapter=SimpleNamespace(nfe_count=0),
        rank=0,
        world=1,
        objective=SimpleNamespace(
            terms=lambda ro: list(range(terms)), loss=loss, masks_invalid=masks_invalid
        ),
        balancing=None,
        acc=SimpleNamespace(
            device="cpu",
            no_sync=lambda model: contextlib.nullcontext(),
            autocast=lambda: contextlib.nullcontext(),
            backward=lambda t: t.backward(),
            clip_grad_norm_=torch.nn.utils.clip_grad_norm_,
        ),
        params=[w],
        optimizer=opt,
        scheduler=sched,
        ema=None,
        _reduce_sum=lambda t: t,
    )
    host._update_rows = lambda perm, valid: FlowGRPOTrainer._update_rows(host, perm, valid)
    return host


def _update(host: SimpleNamespace, adv: list[float], valid: list[bool]) -> dict[str, float]:
    ro = SimpleNamespace(num_rows=len(adv))
    return FlowGRPOTrainer._update(host, 0, ro, torch.tensor(adv), torch.tensor(valid))


@pytest.mark.parametrize("terms", [1, 2])
def test_an_update_is_the_mean_over_the_valid_rows_whatever_the_micro_batches_and_loss_terms(
    terms: int,
) -> None:
    """Six rows, four valid, micro-batches of 1 row, 1 or 2 loss terms (trained SDE steps): one SGD update at lr 1
    gives w_i = adv_i / 4 on the valid rows and 0 on the others. A loop that left out the division by the number
    of terms took a step `terms` times too large (w_i = 2·adv_i / 4 with two terms)."""
    host = _host(6, terms=terms, micro_batch_size=1)
    m = _update(host, [4.0, -8.0, 2.0, 100.0, 6.0, 100.0], [True, True, True, False, True, False])
    assert host.w.detach().tolist() == pytest.approx([1.0, -2.0, 0.5, 0.0, 1.5, 0.0])
    assert host.calls == {"step": 1, "sched": 1}
    assert m["train/empty_updates"] == 0.0 and m["train/skipped_updates"] == 0.0


def test_train_grad_norm_is_the_mean_of_the_updates_norms() -> None:
    """Two optimizer updates in a step (rows 0, 1 then rows 2, 3, all valid): gradient norms 2.5 (adv 3, 4 over 2
    rows) and 5 (adv 6, 8 over 2 rows); train/grad_norm logs their mean, 3.75. The loop that logged the largest
    (5.0) was not caught: the only test with two updates had one of them report no norm."""
    host = _host(4, updates_per_step=2)
    host._update_rows = lambda perm, valid: torch.arange(4)  # updates [0, 1] and [2, 3]
    m = _update(host, [3.0, 4.0, 6.0, 8.0], [True] * 4)
    assert m["train/grad_norm"] == pytest.approx(3.75)
    assert host.calls == {"step": 2, "sched": 2}
