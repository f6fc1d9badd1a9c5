"""vlm_loglik on tiny random instances of VLM families whose processors differ from Qwen2-VL's: Gemma 3 (a flat image
list is one sample's images; <end_of_turn> is a stop token only in the generation config; the chat template renders
BOS) and InternVL (its processor pads on the left whatever the tokenizer says). Batched scores equal one-by-one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_rewards_tiny import TINY_TEXT, byte_vocab

from imgalign.rewards.base import build_reward, to_pil

torch.set_num_threads(1)

GEMMA3_TEMPLATE = (
    "{{ bos_token }}{%- for message in messages -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = 'model' -%}{%- else -%}"
    "{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- else -%}{%- for item in message['content'] -%}{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<end_of_turn>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{'<start_of_turn>model\n'}}{%- endif -%}"
)
INTERNVL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<IMG_CONTEXT>\n{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_tiny_gemma3(folder: Path) -> Path:
    from tokenizers import AddedToken
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3ImageProcessor,
        Gemma3Processor,
        Qwen2TokenizerFast,
    )

    torch.manual_seed(0)
    tok = Qwen2TokenizerFast(
        vocab=byte_vocab(),
        merges=[],
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens={
            "image_token": "<image_soft_token>",
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
        },
    )
    # as in the real Gemma 3 tokenizer: turn markers are added special tokens, not named special tokens
    tok.add_tokens([AddedToken("<start_of_turn>", special=True), AddedToken("<end_of_turn>", special=True)])
    proc = Gemma3Processor(
        image_processor=Gemma3ImageProcessor(size={"height": 32, "width": 32}),
        tokenizer=tok,
        chat_template=GEMMA3_TEMPLATE,
        image_seq_length=4,
    )
    eot = tok.convert_tokens_to_ids("<end_of_turn>")
    cfg = Gemma3Config(
        text_config=dict(
            vocab_size=len(tok),
            **TINY_TEXT,
            head_dim=16,
            max_position_embeddings=256,
            sliding_window=64,
            pad_token_id=tok.pad_token_id,
            bos_token_id=tok.bos_token_id,
            eos_token_id=[tok.eos_token_id, eot],
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        mm_tokens_per_image=4,
        image_token_id=tok.convert_tokens_to_ids("<image_soft_token>"),
        boi_token_id=tok.convert_tokens_to_ids("<start_of_image>"),
        eoi_token_id=tok.convert_tokens_to_ids("<end_of_image>"),
    )
    Gemma3ForConditionalGeneration(cfg).eval().save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder


def make_tiny_internvl(folder: Path) -> Path:
    from transformers import (
        GotOcr2ImageProcessor,
        InternVLConfig,
        InternVLForConditionalGeneration,
        InternVLProcessor,
        InternVLVideoProcessor,
        Qwen2TokenizerFast,
    )

    torch.manual_seed(0)
    tok = Qwen2TokenizerFast(
        vocab=byte_vocab(),
        merges=[],
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,  # as InternVL3's Qwen2.5 tokenizer: byte-level BPE has no <unk> (unk_token_id is None)
        extra_special_tokens={
            "start_image_token": "<img>",
            "end_image_token": "</img>",
            "context_image_token": "<IMG_CONTEXT>",
            "video_token": "<video>",
        },
    )
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    proc = InternVLProcessor(
        image_processor=GotOcr2ImageProcessor(size={"height": 28, "width": 28}, crop_to_patches=False),
        tokenizer=tok,
        video_processor=InternVLVideoProcessor(),
        chat_template=INTERNVL_TEMPLATE,
        image_seq_length=1,
    )
    cfg = InternVLConfig(
        vision_config=dict(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            image_size=28,
            patch_size=14,
        ),
        text_config=dict(
            model_type="qwen2",
            vocab_size=len(tok),
            **TINY_TEXT,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        ),
        image_token_id=tok.convert_tokens_to_ids("<IMG_CONTEXT>"),
        image_seq_length=1,
        downsample_ratio=0.5,
    )
    InternVLForConditionalGeneration(cfg).eval().save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder


PROMPTS = ["a photo of a red circle", "a cross", "a photo of four white triangles"]


@pytest.mark.parametrize("family", ["gemma3", "internvl"])
def test_batched_scores_equal_one_by_one_and_only_the_prompt_is_scored(tmp_path, family):
    folder = (make_tiny_gemma3 if family == "gemma3" else make_tiny_internvl)(tmp_path / family)
    r = build_reward(f"vlm_loglik:model={folder},batch_size=8")
    torch.manual_seed(0)
    x = torch.rand(3, 3, 32, 32)
    batched = r(x, PROMPTS)
    single = torch.cat([r(x[i : i + 1], PROMPTS[i : i + 1]).scores for i in range(3)])
    torch.testing.assert_close(batched.scores, single, rtol=1e-5, atol=1e-5)
    for d, p in zip(batched.details, PROMPTS):  # byte-level tokens: exactly the prompt, no turn markers
        assert "".join(d["tokens"]).replace("Ġ", " ") == p
    if family == "gemma3":
        texts = [r.processor.apply_chat_template(r._messages(p), tokenize=False) for p in PROMPTS[:1]]
        enc = r._encode(texts, to_pil(x[:1]))
        # one BOS, as the template renders it
        assert enc["input_ids"][0].tolist().count(r.tokenizer.bos_token_id) == 1
