"""``vlm_loglik``: the prompt's log-likelihood under a frozen VLM (SpectraReward / PromptEcho; algorithms.md §10).

One teacher-forced pass of an image-text-to-text model (transformers ``AutoModelForImageTextToText`` with its
``AutoProcessor`` and chat template): user turn = [image, guiding query (empty by default; PromptEcho uses e.g.
"Describe this image in detail.")], assistant turn = the prompt. Reward = mean log p(prompt tokens), where prompt
tokens are the assistant-turn tokens before the first end-of-turn / EOS / special token (so those are masked).
Per-token log-probs come back in the details. Batched with right padding.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from imgalign.hub import check_weights, load_error_reason, tilde_hint
from imgalign.rewards.base import (
    Reward,
    RewardOutput,
    as_bool,
    check_at_least,
    excerpt,
    register_reward,
    to_pil,
)

log = logging.getLogger(__name__)


def masked_mean_logprob(
    logits: torch.Tensor, input_ids: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced token log-probs and their masked mean.

    logits (B, T, V) predict the next token; input_ids (B, T); mask (B, T) marks the target tokens to score.
    Returns (mean log p over masked tokens (B,), token log-probs (B, T) with 0 where unmasked)."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, T-1, V): position t predicts token t+1
    tok = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
    m = mask[:, 1:].to(tok.dtype)
    tok = tok * m
    mean = tok.sum(1) / m.sum(1).clamp(min=1)
    return mean, torch.cat([torch.zeros_like(tok[:, :1]), tok], 1)


def load_vlm(
    name: str, device: torch.device, dtype: torch.dtype, trust_remote_code: bool = False
) -> tuple[Any, Any]:
    """(model in eval mode, processor) for ``shapes-vlm`` or a local folder / cached Hub id."""
    if name == "shapes-vlm":
        try:
            from imgalign.shapes_models import load_shapes_vlm
        except ImportError:
            from imgalign.hub import embedded_path

            name = str(embedded_path("shapes-vlm"))
        else:
            model, processor = load_shapes_vlm(device, dtype)
            return model.eval().requires_grad_(False), processor
    from transformers import AutoModelForImageTextToText, AutoProcessor

    what = "give a local save_pretrained folder of a VLM, a cached Hub id, or shapes-vlm"
    p = Path(name)  # not expanded, as transformers reads it (a ~ that exists expanded was taken for a Hub id)
    if not p.exists() and (p.is_absolute() or name.startswith((".", "~")) or name.count("/") > 1):
        # transformers took it for a Hub id: "Repo id must be in the form 'repo_name' or ..."
        raise FileNotFoundError(f"vlm_loglik: model folder {name!r} does not exist{tilde_hint(name)}; {what}")
    check_weights(f"vlm_loglik model {name!r}", name)
    try:
        model = AutoModelForImageTextToText.from_pretrained(
            name, dtype=dtype, trust_remote_code=trust_remote_code
        )
        processor = AutoProcessor.from_pretrained(name, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:  # ValueError: a folder of another kind ("Unrecognized model in ...")
        first = load_error_reason(e, name).splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"vlm_loglik: cannot load {name!r} as a VLM ({first}); {what}") from None
    return model.to(device).eval().requires_grad_(False), processor


@register_reward("vlm_loglik", "mean log p(prompt | image) under a frozen VLM (SpectraReward / PromptEcho)")
class VLMLogLikReward(Reward):
    name = "vlm_loglik"
    description = "mean log p(prompt tokens | image, query) under a VLM; model=shapes-vlm|PATH, query=..."

    def __init__(
        self,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        model: str = "shapes-vlm",
        query: str = "",
        batch_size: int = 8,
        trust_remote_code: bool = False,
    ) -> None:
        super().__init__(device, dtype)
        trust = as_bool(trust_remote_code, "vlm_loglik reward: trust_remote_code")
        self.batch_size = int(check_at_least(batch_size, 1, "vlm_loglik reward: batch_size"))
        self.model, self.processor = load_vlm(str(model), self.device, dtype, trust)
        self.query = str(query or "")
        self.model_name = str(model)
        cfg = self.model.config
        text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        limit = getattr(text, "max_position_embeddings", None)
        self.max_positions = int(limit) if isinstance(limit, int) and limit > 0 else None
        self._warned_long = False
        tok = self.tokenizer
        if (
            getattr(self.processor, "chat_template", None) is None
            and getattr(tok, "chat_template", None) is None
        ):
            raise ValueError(f"vlm_loglik: the processor of {model!r} has no chat template")
        # a processor without a template of its own renders with its tokenizer's (transformers' processor does not
        # fall back to it: every scoring said "this processor does not have a chat template")
        self.chat_template = None
        if getattr(self.processor, "chat_template", None) is None and tok is not self.processor:
            self.chat_template = tok.get_chat_template()
        # a folder without its tokenizer file gives a tokenizer of special tokens only (every image's error said
        # "empty prompt?")
        if not tok("a photo", add_special_tokens=False)["input_ids"]:
            raise ValueError(
                f"vlm_loglik: the tokenizer of {model!r} turns text into no tokens: it has no vocabulary (its "
                "tokenizer.json, or vocab and merges files, missing?); save the processor there again"
            )
        # special tokens end the scored span, but not <unk>: a word the vocabulary lacks is scored as <unk> (the
        # shapes VLM's word-level tokenizer), not a silent end of the prompt that drops every word after it
        unk = getattr(tok, "unk_token_id", None)
        self.stop_ids = {int(i) for i in tok.all_special_ids if unk is None or int(i) != int(unk)}
        # end-of-turn markers: EOS, and the generation config's stop tokens (Gemma 3's <end_of_turn> is only there)
        gen = getattr(self.model, "generation_config", None)
        for ids in (tok.eos_token_id, getattr(gen, "eos_token_id", None)):
            for i in ids if isinstance(ids, (list, tuple)) else [ids]:
                if i is not None:
                    self.stop_ids.add(int(i))

    @property
    def tokenizer(self) -> Any:
        return getattr(self.processor, "tokenizer", self.processor)

    def _messages(self, prompt: str | None) -> list[dict[str, Any]]:
        user: list[dict[str, Any]] = [{"type": "image"}]
        if self.query:
            user.append({"type": "text", "text": self.query})
        msgs: list[dict[str, Any]] = [{"role": "user", "content": user}]
        if prompt is not None:
            msgs.append({"role": "assistant", "content": [{"type": "text", "text": prompt}]})
        return msgs

    def _encode(self, texts: list[str], images: list[Any]) -> dict[str, torch.Tensor]:
        """The processor's batch: one image per sample (nested, as Gemma 3 / Mllama / SmolVLM processors read a
        flat list as one sample's images); no second BOS when the chat template already rendered one."""
        tok = self.tokenizer
        bos = getattr(tok, "bos_token", None)
        add_special = not (bos and all(t.startswith(bos) for t in texts))
        side = tok.padding_side
        tok.padding_side = "right"
        try:
            return self.processor(
                text=texts,
                images=[[im] for im in images],
                padding=True,
                add_special_tokens=add_special,
                return_tensors="pt",
            )
        finally:
            tok.padding_side = side

    def prompt_mask(
        self,
        full_ids: torch.Tensor,
        full_attn: torch.Tensor,
        prefix_ids: torch.Tensor,
        prefix_attn: torch.Tensor,
    ) -> torch.Tensor:
        """(B, T) mask of the prompt tokens: after the shared user-turn prefix, up to the first special token.
        Only attended positions count, so it holds whichever side the processor padded."""
        mask = torch.zeros_like(full_ids, dtype=torch.bool)
        for b in range(full_ids.shape[0]):
            pos = full_attn[b].bool().nonzero().squeeze(-1)  # the sample's real tokens, in order
            f = full_ids[b, pos].tolist()
            p = prefix_ids[b, prefix_attn[b].bool()].tolist()
            start = 0
            while start < min(len(p), len(f)) and f[start] == p[start]:
                start += 1  # longest common prefix (a BPE merge across the boundary shortens it)
            end = start
            while end < len(f) and f[end] not in self.stop_ids:
                end += 1
            mask[b, pos[start:end]] = True
        return mask

    def teacher_forced_inputs(
        self, prompts: list[str], images: list[Any]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The processor's batch for [user: image (+ query); assistant: prompt] per (prompt, PIL image), and the
        (B, T) mask of the prompt tokens to score."""
        apply = self.processor.apply_chat_template
        template = self.chat_template
        full = [apply(self._messages(p), chat_template=template, tokenize=False) for p in prompts]
        prefix = apply(
            self._messages(None), chat_template=template, add_generation_prompt=True, tokenize=False
        )
        enc = self._encode(full, images)
        pre = self._encode([prefix] * len(prompts), images)
        mask = self.prompt_mask(
            enc["input_ids"], enc["attention_mask"], pre["input_ids"], pre["attention_mask"]
        )
        if not bool(mask.any(1).all()):
            raise ValueError("vlm_loglik: a prompt produced no tokens to score (empty prompt?)")
        return enc, mask

    def warn_past_positions(self, lengths: torch.Tensor, prompts: list[str]) -> None:
        """Warn once per reward when a sequence (image tokens, query and prompt; `lengths` (B,)) is longer than the
        language model's ``max_position_embeddings``: a rotary model (the shapes VLM's 128) scores it past the
        length it was made for, and the only word was the tokenizer's "will result in indexing errors", which
        named no prompt and no error followed."""
        if self._warned_long or self.max_positions is None or int(lengths.max()) <= self.max_positions:
            return
        self._warned_long = True
        first = int((lengths > self.max_positions).nonzero()[0])
        log.warning(
            "vlm_loglik (%s): a prompt with its image and query takes %d tokens, more than the model's %d "
            "positions (max_position_embeddings): long prompts are scored past the length the model was made "
            "for, e.g. %r",
            self.model_name,
            int(lengths[first]),
            self.max_positions,
            excerpt(prompts[first]),
        )

    @torch.no_grad()
    def _score_batch(
        self, images: torch.Tensor, prompts: list[str]
    ) -> tuple[torch.Tensor, list[dict[str, Any]]]:
        enc, mask = self.teacher_forced_inputs(prompts, to_pil(images))
        self.warn_past_positions(enc["attention_mask"].sum(1), prompts)
        inputs = {k: v.to(self.device) for k, v in enc.items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
        logits = self.model(**inputs).logits.cpu()
        mean, tok_lp = masked_mean_logprob(logits, enc["input_ids"], mask)
        details = []
        for b in range(len(prompts)):
            idx = mask[b].nonzero().squeeze(-1)
            details.append(
                {
                    "tokens": self.tokenizer.convert_ids_to_tokens(enc["input_ids"][b, idx].tolist()),
                    "token_logprobs": tok_lp[b, idx].tolist(),
                }
            )
        return mean, details

    def score(
        self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]] | None
    ) -> RewardOutput:
        scores, details = [], []
        for i in range(0, images.shape[0], self.batch_size):
            s, d = self._score_batch(images[i : i + self.batch_size], prompts[i : i + self.batch_size])
            scores.append(s)
            details += d
        return RewardOutput(torch.cat(scores).float(), details)
