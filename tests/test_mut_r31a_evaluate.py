"""Round 31a mutation survivor in imgalign/commands/evaluate.py: the refusal of an --out folder of another
evaluation names a setting that only the earlier evaluation recorded (its --ground-truth), not only those of this
one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_a_setting_only_the_folders_evaluation_had_is_named(tmp_path: Path) -> None:
    from imgalign.commands.evaluate import claim_out_folder
    from imgalign.trainers.checkpoint import unlock_output_dir

    common = {"suite": "shapes", "prompts": "a" * 64, "images_per_prompt": 4, "seed": 0}
    out = tmp_path / "ev"
    out.mkdir()
    (out / "eval_args.json").write_text(json.dumps({**common, "ground_truth": True}))
    (out / "results.jsonl").write_text("")
    ident = {**common, "model": "shapes", "steps": None, "guidance_scale": None}
    try:
        with pytest.raises(ValueError, match="holds another evaluation") as e:
            claim_out_folder(out, ident)
    finally:
        unlock_output_dir(out)
    assert "ground_truth: True there, None now" in str(e.value)
    assert "model: None there, 'shapes' now" in str(e.value)
