"""Bad-input round 26: `imgalign train CONFIG --print-config` under `accelerate launch` (the launch lines of
examples/README.md and examples/accelerate/*.yaml), which starts one imgalign per process with WORLD_SIZE and RANK
set."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main

CONFIG = str(Path(__file__).resolve().parents[1] / "examples" / "shapes" / "flow_grpo.yaml")


def test_print_config_checks_the_batch_on_the_launched_processes(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`accelerate launch --num_processes 3 -m imgalign train flow_grpo.yaml --set train.updates_per_step=3
    --print-config` showed the config (three times) as fine, though its 16 samples per process do not split into 3
    updates and the training stops on it; the batch is now checked on the launched process count."""
    overrides = ["--set", "train.updates_per_step=3", "--print-config"]
    assert main(["train", CONFIG, *overrides]) == 0  # 48 samples split into 3 updates on one process
    capsys.readouterr()
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    assert main(["train", CONFIG, *overrides]) == 2
    err = capsys.readouterr().err
    assert "16 samples per process do not split into train.updates_per_step=3 equal updates" in err, err


def test_print_config_is_printed_once_under_a_launch(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each launched process printed the whole config: two (or eight) copies, one after another; the main process
    (RANK 0) prints it, the others check it only."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert main(["train", CONFIG, "--print-config"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("model:") and shown.count("\nsampling:") == 1
    monkeypatch.setenv("RANK", "1")
    assert main(["train", CONFIG, "--print-config"]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("value", "count"), [(None, 1), ("", 1), ("4", 4)])
def test_launched_processes_reads_world_size(
    value: str | None, count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imgalign.commands.train import launched_processes

    if value is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", value)
    assert launched_processes() == count


@pytest.mark.parametrize("value", ["0", "x", "²"])
def test_launched_processes_refuses_a_world_size_that_is_no_process_count(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imgalign.commands.train import launched_processes

    monkeypatch.setenv("WORLD_SIZE", value)
    with pytest.raises(ValueError, match=rf"^WORLD_SIZE={value!r} is not a process count"):
        launched_processes()
