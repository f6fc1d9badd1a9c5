"""``imgalign grid``: base and fine-tuned tiny SD3 pipelines side by side, and clear errors before any model loads."""

from __future__ import annotations

import contextlib
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from imgalign.cli import main
from imgalign.trainers.testing import stub_pipeline_folder

torch.set_num_threads(1)
SHAPES_PROMPTS = Path(__file__).resolve().parents[1] / "prompts" / "shapes_geneval.jsonl"


def _drawn_texts(monkeypatch) -> list[tuple[tuple[float, float], str]]:
    """Every (xy, text) that PIL's ImageDraw.text draws from now on (it still draws it)."""
    from PIL import ImageDraw

    texts: list[tuple[tuple[float, float], str]] = []
    real = ImageDraw.ImageDraw.text
    monkeypatch.setattr(
        ImageDraw.ImageDraw,
        "text",
        lambda self, xy, text, *a, **kw: (texts.append((xy, text)), real(self, xy, text, *a, **kw))[1],
    )
    return texts


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny base pipeline, a full fine-tuned copy, a transformer-only overlay and a PEFT LoRA overlay."""
    import geneval_real_tiny as T
    from diffusers import StableDiffusion3Pipeline
    from peft import LoraConfig, get_peft_model

    from imgalign.pipelines import absent_components

    root = tmp_path_factory.mktemp("grid")
    base = T.build_tiny_sd3(root / "base")
    pipe = StableDiffusion3Pipeline.from_pretrained(base, **absent_components(base))
    with torch.no_grad():
        for p in pipe.transformer.parameters():
            p.add_(0.05 * torch.randn_like(p))
    pipe.save_pretrained(root / "full")
    pipe.transformer.save_pretrained(root / "overlay")
    fresh = StableDiffusion3Pipeline.from_pretrained(base, **absent_components(base)).transformer
    lora = get_peft_model(fresh, LoraConfig(r=2, target_modules=["to_q", "to_v"], init_lora_weights=False))
    lora.save_pretrained(root / "lora")
    # a LoRA checkpoint as imgalign's trainer writes it: diffusers LoRA weights + imgalign_model.json naming the base
    from peft.utils import get_peft_model_state_dict

    layers = {k.removeprefix("base_model.model."): v for k, v in get_peft_model_state_dict(lora).items()}
    StableDiffusion3Pipeline.save_lora_weights(
        str(root / "ckpt"),
        transformer_lora_layers=layers,
        transformer_lora_adapter_metadata=lora.peft_config["default"].to_dict(),  # rank and alpha
    )
    (root / "ckpt" / "imgalign_model.json").write_text(json.dumps({"family": "sd3", "base_model": str(base)}))
    return {
        "base": base,
        "full": root / "full",
        "overlay": root / "overlay",
        "lora": root / "lora",
        "ckpt": root / "ckpt",
    }


def test_model_argument_syntax():
    from imgalign.pipelines import ModelSpec, parse_model_arg

    assert parse_model_arg("base=shapes") == ModelSpec("base", "shapes")
    assert parse_model_arg(" ft = shapes+runs/a/lora ") == ModelSpec("ft", "shapes", "runs/a/lora")
    assert parse_model_arg("ft=shapes+runs/a/lora") == ModelSpec("ft", "shapes", "runs/a/lora")
    assert parse_model_arg("runs/a/final") == ModelSpec("final", "runs/a/final")
    # unlabelled BASE+OVERLAY: named by the overlay (the fine-tune), not by the base every overlay shares
    assert parse_model_arg("shapes+runs/a/lora") == ModelSpec("lora", "shapes", "runs/a/lora")
    with pytest.raises(ValueError, match="needs both parts"):
        parse_model_arg("ft=shapes+")


def test_a_transformer_overlay_of_another_class_is_refused(tmp_path):
    """A full-transformer overlay must be of the base's denoiser class (a FLUX transformer does not go on SD3)."""
    from types import SimpleNamespace

    from imgalign.pipelines import apply_overlay

    (tmp_path / "config.json").write_text(json.dumps({"_class_name": "FluxTransformer2DModel"}))
    pipe = SimpleNamespace(transformer=torch.nn.Linear(1, 1))
    with pytest.raises(
        ValueError, match="holds a FluxTransformer2DModel, but the base pipeline's transformer is a Linear"
    ):
        apply_overlay(pipe, tmp_path)


def test_a_missing_relative_path_is_not_taken_for_a_hub_id(tmp_path, monkeypatch):
    """``./run`` or ``../run`` (one slash, as a Hub id ``org/name`` has) that does not exist is a missing folder,
    even when the Hub could be asked, not an id to download."""
    import imgalign.pipelines as P

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(P, "hub_id_available", lambda repo_id: True)
    assert P.check_model_spec(P.ModelSpec("hub", "org/model")).base == "org/model"  # an id, as given
    for path in ("./run", "../run"):
        with pytest.raises(P.IncompleteModelError, match=f"'{path}' does not exist"):
            P.check_model_spec(P.ModelSpec("m", path))


def test_an_uncached_hub_id_offline_and_a_quoted_tilde_say_what_to_do(tmp_path, monkeypatch):
    """Offline, a misspelt or never-downloaded Hub id said only "does not exist"; a quoted '~/x' did not say that
    the shell leaves a quoted ~ unexpanded."""
    import imgalign.pipelines as P

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(P, "hub_id_available", lambda repo_id: False)  # offline, not in the cache
    with pytest.raises(
        P.IncompleteModelError, match=r"nor as a Hub id in the local Hugging Face cache .*hf download"
    ):
        P.check_model_spec(P.ModelSpec("m", "stabilityai/stable-diffusion-3.5-mediun"))
    with pytest.raises(P.IncompleteModelError, match=r"'org/bad name' does not exist; give an embedded name"):
        P.check_model_spec(P.ModelSpec("m", "org/bad name"))  # not spelt as a Hub id: no 'hf download' advice
    # an existing file spelt like a Hub id (one slash) is a file, not an id to download
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "model.safetensors").write_bytes(b"")
    with pytest.raises(
        P.IncompleteModelError, match=r"'runs/model.safetensors' is a file, not a model folder"
    ):
        P.check_model_spec(P.ModelSpec("m", "runs/model.safetensors"))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(
        P.IncompleteModelError, match=f"a quoted ~ is not expanded: give the full path, '{tmp_path}"
    ):
        P.check_model_spec(P.ModelSpec("m", "~/runs"))
    # a relative folder that is not there names the working folder it was looked for in (a config run elsewhere)
    with pytest.raises(
        P.IncompleteModelError,
        match=re.escape(
            f"'no-model' does not exist (a relative path is read from the working folder {tmp_path})"
        ),
    ):
        P.check_model_spec(P.ModelSpec("m", "no-model"))
    # a $HOME from a YAML config (model.path) or quoted is not expanded either
    with pytest.raises(
        P.IncompleteModelError, match=f"are not expanded: give the full path, '{tmp_path}/runs'"
    ):
        P.check_model_spec(P.ModelSpec("m", "$HOME/runs"))


def test_a_fine_tune_of_another_family_is_refused_before_the_base_loads(tmp_path):
    """A FLUX LoRA checkpoint on the SD3-family shapes base (its imgalign_model.json records the family) is refused
    by check_model_spec, naming both families and its recorded base; it failed only once the base had loaded. A
    checkpoint of the same family, or without a record, passes."""
    import json

    import imgalign.pipelines as P

    ckpt = tmp_path / "flux-lora"
    ckpt.mkdir()
    (ckpt / P.LORA_FILES[0]).write_bytes(b"stub")  # not empty: an empty weights file is refused first
    info = {"family": "flux", "base_model": "runs/flux-base", "lora": {}}
    (ckpt / "imgalign_model.json").write_text(json.dumps(info))
    with pytest.raises(
        ValueError, match=r"is a flux fine-tune .* 'shapes' is a sd3 pipeline.*\(runs/flux-base\+"
    ):
        P.check_model_spec(P.ModelSpec("m", "shapes", str(ckpt)))
    (ckpt / "imgalign_model.json").write_text(json.dumps({**info, "family": "sd3"}))
    assert P.check_model_spec(P.ModelSpec("m", "shapes", str(ckpt))).overlay == str(ckpt)
    (ckpt / "imgalign_model.json").unlink()
    assert P.check_model_spec(P.ModelSpec("m", "shapes", str(ckpt))).overlay == str(ckpt)


def test_an_existing_path_is_taken_whole(tmp_path, monkeypatch):
    """Run folders are often named after settings (``lr=1e-4``, ``a+b``); an existing path is not split."""
    from imgalign.pipelines import ModelSpec, parse_model_arg

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "lr=1e-4+ema" / "step-2").mkdir(parents=True)
    path = "runs/lr=1e-4+ema/step-2"
    assert parse_model_arg(path) == ModelSpec("step-2", path)
    assert parse_model_arg(f"ft={path}") == ModelSpec("ft", path)
    assert parse_model_arg("ft=shapes+runs/lr=1e-4+ema") == ModelSpec("ft", "shapes", "runs/lr=1e-4+ema")


def test_overlays_change_the_model_and_seeds_are_shared(models):
    from imgalign.pipelines import load_pipeline
    from imgalign.sampling import generate_images

    def sample(spec: str) -> np.ndarray:
        pipe = load_pipeline(spec)
        ims = generate_images(pipe, ["a cat", "a cat"], [3, 4], steps=2, size=16)
        return np.stack([np.asarray(i) for i in ims])

    base = sample(str(models["base"]))
    assert np.array_equal(base, sample(str(models["base"])))  # same seeds, same pixels
    assert not np.array_equal(base[0], base[1])  # different seeds differ
    full = sample(str(models["full"]))
    assert not np.array_equal(base, full)
    assert np.array_equal(full, sample(f"{models['base']}+{models['overlay']}"))  # same weights, two routes
    peft_lora = sample(f"{models['base']}+{models['lora']}")
    assert not np.array_equal(base, peft_lora)
    # the same LoRA weights saved as a trainer checkpoint, which names its own base
    assert np.array_equal(peft_lora, sample(str(models["ckpt"])))
    assert np.array_equal(peft_lora, sample(f"{models['base']}+{models['ckpt']}"))


def test_a_lora_checkpoint_on_another_base_fails_naming_both(models, caplog, monkeypatch):
    """BASE+CKPT with a BASE other than the one the checkpoint records: a warning naming both, and when the LoRA
    does not fit (another architecture: the shapes model), a clear error saying which base to give, not torch's
    raw size-mismatch traceback. The recorded base given by another path is the same model: no warning."""
    from imgalign.pipelines import load_pipeline

    ckpt, base = models["ckpt"], models["base"]
    with (
        caplog.at_level("WARNING", logger="imgalign.pipelines"),
        warnings.catch_warnings(record=True) as warned,
    ):
        warnings.simplefilter("always")
        with pytest.raises(ValueError) as e:
            load_pipeline(f"shapes+{ckpt}")
    # without peft's "While injecting the PEFT adapters, an inconsistency was discovered ..." before it (round 28)
    assert [str(w.message)[:50] for w in warned if "PEFT" in str(w.message)] == []
    msg = str(e.value)
    assert f"LoRA checkpoint {str(ckpt)!r} does not fit base model 'shapes'" in msg
    assert f"trained on {str(base)!r}" in msg and f"--model {ckpt}" in msg
    assert f"{base}+{ckpt}" in msg
    assert "trained on base model" in caplog.text and "'shapes'" in caplog.text
    caplog.clear()
    monkeypatch.chdir(base.parent)
    with caplog.at_level("WARNING", logger="imgalign.pipelines"):
        load_pipeline(f"./{base.name}+{ckpt}")
    assert "trained on base model" not in caplog.text


def test_same_model_compares_embedded_names_as_their_folders(monkeypatch):
    from imgalign.hub import embedded_path
    from imgalign.pipelines import same_model

    base = embedded_path("shapes")
    assert same_model("shapes", str(base)) and same_model("shapes-t2i", "shapes")
    monkeypatch.chdir(base.parent)
    assert same_model(f"./{base.name}", "shapes")
    assert not same_model("shapes", "shapes-clip")


def test_grid_png_is_labelled_rows_by_models(models, tmp_path):
    out = tmp_path / "grid.png"
    argv = ["grid", "--model", f"base={models['base']}", "--model", f"ft={models['full']}"]
    argv += ["--model", f"lora={models['base']}+{models['lora']}", "--prompt", "a red circle"]
    argv += ["--prompt", "two blue squares", "--seeds", "0,1", "--steps", "2", "--size", "16", "--cell", "32"]
    assert main(argv + ["--out", str(out)]) == 0
    grid = np.asarray(Image.open(out).convert("RGB"))
    from imgalign.eval.gallery import PAD

    assert grid.shape[1] == 180 + 6 * (32 + PAD) + PAD  # label column + 3 models x 2 seeds
    assert (grid[:20, 180:] < 128).any() and (grid[40:, :170] < 128).any()  # header and row-label ink


def test_labelled_grid_places_every_image_once():
    from imgalign.eval.gallery import labelled_grid

    colours = [[(255, 0, 0), (0, 255, 0)], [(0, 0, 255), (255, 0, 255)]]
    images = [[Image.new("RGB", (8, 8), c) for c in row] for row in colours]
    g = np.asarray(
        labelled_grid(images, ["p1", "p2"], ["m1", "m2"], captions=[["a", "b"], ["c", "d"]], cell=24)
    )
    for row in colours:
        for c in row:
            assert int((g == c).all(-1).sum()) == 24 * 24  # scaled to the cell, pasted exactly once
    with pytest.raises(ValueError, match="do not line up"):
        labelled_grid(images, ["p1"], ["m1", "m2"])
    for empty in ([], [[]]):  # no row; a row of no image (its empty header list was a bare max() error)
        with pytest.raises(ValueError, match="a grid needs at least one row and one column"):
            labelled_grid(empty, ["p"] * len(empty), [])


def test_a_caption_ends_a_pad_above_the_next_rows_image():
    from imgalign.eval.gallery import PAD, labelled_grid

    red = (255, 0, 0)
    images = [[Image.new("RGB", (8, 8), red)], [Image.new("RGB", (8, 8), red)]]
    g = np.asarray(
        labelled_grid(images, ["p", "q"], ["m"], captions=[["Ag\nAg"], ["x"]], cell=16, label_width=40)
    )
    cells = g[:, 40 : 40 + 16]
    red_rows = np.nonzero((cells == red).all(-1).any(1))[0]
    second_top = red_rows[np.nonzero(np.diff(red_rows) > 1)[0][0] + 1]
    ink = np.nonzero(((cells != 255).any(-1) & ~(cells == red).all(-1)).any(1))[0]
    caption_bottom = ink[ink < second_top].max()
    assert caption_bottom > red_rows[0] + 16  # the first row's caption, under its image
    assert second_top - caption_bottom - 1 >= PAD  # not touching the image under it (1 px without the PAD)


def test_grid_with_reward_scores_under_images(models, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(SHAPES_PROMPTS.read_text().splitlines(keepends=True)[:2]))
    out = tmp_path / "g.png"
    argv = ["grid", "--model", f"base={models['base']}", "--prompts", str(prompts), "--steps", "2"]
    assert main(argv + ["--size", "16", "--cell", "32", "--out", str(out)]) == 0
    plain = Image.open(out).size
    assert main(argv + ["--size", "16", "--cell", "32", "--reward", "geneval", "--out", str(out)]) == 0
    scored = Image.open(out).size
    assert scored[0] == plain[0] and scored[1] > plain[1]  # a caption line under each image


@pytest.fixture
def no_loading(monkeypatch):
    import imgalign.pipelines as M

    def fail(*a, **k):
        raise AssertionError("a model was loaded before the inputs were checked")

    monkeypatch.setattr(M, "load_pipeline", fail)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--model", "a={base}", "--model", "a={full}", "--prompt", "x"], "label 'a' is used twice"),
        (["--model", "a={base}", "--model", "b=/no/such/model", "--prompt", "x"], "does not exist"),
        (["--model", "a=runs/missing", "--prompt", "x"], "does not exist"),
        (["--model", "a={tmp}/two.txt", "--prompt", "x"], "two.txt' is a file, not a model folder"),
        (["--model", "a={base}+{tmp}/two.txt", "--prompt", "x"], "two.txt' is a file; give the folder"),
        (["--model", "a={base}", "--prompt", "  "], "non-empty"),
        (["--model", "a={base}", "--prompts", "{tmp}/none.txt"], "does not exist"),
        (["--model", "a={base}", "--prompts", "{tmp}/empty.txt"], "holds no prompts"),
        (["--model", "a={base}", "--prompts", "{tmp}/binary.txt"], "cannot read prompt file"),
        (["--model", "a={base}", "--prompts", "{tmp}/bad.jsonl"], "not valid JSON"),
        (["--model", "a={lora}", "--prompt", "x"], "is a LoRA folder that does not name its base"),
        (["--model", "a={base}+{tmp}", "--prompt", "x"], "not a fine-tuned model folder"),
        (["--model", "a={base}", "--prompt", "x", "--seeds", "0,x"], "comma-separated integers"),
        (["--model", "a={base}", "--prompt", "x", "--seeds", "0,-1"], "seeds are integers from 0"),
        (["--model", "a={base}", "--prompt", "x", "--seeds", str(2**63)], "seeds are integers from 0"),
        (["--model", "a={base}", "--prompt", "x", "--seeds", ","], "--seeds is empty"),
        (["--model", "a={base}", "--prompt", "x", "--seeds", "3,1,3"], "'3,1,3' repeats seed 3: its columns"),
        (["--model", "a={base}", "--prompt", "x", "--out", "{tmp}/g.jpg"], "use a .png name"),
        # an upper-case .PNG and a 'module:attr' reward pass their checks: the next one (--steps) speaks
        (["--model", "a={base}", "--prompt", "x", "--out", "{tmp}/G.PNG", "--steps", "0"], "--steps must be"),
        (
            [
                "--model",
                "a={base}",
                "--prompt",
                "x",
                "--reward",
                "imgalign.trainers.testing:red_reward",
                "--steps",
                "0",
            ],
            "--steps must be",
        ),
        (
            ["--model", "a={base}", "--prompts", "{tmp}/two.txt", "--max-prompts", "0"],
            "--max-prompts must be",
        ),
        (["--model", "a={base}", "--prompt", "x", "--out", "/proc/g.png"], "cannot write in '/proc'"),
        (["--model", "a={base}", "--prompt", "x", "--reward", "nope"], "unknown reward 'nope'"),
        # named before the later checks (here --steps), not only when the reward is built
        (
            ["--model", "a={base}", "--prompt", "x", "--reward", "nope", "--steps", "0"],
            "unknown reward 'nope'",
        ),
        (["--model", "a={base}", "--prompt", "x", "--reward", "geneval"], "needs GenEval metadata"),
        (
            ["--model", "a={base}", "--prompt", "x", "--reward", "geneval:mode=strict"],
            "needs GenEval metadata",
        ),
        (
            ["--model", "a={base}", "--prompts", "{tmp}/mixed.jsonl", "--reward", "geneval"],
            "needs GenEval metadata",
        ),
        (
            ["--model", "a={base}", "--prompts", "{tmp}/dog.jsonl", "--reward", "geneval"],
            "dog.jsonl': geneval reward: prompt 'a photo of a dog': include[0].class 'dog' is not a shape",
        ),
        (  # a fid reward without a generated set captioned every image "fid: nan", after every model ran
            ["--model", "a={base}", "--prompt", "x", "--reward", "fid:features=stats,ref_size=8"],
            "--reward fid:features=stats,ref_size=8 cannot score yet: its set of generated images is empty",
        ),
        (  # a fresh online head's scores are noise
            ["--model", "a={base}", "--prompt", "x", "--reward", "discriminator:features=stats,ref_size=8"],
            "cannot score yet: give head=FILE",
        ),
        (["--model", "a={base}", "--prompt", "x", "--steps", "0"], "--steps must be at least 1"),
        (
            ["--model", "a={base}", "--prompt", "x", "--device", "gpu0"],
            "--device 'gpu0' is not a torch device",
        ),
        (["--model", "a={base}", "--prompt", "x", "--cell", "0"], "--cell must be at least 1"),
        (
            ["--model", "a={base}", "--prompt", "x", "--max-sequence-length", "0"],
            "--max-sequence-length must be at least 1",
        ),
        (  # diffusers' own error came once the model had loaded, without advice
            ["--model", "a={base}", "--prompt", "x", "--max-sequence-length", "100000"],
            "--max-sequence-length 100000: the SD3 and FLUX pipelines take at most 512 T5 tokens",
        ),
        (["--model", "a={base}", "--prompt", "x", "--guidance", "-1"], "--guidance must be >= 0"),
        (["--model", "a={base}", "--prompt", "x", "--guidance", "nan"], "--guidance must be >= 0"),
        (  # infinite guidance sampled every image of the grid as NaN, after every model had loaded
            ["--model", "a={base}", "--prompt", "x", "--guidance", "inf"],
            "--guidance must be >= 0 and finite (got inf)",
        ),
    ],
)
def test_bad_inputs_fail_clearly_before_loading(models, tmp_path, capsys, no_loading, extra, message):
    (tmp_path / "empty.txt").write_text("\n\n")
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00bad")
    (tmp_path / "bad.jsonl").write_text(json.dumps({"prompt": "ok"}) + "\n{oops\n")
    (tmp_path / "two.txt").write_text("a\nb\n")
    dog = {"tag": "single_object", "prompt": "a photo of a dog", "include": [{"class": "dog", "count": 1}]}
    (tmp_path / "dog.jsonl").write_text(json.dumps(dog) + "\n")
    square = {
        "tag": "single_object",
        "prompt": "a photo of a square",
        "include": [{"class": "square", "count": 1}],
    }
    (tmp_path / "mixed.jsonl").write_text(json.dumps(square) + "\n" + json.dumps({"prompt": "plain"}) + "\n")
    fill = {"base": models["base"], "full": models["full"], "lora": models["lora"], "tmp": tmp_path}
    argv = ["grid"] + [a.format(**fill) for a in extra]
    argv += [] if "--out" in extra else ["--out", str(tmp_path / "g.png")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "g.png").exists()


def test_shapes_family_uses_the_trained_sampler_settings(models, monkeypatch):
    import sys
    import types

    from imgalign.eval.models import is_shapes_family, sampling_defaults
    from imgalign.pipelines import ModelSpec

    fake = types.ModuleType("imgalign.sampling")
    fake.NUM_INFERENCE_STEPS, fake.GUIDANCE_SCALE, fake.MAX_SEQUENCE_LENGTH = 20, 4.0, 1
    monkeypatch.setitem(sys.modules, "imgalign.sampling", fake)
    assert is_shapes_family(ModelSpec("a", "shapes", "runs/lora"))
    assert sampling_defaults(ModelSpec("a", "shapes")) == {
        "steps": 20,
        "guidance": 4.0,
        "max_sequence_length": 1,
    }
    # another architecture keeps the pipeline's own defaults
    assert not is_shapes_family(ModelSpec("b", str(models["base"])))
    assert sampling_defaults(ModelSpec("b", str(models["base"]))) == {}


def test_grid_with_the_embedded_shapes_model_and_a_lora_on_it(tmp_path):
    """The shapes base model next to a fine-tune of it (a LoRA checkpoint naming 'shapes' as its base)."""
    from imgalign.hub import ModelNotFoundError, embedded_path

    try:
        base = embedded_path("shapes")
    except ModelNotFoundError:
        pytest.skip("the embedded shapes model is not in this checkout")
    from diffusers import StableDiffusion3Pipeline
    from peft import LoraConfig, get_peft_model
    from peft.utils import get_peft_model_state_dict

    from imgalign.eval.models import is_shapes_family
    from imgalign.pipelines import absent_components, check_model_spec, parse_model_arg

    transformer = StableDiffusion3Pipeline.from_pretrained(base, **absent_components(str(base))).transformer
    torch.manual_seed(0)
    lora = get_peft_model(
        transformer, LoraConfig(r=2, target_modules=["to_q", "to_v"], init_lora_weights=False)
    )
    layers = {k.removeprefix("base_model.model."): v for k, v in get_peft_model_state_dict(lora).items()}
    ckpt = tmp_path / "step-000010"
    StableDiffusion3Pipeline.save_lora_weights(
        str(ckpt),
        transformer_lora_layers=layers,
        transformer_lora_adapter_metadata=lora.peft_config["default"].to_dict(),
    )
    (ckpt / "imgalign_model.json").write_text(json.dumps({"family": "sd3", "base_model": "shapes"}))
    spec = check_model_spec(parse_model_arg(f"ft={ckpt}"))
    assert (spec.base, spec.overlay) == ("shapes", str(ckpt)) and is_shapes_family(spec)
    out = tmp_path / "shapes.png"
    argv = ["grid", "--model", "base=shapes", "--model", f"ft={ckpt}", "--prompt", "a photo of a red circle"]
    assert main(argv + ["--seeds", "0,1", "--steps", "2", "--cell", "64", "--out", str(out)]) == 0
    grid = np.asarray(Image.open(out).convert("RGB"))
    assert grid.shape[1] == 180 + 4 * (64 + 6) + 6


def _one_model_argv(models, *extra: str) -> list[str]:
    return ["grid", "--model", f"a={models['base']}", "--prompt", "x", *extra]


def test_an_output_under_a_file_fails_before_loading(models, tmp_path, capsys, no_loading):
    (tmp_path / "afile").write_text("x")
    assert main(_one_model_argv(models, "--out", str(tmp_path / "afile" / "g.png"))) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_a_size_the_model_cannot_take_is_named(models, tmp_path, capsys):
    assert main(_one_model_argv(models, "--size", "200", "--out", str(tmp_path / "g.png"))) == 2
    err = capsys.readouterr().err
    assert "size this model can take; use a multiple of" in err and not (tmp_path / "g.png").exists()


def test_a_size_the_model_cannot_take_fails_before_loading(models, tmp_path, capsys, no_loading):
    """--size is checked from each model's configs (pipeline folder, embedded name, transformer overlay) before
    the first model loads, so a bad size in the last column does not cost loading the first."""
    out = str(tmp_path / "g.png")
    argv = ["grid", "--model", f"ok={models['base']}", "--model", "bad=shapes", "--prompt", "x", "--out", out]
    assert main([*argv, "--size", "80"]) == 2  # the tiny base takes 80, the shapes model at most 64
    assert "model 'bad': --size=80 is not an image size this model can take" in capsys.readouterr().err
    for model in (str(models["base"]), f"{models['base']}+{models['overlay']}"):
        argv = ["grid", "--model", f"bad={model}", "--prompt", "x", "--out", out]
        assert main([*argv, "--size", "200"]) == 2
        err = capsys.readouterr().err
        assert "model 'bad': --size=200 is not an image size this model can take" in err


def test_sizes_read_from_the_configs_are_the_loaded_pipelines(models, tmp_path):
    """folder_sizes (configs only) agrees with supported_sizes (the loaded pipeline); a folder whose configs
    cannot tell gives None, and is checked after loading."""
    from imgalign.hub import embedded_path
    from imgalign.pipelines import load_pipeline
    from imgalign.sampling import folder_sizes, supported_sizes
    from imgalign.trainers.testing import tiny_flux_pipeline

    for folder in (models["base"], embedded_path("shapes"), tiny_flux_pipeline(tmp_path / "flux")):
        pipe = load_pipeline(str(folder))
        trained = pipe.default_sample_size * pipe.vae_scale_factor
        assert folder_sizes(folder) == (supported_sizes(pipe), trained)
    assert folder_sizes(models["overlay"]) is None  # a transformer alone: no model_index.json


def test_folder_sizes_of_an_overlay_read_the_overlay_transformers_config(tmp_path):
    """The shapes model (VAE factor 4, patch 2, grid 8): sides 8..64; its VAE under a transformer whose grid is 16
    (given as `transformer_folder`) takes 8..128. The trained size stays 16 x 4."""
    from imgalign.hub import embedded_path
    from imgalign.sampling import folder_sizes

    base = embedded_path("shapes")
    config = json.loads((base / "transformer" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "pos_embed_max_size": 16}))
    assert folder_sizes(base) == ([8 * k for k in range(1, 9)], 64)
    assert folder_sizes(base, tmp_path) == ([8 * k for k in range(1, 17)], 64)


def test_folder_sizes_are_none_when_the_configs_cannot_tell(tmp_path):
    """A VAE config without block_out_channels (or not a list), or a pipeline class neither SD3 nor FLUX: None (the
    size is checked after loading), never an exception."""
    from imgalign.hub import embedded_path
    from imgalign.sampling import folder_sizes

    base = embedded_path("shapes")
    index = json.loads((base / "model_index.json").read_text())
    vae = json.loads((base / "vae" / "config.json").read_text())
    (tmp_path / "transformer").mkdir()
    (tmp_path / "vae").mkdir()
    (tmp_path / "transformer" / "config.json").write_text((base / "transformer" / "config.json").read_text())
    for index_over, vae_over in (
        ({}, {"block_out_channels": None}),
        ({}, {"block_out_channels": 4}),
        ({"_class_name": "KandinskyPipeline"}, {}),
    ):
        (tmp_path / "model_index.json").write_text(json.dumps({**index, **index_over}))
        v = {k: x for k, x in {**vae, **vae_over}.items() if x is not None}
        (tmp_path / "vae" / "config.json").write_text(json.dumps(v))
        assert folder_sizes(tmp_path) is None, (index_over, vae_over)
    (tmp_path / "model_index.json").write_text(json.dumps(index))  # the copy itself reads as the original
    assert folder_sizes(tmp_path) == folder_sizes(base) is not None


def _centre(g: np.ndarray, colour: tuple[int, int, int]) -> tuple[float, float]:
    ys, xs = np.nonzero((g == colour).all(-1))
    return float(ys.mean()), float(xs.mean())


def test_labelled_grid_puts_rows_down_and_columns_across_with_each_seed_labelled(monkeypatch):
    """images[r][c]: row r (a prompt) below row r-1, column c (model c // group, seed c % group) right of c-1;
    the sub-labels name each column's seed."""
    from imgalign.eval.gallery import labelled_grid

    colours = [[(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0)],
               [(255, 0, 255), (0, 255, 255), (128, 0, 0), (0, 128, 0)]]  # fmt: skip
    images = [[Image.new("RGB", (8, 8), c) for c in row] for row in colours]
    texts = _drawn_texts(monkeypatch)
    g = np.asarray(
        labelled_grid(images, ["p1", "p2"], ["m1", "m2"], group=2, sub_labels=["s0", "s1"], cell=16)
    )
    centres = [[_centre(g, c) for c in row] for row in colours]
    for r in range(2):
        xs = [centres[r][c][1] for c in range(4)]
        assert xs == sorted(xs) and len(set(xs)) == 4
    for c in range(4):
        assert centres[0][c][0] < centres[1][c][0]
    subs = sorted((xy[0], t) for xy, t in texts if t in ("s0", "s1"))
    assert [t for _, t in subs] == ["s0", "s1", "s0", "s1"]
    with pytest.raises(ValueError, match="do not line up"):  # 4 columns are 2 models of 2 seeds, not 3 models
        labelled_grid(images, ["p1", "p2"], ["m1", "m2", "m3"], group=2)
    with pytest.raises(ValueError, match="do not line up"):
        labelled_grid(images, ["p1", "p2"], ["m1"], group=2)


def test_caption_grid_fills_rows_left_to_right():
    from imgalign.eval.gallery import caption_grid

    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]
    g = np.asarray(
        caption_grid([Image.new("RGB", (8, 8), c) for c in colours], ["a", "b", "c"], ncols=2, cell=16)
    )
    (y0, x0), (y1, x1), (y2, x2) = (_centre(g, c) for c in colours)
    assert y0 == y1 < y2 and x0 < x1 and x2 == x0
    # one image: one column, not a canvas six cells wide
    from imgalign.eval.gallery import PAD

    assert caption_grid([Image.new("RGB", (8, 8))], ["a"], ncols=6, cell=16).width == 16 + 2 * PAD


def test_fit_scales_the_longer_side_and_wrap_marks_a_cut():
    from imgalign.eval.gallery import fit, font, wrap

    assert fit(Image.new("RGB", (100, 50)), 40).size == (40, 20)
    assert fit(Image.new("RGB", (10, 20)), 40).size == (20, 40)
    text = wrap("\n".join(f"line{i}" for i in range(5)), 400, font(12), max_lines=3)
    assert text.splitlines() == ["line0", "line1", "line2…"]


def test_save_png_renames_its_temporary_file(tmp_path):
    from imgalign.eval.gallery import save_png

    save_png(Image.new("RGB", (4, 4), (1, 2, 3)), tmp_path / "sub" / "g.png")
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["g.png"]
    with Image.open(tmp_path / "sub" / "g.png") as im:
        assert im.getpixel((0, 0)) == (1, 2, 3)


def test_max_prompts_takes_the_first_prompts_of_a_file(tmp_path, caplog):
    """The first --max-prompts prompts of a file, with a warning when some are left out (a file of 300 prompts
    gave a 16-row grid, the default, without a word)."""
    import argparse

    from imgalign.commands.grid import read_rows

    (tmp_path / "p.txt").write_text("a\nb\nc\n")
    args = argparse.Namespace(prompts=str(tmp_path / "p.txt"), prompt=None, max_prompts=2)
    with caplog.at_level("WARNING"):
        assert read_rows(args) == (["a", "b"], [None, None])
    assert "p.txt holds 3 prompts; the grid shows its first 2 (--max-prompts 2)" in caplog.text
    caplog.clear()
    args.max_prompts = 3
    assert read_rows(args) == (["a", "b", "c"], [None, None, None]) and not caplog.text


def test_max_prompts_with_typed_prompts_is_refused(capsys):
    """--max-prompts applies to a --prompts file: `--prompt x --max-prompts 0` was taken without a word."""
    import argparse

    from imgalign.commands.grid import read_rows

    with pytest.raises(
        ValueError, match="--max-prompts 0 applies to a --prompts file; .*leave --max-prompts out"
    ):
        read_rows(argparse.Namespace(prompts=None, prompt=["a red cube"], max_prompts=0))
    assert read_rows(argparse.Namespace(prompts=None, prompt=["a red cube"], max_prompts=None)) == (
        ["a red cube"],
        [None],
    )
    argv = ["grid", "--model", "shapes", "--prompt", "a red cube", "--max-prompts", "4", "--out", "g.png"]
    assert main(argv) == 2
    assert "imgalign grid: error: --max-prompts 4 applies to a --prompts file" in capsys.readouterr().err


def test_grid_puts_each_seed_in_its_column_with_the_given_settings(tmp_path, monkeypatch):
    """images[r][c]: prompt r, model c // len(seeds), seed seeds[c % len(seeds)] as given; --steps and --guidance
    reach the sampler over the model's own settings; one seed needs no seed labels."""
    import imgalign.eval.gallery as gallery
    import imgalign.pipelines as P
    import imgalign.sampling as S

    calls = []
    monkeypatch.setattr(P, "load_pipeline", lambda spec, device, dtype: spec.label)

    def generate(pipe, prompts, seeds, batch_size, **kw):
        calls.append(kw)
        return [(pipe, p, s) for p, s in zip(prompts, seeds)]

    monkeypatch.setattr(S, "generate_images", generate)
    got = {}

    def grid(images, rows, cols, **kw):
        got.update(images=images, rows=rows, cols=cols, **kw)
        return Image.new("RGB", (4, 4))

    monkeypatch.setattr(gallery, "labelled_grid", grid)
    argv = ["grid", "--model", "a=shapes", "--model", "b=shapes", "--prompt", "x", "--prompt", "y"]
    argv += ["--steps", "2", "--guidance", "1.5", "--out", str(tmp_path / "g.png")]
    assert main([*argv, "--seeds", "3,1"]) == 0
    assert got["images"] == [
        [("a", "x", 3), ("a", "x", 1), ("b", "x", 3), ("b", "x", 1)],
        [("a", "y", 3), ("a", "y", 1), ("b", "y", 3), ("b", "y", 1)],
    ]
    assert got["rows"] == ["x", "y"] and got["cols"] == ["a", "b"] and got["group"] == 2
    assert got["sub_labels"] == ["seed 3", "seed 1"]
    assert calls[0]["steps"] == 2 and calls[0]["guidance"] == 1.5
    assert main([*argv, "--seeds", "0"]) == 0
    assert got["sub_labels"] is None and got["group"] == 1
    assert main([*argv[:-4], "--guidance", "0", "--out", str(tmp_path / "g.png"), "--seeds", "0"]) == 0
    assert calls[-1]["guidance"] == 0.0  # no guidance is a valid setting


def test_model_argument_without_a_path_or_a_base_is_refused():
    from imgalign.pipelines import parse_model_arg

    with pytest.raises(ValueError, match="expected LABEL=PATH"):
        parse_model_arg("ft=")
    with pytest.raises(ValueError, match="needs both parts"):
        parse_model_arg("ft=+runs/a/lora")


def test_model_argument_spacing_order_and_extra_plus_are_named(tmp_path):
    """'shapes + ft' is shapes+ft (the base was 'shapes ', "does not exist"); LORA+BASE says the base comes first
    (it said the LoRA names no base, though it may); 'shapes++ft' says BASE+OVERLAY takes one '+'."""
    from imgalign.pipelines import ModelSpec, check_model_spec, parse_model_arg

    assert parse_model_arg("ft=shapes + runs/a/lora") == ModelSpec("ft", "shapes", "runs/a/lora")
    lora = tmp_path / "lora"
    lora.mkdir()
    (lora / "pytorch_lora_weights.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match=f"the base model comes first: ft=shapes\\+{lora}"):
        check_model_spec(parse_model_arg(f"ft={lora}+shapes"))
    # two LoRAs: the advice was the same pair swapped
    other = tmp_path / "other"
    other.mkdir()
    (other / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match=f"are both LoRA folders; .* e.g. ft=BASE\\+{other}$"):
        check_model_spec(parse_model_arg(f"ft={lora}+{other}"))
    (other / "imgalign_model.json").write_text(json.dumps({"base_model": "shapes"}))
    with pytest.raises(ValueError, match=f"e.g. ft=shapes\\+{other}$"):
        check_model_spec(parse_model_arg(f"ft={lora}+{other}"))
    with pytest.raises(FileNotFoundError, match="takes one '\\+' between the two parts"):
        check_model_spec(parse_model_arg(f"ft=shapes++{lora}"))
    with pytest.raises(FileNotFoundError, match="takes one '\\+' between the two parts"):
        check_model_spec(parse_model_arg(f"ft=shapes+{lora}+"))


def test_overlay_kinds_are_told_apart_by_their_files(tmp_path):
    from types import SimpleNamespace

    from imgalign.pipelines import apply_overlay, overlay_kind

    def folder(name: str, *files: str) -> Path:
        d = tmp_path / name
        for f in files:
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            (d / f).write_text("{}")
        return d

    assert overlay_kind(folder("peft", "adapter_config.json", "pytorch_lora_weights.safetensors")) == "peft"
    assert overlay_kind(folder("lora_bin", "pytorch_lora_weights.bin")) == "lora"
    assert overlay_kind(folder("sub", "transformer/config.json")) == "transformer-subfolder"
    assert overlay_kind(folder("full", "config.json")) == "transformer"
    # a transformer/ subfolder overlay is read from the subfolder
    (tmp_path / "sub" / "transformer" / "config.json").write_text(json.dumps({"_class_name": "FluxX"}))
    pipe = SimpleNamespace(transformer=torch.nn.Linear(1, 1))
    with pytest.raises(ValueError, match=r"sub/transformer holds a FluxX"):
        apply_overlay(pipe, tmp_path / "sub")

    def no_fit(path: str) -> None:  # peft's error when the LoRA's target modules are not in the base
        raise ValueError("Target modules {'to_q'} not found in the base model")

    pipe = SimpleNamespace(transformer=torch.nn.Linear(1, 1), load_lora_weights=no_fit)
    with pytest.raises(ValueError, match=r"lora_bin' does not fit base model 'b'.*Target modules"):
        apply_overlay(pipe, tmp_path / "lora_bin", base="b")


def test_pipeline_folder_check_names_each_missing_part(tmp_path, monkeypatch):
    """Weights saved as .bin count; an encoder without weights is incomplete; a file is not a folder; a run
    folder's hint names its latest checkpoint; an incomplete embedded model (also when named, not given as a
    path) is fixed by reinstalling."""
    import imgalign.hub as hub
    import imgalign.pipelines as P

    P.check_pipeline_folder(stub_pipeline_folder(tmp_path / "bin", {"transformer": ["config.json", "w.bin"]}))
    enc = stub_pipeline_folder(tmp_path / "enc", {"text_encoder": ["config.json"], "vae": ["config.json"]})
    with pytest.raises(
        P.IncompleteModelError, match=r"missing: text_encoder/ weights \(\*.safetensors\), vae/ weights"
    ):
        P.check_pipeline_folder(enc)
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(P.IncompleteModelError, match="f.txt' is a file"):
        P.check_pipeline_folder(tmp_path / "f.txt")
    for step in ("step-000002", "step-000010"):
        (tmp_path / "run" / "checkpoints" / step).mkdir(parents=True)
    with pytest.raises(P.IncompleteModelError, match=r"checkpoints/step-000010'"):
        P.check_pipeline_folder(tmp_path / "run")
    with pytest.raises(P.IncompleteModelError, match=r"holds a run's checkpoints.*checkpoints/step-000010'"):
        P.check_pipeline_folder(tmp_path / "run" / "checkpoints")  # was: "not a diffusers pipeline folder"
    # the latest by step, whatever order the folder lists them in; a run that saved none yet says so
    for step in range(1, 13):
        (tmp_path / "run12" / "checkpoints" / f"step-{step:06d}").mkdir(parents=True)
    with pytest.raises(P.IncompleteModelError, match=r"give one of its checkpoints, e.g. '.*step-000012'"):
        P.check_pipeline_folder(tmp_path / "run12")
    with pytest.raises(P.IncompleteModelError, match=r"holds a run's checkpoints, .*step-000012'"):
        P.check_pipeline_folder(tmp_path / "run12" / "checkpoints")
    (tmp_path / "new" / "checkpoints").mkdir(parents=True)
    with pytest.raises(
        P.IncompleteModelError, match=r"a training run folder, not a model.*\(it has none yet\)"
    ):
        P.check_pipeline_folder(tmp_path / "new")
    assets = tmp_path / "assets"
    stub_pipeline_folder(assets / "shapes-t2i", {"transformer": ["config.json"]})
    monkeypatch.setattr(hub, "ASSETS", assets)
    with pytest.raises(P.IncompleteModelError, match=r"transformer/ weights.*reinstall imgalign"):
        P.check_model_spec(P.ModelSpec("s", "shapes"))
    monkeypatch.chdir(tmp_path)  # the embedded folder given by a relative path is still the embedded model
    with pytest.raises(P.IncompleteModelError, match=r"transformer/ weights.*reinstall imgalign"):
        P.check_pipeline_folder(Path("assets") / "shapes-t2i")


def test_a_sharded_component_missing_a_shard_or_its_index_is_named_before_loading(tmp_path):
    """A transformer saved in shards with one shard (or the shard index) gone failed only once other components
    had loaded, with diffusers' "does not appear to have a file named ..." / "no file named ....bin"."""
    import imgalign.pipelines as P

    a, b = (
        "diffusion_pytorch_model-00001-of-00002.safetensors",
        "diffusion_pytorch_model-00002-of-00002.safetensors",
    )
    index = "diffusion_pytorch_model.safetensors.index.json"
    folder = stub_pipeline_folder(tmp_path / "m", {"transformer": ["config.json", a, b, index]})
    (folder / "transformer" / index).write_text(json.dumps({"weight_map": {"x.weight": a, "y.weight": b}}))
    P.check_pipeline_folder(folder)
    (folder / "transformer" / b).unlink()
    with pytest.raises(P.IncompleteModelError, match=f"missing: transformer/{b}; recreate it"):
        P.check_pipeline_folder(folder)
    (folder / "transformer" / b).write_bytes(b"stub")  # not empty: an empty weights file is refused first
    (folder / "transformer" / index).unlink()
    with pytest.raises(P.IncompleteModelError, match=f"missing: transformer/{index}"):
        P.check_pipeline_folder(folder)
    (folder / "transformer" / index).write_text("[1, 2]")  # JSON, but not an index
    with pytest.raises(P.IncompleteModelError, match=f"missing: transformer/{index} \\(not a JSON index\\)"):
        P.check_pipeline_folder(folder)
    (folder / "transformer" / index).write_text(json.dumps({"weight_map": {"x.weight": a, "y.weight": b}}))
    (folder / "step-000010").mkdir()  # a pipeline folder holding step-* folders is still a pipeline
    P.check_pipeline_folder(folder)
    # so is one holding checkpoints/, and a full fine-tune's checkpoint (its pipeline beside trainer_state/)
    (folder / "checkpoints" / "step-000001").mkdir(parents=True)
    (folder / "trainer_state").mkdir()
    P.check_pipeline_folder(folder)


def test_a_component_without_its_config_or_with_a_cut_short_shard_is_named_before_loading(tmp_path):
    """A transformer folder without config.json, or a .safetensors cut short by a copy, failed only once other
    components had loaded (in `grid`, after the earlier columns were sampled), with diffusers' "no file named
    config.json" / "Unable to load weights from checkpoint file" and no word on what to do."""
    from safetensors.torch import save_file

    import imgalign.pipelines as P

    folder = stub_pipeline_folder(tmp_path / "m", {"transformer": ["config.json"], "vae": ["config.json"]})
    for name in ("transformer", "vae"):
        save_file({"w": torch.zeros(64)}, folder / name / "diffusion_pytorch_model.safetensors")
    save_file({"w": torch.zeros(0)}, folder / "vae" / "empty.safetensors")  # no data at all is whole
    P.check_pipeline_folder(folder)
    shard = folder / "transformer" / "diffusion_pytorch_model.safetensors"
    whole = shard.read_bytes()
    shard.write_bytes(whole[: len(whole) - 10])
    (folder / "vae" / "config.json").unlink()
    with pytest.raises(
        P.IncompleteModelError,
        match=rf"missing: the rest of transformer/{shard.name} \({len(whole) - 10} of {len(whole)} bytes there: "
        r"truncated\), vae/config.json; recreate it",
    ):
        P.check_pipeline_folder(folder)


def test_checkpoints_missing_their_weights_are_named_before_loading(tmp_path):
    """A LoRA checkpoint without its LoRA file is named as an incomplete checkpoint (not as a folder that is no
    pipeline), and a transformer overlay without weights fails before the base loads (it failed in diffusers
    after the base had loaded)."""
    import imgalign.pipelines as P

    base = stub_pipeline_folder(tmp_path / "base", {"transformer": ["config.json", "w.safetensors"]})
    lora = tmp_path / "run" / "checkpoints" / "step-000001"
    (lora / "trainer_state").mkdir(parents=True)
    (lora / "imgalign_model.json").write_text(json.dumps({"base_model": str(base)}))
    with pytest.raises(P.IncompleteModelError, match=r"step-000001' is incomplete.*pytorch_lora_weights"):
        P.check_model_spec(P.ModelSpec("ft", str(lora)))
    # a LoRA checkpoint whose recorded base is gone (the run was copied to another machine) says where that
    # base came from and how to give another one
    (lora / "pytorch_lora_weights.safetensors").write_text("x")
    (lora / "imgalign_model.json").write_text(json.dumps({"base_model": str(tmp_path / "gone")}))
    with pytest.raises(
        P.IncompleteModelError,
        match=r"step-000001' names its base model '.*gone' in imgalign_model.json.*give the base as ft=BASE\+",
    ):
        P.check_model_spec(P.ModelSpec("ft", str(lora)))
    full = stub_pipeline_folder(tmp_path / "full", {"transformer": ["config.json"]})
    for overlay in (full, full / "transformer"):
        with pytest.raises(
            P.IncompleteModelError, match=r"full/transformer' has a config.json but no weights"
        ):
            P.check_model_spec(P.ModelSpec("ft", str(base), str(overlay)))


def test_a_cut_short_lora_file_is_named_as_the_checkpoints_before_the_base_loads(tmp_path):
    """A LoRA checkpoint whose pytorch_lora_weights.safetensors was cut short failed once the base had loaded,
    with diffusers' "Unable to load weights from checkpoint file" and no word on what to do."""
    from safetensors.torch import save_file

    import imgalign.pipelines as P

    base = stub_pipeline_folder(tmp_path / "base", {"transformer": ["config.json", "w.safetensors"]})
    lora = tmp_path / "run" / "checkpoints" / "step-000001"
    (lora / "trainer_state").mkdir(parents=True)
    (lora / "imgalign_model.json").write_text(json.dumps({"base_model": str(base)}))
    f = lora / "pytorch_lora_weights.safetensors"
    save_file({"transformer.a.lora_A.weight": torch.zeros(4, 8)}, f)
    assert P.check_model_spec(P.ModelSpec("ft", str(lora))).overlay == str(lora)
    f.write_bytes(f.read_bytes()[:-8])
    for spec in (P.ModelSpec("ft", str(lora)), P.ModelSpec("ft", str(base), str(lora))):
        # alone, it is not blamed on the base its imgalign_model.json names
        with pytest.raises(
            ValueError, match=r"^model 'ft': fine-tuned folder .*step-000001' is incomplete; "
        ):
            P.check_model_spec(spec)
    with pytest.raises(
        ValueError, match=r"the rest of step-000001/pytorch_lora_weights.safetensors .*another"
    ):
        P.check_model_spec(P.ModelSpec("ft", str(lora)))


def test_a_transformer_overlay_that_does_not_fit_the_base_fails_before_loading(tmp_path):
    """A transformer of another class, or of the same class sized for other text encoders, fails in the check
    (it failed after the base had loaded, or with a matmul error while sampling after other models ran)."""
    import imgalign.pipelines as P

    def config(folder: Path, **cfg) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(cfg))
        (folder / "w.safetensors").write_text("x")

    base = stub_pipeline_folder(tmp_path / "base", {"transformer": []})
    sd3 = {"_class_name": "SD3Transformer2DModel", "in_channels": 4, "joint_attention_dim": 64}
    config(base / "transformer", **sd3)
    config(tmp_path / "same", **sd3, num_layers=3)
    assert P.check_model_spec(P.ModelSpec("ok", str(base), str(tmp_path / "same"))).overlay
    config(tmp_path / "flux" / "transformer", _class_name="FluxTransformer2DModel", in_channels=4)
    config(tmp_path / "small", **{**sd3, "joint_attention_dim": 32})
    config(tmp_path / "latent", **{**sd3, "in_channels": 16})
    config(tmp_path / "pooled", **sd3, pooled_projection_dim=32)
    (base / "transformer" / "config.json").write_text(json.dumps({**sd3, "pooled_projection_dim": 64}))
    for overlay, message in (
        ("flux", "_class_name FluxTransformer2DModel against the base's SD3Transformer2DModel"),
        ("small", "joint_attention_dim 32 against the base's 64"),
        ("latent", "in_channels 16 against the base's 4"),  # another autoencoder's latents
        ("pooled", "pooled_projection_dim 32 against the base's 64"),
    ):
        with pytest.raises(ValueError, match=f"'{tmp_path / overlay}.*does not fit base model.*{message}"):
            P.check_model_spec(P.ModelSpec("ft", str(base), str(tmp_path / overlay)))
    # weights saved as .bin count; an embedded base is read from its folder too
    bin_overlay = tmp_path / "bin"
    bin_overlay.mkdir()
    (bin_overlay / "config.json").write_text(json.dumps(sd3))
    (bin_overlay / "diffusion_pytorch_model.bin").write_text("x")
    assert P.check_model_spec(P.ModelSpec("ok", str(base), str(bin_overlay))).overlay
    with pytest.raises(
        ValueError, match="does not fit base model 'shapes'.*_class_name FluxTransformer2DModel"
    ):
        P.check_model_spec(P.ModelSpec("ft", "shapes", str(tmp_path / "flux")))


def test_a_hub_id_is_checked_against_the_cache_and_the_offline_setting(tmp_path, monkeypatch):
    """A name with no slash that does not exist is a missing folder, not a Hub id; an invalid id is not
    available; an uncached id is available only when the Hub may be contacted."""
    from huggingface_hub import constants

    import imgalign.pipelines as P

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(P, "hub_id_available", lambda repo_id: True)
    with pytest.raises(P.IncompleteModelError, match="'runs' does not exist"):
        P.check_model_spec(P.ModelSpec("m", "runs"))
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert not P.hub_id_available("org/not a valid id")
    assert P.hub_id_available("imgalign-test/never-downloaded")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not P.hub_id_available("imgalign-test/never-downloaded")
    for value in ("true", "YES", "On"):  # huggingface_hub's own spellings, in any case
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        assert not P.hub_id_available("imgalign-test/never-downloaded")


def test_a_hub_id_cached_as_having_no_model_index_is_not_available_offline(tmp_path, monkeypatch):
    """The Hub cache also records files known to be absent (``.no_exist``): such an id is not a cached pipeline."""
    from huggingface_hub import constants

    import imgalign.pipelines as P

    repo = tmp_path / "models--org--lora-only"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / ".no_exist" / "abc123").mkdir(parents=True)
    (repo / ".no_exist" / "abc123" / "model_index.json").write_text("")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not P.hub_id_available("org/lora-only")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "model_index.json").write_text("{}")
    (repo / ".no_exist" / "abc123" / "model_index.json").unlink()
    assert P.hub_id_available("org/lora-only")


def test_a_checkpoint_record_that_is_not_a_json_object_is_named(tmp_path):
    from imgalign.pipelines import absent_components, recorded_base

    (tmp_path / "imgalign_model.json").write_text('["shapes"]')
    with pytest.raises(ValueError, match="imgalign_model.json: not a JSON object"):
        recorded_base(tmp_path)
    (tmp_path / "imgalign_model.json").write_text(json.dumps({"family": "sd3"}))
    assert recorded_base(tmp_path) is None  # no base recorded: the user gives BASE+CHECKPOINT
    assert absent_components(tmp_path) == {}  # no model_index.json (e.g. a Hub id): nothing to pass
    (tmp_path / "model_index.json").write_text(
        json.dumps({"_class_name": "X", "text_encoder_3": [None, None]})
    )
    assert absent_components(tmp_path) == {"text_encoder_3": None}


def test_pipelines_and_overlays_load_in_the_given_dtype(models):
    from imgalign.pipelines import load_pipeline

    pipe = load_pipeline(str(models["base"]), dtype=torch.bfloat16)
    assert pipe.transformer.dtype == pipe.vae.dtype == torch.bfloat16
    pipe = load_pipeline(f"{models['base']}+{models['overlay']}", dtype=torch.bfloat16)
    assert pipe.transformer.dtype == torch.bfloat16


def test_shapes_family_is_told_by_the_transformer_architecture_alone(tmp_path):
    """A folder whose transformer config matches the shapes model's except for the bookkeeping keys diffusers
    writes (``_diffusers_version``, ``_name_or_path``) is of the shapes family; a folder without a transformer
    config is not; both embedded names of the shapes model are."""
    from imgalign.eval.models import is_shapes_family
    from imgalign.hub import ASSETS, EMBEDDED
    from imgalign.pipelines import ModelSpec

    ref = ASSETS / EMBEDDED["shapes"] / "transformer" / "config.json"
    if not ref.is_file():
        pytest.skip("the embedded shapes model is not in this checkout")
    cfg = json.loads(ref.read_text())
    (tmp_path / "ft" / "transformer").mkdir(parents=True)
    cfg |= {"_diffusers_version": "0.0.1", "_name_or_path": "somewhere/else"}
    (tmp_path / "ft" / "transformer" / "config.json").write_text(json.dumps(cfg))
    assert is_shapes_family(ModelSpec("ft", str(tmp_path / "ft")))
    assert not is_shapes_family(ModelSpec("empty", str(tmp_path)))
    assert is_shapes_family(ModelSpec("a", "shapes")) and is_shapes_family(ModelSpec("b", "shapes-t2i"))


def test_grid_cells_centre_an_image_that_is_not_square():
    """A wide image sits in the middle of its cell, level with a square one in the same row, in both grids."""
    from imgalign.eval.gallery import caption_grid, labelled_grid

    red, blue = (255, 0, 0), (0, 0, 255)
    wide, square = Image.new("RGB", (16, 8), red), Image.new("RGB", (8, 8), blue)
    g = np.asarray(labelled_grid([[wide, square]], ["p"], ["m1", "m2"], cell=16))
    assert _centre(g, red)[0] == _centre(g, blue)[0]
    g = np.asarray(caption_grid([wide, square], ["a", "b"], ncols=2, cell=16))
    assert _centre(g, red)[0] == _centre(g, blue)[0]


def test_fit_keeps_pixels_when_enlarging_and_filters_when_shrinking_and_wrap_fills_its_width():
    from PIL import ImageDraw

    from imgalign.eval.gallery import fit, font, text_size, wrap

    checker = Image.fromarray((np.indices((4, 4)).sum(0) % 2 * 255).astype(np.uint8)).convert("RGB")
    assert set(np.unique(np.asarray(fit(checker, 8)))) == {0, 255}  # nearest: still only black and white
    assert not set(np.unique(np.asarray(fit(checker, 2)))) & {0, 255}  # Lanczos: shrinking averages to greys
    f = font(12)
    avg = text_size(ImageDraw.Draw(Image.new("RGB", (1, 1))), "abcdefghijklmnopqrstuvwxyz", f)[0] / 26
    text = "aaaa bbbb cccc dddd"  # 19 characters: one line at 20 average glyphs wide
    assert wrap(text, int(20 * avg) + 1, f) == text
    assert wrap("a\nb\nc", 400, f, max_lines=3) == "a\nb\nc"  # exactly max_lines lines: nothing is cut
    assert wrap("abcdefgh ij", 1, f) == "abcd\nefgh\nij"  # narrower than a glyph: still 4 characters a line


def test_sub_labels_push_the_rows_down_below_them():
    from imgalign.eval.gallery import labelled_grid

    red = (255, 0, 0)
    images = [[Image.new("RGB", (8, 8), red), Image.new("RGB", (8, 8), (0, 0, 255))]]
    plain = np.asarray(labelled_grid(images, ["p"], ["m"], group=2, cell=16))
    seeds = np.asarray(labelled_grid(images, ["p"], ["m"], group=2, sub_labels=["s0", "s1"], cell=16))
    top = [int(np.nonzero((g == red).all(-1))[0].min()) for g in (plain, seeds)]
    assert top[1] - top[0] == seeds.shape[0] - plain.shape[0] > 0  # moved down by the sub-label line's height


def test_a_ragged_grid_is_refused_by_name():
    from imgalign.eval.gallery import labelled_grid

    im = Image.new("RGB", (8, 8))
    with pytest.raises(ValueError, match="do not line up"):
        labelled_grid([[im, im], [im]], ["p1", "p2"], ["m1", "m2"])


def test_the_size_check_reads_an_overlays_transformer_or_its_transformer_subfolder(tmp_path):
    """Before loading, a fine-tuned transformer given as the overlay folder itself or as its `transformer/`
    subfolder (a full fine-tune's checkpoint) sets the sizes: the shapes model takes at most 64, its VAE under a
    transformer whose grid is 16 takes 128."""
    from imgalign.commands.grid import check_size_before_loading
    from imgalign.hub import embedded_path
    from imgalign.pipelines import parse_model_arg

    config = json.loads((embedded_path("shapes") / "transformer" / "config.json").read_text())
    (tmp_path / "run" / "transformer").mkdir(parents=True)
    for folder in (tmp_path, tmp_path / "run" / "transformer"):
        (folder / "config.json").write_text(json.dumps({**config, "pos_embed_max_size": 16}))
    with pytest.raises(ValueError, match="model 'shapes': --size=128 is not an image size"):
        check_size_before_loading(parse_model_arg("shapes"), 128)
    for overlay in (tmp_path, tmp_path / "run"):
        check_size_before_loading(parse_model_arg(f"shapes+{overlay}"), 128)
        with pytest.raises(ValueError, match="--size=136 is not an image size"):
            check_size_before_loading(parse_model_arg(f"shapes+{overlay}"), 136)


def test_labels_sit_over_their_columns_and_long_text_is_wrapped_inside_its_cell(monkeypatch):
    """Each seed's sub-label is centred over its own column, below the model's header, which is centred over its
    group; a long prompt, caption or header is wrapped to its own space, not drawn across the neighbouring cells."""
    from imgalign.eval.gallery import PAD, labelled_grid

    red, cell, lw = (255, 0, 0), 60, 180
    images = [[Image.new("RGB", (8, 8), red), Image.new("RGB", (8, 8), red)]]
    texts = _drawn_texts(monkeypatch)
    g = np.asarray(labelled_grid(images, ["p"], ["m"], group=2, sub_labels=["s0", "s1"], cell=cell))
    at = {t: xy for xy, t in texts}
    assert lw <= at["s0"][0] < lw + cell <= lw + cell + PAD <= at["s1"][0] < lw + 2 * cell + PAD
    assert at["s0"][1] == at["s1"][1] > at["m"][1]  # the sub-labels are a line below the header
    ink = (g[: at["s0"][1], lw:] != 255).any(-1).nonzero()[1]  # the header "m", centred over both columns
    assert abs(lw + ink.mean() - (lw + cell + PAD / 2)) < 8

    long = "a long text of many words that cannot fit in one cell " * 2
    for grid in (
        labelled_grid(images, [long], ["m1"], cell=cell, group=2, label_width=lw),
        labelled_grid(images, ["p"], ["m1", "m2"], captions=[[long, ""]], cell=cell, label_width=lw),
    ):
        g = np.asarray(grid)
        band = (g == red).all(-1).nonzero()[0].min()  # below the header
        gaps = [g[band:, lw - PAD // 2 : lw], g[band:, lw + cell + 1 : lw + cell + PAD]]
        assert all((gap > 200).all() for gap in gaps)  # no text between the columns (an edge's antialiasing)
    # a header that fits over its group of two columns stays on one line (rows start no lower than a short one's)
    tops = [
        (np.asarray(labelled_grid(images, ["p"], [h], group=2, cell=cell)) == red).all(-1).nonzero()[0].min()
        for h in ("ml", "model label")
    ]
    assert tops[0] == tops[1]


def test_a_gallery_needs_an_image_and_leaves_room_for_its_captions():
    from imgalign.eval.gallery import PAD, caption_grid

    with pytest.raises(ValueError, match="at least one image"):
        caption_grid([], [])
    g = caption_grid([Image.new("RGB", (8, 8), (255, 0, 0))], ["a caption\nof two lines"], cell=16)
    assert g.height >= 16 + 2 * PAD + 20  # the image's cell, and two lines of text under it
    assert (np.asarray(g)[16 + PAD + 2 :] != 255).any()  # drawn, inside the canvas


def test_a_gallery_caption_keeps_up_to_its_lines_and_cuts_only_past_them():
    """caption_grid wraps each caption to `lines` lines (8 by default, the failure gallery's prompt and the judge's
    reason), not wrap's own default of 6: captions of 6, 7 and 8 lines each take more room, a 9th line is cut."""
    from imgalign.eval.gallery import caption_grid

    im = [Image.new("RGB", (8, 8), (255, 0, 0))]

    def height(n_lines: int, **kw: int) -> int:
        return caption_grid(im, ["\n".join(f"l{i}" for i in range(n_lines))], cell=16, **kw).height

    h6, h7, h8, h9 = (height(n) for n in (6, 7, 8, 9))
    assert h6 < h7 < h8 == h9
    assert height(3, lines=2) == height(2, lines=2) < height(3, lines=3)


def test_a_gallery_and_a_grid_need_one_caption_per_image():
    """caption_grid zipped images with captions (images past the last caption were dropped silently, no caption
    at all was a bare max() error); labelled_grid indexed captions[r][c] (a short row was an IndexError)."""
    from imgalign.eval.gallery import caption_grid, labelled_grid

    ims = [Image.new("RGB", (8, 8), (255, 0, 0)) for _ in range(3)]
    for caps in (["a", "b"], [], ["a", "b", "c", "d"]):
        with pytest.raises(
            ValueError, match=rf"one caption per image \(got 3 images, {len(caps)} captions\)"
        ):
            caption_grid(ims, caps, cell=16)
    grid = [ims[:2], ims[:2]]
    for caps in ([["a", "b"]], [["a", "b"], ["c"]], [["a", "b"], ["c", "d", "e"]]):
        with pytest.raises(ValueError, match="captions do not line up with its images"):
            labelled_grid(grid, ["p1", "p2"], ["m1", "m2"], captions=caps, cell=16)
    assert labelled_grid(grid, ["p1", "p2"], ["m1", "m2"], captions=[["a", "b"], ["c", "d"]], cell=16)


def test_grid_passes_the_dtype_size_context_length_and_cell_on(tmp_path, monkeypatch, capsys):
    """--dtype reaches the loader, --size and --max-sequence-length the sampler (over the model's own settings),
    --cell the grid."""
    import imgalign.eval.gallery as gallery
    import imgalign.pipelines as P
    import imgalign.sampling as S

    loaded, calls, got = [], [], {}
    monkeypatch.setattr(P, "load_pipeline", lambda spec, device, dtype: loaded.append(dtype) or spec.label)
    monkeypatch.setattr(
        S,
        "generate_images",
        lambda pipe, prompts, seeds, batch_size, **kw: calls.append(kw) or [pipe] * len(seeds),
    )
    monkeypatch.setattr(
        gallery, "labelled_grid", lambda *a, **kw: got.update(kw, labels=a[2]) or Image.new("RGB", (4, 4))
    )
    argv = ["grid", "--model", "a=shapes", "--prompt", "x", "--dtype", "bfloat16", "--size", "32"]
    assert main(argv + ["--max-sequence-length", "3", "--cell", "40", "--out", str(tmp_path / "g.png")]) == 0
    # the LABEL, not the path
    assert loaded == [torch.bfloat16] and got["cell"] == 40 and got["labels"] == ["a"]
    assert "(1 prompt x 1 model x 1 seed)" in capsys.readouterr().out
    assert calls == [{"steps": 20, "guidance": 4.0, "max_sequence_length": 3, "size": 32}]
    # the largest bounds are allowed: 512 T5 tokens (513 is refused) and seed 2**63 - 1 (a 64-bit generator seed)
    top = [
        "--max-sequence-length",
        "512",
        "--seeds",
        f"0,{2**32},{2**63 - 1}",
        "--out",
        str(tmp_path / "h.png"),
    ]
    assert main(argv + top) == 0
    assert calls[-1]["max_sequence_length"] == 512 and got["sub_labels"][1:] == [
        f"seed {2**32}",
        f"seed {2**63 - 1}",
    ]


def test_grid_scores_each_row_against_its_own_prompt(tmp_path, monkeypatch):
    import imgalign.eval.gallery as gallery
    import imgalign.pipelines as P
    import imgalign.rewards.base as R
    import imgalign.sampling as S

    metas = []

    class PromptLength:
        name = "len"

        def __call__(self, images, prompts, metadata):
            metas.append(metadata)
            return type("Out", (), {"scores": [float(len(p)) for p in prompts]})()

    monkeypatch.setattr(P, "load_pipeline", lambda spec, device, dtype: spec.label)
    monkeypatch.setattr(
        S, "generate_images", lambda pipe, prompts, seeds, batch_size, **kw: [pipe] * len(seeds)
    )
    built = []
    monkeypatch.setattr(R, "build_reward", lambda spec, device: built.append(device) or PromptLength())
    got = {}
    monkeypatch.setattr(gallery, "labelled_grid", lambda *a, **kw: got.update(kw) or Image.new("RGB", (4, 4)))
    argv = [
        "grid",
        "--model",
        "a=shapes",
        "--prompt",
        "x",
        "--prompt",
        "four",
        "--seeds",
        "0,1",
        "--device",
        "cpu:0",
    ]
    assert (
        main(argv + ["--reward", "imgalign.trainers.testing:red_reward", "--out", str(tmp_path / "g.png")])
        == 0
    )
    assert got["captions"] == [["len: 1.000"] * 2, ["len: 4.000"] * 2]
    assert metas == [None] * 4  # plain prompts have no metadata: None, not [None]
    assert built == ["cpu:0"]  # the reward runs on --device


def test_an_incomplete_pipeline_folder_given_as_a_model_is_refused_before_loading(tmp_path):
    import imgalign.pipelines as P

    folder = tmp_path / "pipe"
    folder.mkdir()
    index = {"_class_name": "StableDiffusion3Pipeline", "vae": ["diffusers", "AutoencoderKL"]}
    (folder / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(P.IncompleteModelError, match="is incomplete; missing: vae/; recreate it"):
        P.check_model_spec(P.ModelSpec("m", str(folder)))


def test_a_lora_mismatch_quotes_the_loaders_first_two_lines(tmp_path):
    """torch's message is a header, then the first mismatching weight: both are quoted, on one line."""
    import imgalign.pipelines as P

    error = RuntimeError(
        "Error(s) in loading state_dict for X:\n\n\tsize mismatch for a.lora_B: 4 vs 8.\n\tnext"
    )
    msg = P.lora_mismatch_message(tmp_path, "shapes", error)
    assert msg.endswith("(loader: Error(s) in loading state_dict for X: size mismatch for a.lora_B: 4 vs 8.)")


def test_the_absent_component_filter_is_removed_after_its_block():
    import logging

    import imgalign.pipelines as P

    logger = logging.getLogger("diffusers.pipelines.pipeline_utils")
    before = list(logger.filters)
    with P.quiet_absent_components():
        assert len(logger.filters) == len(before) + 1
    assert logger.filters == before


def test_a_lora_checkpoint_alone_keeps_its_label_and_takes_its_recorded_base(tmp_path):
    import imgalign.pipelines as P

    ckpt = tmp_path / "step-000500"
    ckpt.mkdir()
    (ckpt / "adapter_config.json").write_text("{}")
    (ckpt / "imgalign_model.json").write_text(json.dumps({"base_model": "shapes"}))
    assert P.check_model_spec(P.parse_model_arg(f"ft={ckpt}")) == P.ModelSpec("ft", "shapes", str(ckpt))


def test_a_transformer_only_lora_loads_without_diffusers_text_encoder_warnings(tmp_path, capfd):
    """diffusers warned "No LoRA keys associated to CLIPTextModelWithProjection ... open an issue" once per text
    encoder whenever a LoRA checkpoint (transformer only, as imgalign trains) loaded for grid or eval."""
    from imgalign import hub
    from imgalign.adapters import load_adapter
    from imgalign.pipelines import load_pipeline

    a = load_adapter("shapes")
    a.add_lora(2, 4.0)
    a.save(tmp_path / "ck", base_model=str(hub.resolve("shapes")))
    capfd.readouterr()
    with _diffusers_lora_records() as records:  # diffusers' handler writes to the sys.stderr of its import
        load_pipeline(str(tmp_path / "ck"))
    assert "No LoRA keys associated" not in capfd.readouterr().err
    assert not [r for r in records if "No LoRA keys associated" in r.getMessage()]


@contextlib.contextmanager
def _diffusers_lora_records():
    """The records diffusers' LoRA loader logs, past the filters on its logger (its own handler writes to the
    sys.stderr it found at import, which capfd does not see)."""
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("diffusers.loaders.lora_base")
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.WARNING)
    logger.propagate = False  # diffusers' handler: a stale stream under pytest
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def test_the_text_encoder_lora_warning_is_quieted_only_for_a_transformer_only_lora_file(tmp_path):
    """The filter goes on only when the LoRA file holds no text-encoder keys (diffusers' 'text_encoder' prefix,
    or kohya's 'lora_te'); a file it cannot read (a .bin) keeps the warning; other messages pass; the filter is
    taken off after the block."""
    import logging

    from safetensors.torch import save_file

    from imgalign.pipelines import LORA_FILES, quiet_text_encoder_lora_warning

    logger = logging.getLogger("diffusers.loaders.lora_base")
    filters = list(logger.filters)

    def warned(keys: list[str] | None) -> list[str]:
        d = tmp_path / str(keys)
        d.mkdir()
        if keys is None:
            (d / LORA_FILES[0]).write_bytes(b"not safetensors")
        else:
            save_file({k: torch.zeros(1) for k in keys}, str(d / LORA_FILES[0]))
        with _diffusers_lora_records() as records, quiet_text_encoder_lora_warning(d):
            logger.warning("%s", "No LoRA keys associated to CLIPTextModelWithProjection found")
            logger.warning("another warning")
        return [r.getMessage() for r in records]

    assert warned(["transformer.x.lora_A.weight"]) == ["another warning"]
    for keys in (["text_encoder.x.lora_A.weight"], ["lora_te_x.lora_down.weight"], None):
        assert len(warned(keys)) == 2, keys
    assert logger.filters == filters


def test_a_damaged_imgalign_model_json_says_to_give_the_base_and_then_loads_on_it(tmp_path):
    """A LoRA checkpoint whose imgalign_model.json is damaged: alone it says to give BASE+CKPT; given so, it loaded
    the base and then failed on the same damaged file (after eval had claimed its --out)."""
    from imgalign.adapters import load_adapter
    from imgalign.pipelines import load_pipeline

    a = load_adapter("shapes")
    a.add_lora(2, 4.0)
    a.save(tmp_path / "ck")
    (tmp_path / "ck" / "imgalign_model.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object.*give the base model yourself as BASE\\+"):
        load_pipeline(str(tmp_path / "ck"))
    assert load_pipeline(f"shapes+{tmp_path / 'ck'}") is not None


def test_a_row_label_taller_than_its_cell_pushes_the_next_row_down():
    """A row label of several lines sets its row's height: the next row starts below the label, not one cell
    lower (mutation round 9: row_h = cell + caption left the label drawn over the next row)."""
    from imgalign.eval.gallery import PAD, labelled_grid

    red, blue = (255, 0, 0), (0, 0, 255)
    images = [[Image.new("RGB", (8, 8), red)], [Image.new("RGB", (8, 8), blue)]]
    label = "\n".join(f"line {i}" for i in range(6))
    g = np.asarray(labelled_grid(images, [label, ""], ["m"], cell=16, label_width=80))
    ink_rows = np.nonzero((g[:, :80] < 128).all(-1).any(1))[0]  # the label column's ink: the first label only
    blue_top = np.nonzero((g == blue).all(-1).any(1))[0].min()
    assert ink_rows.max() - PAD < blue_top  # the label ends within the row gap above the next row


def test_sub_labels_may_name_every_column_not_only_one_group(monkeypatch):
    """sub_labels with one entry per column (not per column of a group) label each column with its own entry."""
    from imgalign.eval.gallery import labelled_grid

    images = [[Image.new("RGB", (8, 8), (0, 0, 0)) for _ in range(4)]]
    texts = _drawn_texts(monkeypatch)
    labelled_grid(images, ["p"], ["m1", "m2"], group=2, sub_labels=["a", "b", "c", "d"], cell=16)
    subs = sorted((xy[0], t) for xy, t in texts if t in ("a", "b", "c", "d"))
    assert [t for _, t in subs] == ["a", "b", "c", "d"]


def test_a_grid_larger_than_pillow_opens_is_refused_before_any_model_loads(tmp_path, monkeypatch, capsys):
    """A grid of some 3100 prompts or more was sampled and written, and then no reader (nor imgalign) could open the
    PNG: Pillow refuses images over twice its MAX_IMAGE_PIXELS (about 179M pixels)."""
    import imgalign.pipelines as P
    from imgalign.commands.grid import check_grid_pixels

    monkeypatch.setattr(P, "load_pipeline", lambda *a, **k: pytest.fail("a model loaded"))
    prompts = tmp_path / "p.txt"
    prompts.write_text("".join(f"prompt {i}\n" for i in range(3200)))
    argv = ["grid", "--model", "shapes", "--prompts", str(prompts), "--max-prompts", "3200"]
    assert main([*argv, "--out", str(tmp_path / "g.png")]) == 2
    err = capsys.readouterr().err
    assert (
        "the grid of 3200 prompts x 1 image would be at least 352 x 531206 pixels, more than Pillow opens"
        in err
    )
    assert "give fewer prompts (--max-prompts), seeds or models, or a smaller --cell" in err
    check_grid_pixels(3000, 1, 160)  # 352 x 498006, 175M pixels: taken
