"""Mutation round 30 (helper d): after ``imgalign.config.import_user_module`` reloaded an edited plug-in, the new
file's stamp is what it remembers: a next command with the file unchanged takes the module as it is (mutant: the
first stamp kept, so every later command ran the plug-in's code again)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from imgalign import config
from tests.conftest import plugin_module, write_later

NAME = "r30d_plugin_mod"


@pytest.fixture
def plugin(tmp_path, monkeypatch) -> Iterator[Path]:
    yield from plugin_module(tmp_path, monkeypatch, NAME)


def _load() -> object:
    return config.import_user_module(NAME, f"reward '{NAME}:VALUE'")


def test_a_reloaded_plugin_is_not_run_again_while_its_file_stays_as_it_is(plugin) -> None:
    write_later(plugin, "VALUE = 1\n", 0)
    assert _load().VALUE == 1
    write_later(plugin, "VALUE = 2\n", 10)
    module = _load()
    assert module.VALUE == 2
    module.VALUE = "set after the reload"  # a re-run of the file would put 2 back
    assert _load() is module and module.VALUE == "set after the reload"
