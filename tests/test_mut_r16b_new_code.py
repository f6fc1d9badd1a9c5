"""Mutation round 16b: behaviour of the code added in round 16's fixes that no test checked (ids in
/work/audit/s53/mE/mutations.tsv)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.parametrize("text", ["null", "[]", '"shapes"', "3"])
def test_an_eval_args_json_that_is_valid_json_but_no_record_is_damaged_not_a_traceback(
    tmp_path: Path, text: str
) -> None:
    """judge_name's update of the old record ran `.update`/`.get` on whatever the JSON held: `null` or a list gave an
    AttributeError traceback, even alone in the folder (which is taken over)."""
    from imgalign.commands.evaluate import claim_out_folder

    out = tmp_path / "out"
    out.mkdir()
    (out / "eval_args.json").write_text(text)
    claim_out_folder(out, {"suite": "shapes"})  # alone: taken over
    assert json.loads((out / "eval_args.json").read_text()) == {"suite": "shapes"}
    (out / "eval_args.json").write_text(text)
    (out / "results.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match="eval_args.json is damaged"):
        claim_out_folder(out, {"suite": "shapes"})
