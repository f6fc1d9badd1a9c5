"""Mutation round 32g: `world pretrain --component all`'s refusal of a config its component already names."""

from pathlib import Path

from imgalign.cli import main


def test_a_component_error_that_names_its_component_gets_no_second_prefix(tmp_path: Path, capsys) -> None:
    """The CLIP's own "clip: pool_size must be at least batch_size" is said once, not as "clip: clip: ...", and
    gets no generic "(--set clip.KEY=VALUE)" hint after it; nothing is written."""
    out = tmp_path / "pt"
    args = ["world", "pretrain", "--component", "all", "--out", str(out), "--set", "clip.pool_size=1"]
    assert main(args) == 2
    assert capsys.readouterr().err == (
        "imgalign world pretrain: error: clip: pool_size must be at least batch_size\n"
    )
    assert not out.exists()
