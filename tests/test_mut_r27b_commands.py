"""Mutation round 27 (commands/__init__.py): behaviour the earlier tests let a mutant change unseen."""

from __future__ import annotations

from imgalign.commands import counted


def test_counted_is_singular_for_one_only() -> None:
    """`counted` gives the plural for every count but 1: "0 prompts" (not "0 prompt"), "1 prompt", "2 prompts"."""
    assert [counted(n, "prompt") for n in (0, 1, 2)] == ["0 prompts", "1 prompt", "2 prompts"]
