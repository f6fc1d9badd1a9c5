"""Mutation round 32k: imgalign/cli._run's SystemExit branch: with -v a plug-in's sys.exit() goes on as raised
(the traceback the message points to), and exit_called_message shows a text code as the plug-in wrote it
(quoted)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from imgalign.cli import main
from tests.conftest import plugin_module

NAME = "exiting_reward_plugin_r32k"


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from plugin_module(tmp_path, monkeypatch, NAME)


def _score(tmp_path: Path, *before: str) -> int:
    Image.new("RGB", (16, 16), "red").save(tmp_path / "a.png")
    argv = ["score", str(tmp_path / "a.png"), "--reward", f"{NAME}:fn", "--out", str(tmp_path / "s.jsonl")]
    return main([*before, *argv, "--no-progress"])


def _write(plugin: Path, code: str) -> None:
    plugin.write_text(
        "import sys\n\n\ndef fn(images, prompts, metadata):\n"
        f"    sys.exit({code})\n\n\nfn.needs_prompt = False\n"
    )


def test_with_verbose_the_plugins_sys_exit_goes_on_as_raised(plugin: Path, tmp_path: Path) -> None:
    _write(plugin, "3")
    with pytest.raises(SystemExit) as info:
        _score(tmp_path, "-v")
    assert info.value.code == 3


def test_a_text_exit_code_is_shown_quoted_as_written(
    plugin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(plugin, "'no GPU here'")
    assert _score(tmp_path) == 2
    assert f"error: sys.exit('no GPU here') was called at {plugin}:5," in capsys.readouterr().err
