"""Bad-input round 19: `imgalign train` on users' own prompt sets (long prompts, blank lines, duplicates, a split
that leaves one training prompt)."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

from imgalign.cli import main
from imgalign.prompts.io import load_prompts
from imgalign.trainers.prompting import long_prompts_warning, over_limit, token_limits
from imgalign.trainers.testing import one_step_config, tiny_clip_tokenizer, tiny_t5_tokenizer, write_config

LONG = "a red circle " * 10  # the tiny tokenizers spell it out: over 77 tokens


def test_prompt_records_keep_their_line(tmp_path):
    """Blank lines are skipped and counted, so a message can name the line the user sees in an editor."""
    txt = tmp_path / "p.txt"
    txt.write_text("\n  a red circle\n\na blue square\na red circle\n")
    assert [(r.prompt, r.line) for r in load_prompts(txt)] == [
        ("a red circle", 2),
        ("a blue square", 4),
        ("a red circle", 5),
    ]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text(
        "\n" + json.dumps({"prompt": "a red circle"}) + "\n\n" + json.dumps({"prompt": "x"}) + "\n"
    )
    assert [r.line for r in load_prompts(jsonl)] == [2, 4]


class T5EncoderModel:  # the class name is what token_limits reads
    pass


def test_token_limits_read_clip_from_the_pipeline_and_t5_from_max_sequence_length():
    clip, t5 = tiny_clip_tokenizer(), tiny_t5_tokenizer()
    pipe = SimpleNamespace(
        tokenizer=clip,
        text_encoder=object(),
        tokenizer_2=t5,
        text_encoder_2=T5EncoderModel(),
        tokenizer_max_length=77,
    )
    assert token_limits(pipe, 16) == [("CLIP", clip, 77), ("T5", t5, 16)]
    # the shapes model: a T5 tokenizer without its encoder encodes nothing
    pipe = SimpleNamespace(tokenizer=clip, text_encoder=object(), tokenizer_3=t5, text_encoder_3=None)
    assert token_limits(pipe, 1) == [("CLIP", clip, 77)]
    # SD3's second CLIP counts as its first: the prompts are tokenized once for both
    pipe = SimpleNamespace(
        tokenizer=clip, text_encoder=object(), tokenizer_2=tiny_clip_tokenizer(), text_encoder_2=object()
    )
    assert token_limits(pipe, 1) == [("CLIP", clip, 77)]


def test_over_limit_counts_start_and_end_tokens_and_names_the_first_encoder_that_cuts():
    clip, t5 = tiny_clip_tokenizer(), tiny_t5_tokenizer()
    limits = [("CLIP", clip, 12), ("T5", t5, 8)]
    # 'abcdefghij': 10 CLIP letters + start + end = 12 (fits), 11 T5 tokens with the end token and the word mark
    prompts = ["ab", "abcdefghij", "abcdefghijk", "ab"]
    assert over_limit(prompts, limits) == {"abcdefghij": ("T5", 12), "abcdefghijk": ("CLIP", 13)}
    assert over_limit([], limits) == {}


def test_the_long_prompt_warning_counts_them_and_names_the_first_line():
    limits = [("CLIP", None, 77), ("CLIP", None, 77), ("T5", None, 256)]
    lines = {"a": 1, "b": 3, "c": 4}
    assert long_prompts_warning("p.txt", lines, {"b": ("CLIP", 90)}, limits) == (
        "prompts.source 'p.txt': 1 of its 3 distinct prompts (line 3, 90 CLIP tokens) is longer than the text "
        "encoders take (CLIP 77, T5 256 tokens); it is truncated when encoded, so its words past the limit do not "
        "steer the images: shorten it to train on every word"
    )
    assert long_prompts_warning("generate:0", lines, {"b": ("T5", 300), "c": ("CLIP", 80)}, limits) == (
        "prompts.source 'generate:0': 2 of its 3 distinct prompts (the first: prompt 3, 300 T5 tokens) are longer "
        "than the text encoders take (CLIP 77, T5 256 tokens); they are truncated when encoded, so their words past "
        "the limit do not steer the images"
    )


def test_train_says_once_which_prompts_are_truncated_and_counts_one_prompt_as_one(
    sd3_dir, tmp_path, caplog, library_log
):
    """Long prompts were reported only by transformers' "Token indices sequence length is longer ... will result in
    indexing errors" and diffusers' "The following part of your input was truncated ..." (once per prompt and CLIP
    encoder), naming no file or line; and one training prompt was logged as "1 distinct training prompts"."""
    prompts = tmp_path / "p.txt"
    prompts.write_text(f"\n{LONG}\n\n{LONG}\n")  # one distinct prompt, at lines 2 and 4
    cfg = one_step_config(
        sd3_dir, tmp_path / "run", prompts={"source": str(prompts)}, sampling={"num_steps": 2}
    )
    del cfg["prompts"]["tasks"]
    assert main(["train", str(write_config(cfg, tmp_path / "c.yaml"))]) == 0
    err = caplog.text
    assert [r.getMessage()[:40] for r in library_log if r.levelno >= logging.WARNING] == []
    assert (
        f"prompts.source {str(prompts)!r}: 1 of its 1 distinct prompts (line 2, 102 CLIP tokens) is longer than the "
        "text encoders take (CLIP 77 tokens); it is truncated when encoded" in err
    )
    assert "1 distinct training prompt, 0 held out for eval.suite=reward" in err
    # quieted for the run only: a later eval or grid in this process gets diffusers' notice
    from imgalign.trainers.trainer import QUIET_TRUNCATION

    assert not any(
        QUIET_TRUNCATION in logging.getLogger(n).filters for n in list(logging.root.manager.loggerDict)
    )


def test_a_reward_weight_past_float32_is_refused_not_trained_as_inf(capsys):
    """rewards.weights=[1e300, 1] passed the config check; the trainer's float32 weights were [inf, 1], every step
    said "no valid sample" and nothing trained (one warning at the end of the run)."""
    two = 'rewards.names=["imgalign.trainers.testing:red_reward","imgalign.trainers.testing:blue_reward"]'
    assert main(["train", "--set", two, "--set", "rewards.weights=[1e300,1]", "--print-config"]) == 2
    assert capsys.readouterr().err == (
        "imgalign train: error: rewards.weights ([1e+300, 1.0]): the trainer weighs rewards in float32, where a "
        "weight over 3.403e+38 is infinite and nothing would train; scale them down (the built-in balancers read only "
        "their ratios)\n"
    )
    assert main(["train", "--set", two, "--set", "rewards.weights=[3.4e38,1]", "--print-config"]) == 0
    assert "- 3.4e+38" in capsys.readouterr().out


def test_a_bom_starting_a_later_line_is_dropped(tmp_path):
    """Files saved with a BOM and joined with cat: the .txt line was a prompt apart from its copy without the BOM
    (so one could be trained and the other held out as a test prompt), the .jsonl line "not valid JSON"."""
    txt = tmp_path / "p.txt"
    txt.write_bytes(b"\xef\xbb\xbfa red circle\n\xef\xbb\xbfa red circle\n")
    assert [r.prompt for r in load_prompts(txt)] == ["a red circle", "a red circle"]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_bytes(b'{"prompt": "a red circle"}\n\xef\xbb\xbf{"prompt": "a blue square"}\n')
    assert [r.prompt for r in load_prompts(jsonl)] == ["a red circle", "a blue square"]


def test_a_prompt_listed_with_two_geneval_specs_is_found_with_its_lines(tmp_path):
    """Each line's GenEval fields judge that line's draws: 'a photo of circles' was judged as two circles half the
    time and as one the other half, without a word (the trainer now warns with the sampler's finding)."""
    from imgalign.trainers.config import PromptConfig
    from imgalign.trainers.prompting import PromptSampler

    def line(tag: str, count: int | None, prompt: str = "a photo of circles") -> str:
        clause = {"class": "circle"} if count is None else {"class": "circle", "count": count}
        return json.dumps({"tag": tag, "include": [clause], "prompt": prompt})

    path = tmp_path / "p.jsonl"
    # repeats with the same fields (a count of 1 given or left out) and plain rows are no conflict
    path.write_text(
        "\n".join(
            [line("single_object", None), line("single_object", 1), json.dumps({"prompt": "x", "a": 1})]
        )
        + "\n"
        + json.dumps({"prompt": "x", "a": 2})
        + "\n\n"
        + line("counting", 2)
        + "\n"
    )
    sampler = PromptSampler(PromptConfig(source=str(path)), hold_out=False)
    assert sampler.conflict == ("a photo of circles", 1, 6)
    path.write_text(line("single_object", None) + "\n" + line("single_object", 1) + "\n")
    assert PromptSampler(PromptConfig(source=str(path)), hold_out=False).conflict is None
