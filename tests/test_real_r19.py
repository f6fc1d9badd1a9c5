"""eval/real.py, mutation round 19: metadata of an --images folder whose clauses are malformed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.eval.real import COCO_CLASSES, metadata_classes, validate_real_metadata

CAT = {"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a photo of a cat"}
BAD = [
    ({**CAT, "include": [{"count": 1}]}, "include[0] is {'count': 1}; each clause needs a 'class'"),
    ({**CAT, "include": "cat"}, "'include' is 'cat'; it must be a list of clauses"),
    ({**CAT, "include": 5}, "'include' is 5; it must be a list of clauses"),
    ({**CAT, "include": [["cat"]]}, "include[0] is ['cat']; each clause needs a 'class'"),
    ({**CAT, "exclude": [{"class": 3, "count": 2}]}, "exclude[0] is {'class': 3, 'count': 2}; each clause"),
    ({**CAT, "exclude": {"class": "dog"}}, "'exclude' is {'class': 'dog'}; it must be a list of clauses"),
]


@pytest.mark.parametrize(("meta", "message"), BAD)
def test_a_malformed_clause_is_refused_naming_the_field(meta, message) -> None:
    """A clause without a class stopped the evaluation with "error: class", an 'include' that is no list with a
    TypeError traceback; each is a ValueError naming the field (a failure row of its prompt folder)."""
    with pytest.raises(ValueError) as e:
        validate_real_metadata(meta, COCO_CLASSES)
    assert message in str(e.value)
    validate_real_metadata({**CAT, "exclude": None}, COCO_CLASSES)  # null exclude: none


def test_the_classes_of_a_prompt_set_skip_clauses_without_a_class_name() -> None:
    metas = [meta for meta, _ in BAD] + [{**CAT, "exclude": [{"class": "dog", "count": 1}]}]
    assert metadata_classes(metas) == ["cat", "dog"]


def test_an_images_folder_with_a_malformed_clause_is_judged_with_a_failure_row(tmp_path: Path) -> None:
    """`imgalign eval --suite geneval --images DIR`: the prompt folders whose 'include' is no list or whose clause
    has no class get a failure row naming their metadata file; the other prompts are judged (exit status 1)."""
    import geneval_real_tiny as T
    from PIL import Image

    from imgalign.cli import main
    from imgalign.eval.suite import write_prompt_folder

    detr, clip = T.build_tiny_detr(tmp_path / "detr"), T.build_tiny_open_clip(tmp_path / "clip")
    img = Image.new("RGB", (32, 32), (100, 100, 100))
    write_prompt_folder(tmp_path / "imgs", 0, CAT, [img])
    write_prompt_folder(tmp_path / "imgs", 1, {**CAT, "include": 5}, [img])
    write_prompt_folder(tmp_path / "imgs", 2, {**CAT, "include": [{"count": 1}]}, [img])
    argv = ["eval", "--suite", "geneval", "--images", str(tmp_path / "imgs"), "--detector", str(detr)]
    assert main([*argv, "--clip", str(clip), "--no-progress", "--out", str(tmp_path / "ev")]) == 1
    rows = [json.loads(line) for line in (tmp_path / "ev" / "results.jsonl").read_text().splitlines()]
    assert [r["error"] for r in rows] == [
        None,
        f"{tmp_path / 'imgs' / '00001' / 'metadata.jsonl'}: 'include' is 5; it must be a list of clauses "
        'such as {"class": "cat", "count": 1}',
        f"{tmp_path / 'imgs' / '00002' / 'metadata.jsonl'}: include[0] is {{'count': 1}}; each clause needs a "
        "'class' naming the object (e.g. \"cat\")",
    ]


@pytest.mark.parametrize("seed", ["\u0663", "\u00b2", "\uff15"])
def test_a_generated_prompt_set_takes_ascii_digits_only(seed: str) -> None:
    """generate:SEED with a digit that is not ASCII (Arabic-Indic 3, superscript 2, full-width 5) is refused by
    name: int() read "٣" as seed 3, another spelling of a set, and "²" failed with int()'s own message."""
    from imgalign.eval.real import load_prompt_set

    with pytest.raises(ValueError, match=r"expected generate:SEED with an integer seed \(digits only\)"):
        load_prompt_set(f"generate:{seed}")


def test_grounding_dino_reads_each_class_from_the_tokens_after_cls(tmp_path: Path) -> None:
    """A query whose logits are high only on "cat" (token 1, after [CLS]) is a cat, one high only on "computer
    mouse" (tokens 3-4) a computer mouse: a span shifted onto [CLS] gave each class its neighbour's tokens."""
    from types import SimpleNamespace

    import geneval_real_tiny as T
    import torch
    from PIL import Image

    from imgalign.eval.real import HFDetector

    d = HFDetector(str(T.build_tiny_grounding_dino(tmp_path / "gd")), classes=["cat", "computer mouse"])
    n_text = d._inputs(text="cat. computer mouse.", images=Image.new("RGB", (40, 40)))["input_ids"].shape[1]
    logits = torch.full((1, 2, n_text), -6.0)
    logits[0, 0, 1] = 6.0  # [CLS] cat . computer mouse . [SEP]
    logits[0, 1, [3, 4]] = 6.0
    boxes = torch.tensor([[[0.25, 0.25, 0.5, 0.5], [0.75, 0.75, 0.5, 0.5]]])

    class Stub:
        config = d.model.config

        def __call__(self, **kw: object) -> SimpleNamespace:
            return SimpleNamespace(logits=logits, pred_boxes=boxes)

    d.model = Stub()
    out = d(Image.new("RGB", (40, 40)))
    assert sorted(out) == ["cat", "computer mouse"]
    assert [x.box for x in out["cat"]] == [(0.0, 0.0, 20.0, 20.0)]
    assert [x.box for x in out["computer mouse"]] == [(20.0, 20.0, 40.0, 40.0)]
