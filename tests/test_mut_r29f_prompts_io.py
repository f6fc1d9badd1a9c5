"""prompts.io.read_text names a file UTF-16 only for a byte-order mark followed by NUL bytes (mutation round 29)."""

import pytest

from imgalign.prompts.io import PromptFileError, load_prompts


def test_a_latin1_file_starting_with_the_bytes_of_a_utf16_bom_is_not_called_utf16(tmp_path):
    """'ÿþ' in Latin-1 is 0xff 0xfe, a UTF-16 byte-order mark's bytes; without the NUL bytes that UTF-16 Latin letters
    carry the file is said to be not UTF-8, not UTF-16 (told to re-save a file that is not UTF-16 from UTF-16)."""
    path = tmp_path / "p.txt"
    path.write_bytes("ÿþ a café\n".encode("latin-1"))
    with pytest.raises(PromptFileError) as e:
        load_prompts(path)
    assert "it is not UTF-8 text" in str(e.value)
    assert "UTF-16" not in str(e.value)


def test_a_binary_file_with_nul_bytes_and_no_bom_is_not_called_utf16(tmp_path):
    """A PNG given as the prompt file is not UTF-8 and holds NUL bytes; without a byte-order mark it is not named
    UTF-16 text."""
    path = tmp_path / "p.txt"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10")
    with pytest.raises(
        PromptFileError, match=r"cannot read prompt file '.*p\.txt': it is not UTF-8 text"
    ) as e:
        load_prompts(path)
    assert "UTF-16" not in str(e.value)
