"""The shapes-VLM's tokenizer and processor, as ``imgalign world pretrain --component vlm`` builds them today, equal
the shipped model's: a changed vocabulary (a word dropped shifts every id after it), unknown token, special
tokens, normalisation or chat template would make the documented command build a model that the shipped files
do not describe. The same for the model's config.json (round 24, second pass: mutants V07-V10, V12, V14, V16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign.hub import embedded_path
from imgalign.pretrain import vlm as vlm_pt

# the tokenizer's runtime padding setting is saved only once it has padded a batch; not part of the model
RUNTIME_ONLY = ("padding",)


def _json(path: Path) -> dict:
    data = json.loads(path.read_text())
    return {k: v for k, v in data.items() if k not in RUNTIME_ONLY}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("vlm_processor")
    cfg = vlm_pt.Config()
    vlm_pt.build_processor(vlm_pt.build_tokenizer(), cfg.patch_size, cfg.vision_arch).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json", "processor_config.json"])
def test_the_built_vlm_tokenizer_and_processor_equal_the_shipped_ones(built: Path, name: str) -> None:
    assert _json(built / name) == _json(embedded_path("shapes-vlm") / name)


def test_the_built_vlm_chat_template_equals_the_shipped_one(built: Path) -> None:
    shipped = (embedded_path("shapes-vlm") / "chat_template.jinja").read_text()
    assert (built / "chat_template.jinja").read_text() == shipped


def test_the_built_vlm_model_config_equals_the_shipped_one(tmp_path: Path) -> None:
    """(The eos id, the image feature strategy, the sizes: what from_pretrained rebuilds the shipped model from.)"""
    model = vlm_pt.build_model(vlm_pt.Config(), vlm_pt.build_tokenizer())
    model.config.save_pretrained(tmp_path)
    # written with the weights only (architectures, dtype) or by the installed library (its version)
    saved_with = ("architectures", "dtype", "transformers_version")
    built, shipped = (
        {k: v for k, v in json.loads(f.read_text()).items() if k not in saved_with}
        for f in (tmp_path / "config.json", embedded_path("shapes-vlm") / "config.json")
    )
    assert built == shipped
