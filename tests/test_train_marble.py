"""MARBLE and the gradient-cosine diagnostics inside `imgalign train`, on a tiny random SD3 pipeline: 2-step runs
(every parameter changes, alpha and cosines logged, state checkpointed), the min-norm property through the trainer
(each reward's cosine with the update equal on alpha's support, never negative), and the amortisation identity
(alpha-weighted per-reward gradients == the gradient of the one mixed loss) for NFT and Flow-GRPO, K = 2 and 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from imgalign.cli import main
from imgalign.trainers.testing import first_rollout
from imgalign.trainers.testing import transformer_weights as initial_trainable

torch.set_num_threads(1)

RED = "imgalign.trainers.testing:red_reward"
BRIGHT = "imgalign.trainers.testing:brightness_reward"
BLUE = "imgalign.trainers.testing:blue_reward"  # the path form: nothing added to the global registry


def tiny_config(model: Path, out: Path, rewards: list[str], balancer: str, objective: str, **over) -> dict:
    cfg = {
        "model": {"path": str(model)},
        "prompts": {"source": "shapes", "tasks": ["single_object", "colors"]},
        "sampling": {"num_steps": 3, "group_size": 2, "samples_per_step": 4, "batch_size": 4},
        "rewards": {"names": rewards, "balancer": balancer, "diagnose_cosines": True},
        "objective": {"name": objective, "terms_per_sample": 1},
        "train": {"max_steps": 2, "lr": 1e-3, "micro_batch_size": 4, "updates_per_step": 1},
        "eval": {"every": -1},
        "log": {"output_dir": str(out), "sample_every": 0, "trackers": "none", "progress": False},
    }
    for key, val in over.items():
        sect, name = key.split("__")
        cfg[sect][name] = val
    return cfg


def train(cfg: dict, tmp_path: Path) -> list[dict]:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["train", str(path)]) == 0
    out = Path(cfg["log"]["output_dir"])
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_marble_nft_three_rewards_two_steps(sd3_dir, tmp_path):
    out = tmp_path / "run"
    names = ["red_reward", "brightness_reward", "blue_reward"]
    cfg = tiny_config(sd3_dir, out, [RED, BRIGHT, BLUE], "marble", "nft")
    cfg["rewards"]["marble"] = {"ema": 0.0}  # each update's own alpha*: the min-norm property holds exactly
    r = train(cfg, tmp_path)
    assert [x["step"] for x in r] == [1, 2]
    for row in r:
        alpha = [row[f"balance/alpha/{n}"] for n in names]
        assert sum(alpha) == pytest.approx(1.0, abs=1e-9) and min(alpha) >= 0
        coef = [row[f"balance/coef/{n}"] for n in names]
        assert sum(coef) == pytest.approx(1.0, abs=1e-9)
        cos = [row[f"balance/grad_cos/{n}"] for n in names]
        # one micro-batch per update, ema 0: d = sum_k alpha_k g^_k is the min-norm point, so <g^_k, d> = ||d||^2
        # on alpha's support and >= ||d||^2 off it: every cosine equals min cos > 0 there (MGDA optimality)
        assert row["balance/grad_cos_min"] == pytest.approx(min(cos), abs=1e-6) and min(cos) > 0
        for a, c in zip(alpha, cos):
            if a > 1e-6:
                assert c == pytest.approx(min(cos), rel=1e-3, abs=1e-5)
        assert row["balance/neg_cos_share"] == 0.0
        assert f"reward/{names[2]}/mean" in row and row["perf/sec_balance"] > 0
    ckpt = out / "checkpoints" / "step-000002"
    raw = load_file(str(ckpt / "trainer_state" / "trainable.safetensors"))
    init = initial_trainable(sd3_dir)
    unchanged = [n for n, t in raw.items() if torch.equal(t, init[n])]
    assert not unchanged, f"parameters that did not change: {unchanged[:5]}"
    state = torch.load(str(ckpt / "trainer_state" / "balance.pt"), weights_only=True)
    assert state["updates"] == 2 and state["diag_updates"] == 2
    torch.testing.assert_close(
        state["marble"]["alpha"],
        torch.tensor([r[1][f"balance/alpha/{n}"] for n in names], dtype=torch.float64),
    )


@pytest.mark.parametrize("balancer", ["weighted_sum", "gdpo", "marble"])
def test_cosine_diagnostics_grpo_two_rewards(sd3_dir, tmp_path, balancer):
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, [RED, BRIGHT], balancer, "grpo", train__micro_batch_size=2)
    cfg["rewards"]["marble"] = {"gram": "params"}  # parameter-space gradients on every trainable weight
    r = train(cfg, tmp_path)
    for row in r:
        cos = [row[f"balance/grad_cos/{n}"] for n in ("red_reward", "brightness_reward")]
        assert all(-1 - 1e-6 <= c <= 1 + 1e-6 for c in cos)
        assert row["balance/grad_cos_min"] == pytest.approx(min(cos), abs=1e-6)
        assert 0.0 <= row["balance/neg_cos_share"] <= 1.0
        assert ("balance/alpha/red_reward" in row) == (balancer == "marble")
    if balancer == "marble":  # K = 2 normalised: the closed form puts alpha at 1/2 whatever the angle
        assert r[0]["balance/alpha/red_reward"] == pytest.approx(0.5, abs=1e-9)
    negatives = sum(row["balance/neg_cos_share_step"] for row in r)
    assert r[-1]["balance/neg_cos_share"] == pytest.approx(negatives / len(r))


@pytest.mark.parametrize(("objective", "gram"), [("grpo", "output"), ("grpo", "params"), ("nft", "output")])
def test_marble_weights_see_every_term_of_the_micro_batch(sd3_dir, tmp_path, objective, gram):
    """With rewards.marble.all_terms, alpha* is solved on the whole micro-batch with all its loss terms (GRPO: both
    trained SDE steps of a 3-step rollout; NFT: two noise draws), so with one micro-batch per update, ema 0 and no
    regulariser the update is the min-norm point of the two normalised gradients the diagnostics measure: their
    bisector, equal cosines. Solved on the first term only (the default), they differ (0.8786 vs 0.8740 in the
    audit's repro)."""
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, [RED, BRIGHT], "marble", objective, train__max_steps=1)
    cfg["objective"]["terms_per_sample"] = 2
    cfg["rewards"]["marble"] = {"ema": 0.0, "gram": gram, "all_terms": True}
    (row,) = train(cfg, tmp_path)
    cos = [row[f"balance/grad_cos/{n}"] for n in ("red_reward", "brightness_reward")]
    assert cos[0] > 0 and cos[0] == pytest.approx(cos[1], rel=1e-4)
    cfg["rewards"]["marble"]["all_terms"] = False
    cfg["log"]["output_dir"] = str(tmp_path / "first-term")
    (row,) = train(cfg, tmp_path)
    cos = [row[f"balance/grad_cos/{n}"] for n in ("red_reward", "brightness_reward")]
    assert cos[0] != pytest.approx(cos[1], rel=1e-4)  # the default: the first term's bisector only


def test_marble_all_terms_probes_the_first_micro_batchs_other_terms(sd3_dir, tmp_path, monkeypatch):
    """With two micro-batches per update, all_terms solves alpha* on the FIRST micro-batch's every term: the probe
    before its loss takes that micro-batch's rows with the second trained step, not the second micro-batch's
    first step (the update loop runs micro-batch by micro-batch, each with all its terms)."""
    from imgalign.trainers.balance import RewardBalancing
    from imgalign.trainers.objectives import GRPOObjective

    calls: list[tuple[str, tuple[int, ...], int]] = []
    head, probe, micro_loss = GRPOObjective.head, RewardBalancing.probe, RewardBalancing.micro_loss

    def spy_head(self, ctx, ro, idx, term, valid):
        calls.append(("head", tuple(idx.tolist()), term))
        return head(self, ctx, ro, idx, term, valid)

    def spy(kind, fn):
        def wrapped(self, *a, **k):
            calls.append((kind, (), -1))
            return fn(self, *a, **k)

        return wrapped

    monkeypatch.setattr(GRPOObjective, "head", spy_head)
    monkeypatch.setattr(RewardBalancing, "probe", spy("probe", probe))
    monkeypatch.setattr(RewardBalancing, "micro_loss", spy("micro_loss", micro_loss))
    cfg = tiny_config(sd3_dir, tmp_path / "run", [RED, BRIGHT], "marble", "grpo", train__max_steps=1)
    cfg["objective"]["terms_per_sample"] = 2
    cfg["train"]["micro_batch_size"] = 2
    cfg["rewards"]["marble"] = {"ema": 0.0, "all_terms": True}
    train(cfg, tmp_path)
    heads = [c for c in calls if c[0] == "head"]
    kinds = [c[0] for c in calls]
    # one probe (head, probe), then per micro-batch and term: head, micro_loss
    assert kinds == ["head", "probe"] + ["head", "micro_loss"] * 4
    (first_mb, second_mb) = heads[1][1], heads[3][1]
    assert len(first_mb) == 2 and set(first_mb).isdisjoint(second_mb)
    steps = [heads[1][2], heads[2][2]]
    assert steps[0] != steps[1]
    assert heads[0][1:] == (first_mb, steps[1])  # the probe: the first micro-batch, its other trained step
    assert [h[1:] for h in heads[1:]] == [(first_mb, steps[0]), (first_mb, steps[1])] + [
        (second_mb, steps[0]),
        (second_mb, steps[1]),
    ]


def test_per_reward_advantages_reach_the_balancer_in_reward_order(sd3_dir, tmp_path, monkeypatch):
    """Column k of the per-reward advantages the balancing sees is reward k's own: red and minus red with weights
    [2, 1] sum to red, so the weighted-sum advantage equals red's group advantage; red's column must equal it, and
    minus red's column its negative (reversing the reward order would swap their signs)."""
    from imgalign.trainers import testing
    from imgalign.trainers.balance import RewardBalancing

    def neg_red_reward(images, prompts, metadata=None):
        return -testing.red_reward(images, prompts, metadata)

    monkeypatch.setattr(testing, "neg_red_reward", neg_red_reward, raising=False)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    micro_loss = RewardBalancing.micro_loss

    def spy(self, head, per, adv, *a, **k):
        seen.append((per.detach().clone(), adv.detach().clone()))
        return micro_loss(self, head, per, adv, *a, **k)

    monkeypatch.setattr(RewardBalancing, "micro_loss", spy)
    rewards = [RED, "imgalign.trainers.testing:neg_red_reward"]
    cfg = tiny_config(sd3_dir, tmp_path / "run", rewards, "weighted_sum", "grpo", train__max_steps=1)
    cfg["rewards"]["weights"] = [2.0, 1.0]
    train(cfg, tmp_path)
    assert seen
    for per, adv in seen:
        assert per.shape == (len(adv), 2) and adv.abs().min() > 0.5  # G = 2: every group is +-1 (up to eps)
        torch.testing.assert_close(per[:, 0], adv, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(per[:, 1], -adv, rtol=1e-4, atol=1e-4)


def test_resume_with_another_balancer_or_reward_list_starts_balancing_fresh(sd3_dir, tmp_path, caplog):
    """Resuming a cosine-diagnostics run with MARBLE, then that MARBLE run with a third reward: each time the saved
    balancing state does not fit; the run goes on with it fresh and a warning that says why (before, the first
    failed with "no MARBLE state", the second with "saved alpha has 2 rewards, not 3")."""
    out = tmp_path / "run"
    cfg = tiny_config(sd3_dir, out, [RED, BRIGHT], "gdpo", "grpo", train__max_steps=1)
    train(cfg, tmp_path)
    cfg["rewards"]["balancer"], cfg["train"]["max_steps"] = "marble", 2
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    with caplog.at_level("WARNING"):
        assert main(["train", str(tmp_path / "c.yaml"), "--resume", "auto"]) == 0
    assert "reward-balancing state does not fit this run: it has no MARBLE weights" in caplog.text
    caplog.clear()
    cfg["rewards"]["names"], cfg["train"]["max_steps"] = [RED, BRIGHT, BLUE], 3
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    with caplog.at_level("WARNING"):
        assert main(["train", str(tmp_path / "c.yaml"), "--resume", "auto"]) == 0
    assert "its rewards ['red_reward', 'brightness_reward'] are not this run's" in caplog.text
    last = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["step"] == 3 and "balance/alpha/blue_reward" in last


def test_marble_rejects_objective_without_head(sd3_dir, tmp_path, capsys):
    from imgalign.trainers.objectives import GRPOObjective
    from imgalign.trainers.registry import OBJECTIVES

    @OBJECTIVES.register("test_no_head")
    class NoHead:  # a custom objective with only the basic contract (terms, loss)
        def __init__(self, cfg, sampling):
            self.inner = GRPOObjective(cfg, sampling)
            self.needs_reference = False

        def terms(self, rollout):
            return self.inner.terms(rollout)

        def loss(self, *args):
            return self.inner.loss(*args)

    cfg = tiny_config(sd3_dir, tmp_path / "run", [RED, BRIGHT], "marble", "test_no_head")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["train", str(path)]) == 2
    assert "need an objective with a head()" in capsys.readouterr().err


# ---- the amortisation identity in the trainer setting ------------------------------------------------------------


def _move_off_the_base(tr) -> None:
    """Move the trainable weights off the frozen base: a small seeded random step, and the output layer scaled by
    1.2 so that ‖v_θ‖ > ‖v_ref‖ (the velocity-norm hinge active). The KL and penalty gradients are then nonzero."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in tr.params:
            p.add_(0.01 * torch.randn(p.shape, generator=g).to(p))
        tr.model.proj_out.weight.mul_(1.2)
        tr.model.proj_out.bias.mul_(1.2)


def _trainer_and_rollout(
    sd3_dir: Path, out: Path, rewards: list[str], objective: str, off_base: bool = False, **over
):
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.rewarding import per_reward_advantages, score_all
    from imgalign.trainers.trainer import FlowGRPOTrainer

    cfg_d = tiny_config(sd3_dir, out, rewards, "marble", objective, **over)
    path = out.parent / "c.yaml"
    path.write_text(yaml.safe_dump(cfg_d))
    cfg = load_config(FlowGRPOConfig, path)
    tr = FlowGRPOTrainer(cfg, out)
    tr.setup()
    if off_base:  # before the rollout: GRPO stays on-policy (ratio 1), the base model is the reference
        _move_off_the_base(tr)
    ro, gid = first_rollout(tr)
    scores = score_all(tr.rewards, ro.images, ro.prompts, ro.metadata)  # [K, N]
    per, valid, _ = per_reward_advantages(scores, gid, torch.isfinite(scores))
    return tr, ro, per.T.contiguous(), valid  # [N, K], [N]


def _grad(tr, loss: torch.Tensor) -> torch.Tensor:
    grads = torch.autograd.grad(loss, tr.params, allow_unused=True)
    return torch.cat(
        [(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, tr.params)]
    )


PENALTY = {"objective__penalty": "vnorm", "objective__penalty_weight": 0.1}


@pytest.mark.parametrize(
    ("objective", "rewards", "over", "off_base"),
    [
        ("nft", [RED, BRIGHT, BLUE], {}, False),
        ("nft", [RED, BRIGHT], PENALTY, False),
        ("grpo", [RED, BRIGHT, BLUE], {"objective__kl_beta": 0.05}, False),
        # off the base the regularisers have nonzero gradients: counting them more than once would show
        ("nft", [RED, BRIGHT], PENALTY, True),
        ("grpo", [RED, BRIGHT, BLUE], {"objective__kl_beta": 0.05}, True),
    ],
)
def test_amortisation_identity_in_trainer(sd3_dir, tmp_path, objective, rewards, over, off_base):
    """sum_k c_k grad L(signal_k) == grad L(sum_k c_k signal_k) for c on the simplex, through the real objective
    heads (NFT: signal = r, exact; Flow-GRPO on-policy: signal = A, exact while the ratio is inside the clip range),
    regularisers (KL, velocity penalty) included once on both sides since sum c = 1. `off_base`: the weights moved
    off the base model first, so that the regularisers' gradients are nonzero (at initialisation they vanish)."""
    from imgalign.trainers.objectives import TrainContext

    tr, ro, per, valid = _trainer_and_rollout(sd3_dir, tmp_path / "run", rewards, objective, off_base, **over)
    k = per.shape[1]
    assert valid.any() and (per[valid].abs().sum(0) > 0).all()  # every reward carries signal
    c = torch.distributions.Dirichlet(torch.ones(k)).sample((1,))[0].double()
    c = c / c.sum()
    idx = torch.arange(per.shape[0])
    ctx = TrainContext(tr.adapter, tr.model, 0)
    term = tr.objective.terms(ro)[0]
    tr.model.train()
    weighted = None
    for j in range(k):  # K separate forwards and backwards: the non-amortised MARBLE direction
        head = tr.objective.head(ctx, ro, idx, term, valid)
        loss, _ = head.total(head.to_signal(per[:, j]))
        gj = c[j] * _grad(tr, loss).double()
        weighted = gj if weighted is None else weighted + gj
    head = tr.objective.head(ctx, ro, idx, term, valid)
    sig = head.to_signal(per)  # [N, K]
    mixed, _ = head.total(sig @ c.to(sig.dtype))
    one = _grad(tr, mixed).double()
    assert weighted is not None and weighted.norm() > 0
    tol = {"rtol": 1e-4, "atol": 1e-6 * float(weighted.abs().max())}
    torch.testing.assert_close(one, weighted, **tol)
    if off_base:  # the regulariser's gradient is large enough that counting it k times breaks the identity
        head = tr.objective.head(ctx, ro, idx, term, valid)
        assert float(head.extra.detach()) > 0
        g_extra = _grad(tr, head.extra).double()
        assert not torch.allclose(one + (k - 1) * g_extra, weighted, **tol)
    # and the trainer's balancer produces exactly that mix from its coefficients
    from imgalign.trainers.balance import RewardBalancing

    rb = RewardBalancing([str(i) for i in range(k)], marble=True, diagnose=True, space="output", ema=0.0)
    rb.start_update()
    head = tr.objective.head(ctx, ro, idx, term, valid)
    loss, _ = rb.micro_loss(head, per, torch.zeros(per.shape[0]), tr.params)
    rb.end_update()
    assert rb.balancer is not None and rb.balancer.steps == 1
    c_rb = rb.coefficients()
    head = tr.objective.head(ctx, ro, idx, term, valid)
    ref, _ = head.total(head.to_signal(per) @ c_rb.float())
    torch.testing.assert_close(loss, ref)
    m = rb.step_metrics()
    if not off_base:
        # at initialisation the KL / velocity-penalty gradients vanish, so d is the min-norm point: cosines > 0
        assert m["balance/grad_cos_min"] > 0
