"""imgalign.pretrain.clip, mutation round 28 (helper e): the zero-shot accuracies score each image's own label."""

from __future__ import annotations

import pytest
import torch

from imgalign import shapes as W
from imgalign.pretrain import clip as clip_pt


def test_zero_shot_accuracy_compares_shape_predictions_with_shapes_and_colour_ones_with_colours(monkeypatch):
    """Each image encodes to one-hot(its predicted shape) + one-hot(its predicted colour) and each prompt to its
    name's one-hot, so the predictions are known: 3 of 4 shapes and 1 of 4 colours match the renders' labels. A
    colour prediction checked against the shape label (or the reverse) scores 0 instead."""
    shapes, colours = list(W.SHAPES), list(W.COLORS)
    # (predicted shape, predicted colour) as the "image", then the render's true shape and colour
    data = [
        ((0, 0), shapes[0], colours[0]),
        ((1, 2), shapes[1], colours[3]),
        ((2, 1), shapes[2], colours[4]),
        ((0, 5), shapes[3], colours[0]),
    ]
    monkeypatch.setattr(clip_pt, "heldout_single_objects", lambda n, seed: data)
    dim = len(shapes) + len(colours)

    class Fake(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def encode_image(self, x, normalize):
            return x

        def encode_text(self, tok, normalize):
            offset = 0 if len(tok) == len(shapes) else len(shapes)
            return torch.eye(dim)[offset : offset + len(tok)]

    def preprocess(img):
        s, c = img
        return torch.eye(dim)[s] + torch.eye(dim)[len(shapes) + c]

    acc = clip_pt.zero_shot_accuracy(Fake(), preprocess, lambda texts: torch.arange(len(texts)), n=4, seed=0)
    assert acc == {"zero_shot/shape_acc": pytest.approx(3 / 4), "zero_shot/colour_acc": pytest.approx(1 / 4)}
