"""A CLIP BPE tokenizer whose vocabulary is the shapes world: every shapes word is one token.

The files are the standard ``vocab.json`` + ``merges.txt`` that :class:`transformers.CLIPTokenizer` reads, so the
tokenizer loads offline with ``CLIPTokenizer.from_pretrained(folder)`` like any CLIP tokenizer. Single characters
(letters, digits, common punctuation; with and without the end-of-word marker ``</w>``) stay in the vocabulary, so
an unknown word still tokenises (into pieces) instead of failing. A character outside that set (``&``, ``é``) becomes
the unknown token, which is the end-of-text token: :func:`imgalign.sampling.warn_unknown_words` names such words.

Merges are built greedily: for each word in turn, simulate BPE with the merges so far and append merges for the
adjacent pairs until the word is a single token. New merges rank below all earlier ones and an earlier word is
already one token (no pairs left), so adding a word never changes how an earlier word splits.
"""

from __future__ import annotations

import functools
import json
import re
import string
import unicodedata
from pathlib import Path

BOS, EOS = "<|startoftext|>", "<|endoftext|>"
EOW = "</w>"
EXTRA_WORDS = (
    "a",
    "an",
    "photo",
    "of",
    "and",
    "left",
    "right",
    "above",
    "below",
    "one",
    "two",
    "three",
    "four",
)


def shapes_words() -> list[str]:
    """Every word a shapes-world prompt can contain (sorted, deterministic)."""
    # (imported here: imgalign.sampling takes prompt_pieces from this module, and no sampler needs the shapes world)
    from imgalign import shapes as W

    words = set(EXTRA_WORDS) | set(W.SHAPES) | set(W.PLURALS.values()) | set(W.COLORS)
    words |= set(W.NUMBERS.values())
    for rel in W.RELATIONS:
        words |= set(rel.split())
    return sorted(words)


def _bpe(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    """CLIP's BPE on one word (characters, the last with ``</w>``), merging the lowest-ranked pair first."""
    parts = [*word[:-1], word[-1] + EOW]
    while len(parts) > 1:
        pairs = [(ranks.get((a, b)), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
        pairs = [(r, i) for r, i in pairs if r is not None]
        if not pairs:
            break
        r, _ = min(pairs)
        a, b = next(p for p in zip(parts, parts[1:]) if ranks.get(p) == r)
        merged, i = [], 0
        while i < len(parts):
            if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                merged.append(a + b)
                i += 2
            else:
                merged.append(parts[i])
                i += 1
        parts = merged
    return parts


@functools.cache
def build_vocab(words: tuple[str, ...]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocab token -> id, merges in rank order) so that each of `words` is exactly one token."""
    chars = string.ascii_lowercase + string.digits + ".,!?'\"-:;()"
    tokens: list[str] = [*chars, *(c + EOW for c in chars)]
    merges: list[tuple[str, str]] = []
    ranks: dict[tuple[str, str], int] = {}
    for w in words:
        while len(parts := _bpe(w, ranks)) > 1:
            pair = (parts[0], parts[1])  # merge left to right
            ranks[pair] = len(merges)
            merges.append(pair)
            if pair[0] + pair[1] not in tokens:
                tokens.append(pair[0] + pair[1])
    tokens += [BOS, EOS]
    return {t: i for i, t in enumerate(tokens)}, merges


def save_tokenizer(folder: Path, model_max_length: int):
    """Write a CLIPTokenizer for the shapes vocabulary to `folder` (standard files) and return it loaded back."""
    from transformers import CLIPTokenizer

    vocab, merges = build_vocab(tuple(shapes_words()))
    tok = CLIPTokenizer(
        vocab=vocab,
        merges=[tuple(m) for m in merges],
        model_max_length=model_max_length,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=EOS,
        unk_token=EOS,
    )
    folder.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(folder)
    # the slow-tokenizer files too, for readers (and older transformers) that look for them
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return CLIPTokenizer.from_pretrained(folder)


# CLIP's pre-tokenizer (open_clip's and transformers' CLIPTokenizer, Radford et al. 2021): a few contractions,
# runs of letters, single digits, runs of anything else but spaces ("-_" one piece); each piece is tokenised on its
# own
_PIECES = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d|[^\W\d_]+|\d|(?:[^\s\w]|_)+")


def prompt_pieces(prompt: str) -> list[str]:
    """`prompt` lower-cased and split as a CLIP tokenizer splits it before BPE: "red-circle" is "red", "-",
    "circle" (three words the shapes vocabulary knows), "circle's" is "circle", "'s"."""
    # NFC first, as the tokenizer's normalizer: a decomposed "cafe\u0301" was "cafe" and a bare accent, not "café"
    return _PIECES.findall(unicodedata.normalize("NFC", prompt).lower())


def is_word(piece: str) -> bool:
    """Whether a :func:`prompt_pieces` piece holds a letter or digit (a word), not punctuation alone."""
    return any(ch.isalnum() for ch in piece)


def unknown_words(prompt: str) -> list[str]:
    """Words of `prompt` outside the shapes vocabulary (lower-cased, split as CLIP's tokenizer splits them, bare
    punctuation ignored)."""
    known = set(shapes_words())
    return [w for w in prompt_pieces(prompt) if is_word(w) and w not in known]
