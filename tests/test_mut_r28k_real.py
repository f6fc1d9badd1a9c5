"""eval/real.py, mutation round 28k: the detector's input dtype and the judge specs of a cached Hub id."""

from __future__ import annotations

import torch

from imgalign.eval.real import HFDetector, check_judge_specs


class _Processor:
    def __call__(self, return_tensors: str, **kw):
        assert return_tensors == "pt"
        return {
            "pixel_values": torch.zeros(1, 3, 4, 4, dtype=torch.float32),
            "input_ids": torch.ones(1, 5, dtype=torch.int64),
            "pixel_mask": torch.ones(1, 4, 4, dtype=torch.bool),
            "not_a_tensor": [1, 2],
        }


def test_detector_inputs_take_the_models_dtype_for_floats_only_and_drop_what_is_no_tensor():
    d = object.__new__(HFDetector)
    d.processor, d.device, d.dtype = _Processor(), torch.device("cpu"), torch.float16
    got = d._inputs(images=None)
    assert set(got) == {"pixel_values", "input_ids", "pixel_mask"}
    assert got["pixel_values"].dtype == torch.float16  # a half-precision model gets half-precision pixels
    assert got["input_ids"].dtype == torch.int64 and got["pixel_mask"].dtype == torch.bool


def test_a_detector_given_as_a_cached_hub_id_is_not_refused_as_a_folder_without_weights(
    tmp_path, monkeypatch
):
    """The weights check is for folders: a Hub id (no folder here) is left to the library's cache."""
    import transformers

    monkeypatch.chdir(tmp_path)
    asked = []
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", lambda name, *a, **k: asked.append(name))
    check_judge_specs("org/detector", "hf-hub:org/clip")
    assert asked == ["org/detector"]


def test_a_clip_folder_given_with_a_tilde_that_is_not_there_is_no_such_folder(tmp_path, monkeypatch):
    """A quoted ~/... (the shell left the tilde) is a folder that is not there, not an unknown ARCH:PRETRAINED."""
    import pytest
    import transformers

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", lambda name, *a, **k: None)
    with pytest.raises(FileNotFoundError, match="CLIP '~/no-such-clip': no such folder"):
        check_judge_specs("org/detector", "~/no-such-clip")


def test_the_colour_classifier_asks_nothing_of_clip_for_no_detections():
    from imgalign.eval.real import ClipColorClassifier

    clf = object.__new__(ClipColorClassifier)  # no model: an empty list must not reach it
    assert clf(None, [], "cat") == []
