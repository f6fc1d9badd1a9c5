"""Units of the ``imgalign`` command's plumbing (imgalign/cli.py, imgalign/commands/__init__.py and
imgalign/commands/train.py) that the command-level tests leave unchecked (mutation round 10)."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from pathlib import Path

import pytest
import yaml

from imgalign.cli import main


def _checkpoint(path: Path, step: int) -> Path:
    """A checkpoint folder holding only its trainer_state/state.json (what latest_checkpoint reads)."""
    (path / "trainer_state").mkdir(parents=True)
    (path / "trainer_state" / "state.json").write_text(json.dumps({"step": step, "num_processes": 1}))
    return path


def test_an_interrupted_run_begun_with_resume_auto_is_told_to_run_with_resume_auto_again(tmp_path):
    """--resume auto before the first checkpoint is the plain advice (run with --resume auto), not the branch's
    "run the same command again (with --resume auto) ... from there", which is for a checkpoint of another folder;
    once the folder has a checkpoint, that checkpoint is named whatever --resume was."""
    from imgalign.commands.train import interrupted_line

    out = tmp_path / "run"
    for resume in (None, "auto"):
        line = interrupted_line(out, resume)
        assert line == (
            f"interrupted before the run's first checkpoint in {out}: run the same command with --resume auto to "
            "start it again"
        )
    other = tmp_path / "old" / "checkpoints" / "step-000003"
    assert f"again (with --resume {other}) to start it again from there" in interrupted_line(out, str(other))
    last = _checkpoint(out / "checkpoints" / "step-000002", 2)
    for resume in (None, "auto", str(other)):
        assert interrupted_line(out, resume).startswith(f"interrupted; its last checkpoint, {last}, is whole")


def test_sigterm_handling_off_the_main_thread_sets_no_handler():
    """Only the main thread may set a signal handler: main() called from another thread (a notebook's worker, a
    test runner's thread) runs without one instead of failing in signal.signal."""
    from imgalign.cli import _sigterm_interrupts

    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def body() -> None:
        try:
            with _sigterm_interrupts() as got:
                seen.append((got, signal.getsignal(signal.SIGTERM)))
        except Exception as e:  # noqa: BLE001 - the failure to report
            seen.append(e)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == [([], before)]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_device_string_torch_does_not_parse_is_named_with_the_forms_to_give():
    from imgalign.commands import check_device

    check_device("cpu")
    with pytest.raises(ValueError, match="--gpu 'gpu0' is not a torch device; use cpu, cuda or cuda:N"):
        check_device("gpu0", flag="--gpu")


def test_a_seed_must_be_written_as_an_integer():
    """--seed 1.5 is refused, not truncated to 1; a seed out of range gets check_seed's message."""
    from imgalign.commands import seed_arg

    assert seed_arg("7") == 7
    for text in ("1.5", "1e3", "seven"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"'{text}' is not an integer seed"):
            seed_arg(text)
    with pytest.raises(argparse.ArgumentTypeError, match="seed"):
        seed_arg("-1")


def test_train_output_dir_of_spaces_is_refused_as_an_empty_one(capsys):
    assert main(["train", "--output-dir", "  ", "--print-config"]) == 2
    assert "--output-dir is empty (an unset shell variable?)" in capsys.readouterr().err


def test_print_config_and_the_checks_before_training_refuse_a_reward_option_it_does_not_take(capsys):
    """``clip:wieght=2`` or ``clip:batch_size=abc`` was shown by --print-config as a config to run, and training
    refused it only when the rewards were built (after the first reward's model had loaded)."""
    from imgalign.config import ConfigError
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import check_reward_names

    two = 'rewards.names=[geneval, "clip:wieght=2"]'
    assert main(["train", "--set", two, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert (
        "rewards.names: 'clip:wieght=2': reward 'clip': unknown option(s) wieght (did you mean 'weight'?); its "
        "options: model" in err
    )
    cfg = FlowGRPOConfig()
    cfg.rewards.names = ["clip:batch_size=abc"]
    with pytest.raises(ConfigError, match="option batch_size must be a whole number"):
        check_reward_names(cfg)
    cfg.rewards.names = ["clip:batch_size=8", "geneval:mode=partial"]
    check_reward_names(cfg)  # taken: the options it has


def test_print_config_keeps_the_sections_in_the_configs_order(capsys):
    """--print-config is for reading: model first, log last, each section's keys as the config class lists them
    (a sorted dump put eval before model and log before train)."""
    from imgalign.config import to_dict
    from imgalign.trainers.config import FlowGRPOConfig

    assert main(["train", "--print-config"]) == 0
    printed = capsys.readouterr().out
    order = list(to_dict(FlowGRPOConfig()))
    assert order[0] == "model" and order[-1] == "log"
    assert [ln[:-1] for ln in printed.splitlines() if not ln.startswith(" ")] == order
    assert list(yaml.safe_load(printed)["train"]) == list(to_dict(FlowGRPOConfig())["train"])


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--set", "train.lr=0.002"], "train.lr = 0.002  (default 0.0001)\n"),
        (["--max-steps", "7"], "train.max_steps = 7  (default 100)\n"),
        (["--output-dir", "elsewhere"], "log.output_dir = 'elsewhere'  (default 'runs/flow_grpo')\n"),
        (["--no-progress"], "log.progress = False  (default True)\n"),
    ],
)
def test_train_describe_shows_what_each_flag_alone_sets(flags, line, capsys):
    """Each of --set, --max-steps, --output-dir and --no-progress, given without a CONFIG, is shown by --describe
    (it was ignored, silently)."""
    assert main(["train", *flags, "--describe"]) == 0
    assert line in capsys.readouterr().out


def test_train_prints_its_summary_from_the_main_process_only(tmp_path, capsys, monkeypatch):
    """Under `accelerate launch` every process runs the command: only RANK 0 (or no RANK) prints the summary."""
    import imgalign.trainers.trainer as trainer

    def fake_run(cfg, out, resume):
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/red/mean": 0.5}) + "\n")

    monkeypatch.setattr(trainer, "preflight", lambda cfg: None)
    monkeypatch.setattr(trainer, "run", fake_run)
    out = tmp_path / "run"
    monkeypatch.setenv(
        "WORLD_SIZE", "2"
    )  # a launch of two processes (without one, every process is the main one)
    for rank, printed in (("1", False), ("0", True), ("", True)):
        monkeypatch.setenv("RANK", rank)
        assert main(["train", "--output-dir", str(out), "--max-steps", "1"]) == 0
        assert (f"done: {out}\n" in capsys.readouterr().out) is printed, rank


def _raising(exc: BaseException):  # noqa: ANN202 - a command handler
    def handler(args: argparse.Namespace) -> int:
        raise exc

    return handler


def test_a_full_disk_names_the_run_folder_and_how_each_command_goes_on(monkeypatch, capsys):
    """A write cut short by a full disk (ENOSPC, as EFBIG and EDQUOT) names --output-dir where the command has no
    --out, and says how that command goes on (train: --resume auto; a command without its own hint: run it again);
    an OSError that names its file names it in place of the folder (Python's own line said nothing to do)."""
    import errno

    import imgalign.commands.report as report
    import imgalign.commands.train as train

    full = OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(train, "run_train", _raising(full))
    assert main(["train", "--output-dir", "runs/x"]) == 2
    assert capsys.readouterr().err == (
        "imgalign train: error: No space left on device while writing an output file under 'runs/x': free disk "
        "space (or raise the file-size limit, ulimit -f); every checkpoint written so far is whole: add --resume "
        "auto to the same command to continue from the last one\n"
    )
    monkeypatch.setattr(report, "run_report", _raising(full))
    assert main(["report", "run", "--out", "rep"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "under 'rep': free disk space (or raise the file-size limit, ulimit -f); then run the same "
        "command again\n"
    )
    named = OSError(errno.ENOSPC, "No space left on device", "rep/summary.md")
    monkeypatch.setattr(report, "run_report", _raising(named))
    assert main(["report", "run"]) == 2
    assert capsys.readouterr().err == (
        "imgalign report: error: No space left on device while writing 'rep/summary.md': free disk space (or raise "
        "the file-size limit, ulimit -f); then run the same command again\n"
    )


def test_a_full_disk_during_training_names_the_configs_run_folder(tmp_path, monkeypatch, capsys):
    """Without --output-dir the run folder is the config's log.output_dir: a full disk named no folder."""
    import errno

    import imgalign.trainers.trainer as trainer

    def full(cfg, out, resume):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(trainer, "preflight", lambda cfg: None)
    monkeypatch.setattr(trainer, "run", full)
    out = tmp_path / "from_config"
    config = tmp_path / "c.yaml"
    config.write_text(f"log:\n  output_dir: {out}\n")
    assert main(["train", str(config)]) == 2
    assert f"while writing an output file under {str(out)!r}: free disk space" in capsys.readouterr().err


def test_train_refuses_an_empty_resume_before_anything_loads(tmp_path, capsys, monkeypatch):
    """`--resume "$CKPT"` with CKPT unset trained a new folder from the base model, as if --resume were not given."""
    import imgalign.trainers.trainer as trainer

    calls = []
    monkeypatch.setattr(trainer, "preflight", lambda cfg: calls.append("preflight"))
    monkeypatch.setattr(trainer, "run", lambda cfg, out, resume: calls.append(resume))
    for resume in ("", "  "):
        assert main(["train", "--output-dir", str(tmp_path / "run"), "--resume", resume]) == 2
        assert "--resume is empty (an unset shell variable?): give auto, or the run or checkpoint folder" in (
            capsys.readouterr().err
        )
    assert calls == []


def test_a_name_longer_than_the_file_system_takes_is_said_so_with_what_to_do(tmp_path, capsys):
    """A --model or --output-dir with a name over 255 bytes printed Python's "[Errno 36] File name too long: '...'"
    with the whole name and nothing to do."""
    long_name = "a" * 300
    assert main(["eval", "--suite", "shapes", "--model", long_name, "--out", str(tmp_path / "ev")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"imgalign eval: error: path '{'a' * 60}...{'a' * 12}' is too long for the file system"
    )
    assert (
        "(a folder or file name of 300 bytes; most file systems take at most 255 bytes per name): give a shorter"
        in err
    )
    assert main(["train", "--max-steps", "1", "--output-dir", str(tmp_path / long_name)]) == 2
    assert "a folder or file name of 300 bytes" in capsys.readouterr().err


def test_a_path_too_long_of_short_names_is_called_too_long_a_path(tmp_path, capsys):
    """A path over the system's path limit made of short names (`ab/ab/.../x`) was called "a folder or file name of
    13 bytes; most file systems take at most 255 bytes per name", which it is not."""
    long_path = "ab/" * 1500 + "x.safetensors"
    assert main(["rewards", "fid-stats", "--images", "shapes", "--out", long_path]) == 2
    err = capsys.readouterr().err
    assert (
        "is too long for the file system (the whole path is 4513 bytes; most systems take at most 4096" in err
    )
    assert "a folder or file name of" not in err


def test_a_name_too_long_error_without_a_file_name_names_no_empty_path():
    """An ENAMETOOLONG that carries no file name said "path '' is too long ... (a folder or file name of 0 bytes"."""
    from imgalign.cli import name_too_long_message

    assert name_too_long_message("") == (
        "a path given is too long for the file system (most take at most 255 bytes per folder or file name, 4096 "
        "in a path): give a shorter one"
    )


def test_an_interrupted_train_begun_from_another_checkpoint_says_to_resume_from_it_again(
    tmp_path, monkeypatch
):
    """Ctrl-C before the first save of a run begun with --resume CHECKPOINT (of another folder): the line names
    that checkpoint (--resume auto would find none in the new folder and start from the base model)."""
    import imgalign.trainers.trainer as trainer
    from imgalign.cli import Interrupted

    def interrupted(cfg, out, resume):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "preflight", lambda cfg: None)
    monkeypatch.setattr(trainer, "run", interrupted)
    other = tmp_path / "old" / "checkpoints" / "step-000002"
    out = tmp_path / "run"
    with pytest.raises(Interrupted, match=f"with --resume {other}\\) to start it again from there"):
        main(["train", "--output-dir", str(out), "--resume", str(other), "--max-steps", "1"])
    assert not Path(out).exists()
