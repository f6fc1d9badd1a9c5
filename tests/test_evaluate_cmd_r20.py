"""Round 20 mutation tests for imgalign/commands/evaluate.py (stop 57)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest


def test_an_eval_args_json_that_is_valid_json_but_no_record_is_damaged() -> None:
    """``null``, a list or a number in eval_args.json is valid JSON but no record of an evaluation: alone (the model
    failed to load) the folder is taken over, beside other files it is refused as damaged, not an AttributeError
    from reading it as a dict (E13)."""
    from imgalign.commands.evaluate import claim_out_folder

    ident = {"suite": "shapes", "ground_truth": True}
    with tempfile.TemporaryDirectory() as tmp:
        for i, text in enumerate(("null", "[]", '["suite", "shapes"]', "7")):
            out = Path(tmp) / f"ev{i}"
            out.mkdir()
            (out / "eval_args.json").write_text(text)
            claim_out_folder(out, ident)
            assert json.loads((out / "eval_args.json").read_text()) == ident
            (out / "eval_args.json").write_text(text)
            (out / "results.jsonl").write_text("")
            with pytest.raises(ValueError, match="eval_args.json is damaged"):
                claim_out_folder(out, ident)
