"""Mutation round 30e, eval/reports.py: what survived its tests (see /work/audit/s67/e/mutants.md)."""

from __future__ import annotations

from imgalign.eval.reports import non_number_lines


def test_a_null_value_is_neither_counted_nor_named_as_a_value_that_is_no_number() -> None:
    """A metric logged as null (no value that step) is left out as the NaN/inf warning leaves it out: only text,
    lists and true/false are named, counted among the rows that carry a value."""
    rows = [{"a": None}, {"a": "0.5"}, {"a": 1.0}, {"b": None}]
    assert non_number_lines(rows, ["a", "b"]) == [
        "WARNING: values that are not numbers (text, lists, true/false) logged, left out of the table and the "
        "plots: `a` 1 of 2 rows"
    ]
    assert non_number_lines([{"b": None}, {"b": 2}], ["b"]) == []


def test_only_eval_keys_ending_in_overall_are_a_suites_headline_score() -> None:
    """``eval/<suite>/overall`` only: another key ending in /overall in eval.jsonl (a hand-added or foreign
    metric) is no suite's score to plot and summarise."""
    from imgalign.eval.reports import eval_overall_keys

    rows = [{"step": 0, "eval/shapes/overall": 0.5, "perf/overall": 1.0, "eval/shapes/partial": 0.6}]
    assert eval_overall_keys(rows) == ["eval/shapes/overall"]
