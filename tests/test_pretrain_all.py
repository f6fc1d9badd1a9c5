"""``imgalign world pretrain --component all``: per-component overrides and the two-process schedule."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from test_encoders import TINY_CLIP, TINY_VLM
from test_t2i import TINY_T2I

from imgalign.cli import main
from imgalign.commands.world import split_component_overrides
from imgalign.pretrain import clip as clip_pt
from imgalign.pretrain import t2i
from imgalign.pretrain import vlm as vlm_pt

# the component tests' tiny configs, two steps each
TINY = {
    "t2i": {**TINY_T2I, "steps": 2},
    "clip": {**TINY_CLIP, "steps": 2},
    "vlm": {**TINY_VLM, "steps": 2},
}


def _sets(comp: str) -> list[str]:
    out = []
    for k, v in TINY[comp].items():
        out += ["--set", f"{comp}.{k}={v}"]
    return out


def test_overrides_are_split_by_component_prefix():
    names = ["t2i", "clip", "vlm"]
    per = split_component_overrides(names, ["t2i.steps=5", "vlm.lr=0.1", "t2i.vae_channels=[8, 8]"])
    assert per == {"t2i": ["steps=5", "vae_channels=[8, 8]"], "clip": [], "vlm": ["lr=0.1"]}
    assert split_component_overrides(["t2i"], ["steps=5", "t2i.lr=1"]) == {"t2i": ["steps=5", "lr=1"]}
    # one component: a dotted key that names no component is that component's own (nested) key
    assert split_component_overrides(["t2i"], ["init.seed=3"]) == {"t2i": ["init.seed=3"]}
    # several components: the component is the key's first part, a nested key keeps the rest
    assert split_component_overrides(names, ["t2i.init.seed=3"])["t2i"] == ["init.seed=3"]
    with pytest.raises(ValueError, match=r"prefix the key with its component.*t2i\.steps="):
        split_component_overrides(names, ["steps=5"])
    # a key that is a component's name, without a dot, is no prefix: refused with several, kept whole with one
    with pytest.raises(ValueError, match=r"--set 'vlm=5': with --component all, prefix the key"):
        split_component_overrides(names, ["vlm=5"])
    assert split_component_overrides(["t2i"], ["t2i=5"]) == {"t2i": ["t2i=5"]}
    # another component's setting with one component: named as such (it was "unknown config key 'clip'")
    with pytest.raises(
        ValueError, match=r"'clip.steps=5' is a setting of the clip component, which --component t2i"
    ):
        split_component_overrides(["t2i"], ["clip.steps=5"])
    # a misspelt component is named (the old message suggested --set t2i.t3i.steps=...)
    with pytest.raises(ValueError, match=r"'t3i' is not a component;.*\(e\.g\. --set t2i\.steps=\.\.\.\)"):
        split_component_overrides(names, ["t3i.steps=5"])


def test_bad_all_arguments_fail_before_training(tmp_path, capsys):
    base = ["world", "pretrain", "--component", "all", "--out", str(tmp_path)]
    for extra, msg in (
        (["--set", "steps=3"], "prefix the key with its component"),
        (["--jobs", "0"], "--jobs must be at least 1"),
        (["--set", "clip.nonsense=1"], "clip: unknown config key 'nonsense'"),  # the component is named
        # an error without a --set hint of its own ends with the prefixed form the key needs
        (["--set", "vlm.steps=abc"], "vlm: steps: expected an integer, got 'abc' (--set vlm.KEY=VALUE)"),
        # a component's own hint gets the prefix --component all needs (it said --set heads=N)
        (["--set", "t2i.heads=0"], "t2i: heads must be at least 1 (got 0); set it with --set t2i.heads=N"),
    ):
        assert main(base + extra) != 0
        assert msg in capsys.readouterr().err
    # an error that already names its component (the CLIP's own checks) is passed on as it is, not prefixed twice
    assert main([*base, "--set", "clip.pool_size=1"]) != 0
    err = capsys.readouterr().err
    assert (
        "clip: pool_size must be at least batch_size" in err
        and "clip: clip:" not in err
        and "KEY=" not in err
    )
    assert not any(tmp_path.iterdir())


def test_an_out_that_cannot_be_written_fails_before_training(tmp_path, capsys, monkeypatch):
    """--out through a file, or in a folder that takes no new file, is refused before any component trains."""
    from imgalign.commands import world

    def no_training(*args, **kwargs):
        raise AssertionError("a component started training before --out was checked")

    monkeypatch.setattr(world, "_pretrain_one", no_training)
    note = tmp_path / "note.txt"
    note.write_text("a file")
    for out, msg in (
        (note / "pt", f"'{note}' is a file, not a folder"),
        ("/proc/imgalign-pt", "cannot write in"),
    ):
        assert main(["world", "pretrain", "--component", "clip", "--out", str(out)]) == 2
        assert msg in capsys.readouterr().err
    # a finished model folder as --out: the VLM would have trained into shapes-clip/shapes-vlm/
    model = tmp_path / "pt" / "shapes-clip"
    model.mkdir(parents=True)
    (model / "open_clip_config.json").write_text("{}")
    assert main(["world", "pretrain", "--component", "vlm", "--out", str(model)]) == 2
    assert (
        "is a model folder (it holds open_clip_config.json); give the folder that holds"
        in capsys.readouterr().err
    )
    # a component's work folder (it holds the run's config.json) was called a model folder
    work = tmp_path / "pt" / "t2i-work"
    work.mkdir()
    (work / "config.json").write_text("{}")
    assert main(["world", "pretrain", "--component", "clip", "--out", str(work)]) == 2
    err = capsys.readouterr().err
    assert (
        "is the work folder of pretraining t2i (checkpoints and caches); give the folder above it "
        f"('{work.parent}')" in err
    )
    # a file where a component writes a folder (its model folder, work folder, or their .tmp/.old): a bare
    # "[Errno 20] Not a directory", the CLIP's only after it had trained
    for comp, name in (
        ("clip", "shapes-clip"),
        ("clip", "shapes-clip.train"),
        ("vlm", "shapes-vlm.old"),
        ("t2i", "t2i-work"),
        ("t2i", "shapes-t2i.tmp"),
    ):
        out = tmp_path / f"out-{name}"
        out.mkdir()
        (out / name).write_text("a file")
        assert main(["world", "pretrain", "--component", comp, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"holds a file named {name!r}, where pretraining {comp} writes a folder" in err, err


def test_all_defaults_to_two_processes_on_two_cpus(tmp_path, monkeypatch, capsys):
    """Without --jobs, --component all trains in min(2, CPUs) processes (t2i beside the CLIP, then the VLM)."""
    import concurrent.futures
    import os

    from imgalign.commands import world

    class InlinePool:  # runs each job at submit time, in this process
        def __init__(self, max_workers, mp_context=None):
            self.max_workers = max_workers
            workers.append(max_workers)

        def shutdown(self, wait=True, cancel_futures=False):
            pass

        def submit(self, fn, *a):
            f = concurrent.futures.Future()
            f.set_result(fn(*a))
            return f

    workers: list[int] = []
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", InlinePool)
    monkeypatch.setattr(world, "_pretrain_one", lambda module, cfg, out, progress: {"progress": progress})
    for cpus, want in ((8, "in 2 processes"), (1, None)):
        monkeypatch.setattr(os, "cpu_count", lambda n=cpus: n)
        assert main(["world", "pretrain", "--component", "all", "--out", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        if want:
            assert f"training t2i, clip, vlm {want}; progress bar: t2i" in out
            # only the first process shows a progress bar; two workers for three components
            assert "clip: {'progress': False}" in out and "vlm: {'progress': False}" in out
            assert workers == [2]
        else:
            assert "processes" not in out
        assert "t2i: {'progress': True}" in out and "vlm: {'progress': " in out
    # one component trains in this process whatever the CPUs (no worker process is started for it)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert main(["world", "pretrain", "--component", "clip", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "clip: {'progress': True}\n" and workers == [2]


def test_out_naming_a_file_is_refused_before_training(tmp_path, capsys):
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"x")
    assert main(["world", "pretrain", "--component", "clip", "--out", str(f)]) != 0
    assert "is a file; give a folder" in capsys.readouterr().err
    assert f.read_bytes() == b"x"


def test_all_in_two_processes_equals_each_component_alone(tmp_path, monkeypatch):
    """The worker processes seed themselves: the folders are bitwise those of one-component runs in this process."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = ["world", "pretrain", "--component", "all", "--out", str(tmp_path / "all"), "--jobs", "2"]
    assert main(args + _sets("t2i") + _sets("clip") + _sets("vlm")) == 0
    torch.set_num_threads(1)
    t2i.pretrain(t2i.Config(**TINY["t2i"]), tmp_path / "one", progress=False)
    clip_pt.pretrain(clip_pt.Config(**TINY["clip"]), tmp_path / "one", progress=False)
    vlm_pt.pretrain(vlm_pt.Config(**TINY["vlm"]), tmp_path / "one", progress=False)
    for f in (
        f"{t2i.FOLDER}/transformer/diffusion_pytorch_model.safetensors",
        f"{t2i.FOLDER}/vae/diffusion_pytorch_model.safetensors",
        f"shapes-clip/{clip_pt.WEIGHTS}",
        "shapes-vlm/model.safetensors",
    ):
        a, b = load_file(tmp_path / "all" / f), load_file(tmp_path / "one" / f)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f


@pytest.mark.parametrize("jobs", ["2", "1"])
def test_a_failing_component_does_not_stop_the_others(tmp_path, monkeypatch, capsys, jobs):
    """t2i refuses a work folder left by a different config; the CLIP and VLM still finish, the error names t2i.
    One process after the other (--jobs 1) did not go on to the CLIP and VLM after the first failure."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    t2i.pretrain(t2i.Config(**{**TINY["t2i"], "steps": 1}), tmp_path, progress=False)
    args = ["world", "pretrain", "--component", "all", "--out", str(tmp_path), "--jobs", jobs]
    assert main(args + _sets("t2i") + _sets("clip") + _sets("vlm")) != 0
    out, err = capsys.readouterr()
    assert "pretraining failed for t2i" in err and "resumes" in err
    assert "t2i: FAILED: ValueError: " in out
    assert (tmp_path / "shapes-clip" / clip_pt.WEIGHTS).is_file()
    assert (tmp_path / "shapes-vlm" / "model.safetensors").is_file()


def test_pretraining_in_process_leaves_the_torch_thread_count_as_it_was(tmp_path, monkeypatch, capsys):
    """Each component sets torch.set_num_threads(cfg.threads); an in-process `world pretrain` left the caller's
    process at that count. It is restored on return (clip, vlm), and when pretraining raises (t2i refuses a work
    folder of another config after setting the threads)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / t2i.WORK).mkdir()
    (tmp_path / t2i.WORK / "config.json").write_text('{"steps": 0}')
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for comp, status in (("clip", 0), ("vlm", 0), ("t2i", 2)):
            args = ["world", "pretrain", "--component", comp, "--out", str(tmp_path)]
            assert main(args + _sets(comp) + ["--set", "steps=1", "--set", "threads=2"]) == status, comp
            assert torch.get_num_threads() == 1, comp
        assert "holds a run with a different config" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)


def test_a_rerun_with_another_config_names_each_changed_setting(tmp_path, monkeypatch, capsys):
    """Rerunning a component into a folder of another config is refused; the message names every setting that
    differs with its recorded and its new value (CLIP and VLM named none)."""
    import dataclasses
    import json

    from imgalign.pretrain import config_changes

    assert config_changes({"a": 1, "b": [1, 2], "c": "x"}, {"a": 1, "b": [1, 3], "d": 0.5}) == (
        'b: [1, 2] -> [1, 3]; c: "x" -> <unset>; d: <unset> -> 0.5'
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    for comp in ("clip", "vlm"):
        args = ["world", "pretrain", "--component", comp, "--out", str(tmp_path), *_sets(comp)]
        args += ["--set", "steps=1", "--set", "threads=1"]
        assert main([*args, "--set", "lr=0.002"]) == 0, comp
        capsys.readouterr()
        assert main([*args, "--set", "lr=0.001", "--set", "warmup=0"]) == 2, comp
        err = capsys.readouterr().err
        assert (
            f"written with a different config (lr: 0.002 -> 0.001; warmup: {TINY[comp]['warmup']} -> 0)"
            in err
        )
    old = dataclasses.asdict(t2i.Config(**{**TINY["t2i"], "steps": 5}))
    (tmp_path / t2i.WORK).mkdir()
    (tmp_path / t2i.WORK / "config.json").write_text(json.dumps(old))
    args = ["world", "pretrain", "--component", "t2i", "--out", str(tmp_path), *_sets("t2i")]
    assert main([*args, "--set", "steps=1", "--set", "threads=1"]) == 2
    assert "holds a run with a different config (steps: 5 -> 1)" in capsys.readouterr().err


def test_a_worker_stopped_by_ctrl_c_starts_no_queued_component(monkeypatch):
    """Ctrl-C reaches the worker processes too, but the pool had already handed them the VLM, and leaving the pool
    waits for it: the whole VLM trained before `--component all` exited. An interrupted worker starts nothing."""
    from imgalign.commands import world

    calls: list[str] = []

    def interrupted(module, cfg, out, progress):
        calls.append(module)
        raise KeyboardInterrupt

    monkeypatch.setattr(world, "_worker_interrupted", False)
    monkeypatch.setattr(world, "_pretrain_one", interrupted)
    with pytest.raises(KeyboardInterrupt):
        world._pretrain_in_worker("t2i", None, "out", True)
    monkeypatch.setattr(world, "_pretrain_one", lambda *a: calls.append("vlm") or {})
    with pytest.raises(KeyboardInterrupt):  # the queued component, in the same worker
        world._pretrain_in_worker("vlm", None, "out", False)
    assert calls == ["t2i"]


def test_an_interrupt_of_the_main_process_alone_ends_the_workers(tmp_path):
    """`kill -INT PID` (or SIGTERM, which the program turns into the same) reaches the main process of
    `--component all` only: leaving the pool waited for the workers to train their components to the end (and a
    main process killed by SIGTERM left them training on, orphaned). The workers now end with it, at once. The pool
    runs in its own process, signalled as `kill -INT PID` does."""
    import os
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "slow_component.py").write_text(
        "import os, time\n"
        "def pretrain(cfg, out, progress):\n"
        "    (out / f'pid-{cfg}').write_text(str(os.getpid()))\n"
        "    time.sleep(20)\n"
    )
    # Ctrl-C's handler set in the child: a job started in the background of a script (`cmd &`, as CI may run the
    # suite) inherits SIGINT ignored, and then `kill -INT PID` does nothing to it at all
    code = (
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); from pathlib import Path; "
        "from imgalign.commands import world; "  # one worker, so that the second component waits in the queue
        f"world.pretrain_in_pool({{n: ('slow_component', n) for n in ('a', 'b')}}, Path({str(tmp_path)!r}), 1)"
    )
    main = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("pid-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        sent = time.monotonic()
        main.send_signal(signal.SIGINT)
        err = main.communicate(timeout=60)[1]
    finally:
        main.kill()
    assert main.returncode != 0 and "KeyboardInterrupt" in err
    assert time.monotonic() - sent < 10  # not after the worker's 20 s (and then the queued component's)
    pids = [int(p.read_text()) for p in tmp_path.glob("pid-*")]
    assert len(pids) == 1  # the queued component was never started
    assert not os.path.exists(f"/proc/{pids[0]}")  # the worker is gone, not left training


def test_a_second_start_into_a_component_being_trained_is_refused(tmp_path, capsys):
    """Two `world pretrain` of one component into one --out wrote the same checkpoint files (one failed with "No
    such file ... checkpoint.pt.tmp"; a checkpoint written by both at once could be published mixed): the component's
    work folder is locked while it trains (here by another process), and the second start is refused, training
    nothing."""
    import subprocess
    import sys

    work = tmp_path / clip_pt.WORK
    work.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import fcntl, os, time; fd = os.open({str(work / '.lock')!r}, os.O_RDWR | "
            "os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    args = ["world", "pretrain", "--component", "clip", "--out", str(tmp_path), *_sets("clip")]
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(args) == 2
        assert "clip is being trained into it by another imgalign world pretrain" in capsys.readouterr().err
        assert not (tmp_path / clip_pt.FOLDER).exists() and list(work.iterdir()) == [work / ".lock"]
    finally:
        holder.kill()
        holder.wait()
