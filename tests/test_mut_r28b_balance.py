from imgalign.trainers.balance import RewardBalancing


def test_a_legacy_marble_state_with_fewer_rewards_starts_fresh_with_its_reason():
    """A state saved before names were recorded is checked by count in both directions: one with fewer rewards than
    this run is refused with the reason, not loaded into MarbleBalancer (which raises on the shape)."""
    legacy = RewardBalancing(["a", "b"], marble=True, diagnose=False).state_dict()
    del legacy["names"], legacy["marble"]["names"]
    rb = RewardBalancing(["a", "b", "c"], marble=True, diagnose=False)
    assert rb.state_change(legacy) == "it has 2 rewards, this run 3 (['a', 'b', 'c'])"
    assert rb.load_state_dict(legacy) == "it has 2 rewards, this run 3 (['a', 'b', 'c'])"
    assert rb.balancer is not None and rb.balancer.steps == 0 and rb.updates == 0
    assert RewardBalancing(["x", "y"], marble=True, diagnose=False).load_state_dict(legacy) is None
