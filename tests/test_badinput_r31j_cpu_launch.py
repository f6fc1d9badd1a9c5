"""Bad-input round 31j: multi-process training through accelerate on the CPU."""

from __future__ import annotations

import pytest

from imgalign.trainers.testing import write_config as write

# what accelerate launch's own launcher (its simple one, used for --cpu and distributed_type: MULTI_CPU) sets
LAUNCHED_ALONE = {
    "ACCELERATE_USE_CPU": "True",
    "ACCELERATE_DYNAMO_BACKEND": "NO",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


def test_a_cpu_launch_asked_for_several_processes_that_started_one_is_named() -> None:
    """`accelerate launch --cpu --num_processes 2` (or --num_processes 2 without GPUs, or a config file with
    distributed_type: MULTI_CPU) started one process and the run trained the whole batch in it, exit 0, without a
    word (only its log line said processes: 1)."""
    from imgalign.trainers.trainer import single_cpu_launch

    msg = single_cpu_launch(LAUNCHED_ALONE, 1)
    assert msg is not None and "asked for several processes" in msg
    assert "ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes N" in msg
    # a launch that did start them, a one-process launch (no MASTER_PORT), torchrun's, or no launcher: nothing
    assert single_cpu_launch(LAUNCHED_ALONE, 2) is None
    assert single_cpu_launch({k: v for k, v in LAUNCHED_ALONE.items() if k != "MASTER_PORT"}, 1) is None
    assert single_cpu_launch({**LAUNCHED_ALONE, "WORLD_SIZE": "1"}, 1) is None
    assert (
        single_cpu_launch({"MASTER_ADDR": "x", "MASTER_PORT": "1", "ACCELERATE_USE_CPU": "true"}, 1) is None
    )
    # `accelerate launch --num_processes 2` on a machine without GPUs: the same single process, USE_CPU False
    assert single_cpu_launch({**LAUNCHED_ALONE, "ACCELERATE_USE_CPU": "False"}, 1) is not None


def test_the_run_warns_of_it(sd3_dir, tmp_path, monkeypatch, caplog) -> None:
    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer

    for key, value in LAUNCHED_ALONE.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    cfg = {
        "model": {"path": str(sd3_dir)},
        "sampling": {"num_steps": 2, "group_size": 2, "samples_per_step": 4, "batch_size": 4},
        "rewards": {"names": ["imgalign.trainers.testing:red_reward"]},
        "train": {"max_steps": 1},
        "eval": {"every": -1},
        "log": {"output_dir": str(tmp_path / "run"), "trackers": "none", "progress": False},
    }
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg, tmp_path / "c.yaml")))
    with caplog.at_level("WARNING"):
        tr.setup()
    assert tr.world == 1
    assert "accelerate launch was asked for several processes" in caplog.text


def test_a_resume_refused_on_the_cpu_names_the_launch_that_starts_the_processes_there(tmp_path) -> None:
    """A checkpoint of 2 CPU processes resumed by 1 said `resume ... from accelerate launch --num_processes 2 -m
    imgalign train ...`: on CPUs that launch starts 1 process, so the advice gave the same refusal again."""
    import json
    from types import SimpleNamespace

    from imgalign.config import ConfigError
    from imgalign.trainers.trainer import FlowGRPOTrainer

    ckpt = tmp_path / "checkpoints" / "step-000001"
    (ckpt / "trainer_state").mkdir(parents=True)
    (ckpt / "trainer_state" / "state.json").write_text(json.dumps({"step": 1, "num_processes": 2}))
    acc = SimpleNamespace(device=SimpleNamespace(type="cpu"))
    tr = SimpleNamespace(resume_from=ckpt, world=1, out=tmp_path, acc=acc)
    with pytest.raises(ConfigError) as e:
        FlowGRPOTrainer._check_resume_fits(tr)
    assert "from `ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 -m imgalign" in str(
        e.value
    )
    acc.device.type = "cuda"  # on GPUs the plain launch starts them
    with pytest.raises(
        ConfigError, match=r"from `accelerate launch --num_processes 2 -m imgalign train \.\.\.`"
    ):
        FlowGRPOTrainer._check_resume_fits(tr)


def test_a_process_group_that_no_torchrun_started_is_named_before_the_wait(
    sd3_dir, tmp_path, monkeypatch, caplog
) -> None:
    """WORLD_SIZE=2 RANK=0 left in the shell, under `accelerate launch --cpu --num_processes 2` (which sets
    MASTER_ADDR): the run waited for a second process that never came, printing nothing (until torch's
    process-group timeout), and answered neither Ctrl-C nor SIGTERM."""
    import accelerate

    from imgalign.config import load_config
    from imgalign.trainers.config import FlowGRPOConfig
    from imgalign.trainers.trainer import FlowGRPOTrainer, rendezvous_notice

    env = {
        "WORLD_SIZE": "2",
        "RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "ACCELERATE_USE_CPU": "True",  # (accelerate launch --cpu's launcher sets it)
    }
    said = rendezvous_notice(env, pid=4242)
    assert said is not None and "WORLD_SIZE=2 as RANK=0 at 127.0.0.1:29500" in said
    # the wait answers neither Ctrl-C nor SIGTERM (tried): the line names the process to kill
    assert "kill -9 4242) and unset WORLD_SIZE, RANK and LOCAL_RANK" in said
    # torchrun's processes (accelerate launch --multi_gpu), one process, or no MASTER_ADDR (refused by name): nothing
    assert rendezvous_notice({**env, "TORCHELASTIC_RUN_ID": "x"}) is None
    assert rendezvous_notice({**env, "WORLD_SIZE": "1"}) is None
    assert rendezvous_notice({k: v for k, v in env.items() if k != "MASTER_ADDR"}) is None
    assert rendezvous_notice({**env, "WORLD_SIZE": "two"}) is None
    # a cluster's own launcher that sets the variables by hand (DeepSpeed's, srun, mpirun): not told to kill -9
    assert rendezvous_notice({k: v for k, v in env.items() if k != "ACCELERATE_USE_CPU"}) is None

    def waits(**kw):  # the rendezvous itself would wait: the line must come before it
        raise RuntimeError("stopped before the rendezvous")

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setattr(accelerate, "Accelerator", waits)
    cfg = {
        "model": {"path": str(sd3_dir)},
        "rewards": {"names": ["imgalign.trainers.testing:red_reward"]},
        "log": {"output_dir": str(tmp_path / "run"), "trackers": "none", "progress": False},
    }
    tr = FlowGRPOTrainer(load_config(FlowGRPOConfig, write(cfg, tmp_path / "c.yaml")))
    with caplog.at_level("WARNING"), pytest.raises(Exception, match="stopped before the rendezvous"):
        tr.setup()
    assert "joining a process group of WORLD_SIZE=2" in caplog.text
