"""Mutation round 28 (helper i): ``imgalign.config.import_user_module``'s reload of an edited plug-in: only a
changed file (its size or its time) reloads it, a module the caller imported itself is taken as it is, one gone
from ``sys.modules`` is imported afresh, a library's module and one without a file are never reloaded, and a plug-in
whose file was deleted is named."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from imgalign import config
from tests.conftest import plugin_module, write_later

NAME = "r28i_plugin_mod"


def _write(path: Path, value: int, later_s: int) -> None:
    write_later(path, f"VALUE = {value}\n", later_s)


@pytest.fixture
def plugin(tmp_path, monkeypatch) -> Iterator[Path]:
    yield from plugin_module(tmp_path, monkeypatch, NAME)


def _load() -> object:
    return config.import_user_module(NAME, f"reward '{NAME}:VALUE'")


def test_an_edit_that_keeps_the_files_time_but_not_its_size_is_reloaded(plugin) -> None:
    _write(plugin, 1, 0)
    assert _load().VALUE == 1
    mtime = plugin.stat().st_mtime_ns
    plugin.write_text("VALUE = 22\n")
    os.utime(plugin, ns=(mtime, mtime))
    assert _load().VALUE == 22


def test_a_module_the_caller_imported_itself_is_not_imported_again(plugin, monkeypatch) -> None:
    """A notebook's own ``import mod`` then a command: its objects stay the caller's (no re-run of the module)."""
    _write(plugin, 1, 0)
    mine = importlib.import_module(NAME)
    mine.VALUE = "set by the caller"
    assert _load() is mine and mine.VALUE == "set by the caller"


def test_a_module_dropped_from_sys_modules_is_imported_afresh(plugin) -> None:
    _write(plugin, 1, 0)
    _load()
    del sys.modules[NAME]
    _write(plugin, 5, 10)
    assert _load().VALUE == 5


def test_a_library_module_is_never_reloaded_when_its_file_changes(plugin, monkeypatch) -> None:
    monkeypatch.setattr(config, "_library_file", lambda filename: True)
    _write(plugin, 1, 0)
    assert _load().VALUE == 1
    _write(plugin, 2, 10)
    assert _load().VALUE == 1


def test_a_module_without_a_file_is_taken_as_it_is() -> None:
    assert config.import_user_module("sys", "reward 'sys:argv'") is sys


def test_a_plugin_whose_file_was_deleted_is_named_with_what_to_do(plugin) -> None:
    _write(plugin, 1, 0)
    _load()
    plugin.unlink()
    with pytest.raises(
        ValueError,
        match=rf"^cannot import reward '{NAME}:VALUE': {NAME}'s file {plugin} is gone since this process imported "
        r"it \(deleted or moved\); put it back, or put the folder that now holds it on the import path$",
    ):
        _load()
