"""eval/reports.py, mutation round 19: the tests that killed its surviving mutants, and a broken PNG in the
failure gallery."""

from __future__ import annotations

import io
import json
from pathlib import Path

from PIL import Image

from imgalign.eval.reports import failure_gallery


def broken_png() -> bytes:
    """A PNG whose second chunk header is damaged: PIL raises SyntaxError ("broken PNG file") loading it."""
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (1, 2, 3)).save(buf, format="PNG")
    data = bytearray(buf.getvalue())
    data[36] = 0
    return bytes(data)


def test_the_failure_gallery_shows_a_broken_png_as_missing(tmp_path: Path, monkeypatch) -> None:
    """judge_folder gives a PNG with a broken chunk a failure row ('cannot read image'); the failure gallery of
    `eval --baseline` then stopped with PIL's SyntaxError traceback. It is drawn as a missing image."""
    ev = tmp_path / "ev"
    (ev / "images" / "00000" / "samples").mkdir(parents=True)
    (ev / "images" / "00000" / "samples" / "0000.png").write_bytes(broken_png())
    row = {"file": "00000/samples/0000.png", "correct": False, "tag": "colors", "prompt": "p", "error": "bad"}
    (ev / "results.jsonl").write_text(json.dumps(row) + "\n")
    import imgalign.eval.gallery as gallery

    shown = []
    monkeypatch.setattr(
        gallery, "caption_grid", lambda images, captions, **kw: shown.extend(captions) or images[0]
    )
    assert failure_gallery(ev, ev / "failures.png", cell=32) == 1
    assert shown == ["[colors] p\n(image missing) bad"] and (ev / "failures.png").is_file()
