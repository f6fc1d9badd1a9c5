"""eval/real.py, mutation round 22 (second pass): the tests that killed its surviving mutants."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from imgalign.eval.real import generate_metadata, load_prompt_set

WARNING = "scores are comparable only with runs on this same set"


def test_a_generated_prompt_set_warns_that_its_scores_compare_only_with_runs_on_the_same_set(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """generate:SEED draws its own prompts, so its scores are not GenEval's published numbers: the user is told so
    each time such a set is loaded, and not when the set is a metadata file."""
    with caplog.at_level(logging.WARNING, logger="imgalign.eval.real"):
        assert load_prompt_set("generate:3") == generate_metadata(3)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and WARNING in r.getMessage()]
    assert len(warned) == 1 and warned[0].name == "imgalign.eval.real"

    caplog.clear()
    path = tmp_path / "metadata.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in generate_metadata(0)[:2]))
    with caplog.at_level(logging.WARNING, logger="imgalign.eval.real"):
        assert [m["prompt"] for m in load_prompt_set(str(path))] == [
            m["prompt"] for m in generate_metadata(0)[:2]
        ]
    assert not [r for r in caplog.records if WARNING in r.getMessage()]


def test_a_detector_without_geneval_classes_asked_for_all_80_in_another_order_names_them_in_short(
    tmp_path: Path,
) -> None:
    """A prompt set that names every COCO class (the official file, generate:SEED) asks the detector for all 80,
    sorted: the error says "GenEval's classes" rather than listing the 80 names."""
    import geneval_real_tiny as T

    from imgalign.eval.real import COCO_CLASSES, HFDetector

    folder = T.build_tiny_detr(tmp_path / "other")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["id2label"] = dict(enumerate(["N/A", "widget", "gadget", "gizmo", "doohickey"]))
    cfg["label2id"] = {v: int(k) for k, v in cfg["id2label"].items()}
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="knows none of GenEval's classes") as e:
        HFDetector(str(folder), classes=sorted(COCO_CLASSES))
    assert "toothbrush" not in str(e.value)
    with pytest.raises(ValueError, match=r"knows none of the classes \['cat', 'dog'\]"):
        HFDetector(str(folder), classes=["cat", "dog"])


def test_an_open_clip_key_error_for_an_architecture_name_is_not_blamed_on_a_folders_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a local-dir: folder's open_clip_config.json can lack a field: an ARCH:PRETRAINED name whose build
    fails with a KeyError raises it as it is, not as "the model_cfg of its open_clip_config.json is incomplete"."""
    import open_clip

    import imgalign.rewards.clip as rc
    from imgalign.eval.real import ClipColorClassifier

    def fail(*args: object, **kw: object) -> None:
        raise KeyError("text_cfg")

    monkeypatch.setattr(rc, "transformers_clip_config", lambda *a, **kw: None)
    monkeypatch.setattr(rc, "other_transformers_model", lambda *a, **kw: None)
    monkeypatch.setattr(rc, "check_open_clip_weights", lambda *a, **kw: None)
    monkeypatch.setattr(open_clip, "create_model_and_transforms", fail)
    with pytest.raises(KeyError, match="text_cfg") as e:
        ClipColorClassifier("ViT-B-32:openai")
    assert e.type is KeyError and "open_clip_config.json" not in str(e.value)
