"""Every registered reward: random images in, finite float32 [B] out, on the CPU with no network."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_rewards_tiny import make_tiny_open_clip, make_tiny_qwen2_vl

from imgalign.prompts.shapes import EVAL_SET_PATH
from imgalign.rewards.base import Reward, RewardOutput, build_reward, list_rewards

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def options(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("models")
    clip = make_tiny_open_clip(d / "clip")
    vlm = make_tiny_qwen2_vl(d / "vlm")
    return {
        "clip": f"clip:model=local-dir:{clip}",
        "vlm_loglik": f"vlm_loglik:model={vlm}",
        "discriminator": "discriminator:features=stats,ref_size=32,hidden=8",
        "artifact": "artifact",  # the shipped shapes-artifact model
        "fid": "fid:features=stats,ref_size=64,set_size=16",
        "geneval": "geneval",
    }


def test_every_registered_reward_is_covered(options: dict[str, str]) -> None:
    assert set(list_rewards()) == set(options), "add the new reward to this test's options"
    assert all(list_rewards().values()), "every reward needs a one-line description"


@pytest.mark.parametrize("name", sorted(list_rewards()))
def test_random_images_give_finite_float32_scores(name: str, options: dict[str, str]) -> None:
    b = 3
    metas = [json.loads(line) for line in Path(EVAL_SET_PATH).read_text().splitlines()[:b]]
    prompts = [m["prompt"] for m in metas]
    reward = build_reward(options[name])
    torch.manual_seed(0)
    if hasattr(reward, "ready") and not reward.ready():  # fid: a generated set to score against
        reward.update(torch.rand(4, 3, 64, 64))
    out = reward(torch.rand(b, 3, 64, 64), prompts, metas)
    assert out.scores.dtype == torch.float32 and out.scores.shape == (b,)
    assert torch.isfinite(out.scores).all()
    assert out.details is None or len(out.details) == b
    for flag in ("higher_is_better", "differentiable", "stateful"):
        assert isinstance(getattr(reward, flag), bool)
    if reward.stateful:
        state = reward.state_dict()
        reward.update(torch.rand(2, 3, 64, 64), prompts[:2])
        reward.load_state_dict(state)


def test_unknown_reward_lists_valid_names() -> None:
    with pytest.raises(
        ValueError, match="valid rewards: .*artifact.*clip.*discriminator.*fid.*geneval.*vlm_loglik"
    ):
        build_reward("clipp")


def test_an_unknown_reward_option_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"reward 'geneval': unknown option\(s\) foo; its options: mode"):
        build_reward("geneval:foo=1")


def test_geneval_modes_on_ground_truth_and_a_blank_image() -> None:
    """strict, partial and soft give 1 on a rendered ground truth and 0 on a blank canvas; a bad mode is named."""
    from imgalign import shapes as W
    from imgalign.prompts.shapes import build_eval_set

    spec = build_eval_set()[0]
    img, _ = W.render(spec, 0)
    x = torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)[None].float() / 255.0
    blank = torch.zeros_like(x) + torch.tensor(W.BACKGROUND, dtype=torch.float32).view(1, 3, 1, 1) / 255.0
    meta = [spec.to_metadata()] * 2
    for mode in ("strict", "partial", "soft"):
        out = build_reward(f"geneval:mode={mode}")(torch.cat([x, blank]), [spec.prompt()] * 2, meta)
        assert out.scores.tolist() == [1.0, 0.0], mode
    with pytest.raises(ValueError, match="strict, partial, soft"):
        build_reward("geneval:mode=dense")
    # clip= belongs to a real detector; with the shapes detector it was ignored silently
    with pytest.raises(
        ValueError, match="clip=ViT-B-32:openai picks the colour classifier of a real detector"
    ):
        build_reward("geneval:clip=ViT-B-32:openai")
    assert build_reward("geneval:clip=ViT-L-14:openai").mode == "partial"  # the default written out


def test_geneval_refuses_soft_with_a_real_detector_and_rows_without_a_tag() -> None:
    """mode=soft is defined only for the shapes detector (refused before any model loads); a row needs a tag (it
    sets the detection threshold) as well as its include clauses."""
    from imgalign.rewards.geneval import GenEvalReward

    with pytest.raises(ValueError, match="mode=soft is defined for the shapes detector"):
        GenEvalReward(mode="soft", detector="facebook/mask2former-swin-small-coco-instance")
    row = {"prompt": "a photo of a circle", "include": [{"class": "circle", "count": 1}]}
    with pytest.raises(ValueError, match="has no GenEval metadata"):
        GenEvalReward().check_metadata([row])
    GenEvalReward().check_metadata([{**row, "tag": "single_object"}])
    with pytest.raises(ValueError, match="needs GenEval metadata with 'tag' and 'include'"):
        GenEvalReward()(torch.zeros(1, 3, 64, 64), [row["prompt"]], [row])


def test_geneval_shapes_vocabulary_checks_both_sides_and_colours() -> None:
    from imgalign.rewards.geneval import check_shapes_vocabulary

    ok = {
        "include": [{"class": "circle", "count": 1, "color": "red"}],
        "exclude": [{"class": "square", "count": 1}],
    }
    check_shapes_vocabulary(ok)
    with pytest.raises(ValueError, match=r"exclude\[0\]\.class 'dog' is not a shape"):
        check_shapes_vocabulary({**ok, "exclude": [{"class": "dog", "count": 1}]})
    with pytest.raises(ValueError, match=r"include\[0\]\.color 'orange' is not a shapes-world colour"):
        check_shapes_vocabulary({"include": [{"class": "circle", "count": 1, "color": "orange"}]})


def test_images_out_of_range_are_refused_and_nan_images_score_nan() -> None:
    reward = build_reward("clip")
    with pytest.raises(ValueError, match=r"images must be in \[0, 1\].*divide \[0, 255\] images by 255"):
        reward(torch.rand(1, 3, 64, 64) * 255, ["a circle"])
    x = torch.rand(3, 3, 64, 64)
    x[1, 0, 0, 0] = float("nan")
    for name in ("clip", "geneval", "artifact"):
        s = build_reward(name)(
            x,
            ["a photo of a circle"] * 3,
            [
                {
                    "tag": "single_object",
                    "include": [{"class": "circle", "count": 1}],
                    "prompt": "a photo of a circle",
                }
            ]
            * 3,
        ).scores
        assert torch.isnan(s[1]) and torch.isfinite(s[[0, 2]]).all(), name


def test_a_nan_image_never_reaches_a_set_based_reward() -> None:
    """fid in group mode scores a batch against its set: a NaN image gets NaN and changes nobody else's reward, and
    it never enters the set (it used to be blacked out and pushed in, flipping the others' sign)."""
    from imgalign.rewards.fid import shapes_reference_images

    real = shapes_reference_images(8, seed=5)
    r = build_reward("fid:features=stats,ref_size=64,set_size=40,mode=group")
    r.update(torch.rand(8, 3, 64, 64))
    clean = r(real[:3], [""] * 3).scores
    x = torch.cat([real[:1], torch.full((1, 3, 64, 64), float("nan")), real[1:3]])
    out = r(x, [""] * 4).scores
    assert torch.isnan(out[1]) and torch.equal(out[[0, 2, 3]], clean)
    seeding = build_reward("fid:features=stats,ref_size=64,set_size=40")
    seeding.update(x, [""] * 4)  # an empty set: the batch seeds it, without the NaN image
    assert seeding.buffer.shape[0] == 3


def test_reward_options_are_read_as_written() -> None:
    from imgalign.rewards.base import parse_reward_spec

    _, o = parse_reward_spec("vlm_loglik:query=Question: what is shown?,batch_size=4")
    assert o == {"query": "Question: what is shown?", "batch_size": 4}  # YAML made the query a mapping
    assert parse_reward_spec("x:a=no,b=true,c=1e-3,e=[x")[1] == {"a": "no", "b": True, "c": 1e-3, "e": "[x"}
    assert parse_reward_spec("x:a='Is it: ok?',b=08,c=3,d=0.5")[1] == {
        "a": "Is it: ok?",
        "b": "08",
        "c": 3,
        "d": 0.5,
    }
    for spec, msg in [
        ("clip:clamp=flase", "clamp must be true or false, got 'flase'"),
        ("clip:batch_size=0", "batch_size must be a number >= 1"),
        ("fid:exact=nope", "exact must be true or false"),
        ("discriminator:online=false", "online=false needs head=FILE"),
        ("discriminator:features=stats,steps=0", "steps must be a number >= 1"),
        ("discriminator:features=stats,reward=clipped,clip=-1", "clip must be > 0"),
    ]:
        with pytest.raises(ValueError, match=msg):
            build_reward(spec)


def make_bright(device="cpu", dtype=torch.float32, gain: float = 1.0):
    """A factory (it takes device/dtype) building a reward, for the next test."""
    from imgalign.rewards.base import FunctionReward

    return FunctionReward(lambda im, p, m: gain * im.mean(dim=(1, 2, 3)), name="bright")


def test_a_reward_factory_path_is_called_as_a_factory(monkeypatch) -> None:
    import sys
    import types

    mod = types.ModuleType("my_lab.rewards")
    mod.make_bright = make_bright
    monkeypatch.setitem(sys.modules, "my_lab.rewards", mod)
    r = build_reward("my_lab.rewards:make_bright:gain=2.0")
    s = r(torch.full((2, 3, 8, 8), 0.25), ["", ""]).scores
    torch.testing.assert_close(s, torch.full((2,), 0.5))
    # an option the factory does not take is refused as a class's or function's is (it was a raw TypeError)
    with pytest.raises(
        ValueError, match=r"reward 'my_lab.rewards:make_bright': unknown option\(s\) bad; its options: gain$"
    ):
        build_reward("my_lab.rewards:make_bright:bad=1")


def bright_fn(images, prompts, metadata, gain: float = 1.0):
    """A plain scoring function with one option, for the next tests."""
    return gain * images.mean(dim=(1, 2, 3))


class NotAReward:
    """A class that is neither a Reward nor a factory (it takes no device/dtype)."""


def test_a_reward_returning_none_is_said_to_return_nothing(monkeypatch) -> None:
    """None became one NaN score (torch.as_tensor(None)): 'non-finite score nan' for one image, 'returned 1 scores
    for 4 images' for more; both hid that the function forgot to return its scores."""
    import sys
    import types

    from imgalign.rewards.base import Reward

    class Forgets(Reward):
        name = "forgets"

        def score(self, images, prompts, metadata):
            images.mean()

    mod = types.ModuleType("my_lab.none_fns")
    mod.returns_none = lambda images, prompts, metadata=None: None
    monkeypatch.setitem(sys.modules, "my_lab.none_fns", mod)
    for reward in (build_reward("my_lab.none_fns:returns_none"), Forgets()):
        for n in (1, 3):
            with pytest.raises(
                ValueError, match=r"returned nothing \(None\); it must return one score per image"
            ):
                reward(torch.full((n, 3, 8, 8), 0.5), [""] * n)


def test_a_function_path_checks_its_options_and_a_bad_class_is_refused_when_built(monkeypatch) -> None:
    import sys
    import types

    mod = types.ModuleType("my_lab.fns")
    mod.bright_fn, mod.NotAReward, mod.threshold = bright_fn, NotAReward, 0.5
    mod.no_metadata = lambda images, prompts: images.mean(dim=(1, 2, 3))
    monkeypatch.setitem(sys.modules, "my_lab.fns", mod)
    x = torch.full((2, 3, 8, 8), 0.25)
    torch.testing.assert_close(
        build_reward("my_lab.fns:bright_fn:gain=2")(x, ["", ""]).scores, torch.full((2,), 0.5)
    )
    # an option the function does not take is refused when built, not at the first scoring call
    with pytest.raises(
        ValueError, match=r"reward 'my_lab.fns:bright_fn': unknown option\(s\) scale; its options: gain"
    ):
        build_reward("my_lab.fns:bright_fn:scale=2")
    with pytest.raises(ValueError, match="'my_lab.fns:NotAReward' is a class but not an imgalign Reward"):
        build_reward("my_lab.fns:NotAReward")
    with pytest.raises(ValueError, match="'my_lab.fns:threshold' is of type float, not callable"):
        build_reward("my_lab.fns:threshold")
    with pytest.raises(
        ValueError, match=r"'my_lab.fns:no_metadata' cannot be called as fn\(images, prompts, metadata\)"
    ):
        build_reward("my_lab.fns:no_metadata")


def test_a_single_file_module_path_is_a_reward(monkeypatch) -> None:
    import sys
    import types

    from imgalign.rewards.base import parse_reward_spec, reward_key

    mod = types.ModuleType("myrewards")
    mod.bright_fn = bright_fn
    monkeypatch.setitem(sys.modules, "myrewards", mod)
    assert parse_reward_spec("myrewards:bright_fn") == ("myrewards:bright_fn", {})
    assert parse_reward_spec("myrewards:bright_fn:gain=2") == ("myrewards:bright_fn", {"gain": 2})
    assert reward_key("myrewards:bright_fn") == "myrewards:bright_fn"
    r = build_reward("myrewards:bright_fn:gain=2")
    assert r.name == "bright_fn"
    torch.testing.assert_close(r(torch.full((2, 3, 8, 8), 0.25), ["", ""]).scores, torch.full((2,), 0.5))
    # a registered name keeps its options: 'clip:foo' is clip with a malformed option, not module clip
    with pytest.raises(ValueError, match="reward option 'foo' in 'clip:foo' must look like key=value"):
        parse_reward_spec("clip:foo")
    assert parse_reward_spec("x:a=1") == ("x", {"a": 1})
    with pytest.raises(ValueError, match="No module named 'genevl'.*nor a registered reward: .*geneval"):
        build_reward("genevl:strict")


class NoDevice(Reward):
    """A Reward subclass whose __init__ takes no device/dtype, for the next test."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()


class Bright(Reward):
    """A Reward subclass with a number and a string option, for the tests below."""

    name = "bright"

    def __init__(self, device="cpu", dtype=torch.float32, scale: float = 1.0, ref: str = "x") -> None:
        super().__init__(device, dtype)
        self.scale, self.ref = scale, ref

    def score(self, images, prompts, metadata):
        return RewardOutput(self.scale * images.mean(dim=(1, 2, 3)))


@pytest.fixture
def my_lab(monkeypatch):
    """Module `my_lab.custom` (and single-file `mylab`) holding Bright, NoDevice and bright_fn."""
    import sys
    import types

    for name in ("my_lab.custom", "mylab"):
        mod = types.ModuleType(name)
        mod.Bright, mod.NoDevice, mod.bright_fn = Bright, NoDevice, bright_fn
        monkeypatch.setitem(sys.modules, name, mod)


def test_a_reward_subclass_without_device_and_dtype_is_refused_by_spec(my_lab) -> None:
    with pytest.raises(
        ValueError,
        match=r"reward 'my_lab.custom:NoDevice:scale=2': NoDevice is a Reward subclass, and a Reward subclass "
        r"must accept device and dtype \(keyword arguments\)",
    ):
        build_reward("my_lab.custom:NoDevice:scale=2")


def test_a_space_after_the_colon_of_a_path_is_ignored(my_lab) -> None:
    from imgalign.rewards.base import parse_reward_spec, reward_key

    for spec in ("mylab: bright_fn", "my_lab.custom: bright_fn", "my_lab.custom : bright_fn :gain=2"):
        name = spec.split(":")[0].strip() + ":bright_fn"
        assert parse_reward_spec(spec)[0] == name, spec
        assert build_reward(spec).name == "bright_fn"
    assert reward_key("mylab: bright_fn: gain=1") == "mylab:bright_fn"


def test_option_values_split_on_commas_outside_quotes_and_brackets() -> None:
    from imgalign.rewards.base import parse_reward_spec

    assert parse_reward_spec('mylab:Bright:ref="a, b",scale=2') == (
        "mylab:Bright",
        {"ref": "a, b", "scale": 2},
    )
    assert parse_reward_spec("x:ref=[1,2],b='c,d',e={f: 1}")[1] == {"ref": [1, 2], "b": "c,d", "e": "{f: 1}"}
    assert parse_reward_spec("x:q=it's, ok=2")[1] == {"q": "it's", "ok": 2}  # an apostrophe opens no quote
    assert parse_reward_spec("x:e=[x,f=1")[1] == {"e": "[x", "f": 1}  # unclosed: every comma splits
    # digits and colons are text, not YAML 1.1's base-60 numbers (16:9 was 969)
    assert parse_reward_spec("x:ref=16:9,t=1:30.5,n=-2:05")[1] == {"ref": "16:9", "t": "1:30.5", "n": "-2:05"}


def test_one_file_named_two_ways_is_one_reward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rewards.names with discriminator:head=o/d.safetensors and head=./o/d.safetensors trained one head twice (its
    weight doubled); a file option is compared by its resolved path. Other files, and a path that does not exist
    (compared as written), stay apart; a value that only happens to name a file keeps its metric key."""
    from imgalign.rewards.base import reward_key
    from imgalign.trainers.rewarding import same_reward_twice

    monkeypatch.chdir(tmp_path)
    (tmp_path / "o").mkdir()
    for name in ("d.safetensors", "e.safetensors"):
        (tmp_path / "o" / name).write_bytes(b"")
    a, b = "discriminator:head=o/d.safetensors", f"discriminator: head={tmp_path}/o/../o/d.safetensors"
    assert same_reward_twice([a, "discriminator:head=o/e.safetensors", b]) == (a, b)
    assert same_reward_twice([a, "discriminator:head=o/e.safetensors"]) is None
    assert same_reward_twice(["fid:ref=gone/x", "fid:ref=./gone/x"]) is None
    assert reward_key(a) == "discriminator:head=o/d.safetensors"


def test_reward_key_reads_values_as_the_reward_gets_them(my_lab) -> None:
    from imgalign.rewards.base import reward_key

    assert reward_key("clip:model=ViT-B-32,batch_size=4.0") == reward_key(
        "clip: batch_size=4, model=ViT-B-32"
    )
    assert reward_key("clip:batch_size=4.0,model=ViT-B-32") == "clip:batch_size=4,model=ViT-B-32"
    assert reward_key("clip:batch_size=0.5") == "clip:batch_size=0.5"
    # a string that reads back as another type is quoted: ref='1' (text) and ref=1 (a number) stay apart
    assert reward_key("my_lab.custom:Bright:ref='1'") == 'my_lab.custom:Bright:ref="1"'
    assert reward_key("my_lab.custom:Bright:ref=1") == "my_lab.custom:Bright:ref=1"
    assert reward_key("my_lab.custom:Bright:ref='true'") == 'my_lab.custom:Bright:ref="true"'
    assert reward_key('my_lab.custom:Bright:ref="a, b"') == 'my_lab.custom:Bright:ref="a, b"'
    assert reward_key("my_lab.custom:Bright:ref=[1,2.0]") == "my_lab.custom:Bright:ref=[1,2]"
    # a custom reward's defaults are dropped as a registered one's: a class, a function and a single-file module
    assert reward_key("my_lab.custom:Bright:scale=1,ref=x") == "my_lab.custom:Bright"
    assert reward_key("my_lab.custom:Bright:scale=2.0,ref=x") == "my_lab.custom:Bright:scale=2"
    assert reward_key("my_lab.custom:bright_fn:gain=1.0") == "my_lab.custom:bright_fn"
    assert reward_key("mylab:Bright:ref='x'") == "mylab:Bright"
    assert reward_key("no_such.module:fn:a=1.0") == "no_such.module:fn:a=1"  # not importable: options kept
    # ordinary strings stay as written, so existing score columns keep their names
    assert reward_key("geneval:mode=strict") == "geneval:mode=strict"
    assert reward_key("vlm_loglik:query=Question: what?") == "vlm_loglik:query=Question: what?"


def test_a_dark_16_bit_image_is_read_as_16_bit() -> None:
    from PIL import Image

    from imgalign.rewards.base import pil_to_rgb

    im = Image.fromarray(np.full((4, 4), 200, dtype=np.uint16)).convert("I;16")
    assert im.mode == "I;16" and np.asarray(pil_to_rgb(im)).max() == 0  # 200/65535 of white, not 200/255


def test_a_palette_image_with_alpha_is_composited_on_black() -> None:
    """A PA image (palette + alpha) composites like its RGBA conversion: a transparent red pixel turns black, a
    half-transparent one half red, an opaque one stays red."""
    from PIL import Image

    from imgalign.rewards.base import pil_to_rgb

    im = Image.new("PA", (3, 1))
    im.putpalette([255, 0, 0] + [0, 0, 0] * 255)
    for x, alpha in enumerate((0, 128, 255)):
        im.putpixel((x, 0), (0, alpha))
    assert im.mode == "PA"
    got = np.asarray(pil_to_rgb(im))
    assert got[0, :, 0].tolist() == [0, 128, 255] and got[..., 1:].max() == 0
    assert np.array_equal(got, np.asarray(pil_to_rgb(im.convert("RGBA"))))


def test_an_unfitted_discriminator_and_a_bad_val_frac_are_refused(tmp_path: Path, capsys) -> None:
    from imgalign.cli import main
    from imgalign.rewards.heads import fit_head

    img = tmp_path / "a.png"
    from PIL import Image

    Image.new("RGB", (32, 32), (10, 200, 30)).save(img)
    argv = ["score", str(img), "--reward", "discriminator:features=stats", "--out", str(tmp_path / "s.jsonl")]
    assert main(argv) == 2
    assert "give head=FILE" in capsys.readouterr().err
    with pytest.raises(ValueError, match="val_frac must be in"):
        fit_head(torch.randn(10, 4), torch.randn(10, 4), val_frac=1.0)
    with pytest.raises(ValueError, match="leaves 1 and 1 examples"):
        fit_head(torch.randn(10, 4), torch.randn(10, 4), val_frac=0.9)
    assert main(["rewards", "check", "--reward", "clip", "--n", "0"]) == 2
    assert "--n must be at least 1" in capsys.readouterr().err


def test_a_reward_module_that_does_not_import_says_how_to_make_it_importable():
    """The `imgalign` console script does not import from the working folder (`python -m` does): a single-file
    module there failed with a bare 'No module named'. The error says to put its folder on the import path."""
    from imgalign.rewards.base import build_reward

    with pytest.raises(ValueError, match=r"No module named 'no_such_reward_module_x'.*PYTHONPATH=FOLDER"):
        build_reward("no_such_reward_module_x:score")
    with pytest.raises(ValueError, match=r"has no attribute") as e:
        build_reward("imgalign.rewards.base:no_such_attr")
    assert "PYTHONPATH" not in str(e.value)
    # a package path missing its top package gets the hint for that package; a module that is found but whose own
    # import fails (a dependency missing) does not: its folder is already on the path
    with pytest.raises(ValueError, match=r"holding 'no_such_pkg_x' on the import path"):
        build_reward("no_such_pkg_x.sub:score")


def test_a_reward_module_whose_own_import_fails_is_not_told_to_fix_the_import_path(tmp_path, monkeypatch):
    from imgalign.rewards.base import build_reward

    (tmp_path / "cfgtest_needs_dep.py").write_text("import no_such_dependency_y\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ValueError, match=r"No module named 'no_such_dependency_y'; cfgtest_needs_dep imports"
    ) as e:
        build_reward("cfgtest_needs_dep:score")
    assert "PYTHONPATH" not in str(e.value)


@pytest.mark.parametrize(
    "source, raised",
    [
        ("THRESH = undefined_name + 1\n", r"NameError: name 'undefined_name' is not defined \(.*, line 1\)"),
        (
            "def score(images, prompts, metadata)\n    return 0\n",
            r"SyntaxError: expected ':' \(.*, line 1\);",
        ),
        (
            "WEIGHTS = open('/no/such/weights.bin').read()\n",
            r"FileNotFoundError: .*weights.bin' \(.*, line 1\)",
        ),
    ],
)
def test_a_user_module_that_raises_while_it_imports_is_one_error_naming_the_plugin_and_its_line(
    tmp_path, monkeypatch, source, raised
):
    """A reward / objective module whose own code fails (a NameError, a SyntaxError, a missing file it opens) is a
    ValueError naming the plug-in, the error and its file and line, not a traceback (NameError) or an OSError that
    read like imgalign's own missing file."""
    from imgalign.rewards.base import build_reward
    from imgalign.trainers.registry import OBJECTIVES

    name = f"cfgtest_raises_{len(source)}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ValueError, match=rf"cannot import reward '{name}:score': importing {name} raised {raised}"
    ):
        build_reward(f"{name}:score")
    with pytest.raises(ValueError, match=rf"cannot import objective '{name}:Obj': importing {name} raised"):
        OBJECTIVES.get(f"{name}:Obj")


class NoScoreMethod(Reward):
    """A Reward subclass that forgot score(), for the next test."""


def grad_scores(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    return images.mean(dim=(1, 2, 3)) * torch.ones(1, requires_grad=True)


def tuple_scores(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> Any:
    return images.mean(dim=(1, 2, 3)), {"note": 1}


def test_a_user_rewards_scores_as_a_tensor_with_a_graph_or_a_list_in_a_reward_output_are_read(
    monkeypatch,
) -> None:
    """A function reward returning a tensor with a graph (or on the GPU) was refused by numpy ("Can't call numpy() on
    Tensor that requires grad"); RewardOutput([...]) was "'list' object has no attribute 'detach'"; a tuple was
    numpy's "inhomogeneous shape" text; a Reward subclass without score() an empty NotImplementedError."""
    import sys
    import types

    from imgalign.rewards.base import FunctionReward

    mod = types.ModuleType("cfgtest_scores")
    mod.NoScoreMethod, mod.grad_scores, mod.tuple_scores = NoScoreMethod, grad_scores, tuple_scores
    monkeypatch.setitem(sys.modules, "cfgtest_scores", mod)
    x = torch.full((2, 3, 4, 4), 0.25)
    out = build_reward("cfgtest_scores:grad_scores")(x, ["", ""]).scores
    assert not out.requires_grad and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.full((2,), 0.25))
    as_list = FunctionReward(lambda im, p, m: RewardOutput([0.5, 0.75]), name="as_list")
    torch.testing.assert_close(as_list(x, ["", ""]).scores, torch.tensor([0.5, 0.75]))
    with pytest.raises(
        ValueError, match="reward 'tuple_scores' returned a tuple that is not one number per image"
    ):
        build_reward("cfgtest_scores:tuple_scores")(x, ["", ""])
    with pytest.raises(ValueError, match="NoScoreMethod is a Reward subclass without a score method"):
        build_reward("cfgtest_scores:NoScoreMethod")


def test_the_reward_contract_refuses_mismatched_batches_and_unexpected_state() -> None:
    """Reward.__call__ checks the batch before scoring: prompts and metadata rows one per image, images
    [B, 3, H, W], one score per image back; a reward that keeps no state refuses one."""
    from imgalign.rewards.base import FunctionReward

    x = torch.full((2, 3, 4, 4), 0.5)
    r = FunctionReward(lambda im, p, m: im.mean(dim=(1, 2, 3)), name="mean")
    with pytest.raises(ValueError, match="got 2 images but 1 prompts"):
        r(x, [""])
    with pytest.raises(ValueError, match="got 2 images but 3 metadata rows"):
        r(x, ["", ""], [{}, {}, {}])
    with pytest.raises(ValueError, match=r"expected images as \[B, 3, H, W\]"):
        r(torch.full((2, 1, 4, 4), 0.5), ["", ""])
    short = FunctionReward(lambda im, p, m: im.mean(dim=(1, 2, 3))[:1], name="short")
    with pytest.raises(ValueError, match=r"returned 1 scores \(shape \(1,\)\) for 2 images: .* shape \[2\]"):
        short(x, ["", ""])
    few = FunctionReward(lambda im, p, m: RewardOutput(im.mean(dim=(1, 2, 3)), [{"n": 1}]), name="few")
    with pytest.raises(ValueError, match=r"'few' returned 1 details for 2 images: .* one dict per image"):
        few(x, ["", ""])
    with pytest.raises(ValueError, match="keeps no state"):
        r.load_state_dict({"mean": 1.0})
    r.load_state_dict({})


def test_the_reward_contract_at_its_edges() -> None:
    """Values a decoder overshoots to, down to −0.5 and up to 1.5, are scored (beyond, refused); an inf image scores
    NaN like a NaN one (it is not refused as out of range); a batch of only non-finite images is NaN without calling
    score(); score() sees float32 images (a half batch too); the scores come back float32 [B] whatever score()
    returns (here float64 [B, 1]), each row's details in its place; a differentiable reward's keep their graph."""
    calls = []

    class Column(Reward):
        name = "column"

        def score(self, images, prompts, metadata):
            calls.append((images.shape[0], images.dtype))
            return RewardOutput(images.double().mean(dim=(1, 2, 3)).unsqueeze(1), [{"p": p} for p in prompts])

    r = Column()
    x = torch.full((4, 3, 2, 2), 0.5)
    x[0], x[2], x[3, 0, 0, 0] = -0.5, 1.5, float("inf")
    out = r(x, ["a", "b", "c", "d"])
    assert out.details == [{"p": "a"}, {"p": "b"}, {"p": "c"}, {"error": "non-finite image"}]
    assert out.scores.dtype == torch.float32 and out.scores.shape == (4,)
    assert out.scores[:3].tolist() == [-0.5, 0.5, 1.5] and out.scores[3].isnan()
    assert calls == [(3, torch.float32)]
    for bad in (-0.6, 1.6):
        with pytest.raises(ValueError, match=r"images must be in \[0, 1\]"):
            r(torch.full((1, 3, 2, 2), bad), [""])
    out = r(torch.full((2, 3, 2, 2), float("nan")), ["", ""])
    assert out.scores.isnan().all() and out.details == [{"error": "non-finite image"}] * 2
    assert calls == [(3, torch.float32)]
    r(x[:2].half(), ["", ""])  # a half-precision batch is scored in float32
    assert calls[-1] == (2, torch.float32)
    Column.differentiable = True
    x = torch.full((2, 3, 2, 2), 0.5, requires_grad=True)
    # the range check reads detached values: torch's scalar warning never shows
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scores = r(x, ["", ""]).scores
    scores.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((2, 3, 2, 2), 1 / 12))


def test_pil_images_convert_by_mode_and_keep_their_layout() -> None:
    """32-bit 'I' images are 8-bit when their maximum is at most 255 and 16-bit above; 'F' values beyond [0, 255] are
    clipped (not wrapped); a palette image's transparent colour is composited on black; to_tensor maps 0..255 to
    exactly 0..1 as [B, 3, H, W] (a 2x3 image stays 2 rows of 3)."""
    from PIL import Image

    from imgalign.rewards.base import pil_to_rgb, to_tensor

    def red(im):
        return np.asarray(pil_to_rgb(im))[0, :, 0].tolist()

    assert red(Image.fromarray(np.array([[0, 128, 255]], dtype=np.int32), mode="I")) == [0, 128, 255]
    assert red(Image.fromarray(np.array([[0, 32768, 65535]], dtype=np.int32), mode="I")) == [0, 127, 255]
    assert red(Image.fromarray(np.array([[-5.0, 2.0, 300.0]], dtype=np.float32))) == [0, 2, 255]
    pal = Image.new("P", (2, 1))
    pal.putpalette([255, 255, 255, 255, 0, 0] + [0] * 762)  # colour 0 white (transparent), colour 1 red
    pal.putpixel((1, 0), 1)
    pal.info["transparency"] = 0
    assert np.asarray(pil_to_rgb(pal)).tolist() == [[[0, 0, 0], [255, 0, 0]]]
    arr = np.arange(18, dtype=np.uint8).reshape(2, 3, 3) * 15  # [H=2, W=3, C], values 0..255
    x = to_tensor([Image.fromarray(arr)])
    assert x.shape == (1, 3, 2, 3) and x.dtype == torch.float32
    torch.testing.assert_close(x[0], torch.from_numpy(arr).permute(2, 0, 1).float() / 255, rtol=0, atol=0)
    assert float(x.max()) == 1.0


def sized_factory(device="cpu", dtype=None, *, size=(2, 2), path):
    """A factory with a keyword-only option, a tuple default and a required option, for the next test."""
    raise AssertionError("never built")


def test_spec_text_at_its_edges(monkeypatch) -> None:
    """Spaces around a key are dropped; an empty value is '', null is None, an unbalanced quote stays as written; an
    attr that is no name is an option, not a path; as_bool reads True/' false '; a keyword-only option is an option;
    a tuple default is the list a spec writes; a required option left out is a ValueError naming the options."""
    import sys
    import types

    from imgalign.rewards.base import (
        _key_text,
        _option_value,
        _same_default,
        as_bool,
        parse_reward_spec,
        required_options,
        reward_options,
    )

    assert parse_reward_spec("clip:model = ViT-B-32, pretrained =openai") == (
        "clip",
        {"model": "ViT-B-32", "pretrained": "openai"},
    )
    assert parse_reward_spec("x:a=,b=null")[1] == {"a": "", "b": None}
    assert _option_value("'abc") == "'abc" and _option_value("'") == "'"
    with pytest.raises(ValueError, match="must look like key=value"):
        parse_reward_spec("myrewards:not-a-name")
    assert as_bool("True", "o") is True and as_bool(" false ", "o") is False
    assert reward_options(sized_factory) == ["size", "path"]
    assert _key_text((1, 2.0)) == "[1,2]" and _same_default((2, 2), [2, 2])
    mod = types.ModuleType("my_sized")
    mod.sized_factory = sized_factory
    monkeypatch.setitem(sys.modules, "my_sized", mod)
    # was Python's "bad options ['size']: ... missing 1 required keyword-only argument: 'path'"
    with pytest.raises(
        ValueError,
        match=r"reward 'my_sized:sized_factory' needs the option\(s\) path: give them in the reward spec, e\.g\. "
        r"'my_sized:sized_factory:size=\.\.\.,path=VALUE'",
    ):
        build_reward("my_sized:sized_factory:size=[3,3]")
    assert required_options(sized_factory) == ["path"]


def test_a_reward_sees_the_metadata_rows_of_its_finite_images() -> None:
    """A NaN image is never shown to score(); the metadata rows it gets are those of the images it scores (the
    full list would misalign every row after the NaN image)."""
    from imgalign.rewards.base import FunctionReward

    seen = []

    def by_row(images, prompts, metadata):
        seen.append((list(prompts), [m["i"] for m in metadata]))
        return torch.tensor([float(m["i"]) for m in metadata])

    x = torch.full((3, 3, 4, 4), 0.5)
    x[1] = float("nan")
    out = FunctionReward(by_row, name="row")(x, ["a", "b", "c"], [{"i": 0}, {"i": 1}, {"i": 2}])
    assert seen == [(["a", "c"], [0, 2])]
    assert out.scores[0] == 0 and out.scores[1].isnan() and out.scores[2] == 2


def test_image_conversion_boundaries() -> None:
    """A float ('F') image whose maximum is exactly 1.0 is in [0, 1] (scaled by 255); transparency is composited
    on black; to_pil rounds to the nearest level and clamps out-of-range values."""
    from PIL import Image

    from imgalign.rewards.base import pil_to_rgb, to_pil

    f = Image.fromarray(np.array([[0.0, 0.5, 1.0]], dtype=np.float32))
    assert f.mode == "F"
    assert np.asarray(pil_to_rgb(f))[0, :, 0].tolist() == [0, 127, 255]
    clear_white = Image.new("RGBA", (2, 2), (255, 255, 255, 0))
    assert np.asarray(pil_to_rgb(clear_white)).max() == 0
    x = torch.tensor([0.999, 0.6 / 255, -0.2, 1.5]).reshape(1, 1, 1, 4).expand(1, 3, 1, 4)
    assert np.asarray(to_pil(x)[0])[0, :, 0].tolist() == [255, 1, 0, 255]  # 254.7 -> 255, 0.6 -> 1


def test_option_values_and_option_checks_at_their_boundaries() -> None:
    """A value may hold '=' (only the first splits); .nan and leading-zero numbers stay text; as_bool takes 0/1 but
    no other integer; check_at_least refuses a boolean (True is not the number 1 here)."""
    from imgalign.rewards.base import as_bool, check_at_least, parse_reward_spec

    assert parse_reward_spec("vlm_loglik:query=is a=b?")[1] == {"query": "is a=b?"}
    assert parse_reward_spec("x:a=.nan,b=007,c=-012")[1] == {"a": ".nan", "b": "007", "c": "-012"}
    assert as_bool(1, "o") is True and as_bool(0, "o") is False
    with pytest.raises(ValueError, match="o must be true or false, got 2"):
        as_bool(2, "o")
    assert check_at_least(1, 1, "n") == 1
    with pytest.raises(ValueError, match="n must be a number >= 1, got True"):
        check_at_least(True, 1, "n")


def open_factory(device="cpu", **opts):
    """A factory taking device (no dtype) and any option, for the next test."""
    from imgalign.rewards.base import FunctionReward

    return FunctionReward(lambda im, p, m: opts.get("gain", 1.0) * im.mean(dim=(1, 2, 3)), name="open")


def test_build_reward_keyword_options_and_open_ended_factories(monkeypatch, my_lab) -> None:
    """Keyword options reach the reward as spec options do; a factory taking **kwargs is given any option; one
    taking device but not dtype is still a factory (not a scoring function)."""
    import sys
    import types

    from imgalign.rewards.base import build_reward

    r = build_reward("my_lab.custom:Bright", scale=3.0)
    assert r.scale == 3.0
    mod = types.ModuleType("my_lab.open")
    mod.open_factory = open_factory
    monkeypatch.setitem(sys.modules, "my_lab.open", mod)
    r = build_reward("my_lab.open:open_factory:gain=2")
    assert r.name == "open"
    torch.testing.assert_close(r(torch.full((2, 3, 4, 4), 0.25), ["", ""]).scores, torch.full((2,), 0.5))


def test_geneval_modes_read_the_judges_verdict_partial_credit_and_soft_credit_per_image() -> None:
    """Near misses tell the modes apart: a two-object prompt with only its circle drawn (partial 1/2), a
    three-squares prompt with two drawn (2/3), a circle drawn above a square it should be left of (partial 1/2;
    soft credit ramps the margin). Each image is judged against its own row, and `details` carry the verdict."""
    from imgalign import shapes as W
    from imgalign.eval.geneval import soft_credit
    from imgalign.eval.shapes_detector import ShapesDetector
    from imgalign.rewards.base import to_pil

    def tensor(spec: W.Spec, seed: int = 0) -> torch.Tensor:
        img, _ = W.render(spec, seed)
        return torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)[None].float() / 255.0

    left = W.position("circle", "left of", "square")
    asked = [W.two_object("circle", "square"), W.counting("square", 3), left, left]
    drawn = [
        W.single_object("circle"),
        W.counting("square", 2),
        W.position("circle", "above", "square"),
        left,
    ]
    x = torch.cat([tensor(s, seed=2) for s in drawn])
    meta = [s.to_metadata() for s in asked]
    out = {
        m: build_reward(f"geneval:mode={m}")(x, [s.prompt() for s in asked], meta)
        for m in ("strict", "partial", "soft")
    }
    assert out["strict"].scores.tolist() == [0.0, 0.0, 0.0, 1.0]
    assert out["partial"].scores.tolist() == pytest.approx([1 / 2, 2 / 3, 1 / 2, 1.0])
    soft = out["soft"].scores.tolist()
    expected = [soft_credit(p, ShapesDetector()(p), m) for p, m in zip(to_pil(x), meta)]
    assert soft == pytest.approx(expected, abs=1e-6)
    assert 0.5 < soft[2] < 1.0 and soft[3] == 1.0
    assert [d["correct"] for d in out["partial"].details] == [False, False, False, True]
    assert [d["partial"] for d in out["strict"].details] == pytest.approx([1 / 2, 2 / 3, 1 / 2, 1.0])
    assert out["strict"].details[1]["reason"] == "expected square>=3, found 2"


def test_geneval_scoring_checks_the_vocabulary_and_refuses_missing_metadata() -> None:
    reward = build_reward("geneval")
    row = {"prompt": "a photo of a dog", "tag": "single_object", "include": [{"class": "dog", "count": 1}]}
    with pytest.raises(ValueError, match=r"include\[0\]\.class 'dog' is not a shape"):
        reward(torch.zeros(1, 3, 64, 64), [row["prompt"]], [row])
    with pytest.raises(ValueError, match="needs GenEval metadata with 'tag' and 'include'"):
        reward(torch.zeros(1, 3, 64, 64), ["a photo of a circle"], None)
    with pytest.raises(
        ValueError, match=r"geneval reward: prompt 'a photo of a dog': include\[0\]\.class 'dog'"
    ):
        reward.check_metadata([row])
    # every clause on both sides is checked, colours too
    second = {**row, "include": [{"class": "circle", "count": 1}, {"class": "dog", "count": 1}]}
    with pytest.raises(ValueError, match=r"include\[1\]\.class 'dog' is not a shape"):
        reward.check_metadata([second])
    bad_exclude = {
        **row,
        "include": [{"class": "circle", "count": 1}],
        "exclude": [{"class": "square", "count": 1, "color": "orange"}],
    }
    with pytest.raises(ValueError, match=r"exclude\[0\]\.color 'orange' is not a shapes-world colour"):
        reward.check_metadata([bad_exclude])


def test_a_capitalised_boolean_and_a_padded_spec_are_read_as_meant() -> None:
    """True/FALSE are booleans as YAML reads them (only yes/no/on/off stay text); spaces around a spec go."""
    from imgalign.rewards.base import parse_reward_spec

    assert parse_reward_spec("x:a=True,b=FALSE,c=no")[1] == {"a": True, "b": False, "c": "no"}
    assert parse_reward_spec("  clip  ") == ("clip", {})


def test_a_subclass_missing_dtype_and_a_factory_returning_no_reward_are_refused(monkeypatch) -> None:
    """A Reward subclass must take both device and dtype (device alone is refused); a function taking device/dtype
    is a factory and must return a Reward."""
    import sys
    import types

    class DeviceOnly(Reward):
        def __init__(self, device="cpu") -> None:
            super().__init__(device)

    def scores_factory(device="cpu", dtype=torch.float32):
        return [1.0]

    mod = types.ModuleType("my_lab2")
    mod.DeviceOnly, mod.scores_factory = DeviceOnly, scores_factory
    monkeypatch.setitem(sys.modules, "my_lab2", mod)
    with pytest.raises(ValueError, match="must accept device and dtype"):
        build_reward("my_lab2:DeviceOnly")
    with pytest.raises(ValueError, match="returned a list, not a Reward"):
        build_reward("my_lab2:scores_factory")


def test_a_negative_32_bit_pixel_is_black_not_wrapped_around() -> None:
    """An "I" image's values are clipped to [0, 255] before the 8-bit cast (-5 would wrap around to 251)."""
    from PIL import Image

    from imgalign.rewards.base import pil_to_rgb

    im = Image.fromarray(np.array([[-5, 100]], dtype=np.int32), mode="I")
    assert np.asarray(pil_to_rgb(im))[0, :, 0].tolist() == [0, 100]


def test_a_numeric_option_given_as_text_or_a_fraction_is_refused_by_name_before_loading(monkeypatch) -> None:
    """clip:weight=abc said only "could not convert string to float: 'abc'" once the model had loaded, and
    fid:ref_size=abc "invalid literal for int()"; clip:batch_size=2.5 silently became 2."""
    from imgalign.rewards import clip

    def no_load(*a, **k):
        raise AssertionError("loaded before the options were checked")

    monkeypatch.setattr(clip, "load_open_clip", no_load)
    with pytest.raises(
        ValueError, match=r"reward 'clip': option weight must be a number \(default 2.5\), got 'abc'"
    ):
        build_reward("clip:weight=abc")
    with pytest.raises(ValueError, match="option batch_size must be a whole number .default 64., got 2.5"):
        build_reward("clip:batch_size=2.5")
    with pytest.raises(ValueError, match="reward 'fid': option ref_size must be a whole number"):
        build_reward("fid:ref_size=abc")
    with pytest.raises(ValueError, match="option batch_size must be a whole number"):
        build_reward("clip:batch_size=true")


def test_numeric_option_check_passes_booleans_whole_numbers_and_integers_for_fractions(monkeypatch) -> None:
    """The refusal of text for numeric options lets through what the reward takes: clamp=false (a bool default is
    not a number), batch_size=8.0 (a whole number written as a float), weight=2 (an integer for a float default);
    each of these reaches the model load."""
    from imgalign.rewards import clip

    class Loading(Exception):
        pass

    def load(*a, **k):
        raise Loading

    monkeypatch.setattr(clip, "load_open_clip", load)
    for spec in (
        "clip:clamp=false",
        "clip:clamp=true",
        "clip:batch_size=8.0",
        "clip:weight=2",
        "clip:weight=2.5",
    ):
        with pytest.raises(Loading):
            build_reward(spec)


def test_a_reward_option_given_twice_is_refused() -> None:
    """clip:weight=1,weight=2 took the last value silently."""
    from imgalign.rewards.base import parse_reward_spec

    with pytest.raises(
        ValueError, match="reward option 'weight' is given twice in 'clip:weight=1, weight =2'"
    ):
        parse_reward_spec("clip:weight=1, weight =2")


def test_two_rewards_in_one_spec_say_to_give_each_its_own() -> None:
    """--reward clip,geneval said only "unknown reward 'clip,geneval'"."""
    with pytest.raises(ValueError, match="give each its own spec .--reward clip --reward geneval"):
        build_reward("clip,geneval")
    with pytest.raises(ValueError, match="give each its own spec .--reward clip,"):
        build_reward("clip,")
    # one is no reward: no such hint
    with pytest.raises(ValueError, match="unknown reward 'clip,nosuch'") as e:
        build_reward("clip,nosuch")
    assert "own spec" not in str(e.value)
    # no reward at all: no '(, or one list ...'
    with pytest.raises(ValueError, match="unknown reward ','") as e:
        build_reward(",")
    assert "own spec" not in str(e.value)


def test_a_type_error_inside_a_reward_is_not_called_a_bad_option_name(monkeypatch) -> None:
    """Option names are checked before the reward is built, so a TypeError from inside it (a value of the wrong
    type, a hand-edited model file) is said as such; it read "bad options ['model']: 'float' object is not
    iterable", blaming the option's name."""
    import sys
    import types

    def picky(device: str = "cpu", dtype: object = None, model: str = "m", size: int = 2) -> object:
        return list(size)  # a value the reward cannot use

    mod = types.ModuleType("my_picky")
    mod.picky = picky
    monkeypatch.setitem(sys.modules, "my_picky", mod)
    with pytest.raises(ValueError) as e:
        build_reward("my_picky:picky:model=x,size=3")
    assert str(e.value) == (
        "reward 'my_picky:picky' could not be built (model='x', size=3): TypeError: 'int' object is not iterable"
    )
