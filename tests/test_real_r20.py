"""eval/real.py, mutation round 20: the tests that killed its surviving mutants."""

from __future__ import annotations

import hashlib
import json

from imgalign.eval.real import generate_metadata


def test_generate_seed_0_is_the_same_prompt_set_as_before() -> None:
    """generate:SEED is how runs are told to share a prompt set ("scores are comparable only with runs on this same
    set"): the set a seed names must not change between versions. Pinned here, each task's first prompt by hand
    (the position task places its second class relative to its first) and the whole set by its digest."""
    metas = generate_metadata(0)
    firsts = {}
    for m in metas:
        firsts.setdefault(m["tag"], m)
    assert firsts["position"] == {
        "tag": "position",
        "include": [
            {"class": "clock", "count": 1},
            {"class": "sink", "count": 1, "position": ["left of", 0]},
        ],
        "prompt": "a photo of a sink left of a clock",
    }
    assert [m["prompt"] for m in firsts.values()] == [
        "a photo of a person",
        "a photo of a cell phone and a broccoli",
        "a photo of four kites",
        "a photo of a green pizza",
        "a photo of a sink left of a clock",
        "a photo of a blue surfboard and a purple stop sign",
    ]
    assert firsts["counting"]["exclude"] == [{"class": "kite", "count": 5}]
    digest = hashlib.sha256(json.dumps(metas, sort_keys=True).encode()).hexdigest()
    assert (len(metas), digest) == (553, "f3d5f35068198ce571e732b04e2ccadde467e11ca7735c668272957cb371fb21")
