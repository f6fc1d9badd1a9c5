"""Round 32 (helper g): in one process (a notebook), a plug-in reward edited after a first command is used as edited
by the next command, not as it was first imported."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from imgalign.rewards.base import build_reward
from tests.conftest import plugin_module, write_later


def _write(path: Path, body: str, later_s: int) -> None:
    write_later(path, f"def score(images, prompts, metadata):\n    return {body}\n", later_s)


@pytest.fixture
def plugin(tmp_path, monkeypatch) -> Iterator[Path]:
    yield from plugin_module(tmp_path, monkeypatch, "r32g_edited_reward")


def test_an_edited_plugin_is_reloaded_by_the_next_build(plugin) -> None:
    """The second command in the same process silently scored with the first version's code."""
    x = torch.full((2, 3, 4, 4), 0.5)
    _write(plugin, "[1.0] * len(prompts)", 0)
    assert build_reward("r32g_edited_reward:score")(x, ["a", "b"]).scores.tolist() == [1.0, 1.0]
    _write(plugin, "[2.0] * len(prompts)  # fixed", 10)
    assert build_reward("r32g_edited_reward:score")(x, ["a", "b"]).scores.tolist() == [2.0, 2.0]


def test_an_unchanged_plugin_is_not_imported_again(plugin) -> None:
    _write(plugin, "[1.0] * len(prompts)", 0)
    first = build_reward("r32g_edited_reward:score").fn
    assert build_reward("r32g_edited_reward:score").fn is first


def test_an_edit_that_breaks_the_plugin_is_named_and_the_next_fix_is_used(plugin) -> None:
    x = torch.full((1, 3, 4, 4), 0.5)
    _write(plugin, "[1.0]", 0)
    build_reward("r32g_edited_reward:score")
    plugin.write_text("def score(images, prompts, metadata)\n")
    st = plugin.stat()
    os.utime(plugin, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000_000))
    with pytest.raises(ValueError, match=r"importing r32g_edited_reward raised SyntaxError"):
        build_reward("r32g_edited_reward:score")
    _write(plugin, "[3.0]", 20)
    assert build_reward("r32g_edited_reward:score")(x, ["a"]).scores.tolist() == [3.0]
