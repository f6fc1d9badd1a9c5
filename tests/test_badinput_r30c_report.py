"""Bad-input round 30c: `imgalign report --compare ... --keys` given as a comma list or as an empty key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.cli import main


def _run(folder: Path) -> Path:
    folder.mkdir()
    rows = [{"step": s, "reward/red/mean": 0.1 * s, "policy/approx_kl": 0.01 * s} for s in (1, 2, 3)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_compare_keys_as_a_comma_list_says_keys_are_separated_by_spaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--keys reward/red/mean,policy/approx_kl` (a comma list, as `grid --seeds` takes one) said "no run logs
    'reward/red/mean,policy/approx_kl'" and listed keys that include both parts. It now says the runs log each part
    and gives the space-separated spelling; nothing is written."""
    run = _run(tmp_path / "run")
    out = tmp_path / "cmp"
    argv = [
        "report",
        "--compare",
        f"a={run}",
        "--keys",
        "reward/red/mean,policy/approx_kl",
        "--out",
        str(out),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "they log each of its comma-separated parts: --keys takes keys separated by spaces" in err
    assert "--keys reward/red/mean policy/approx_kl" in err
    assert not out.exists()
    # a comma list whose parts are not all logged keeps the list of logged keys
    assert main([*argv[:4], "reward/red/mean,nosuch", "--out", str(out)]) == 2
    assert "no run logs 'reward/red/mean,nosuch'; keys these runs log include: " in capsys.readouterr().err
    # the spelling the message gives works
    assert main([*argv[:4], "reward/red/mean", "policy/approx_kl", "--out", str(out)]) == 0
    assert (out / "compare.md").is_file()


@pytest.mark.parametrize("key", ["", "  "])
def test_compare_an_empty_key_is_named_as_empty(
    key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--keys "$KEY"` with KEY unset said "no run logs ''" and listed the logged keys, without saying that the key
    given was empty. It now says so and suggests an unset shell variable."""
    run = _run(tmp_path / "run")
    out = tmp_path / "cmp"
    assert main(["report", "--compare", f"a={run}", "--keys", "reward/red/mean", key, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--keys has an empty key (an unset shell variable?)" in err
    assert not out.exists()
