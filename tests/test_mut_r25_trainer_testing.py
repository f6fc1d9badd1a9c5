"""Round 25 mutants of trainers/testing.py (the helpers the tests and benches share) that no test reached."""

from __future__ import annotations

import argparse

import pytest

from imgalign.trainers.testing import positive_int


def test_positive_int_takes_one_and_up_and_refuses_zero_negatives_and_words() -> None:
    assert (positive_int("1"), positive_int("12")) == (1, 12)
    for text, says in (("0", "must be at least 1, got 0"), ("-3", "got -3"), ("2.5", "got '2.5'")):
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            positive_int(text)
