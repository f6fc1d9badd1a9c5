"""A t2i config given vae_channels as a tuple (in-process callers build Config with tuples) is the config a JSON
round trip gives back: resuming its own work folder and checking an init_from model both compare lists."""

from __future__ import annotations

import json
from dataclasses import asdict

import torch
from test_t2i import tiny_config, tiny_pipeline_dir  # noqa: F401  (a module-scoped fixture)

from imgalign.pretrain import t2i


def test_an_init_from_model_is_checked_against_a_tuple_vae_channels_as_a_list(tiny_pipeline_dir):  # noqa: F811
    cfg = tiny_config(init_from=str(tiny_pipeline_dir))
    cfg.vae_channels = tuple(cfg.vae_channels)
    assert t2i.check_init_from(cfg) == tiny_pipeline_dir


def test_a_work_folder_of_the_same_config_with_tuple_vae_channels_resumes(tmp_path):
    torch.set_num_threads(1)
    cfg = tiny_config(steps=1)
    t2i.pretrain(cfg, tmp_path, progress=False)
    recorded = json.loads((tmp_path / t2i.WORK / "config.json").read_text())
    assert recorded == json.loads(json.dumps(asdict(cfg)))
    again = tiny_config(steps=1)
    again.vae_channels = tuple(again.vae_channels)
    t2i.pretrain(again, tmp_path, progress=False)  # was: "holds a run with a different config"
