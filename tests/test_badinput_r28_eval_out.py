"""Bad-input round 28: `imgalign eval` run again into its own --out with other prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.cli import main


def test_eval_into_an_out_of_other_prompts_says_the_prompt_files_differ_not_two_digests(
    tmp_path: Path, two_prompts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Re-running into an --out evaluated with another prompt file was refused with "prompts: '53f81dcc369719f6da
    898a0f57cf302dd01fd7e91dc2a052a07a1f9b8b5747fe' there, 'c52499cf...' now": two SHA-256 digests of 64 digits
    that name neither file nor what differs."""
    one = tmp_path / "one.jsonl"
    one.write_text(two_prompts.read_text().splitlines()[0] + "\n")
    out = tmp_path / "ev"
    argv = ["eval", "--ground-truth", "--images-per-prompt", "1", "--out", str(out)]
    assert main([*argv, "--prompts", str(one)]) == 0
    capsys.readouterr()
    assert main([*argv, "--prompts", str(two_prompts)]) == 2
    err = capsys.readouterr().err
    there = json.loads((out / "eval_args.json").read_text())["prompts"]
    assert (
        "holds another evaluation (prompts: the --prompts file's content differs from the one evaluated there"
        in err
    )
    assert f"(SHA-256 {there[:12]}... there, " in err
    assert there not in err  # no 64-digit digest


def test_other_settings_and_prompt_names_are_still_shown_as_recorded() -> None:
    from imgalign.commands.evaluate import setting_change

    digest = "ab" * 32
    assert setting_change("seed", 0, 1) == "seed: 0 there, 1 now"
    assert setting_change("prompts", "generate:1", digest) == f"prompts: 'generate:1' there, {digest!r} now"
    assert setting_change("model", digest, "c" * 64) == f"model: {digest!r} there, {'c' * 64!r} now"
    assert setting_change("prompts", "A" * 64, "b" * 64).startswith("prompts: 'AAAA")
