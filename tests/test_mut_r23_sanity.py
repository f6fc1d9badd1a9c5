"""Round 23 mutation tests of rewards/sanity.py: what a corruption changes, and how the pairs are scored."""

import random

import torch

from imgalign import shapes as W
from imgalign.rewards.base import RewardOutput
from imgalign.rewards.sanity import corrupt_spec, true_vs_corrupted

torch.set_num_threads(1)


def test_a_colour_change_recolours_a_coloured_clause_only() -> None:
    """A colour corruption gives another colour to a clause that has one; an uncoloured clause stays uncoloured (a
    colour on it would change the prompt in a second way), and shapes and counts are kept."""
    spec = W.Spec("two_object", (W.Clause("circle"), W.Clause("square", color="red")))
    rng = random.Random(0)
    for _ in range(20):
        bad, kind = corrupt_spec(spec, rng, ("colour",))
        assert kind == "colour"
        assert bad.include[0] == spec.include[0]
        changed = bad.include[1]
        assert (changed.shape, changed.count) == ("square", 1)
        assert changed.color is not None and changed.color != "red"


def test_a_tie_is_no_win_and_every_pair_is_scored_once_in_order() -> None:
    """A reward that scores every prompt alike wins no pair (a tie is a failure); with batches smaller than n,
    each true prompt is scored once, in the order of the specs, and then its corrupted one."""
    from imgalign.rewards.sanity import checkable_specs

    true_prompts = [s.prompt() for s in checkable_specs(10, 2, ("shape", "colour"))]
    seen: list[list[str]] = []

    def constant(images: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        assert images.shape[0] == len(prompts) == len(metadata)
        seen.append(list(prompts))
        return RewardOutput(torch.ones(len(prompts)))

    res = true_vs_corrupted(constant, n=10, seed=2, batch_size=3, kinds=("shape", "colour"))
    assert [len(p) for p in seen] == [3, 3, 3, 3, 3, 3, 1, 1]
    assert seen[0::2] == [true_prompts[i : i + 3] for i in range(0, 10, 3)]
    assert all(t != c for ts, cs in zip(seen[0::2], seen[1::2]) for t, c in zip(ts, cs))
    assert res.n == 10 and res.accuracy == 0.0 and res.n_nonfinite == 0
    assert set(res.per_task.values()) == {0.0} and set(res.per_kind.values()) == {0.0}
    assert (res.mean_true, res.mean_corrupted) == (1.0, 1.0)


def test_the_accuracy_is_the_share_of_wins_over_all_pairs_and_by_task_and_kind_in_name_order() -> None:
    """Each pair counts once in the accuracy and once in its task's and its kind's share; the shares are listed
    by name (the order the command prints), whatever order the seed drew them in."""
    from imgalign.rewards.sanity import checkable_specs

    specs = checkable_specs(12, 4, ("shape", "colour", "count", "relation", "swap"))
    first_true = {s.prompt() for s in specs[:6]}
    calls = [0]

    def wins_first_half(images: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        calls[0] += 1
        if calls[0] % 2:  # the true prompts: 1 for the first six specs, 0 after
            return RewardOutput(torch.tensor([1.0 if p in first_true else 0.0 for p in prompts]))
        return RewardOutput(torch.full((len(prompts),), 0.5))

    res = true_vs_corrupted(wins_first_half, n=12, seed=4, batch_size=12)
    assert res.accuracy == 0.5
    wins_by_task: dict[str, list[float]] = {}
    for i, s in enumerate(specs):
        wins_by_task.setdefault(s.tag, []).append(1.0 if i < 6 else 0.0)
    assert res.per_task == {k: sum(v) / len(v) for k, v in sorted(wins_by_task.items())}
    assert list(res.per_task) == sorted(res.per_task) and list(res.per_kind) == sorted(res.per_kind)
    assert abs(res.mean_true - 0.5) < 1e-6 and abs(res.mean_corrupted - 0.5) < 1e-6


def test_a_bool_or_a_fraction_is_no_number_of_pairs() -> None:
    """n=True is not one pair, nor batch_size=2.0 a batch size: both are refused by name before any scoring."""
    import pytest

    def never_called(images: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        raise AssertionError("the reward must not be called")

    for opts, label in (({"n": True}, "n"), ({"n": 4, "batch_size": 2.0}, "batch_size")):
        with pytest.raises(
            ValueError, match=rf"{label} must be a whole number of at least 1 \(got {opts[label]!r}\)"
        ):
            true_vs_corrupted(never_called, **opts)


def test_unknown_or_no_corruption_kinds_are_refused_by_name() -> None:
    """true_vs_corrupted(kinds="swap") (a string: its letters), kinds=("colour ",) or kinds=() failed inside the
    spec sampler with "sample_training_specs: no tasks given", naming no kind; they are refused naming the kinds."""
    import pytest

    def never_called(images: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        raise AssertionError("the reward must not be called")

    for kinds in ("swap", ("colour ",), (), ("shape", "swapp")):
        with pytest.raises(
            ValueError, match=r"kinds must be a tuple of corruption kinds, some of shape, colour, "
        ):
            true_vs_corrupted(never_called, n=2, kinds=kinds)


def test_specs_a_kind_does_not_apply_to_are_drawn_again_with_the_next_seed() -> None:
    """--kinds swap: the color_attr specs of one colour twice are left out and made up from the next seed's draw
    (the same draw again repeated its specs)."""
    from imgalign.prompts.shapes import sample_training_specs
    from imgalign.rewards.sanity import checkable_specs

    def two_colours(seed: int) -> list[W.Spec]:
        drawn = sample_training_specs(24, seed=seed, tasks=["color_attr"])
        return [s for s in drawn if s.include[0].color != s.include[1].color]

    assert len(two_colours(0)) < 24
    assert checkable_specs(24, 0, ("swap",)) == (two_colours(0) + two_colours(1))[:24]
