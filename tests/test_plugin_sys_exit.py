"""A plug-in that called sys.exit() ended the command without a word: ``sys.exit(0)`` read as a success (exit status
0, no scores written), any other code named neither the plug-in nor what to do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from imgalign.cli import main
from tests.conftest import plugin_module

NAME = "exiting_reward_plugin"


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from plugin_module(tmp_path, monkeypatch, NAME)


@pytest.mark.parametrize("code", [0, 3])
def test_a_plugin_reward_calling_sys_exit_is_an_error_naming_where(plugin, tmp_path, capsys, code) -> None:
    plugin.write_text(
        f"import sys\n\n\ndef fn(images, prompts, metadata):\n    sys.exit({code})\n\n\nfn.needs_prompt = False\n"
    )
    Image.new("RGB", (16, 16), "red").save(tmp_path / "a.png")
    out = tmp_path / "scores.jsonl"
    status = main(
        ["score", str(tmp_path / "a.png"), "--reward", f"{NAME}:fn", "--out", str(out), "--no-progress"]
    )
    err = capsys.readouterr().err
    assert status == 2
    assert f"imgalign score: error: sys.exit({code}) was called at {plugin}:5, which ended the command" in err
    assert "must raise an exception" in err
    assert not out.exists()
