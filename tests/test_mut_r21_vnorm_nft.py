"""Mutation round 21 (velocity-norm hinge, DiffusionNFT): survivors of hand-written mutants of trainers/vnorm.py
and trainers/nft.py."""

from __future__ import annotations

import torch

from imgalign.trainers.vnorm import bucket_means


def test_bucket_means_of_low_precision_ratios_are_taken_in_float32():
    """The mean of two bf16 ratios 1 and 1.0078125 (a step of bf16 apart) is 1.00390625, which bf16 cannot hold: a
    mean taken in bf16 logged 1 or 1.0078 instead."""
    ratio = torch.tensor([1.0, 1.0078125], dtype=torch.bfloat16)
    out = bucket_means(ratio, ["early", "early"])
    assert out == {"vnorm/norm_ratio/early": 1.00390625, "vnorm/norm_ratio/all": 1.00390625}


def test_nft_combine_takes_r_in_the_losses_dtype_also_as_booleans_or_float64():
    """r is cast to the losses' dtype: hard labels given as a bool mask combine as 0/1 (the subtraction 1 - r of a
    bool tensor raised), and a float64 r leaves the loss float32."""
    from imgalign.trainers.nft import nft_combine

    lp = torch.tensor([1.0, 2.0, 3.0])
    lm = torch.tensor([10.0, 20.0, 30.0])
    hard = nft_combine(torch.tensor([True, False, True]), lp, lm, beta=2.0)
    assert hard.dtype == torch.float32
    assert float(hard) == (1.0 + 20.0 + 3.0) / 3 / 2.0
    wide = nft_combine(torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64), lp, lm, beta=2.0)
    assert wide.dtype == torch.float32 and float(wide) == float(hard)


def test_an_ema_state_saved_in_another_dtype_loads_as_float32():
    """The EMA is kept in float32 whatever the parameters' dtype, also when loaded from a state holding bf16 (or
    float64) tensors: a bf16 shadow rounded every later update to 3 significant digits."""
    from imgalign.trainers.nft import EmaParams

    p = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16))
    ema = EmaParams([p])
    ema.load_state_dict({"decay": 0.5, "shadow": [torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16)]})
    assert ema.shadow[0].dtype == torch.float32 and ema.decay == 0.5
    ema.update(decay=0.999)  # 0.999 * 1 + 0.001 * 0: bf16 would hold 1.0
    assert ema.shadow[0][0].item() == torch.tensor(0.999, dtype=torch.float32).item()
