"""imgalign.pretrain.encoder_common, mutation round 22: the evaluation stream's seeds."""

from __future__ import annotations

from imgalign.pretrain import encoder_common as C


def test_the_evaluation_stream_seeds_are_the_ones_the_shipped_model_cards_were_measured_on() -> None:
    """The shipped CLIP and VLM cards report accuracies on the held-out renders of these seeds (0x5EED0000 + 7919 per
    run seed): another formula, even one apart from every training seed, gives other renders and other numbers."""
    assert C.heldout_seed(0) == 0x5EED_0000
    assert C.heldout_seed(1) == 0x5EED_0000 + 7919
    assert C.heldout_seed(2**31) == (2**31 * 7919 + 0x5EED_0000) & 0x7FFFFFFF


def test_the_running_loss_average_travels_in_the_checkpoint(tmp_path) -> None:
    """A resumed or rerun pretraining reports the loss an uninterrupted one does: the average is saved (as a float)
    when there is one, and left out before the first logged loss."""
    from dataclasses import dataclass

    import torch

    @dataclass
    class Cfg:
        steps: int = 2

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    C.save_training_state(tmp_path / "a.pt", model, opt, 3, 0.0, Cfg(), [{"step": 1}], torch.tensor(1.25))
    state = C.load_checkpoint(tmp_path / "a.pt")
    assert state["loss_avg"] == 1.25 and type(state["loss_avg"]) is float and state["step"] == 3
    C.save_training_state(tmp_path / "b.pt", model, opt, 0, 0.0, Cfg(), [], None)
    assert "loss_avg" not in C.load_checkpoint(tmp_path / "b.pt")
