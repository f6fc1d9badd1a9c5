"""Prompt sources for training: the shapes-world generator or a prompt file (.txt, .jsonl, GenEval metadata), a
seeded train/test split, and a per-step sampler that is a pure function of (seed, step).

Because the prompts of step k depend only on (seed, k), every process computes the same global list and takes its
own share, and a run resumed at step k continues exactly the sequence an uninterrupted run would have seen.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imgalign.trainers.config import PromptConfig


@dataclass
class PromptBatch:
    prompts: list[str]  # [P] distinct prompts of the step (global)
    metadata: list[dict[str, Any]]  # [P]


def _mix(*xs: int) -> int:
    """A stable 63-bit seed from integers (Python's hash() of tuples is not stable across processes)."""
    h = 0x9E3779B97F4A7C15
    for x in xs:
        h = (h ^ (x & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
    return h & 0x7FFFFFFFFFFFFFFF


def check_prompt_source(source: str) -> None:
    """Raise FileNotFoundError when `source` names a prompt file that does not exist, or a folder (``shapes`` and
    ``generate:SEED`` are not files)."""
    path = Path(source)
    if source == "shapes" or source.startswith("generate:") or path.is_file():
        return
    if path.is_dir():  # it said "does not exist" of a folder that does
        raise FileNotFoundError(
            f"prompts.source {source!r} is a folder; give 'shapes', a .txt/.jsonl prompt file or generate:SEED"
        )
    from imgalign.hub import tilde_hint

    where = tilde_hint(source) or (
        "" if path.is_absolute() else f" (a relative path is read from the working folder {Path.cwd()})"
    )
    raise FileNotFoundError(
        f"prompts.source {source!r} does not exist{where}: give 'shapes', a .txt/.jsonl prompt file or generate:SEED "
        "(GenEval-style prompts drawn from the task definitions)"
    )


def token_limits(pipe: Any, max_sequence_length: int) -> list[tuple[str, Any, int]]:
    """The tokenizers `pipe` encodes prompts with, as (encoder, tokenizer, tokens it keeps): a CLIP keeps the
    pipeline's ``tokenizer_max_length`` (77; the shapes model's 12), a T5 `max_sequence_length`, as diffusers' SD3
    and FLUX pipelines truncate. A tokenizer whose text encoder is absent (the shapes model's T5) encodes nothing, and
    one counting as an earlier one does (SD3's two CLIPs share a vocabulary) is listed once: tokenizing a large
    prompt file takes seconds."""
    out: list[tuple[str, Any, int]] = []
    for suffix in ("", "_2", "_3"):
        tok = getattr(pipe, f"tokenizer{suffix}", None)
        encoder = getattr(pipe, f"text_encoder{suffix}", None)
        if tok is None or encoder is None:
            continue
        if "T5" in type(encoder).__name__:
            label, limit = "T5", max_sequence_length
        else:
            label, limit = "CLIP", int(getattr(pipe, "tokenizer_max_length", tok.model_max_length))
        key = (label, type(tok), tok.get_vocab(), limit)
        if all((e, type(t), t.get_vocab(), n) != key for e, t, n in out):
            out.append((label, tok, limit))
    return out


def over_limit(prompts: Sequence[str], limits: Sequence[tuple[str, Any, int]]) -> dict[str, tuple[str, int]]:
    """The prompts a text encoder truncates, in the order of `prompts`: prompt -> (encoder, its token count there,
    start and end tokens included), of the first encoder of `limits` that truncates it."""
    found: dict[str, tuple[str, int]] = {}
    for encoder, tok, limit in limits if prompts else ():
        # verbose=False: no "Token indices sequence length is longer ..." line from transformers
        for p, ids in zip(prompts, tok(list(prompts), verbose=False)["input_ids"]):
            if len(ids) > limit and p not in found:
                found[p] = (encoder, len(ids))
    return {p: found[p] for p in prompts if p in found}


def long_prompts_warning(
    source: str,
    lines: dict[str, int],
    over: dict[str, tuple[str, int]],
    limits: Sequence[tuple[str, Any, int]],
) -> str:
    """The line saying how many of `source`'s distinct prompts (`lines`: prompt -> its line) the text encoders
    truncate (`over`, from :func:`over_limit`; not empty), naming the first one's line."""
    first = next(iter(over))
    encoder, tokens = over[first]
    kept = ", ".join(dict.fromkeys(f"{e} {n}" for e, _, n in limits))
    generated = source.startswith("generate:")  # a drawn set, not a file to edit
    where = f"{'prompt' if generated else 'line'} {lines[first]}, {tokens} {encoder} tokens"
    if len(over) == 1:
        which, they, their, them = f"({where}) is", "it is", "its", "it"
    else:
        which, they, their, them = f"(the first: {where}) are", "they are", "their", "them"
    return (
        f"prompts.source {source!r}: {len(over)} of its {len(lines)} distinct prompts {which} longer than the text "
        f"encoders take ({kept} tokens); {they} truncated when encoded, so {their} words past the limit do not "
        "steer the images" + ("" if generated else f": shorten {them} to train on every word")
    )


def conflicting_metadata(
    records: Sequence[tuple[str, dict[str, Any]]], numbers: Sequence[int]
) -> tuple[str, int, int] | None:
    """The first prompt listed twice with other GenEval fields (tag, include, exclude), and its two lines: each
    line's fields judge that line's draws, so the same prompt was judged two ways without a word. An 'exclude' left
    out, null or empty is one spec (the judge reads them alike: no exclusion)."""
    seen: dict[str, tuple[int, list[Any]]] = {}
    for (p, m), n in zip(records, numbers):
        spec = [m.get("tag"), m.get("include"), m.get("exclude") or []]
        if p in seen and seen[p][1] != spec:
            return p, seen[p][0], n
        seen.setdefault(p, (n, spec))
    return None


class PromptSampler:
    """Prompts for each training step, plus the held-out test prompts."""

    def __init__(self, cfg: PromptConfig, hold_out: bool = True) -> None:
        """`hold_out`: split ``cfg.test_fraction`` of a prompt file's distinct prompts off for testing (the trainer
        does when eval.suite=reward scores them; otherwise every prompt trains)."""
        self.cfg = cfg
        self.train: list[tuple[str, dict[str, Any]]] = []
        self.test: list[tuple[str, dict[str, Any]]] = []
        # sha256 of the prompt file, saved in checkpoints to notice an edited file on resume
        self.digest: str | None = None
        # (step, prompts drawn before it): a resumed run continues from its checkpoint's (resume_at)
        self._anchor = (0, 0)
        # each distinct prompt of a file -> its first line (generate:SEED: its number in the set), in file order
        self.lines: dict[str, int] = {}
        # a prompt listed twice with other GenEval fields: (prompt, first line, other line), for the trainer to say
        self.conflict: tuple[str, int, int] | None = None
        if cfg.source == "shapes":
            cfg.validate()  # its tasks (a PromptConfig built in code has not been validated)
        else:
            if cfg.source.startswith("generate:"):  # GenEval-style prompts drawn from the task definitions
                from imgalign.eval.real import load_prompt_set

                records = [(m["prompt"], dict(m)) for m in load_prompt_set(cfg.source)]
                numbers = list(range(1, len(records) + 1))
            else:
                from imgalign.prompts.io import load_prompts

                path = Path(cfg.source)
                check_prompt_source(cfg.source)
                loaded = load_prompts(path)
                records = [(r.prompt, dict(r.metadata)) for r in loaded]
                numbers = [r.line for r in loaded]
                self.digest = hashlib.sha256(path.read_bytes()).hexdigest()
            for (p, _), n in zip(records, numbers):
                self.lines.setdefault(p, n)
            self.conflict = conflicting_metadata(records, numbers)
            # the split is over distinct prompts, so a prompt listed twice is never both trained and tested on
            # (its repeats all stay in training, weighting it as the file does)
            distinct = list(self.lines)
            order = list(range(len(distinct)))
            random.Random(cfg.seed).shuffle(order)
            fraction = cfg.test_fraction if hold_out else 0.0
            n_test = int(round(len(distinct) * fraction))
            if fraction > 0 and len(distinct) > 1:
                n_test = max(1, n_test)  # a test fraction asks for at least one test prompt
            n_test = min(n_test, len(distinct) - 1)
            held = {distinct[i] for i in order[:n_test]}
            first = {p: m for p, m in reversed(records)}  # each prompt's first record
            self.test = [(distinct[i], first[distinct[i]]) for i in order[:n_test]]
            self.train = [r for r in records if r[0] not in held]

    def position(self, step: int, prompts_per_step: int) -> int:
        """How many training prompts have been drawn before `step` (saved in checkpoints)."""
        anchor_step, anchor_position = self._anchor
        return anchor_position + (step - anchor_step) * prompts_per_step

    def resume_at(self, step: int, position: int) -> None:
        """Continue the prompt sequence of a checkpoint written at `step` after `position` draws: the same prompts
        as an uninterrupted run, also when ``sampling.prompts_per_step`` changed on resume."""
        self._anchor = (step, position)

    def for_step(self, step: int, n: int) -> PromptBatch:
        """The `n` prompts of training step `step` (identical on every process)."""
        if self.cfg.source == "shapes":
            from imgalign.prompts.shapes import sample_training_specs

            specs = sample_training_specs(n, seed=_mix(self.cfg.seed, step), tasks=tuple(self.cfg.tasks))
            return PromptBatch([s.prompt() for s in specs], [s.to_metadata() for s in specs])
        # files: walk through seeded permutations of the train prompts, epoch after epoch
        start = self.position(step, n)
        size = len(self.train)
        prompts, metas = [], []
        cache: dict[int, list[int]] = {}
        for k in range(start, start + n):
            epoch, i = divmod(k, size)
            if epoch not in cache:
                perm = list(range(size))
                random.Random(_mix(self.cfg.seed, 7919, epoch)).shuffle(perm)
                cache[epoch] = perm
            p, m = self.train[cache[epoch][i]]
            prompts.append(p)
            metas.append(m)
        return PromptBatch(prompts, metas)
