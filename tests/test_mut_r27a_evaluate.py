"""Mutation round 27 (helper a): imgalign/commands/evaluate.py."""

import hashlib

from imgalign.commands.evaluate import _is_digest, setting_change


def test_only_a_full_sha256_hex_digest_reads_as_a_prompt_files_digest():
    digest = hashlib.sha256(b"x").hexdigest()
    assert _is_digest(digest)
    assert not _is_digest(digest[:12])  # hex, but not 64 characters
    assert not _is_digest(digest + "0")
    assert not _is_digest(digest.upper())
    assert not _is_digest(None)
    # two short hex values (a hand-edited eval_args.json) are shown as they are, not as SHA-256 digests
    assert setting_change("prompts", "abc", "def") == "prompts: 'abc' there, 'def' now"
    other = hashlib.sha256(b"y").hexdigest()
    assert "content differs" in setting_change("prompts", digest, other)
