"""Mutation round 21 (prompting, prompt files): survivors of hand-written mutants of trainers/prompting.py and
prompts/io.py, and the bugs they showed."""

from __future__ import annotations

import json

from imgalign.trainers.config import PromptConfig
from imgalign.trainers.prompting import PromptSampler, conflicting_metadata


def _geneval(exclude: object = "absent") -> dict[str, object]:
    row: dict[str, object] = {
        "tag": "counting",
        "include": [{"class": "circle", "count": 2}],
        "prompt": "two circles",
    }
    if exclude != "absent":
        row["exclude"] = exclude
    return row


def test_an_exclude_left_out_null_or_empty_is_one_spec_and_not_a_conflict(tmp_path):
    """The judge reads a missing, null and empty 'exclude' alike (no exclusion): the same prompt listed with two of
    them was warned of as "judged two ways"."""
    rows = [_geneval(), _geneval(None), _geneval([])]
    assert conflicting_metadata([("two circles", r) for r in rows], [1, 2, 3]) is None
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert PromptSampler(PromptConfig(source=str(path)), hold_out=False).conflict is None
    # an exclusion given on one line only still is one
    other = _geneval([{"class": "circle", "count": 3}])
    found = conflicting_metadata([("two circles", r) for r in (*rows, other)], [1, 2, 3, 5])
    assert found == ("two circles", 1, 5)


class T5EncoderModel:  # the class name is what token_limits reads
    pass


def test_token_limits_read_sd3s_third_tokenizer_and_take_the_t5_limit_from_its_encoder():
    """SD3 keeps its T5 as tokenizer_3/text_encoder_3: a prompt too long for the T5 went unreported when the third
    pair was not read. Whether a tokenizer is T5's is told by its encoder (a T5 tokenizer loaded under a generic
    class keeps max_sequence_length tokens, not the pipeline's CLIP 77)."""
    from types import SimpleNamespace

    from transformers import PreTrainedTokenizerFast

    from imgalign.trainers.prompting import token_limits
    from imgalign.trainers.testing import tiny_clip_tokenizer, tiny_t5_tokenizer

    clip, t5 = tiny_clip_tokenizer(), tiny_t5_tokenizer()
    sd3 = SimpleNamespace(
        tokenizer=clip,
        text_encoder=object(),
        tokenizer_2=tiny_clip_tokenizer(),
        text_encoder_2=object(),
        tokenizer_3=t5,
        text_encoder_3=T5EncoderModel(),
        tokenizer_max_length=77,
    )
    assert token_limits(sd3, 256) == [("CLIP", clip, 77), ("T5", t5, 256)]
    generic = PreTrainedTokenizerFast(tokenizer_object=t5.backend_tokenizer)
    assert "T5" not in type(generic).__name__
    pipe = SimpleNamespace(tokenizer=generic, text_encoder=T5EncoderModel(), tokenizer_max_length=77)
    assert token_limits(pipe, 512) == [("T5", generic, 512)]
    # a CLIP keeps what the pipeline truncates at (the shapes model's 12), else its tokenizer's own limit
    assert clip.model_max_length == 77
    shapes = SimpleNamespace(tokenizer=clip, text_encoder=object(), tokenizer_max_length=12)
    assert token_limits(shapes, 1) == [("CLIP", clip, 12)]
    clip.model_max_length = 20
    assert token_limits(SimpleNamespace(tokenizer=clip, text_encoder=object()), 1) == [("CLIP", clip, 20)]


def test_over_limit_lists_the_prompts_in_their_own_order_whichever_encoder_cuts_them():
    """The warning names the first prompt of `over_limit` as the first line that is cut: it is the file's first, not
    the first the first encoder cuts."""
    from imgalign.trainers.prompting import over_limit
    from imgalign.trainers.testing import tiny_clip_tokenizer, tiny_t5_tokenizer

    limits = [("CLIP", tiny_clip_tokenizer(), 12), ("T5", tiny_t5_tokenizer(), 8)]
    # 'abcdefghij' is cut by the T5 only, 'abcdefghijk' by the CLIP already
    assert list(over_limit(["ab", "abcdefghij", "abcdefghijk"], limits)) == ["abcdefghij", "abcdefghijk"]


def test_read_text_and_first_line_drop_a_windows_editors_bom(tmp_path):
    """read_text serves the config and score commands too, which read no lines through _lines: a BOM left at the
    start made the first YAML key or metadata line '\\ufeff...'."""
    from imgalign.prompts.io import first_line, read_text

    path = tmp_path / "metadata.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "a cat"}\r\n{"prompt": "a dog"}\r\n')
    assert read_text(path, "metadata file") == '{"prompt": "a cat"}\n{"prompt": "a dog"}\n'
    assert first_line(path, "metadata file") == '{"prompt": "a cat"}'


def test_a_broken_json_line_is_not_called_plain_text_also_when_indented_or_missing_its_braces(tmp_path):
    """Only a line that does not look like JSON gets the "plain text, use a .txt" hint: an indented object cut short
    and a key-value pair without its braces are JSON gone wrong, and renaming the file to .txt would train on them."""
    import pytest

    from imgalign.prompts.io import PromptFileError, load_prompts

    path = tmp_path / "p.jsonl"
    for line in ('  {"prompt": "a cat"', '"prompt": "a cat"'):
        path.write_text(json.dumps({"prompt": "a dog"}) + "\n" + line + "\n")
        with pytest.raises(PromptFileError, match=r":2: not valid JSON") as e:
            load_prompts(path)
        assert "plain text" not in str(e.value)
    path.write_text("a photo of a cat\n")
    with pytest.raises(PromptFileError, match="the line is plain text"):
        load_prompts(path)


def test_generated_prompts_are_numbered_from_one():
    """generate:SEED has no lines: a warning names a prompt by its number in the set, counted from 1 as lines are."""
    s = PromptSampler(PromptConfig(source="generate:1"), hold_out=False)
    assert sorted(s.lines.values())[0] == 1
    assert list(s.lines.values()) == sorted(s.lines.values())
