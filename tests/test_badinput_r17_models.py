"""Bad-input round 17: `imgalign score`, `grid`, `rewards` and `eval --suite geneval` with users' own real-architecture
model folders (open_clip, DINOv2, VLMs, detectors) that are damaged, of another kind, or given odd settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from geneval_real_tiny import build_tiny_detr
from test_rewards_tiny import make_tiny_dinov2, make_tiny_open_clip, make_tiny_qwen2_vl

from imgalign.cli import main

torch.set_num_threads(1)


def _cut(file: Path) -> Path:
    """Keep the first half of `file`, as a copy or download cut short leaves it."""
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])
    return file


def test_a_cut_weights_file_is_named_by_every_model_loader_of_the_rewards_and_the_judge(
    tmp_path: Path,
) -> None:
    """A model folder whose .safetensors file a copy or download cut short failed with safetensors' traceback
    ("SafetensorError: Error while deserializing header: incomplete metadata"), naming neither the file nor the
    model: the clip reward and open_clip features, the dinov2 features, the vlm_loglik reward and the geneval
    suite's detector. Each names the model and the file now (the judge before any image is generated)."""
    from imgalign.eval.real import check_judge_specs
    from imgalign.rewards.clip import load_open_clip
    from imgalign.rewards.features import build_features
    from imgalign.rewards.vlm import load_vlm

    cpu, f32 = torch.device("cpu"), torch.float32
    clip = make_tiny_open_clip(tmp_path / "clip")
    cut_clip = _cut(clip / "open_clip_model.safetensors")
    with pytest.raises(ValueError, match=f"'local-dir:{clip}': its weights file '{cut_clip}' is damaged"):
        load_open_clip(str(clip), cpu, f32)
    with pytest.raises(ValueError, match=f"its weights file '{cut_clip}' is damaged"):  # as a checkpoint file
        load_open_clip("ViT-B-32", cpu, f32, pretrained=str(cut_clip))
    dino = make_tiny_dinov2(tmp_path / "dino")
    cut_dino = _cut(dino / "model.safetensors")
    with pytest.raises(
        ValueError, match=f"feature encoder 'dinov2:{dino}': its weights file '{cut_dino}' is damaged"
    ):
        build_features(f"dinov2:{dino}")
    (tmp_path / "vlm").mkdir()
    cut_vlm = _cut(cut_dino.rename(tmp_path / "vlm" / "model.safetensors"))
    with pytest.raises(
        ValueError, match=f"vlm_loglik model '{tmp_path / 'vlm'}': its weights file '{cut_vlm}'"
    ):
        load_vlm(str(tmp_path / "vlm"), cpu, f32)
    good_detr, good_clip = build_tiny_detr(tmp_path / "detr"), make_tiny_open_clip(tmp_path / "clip2")
    with pytest.raises(ValueError, match=f"its weights file '{cut_clip}' is damaged"):
        check_judge_specs(str(good_detr), str(clip))
    cut_detr = _cut(good_detr / "model.safetensors")
    with pytest.raises(ValueError, match=f"detector '{good_detr}': its weights file '{cut_detr}' is damaged"):
        check_judge_specs(str(good_detr), str(good_clip))


def test_score_with_a_clip_folder_whose_weights_are_empty_is_one_error_line(tmp_path: Path, capsys) -> None:
    """`imgalign score --reward clip:model=FOLDER` whose weights file is empty: exit status 2 and one line naming the
    file, not a traceback; no output file."""
    from PIL import Image

    clip = make_tiny_open_clip(tmp_path / "clip")
    (clip / "open_clip_model.safetensors").write_bytes(b"")
    Image.new("RGB", (32, 32), "red").save(tmp_path / "a.png")
    (tmp_path / "p.jsonl").write_text('{"file": "a.png", "prompt": "a red square"}\n')
    out = tmp_path / "s.jsonl"
    argv = [
        "score",
        str(tmp_path / "a.png"),
        "--reward",
        f"clip:model={clip}",
        "--prompts",
        str(tmp_path / "p.jsonl"),
    ]
    assert main(argv + ["--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"its weights file '{clip / 'open_clip_model.safetensors'}' is damaged" in err
    assert not out.exists()


def test_the_dinov2_encoder_refuses_a_model_of_another_kind_and_takes_other_dino_vits(tmp_path: Path) -> None:
    """`--features dinov2:FOLDER` of an object detector (DETR) gave an FD from its first decoder query taken for a CLS
    token, silently; of a CLIP or a VLM folder it failed with "AttributeError: 'CLIPConfig' object has no attribute
    'hidden_size'". Both are refused by model type, before any weights load; a DINO v1 ViT (model type vit) loads."""
    from transformers import CLIPConfig, ViTConfig, ViTImageProcessor, ViTModel

    from imgalign.rewards.features import build_features

    detr = build_tiny_detr(tmp_path / "detr")
    with pytest.raises(
        ValueError, match=f"'dinov2:{detr}': '{detr}' holds a 'detr' model, not a DINOv2-style"
    ):
        build_features(f"dinov2:{detr}")
    CLIPConfig().save_pretrained(tmp_path / "clip")  # no weights needed: the type is read first
    with pytest.raises(ValueError, match="holds a 'clip' model, not a DINOv2-style image encoder"):
        build_features(f"dinov2:{tmp_path / 'clip'}")
    vit = ViTConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16
    )
    ViTModel(vit).save_pretrained(tmp_path / "vit")
    ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(tmp_path / "vit")
    assert build_features(f"dinov2:{tmp_path / 'vit'}")(torch.rand(2, 3, 20, 20)).shape == (2, 16)


def test_a_vlm_folder_without_its_tokenizer_file_is_refused_by_name_not_as_empty_prompts(
    tmp_path: Path,
) -> None:
    """transformers builds a tokenizer of special tokens only when a VLM folder lacks tokenizer.json; vlm_loglik then
    gave every image the error "a prompt produced no tokens to score (empty prompt?)". It is refused when built."""
    from imgalign.rewards.vlm import VLMLogLikReward

    folder = make_tiny_qwen2_vl(tmp_path / "qwen")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(
        ValueError, match=f"the tokenizer of '{folder}' turns text into no tokens: it has no vocab"
    ):
        VLMLogLikReward(model=str(folder))


def test_a_device_kind_this_pytorch_cannot_compute_on_is_refused_before_any_work() -> None:
    """--device mps on a machine without MPS: grid and eval --suite geneval failed with "RuntimeError: PyTorch is not
    linked with support for mps devices" once the model had loaded, and score blamed the model ("cannot load open_clip
    model ...: PyTorch is not linked ..."); --device meta gave every image "Cannot copy out of meta tensor"."""
    from imgalign.commands import check_device

    if not torch.backends.mps.is_available():
        with pytest.raises(
            ValueError, match="--device 'mps': this machine's PyTorch cannot compute on mps devices"
        ):
            check_device("mps")
    with pytest.raises(
        ValueError, match="--gpu 'meta': this machine's PyTorch cannot compute on meta devices"
    ):
        check_device("meta", flag="--gpu")
    check_device("cpu:0")


@pytest.mark.parametrize("key", ["text_cfg", "embed_dim"])
def test_an_open_clip_folder_whose_config_lacks_a_field_names_the_config(tmp_path: Path, key: str) -> None:
    """An open_clip_config.json without model_cfg.text_cfg gave "imgalign score: error: text_cfg" (open_clip's bare
    KeyError), and one without embed_dim "reward 'clip': bad options ['model']: CLIP.__init__() missing ..."; the
    clip reward and the geneval judge's CLIP both name the config file and the fields it needs."""
    import json

    from imgalign.eval.real import ClipColorClassifier
    from imgalign.rewards.clip import load_open_clip

    folder = make_tiny_open_clip(tmp_path / "clip")
    cfg = json.loads((folder / "open_clip_config.json").read_text())
    del cfg["model_cfg"][key]
    (folder / "open_clip_config.json").write_text(json.dumps(cfg))
    want = f"'local-dir:{folder}': the model_cfg of its open_clip_config.json is incomplete .*{key}"
    with pytest.raises(ValueError, match=want):
        load_open_clip(str(folder), torch.device("cpu"), torch.float32)
    with pytest.raises(ValueError, match=want):
        ClipColorClassifier(str(folder))


def test_a_head_or_stats_file_fitted_with_a_relative_model_folder_works_from_another_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """`fit-discriminator --features dinov2:m/dino` (and fid-stats) recorded the relative name; from another folder
    the head failed with "cannot load feature encoder 'dinov2:m/dino': its files are not in the local Hub cache" (a
    Hub id, read so), and `fd STATS ... --features dinov2:<the same folder spelt from there>` refused the stats as
    another encoder's. The folder is recorded absolute, and names of one folder compare equal."""
    from PIL import Image

    from imgalign.rewards.base import build_reward

    make_tiny_dinov2(tmp_path / "m" / "dino")
    for i in range(6):
        for cls, colour in (("real", (200, 30 * i, 0)), ("fake", (0, 30 * i, 200))):
            (tmp_path / cls).mkdir(exist_ok=True)
            Image.new("RGB", (32, 32), colour).save(tmp_path / cls / f"{i}.png")
    monkeypatch.chdir(tmp_path)
    fit = ["rewards", "fit-discriminator", "--real", "real", "--fake", "fake", "--features", "dinov2:m/dino"]
    assert main(fit + ["--out", "d.safetensors", "--epochs", "2"]) == 0
    assert (
        main(
            [
                "rewards",
                "fid-stats",
                "--images",
                "real",
                "--features",
                "dinov2:m/dino",
                "--out",
                "s.safetensors",
            ]
        )
        == 0
    )
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    monkeypatch.setattr("imgalign.rewards.features._CACHE", {})  # as a new process: no encoder built yet
    reward = build_reward(f"discriminator:head={tmp_path / 'd.safetensors'}")
    assert reward(torch.rand(2, 3, 32, 32), ["a", "b"], None).scores.shape == (2,)
    capsys.readouterr()
    fd = [
        "rewards",
        "fd",
        str(tmp_path / "s.safetensors"),
        str(tmp_path / "fake"),
        "--features",
        "dinov2:../m/dino",
    ]
    assert main(fd) == 0
    assert "FD(" in capsys.readouterr().out


def test_a_detector_folder_without_its_processor_or_weights_file_names_the_detector(tmp_path: Path) -> None:
    """--detector FOLDER without preprocessor_config.json (or without weights) printed transformers' own "Can't load
    image processor for 'FOLDER'. If you were trying to load it from 'https://huggingface.co/models' ...", naming no
    detector; it is said as the other loaders say it."""
    from imgalign.eval.real import HFDetector

    folder = build_tiny_detr(tmp_path / "detr")
    (folder / "preprocessor_config.json").unlink()
    with pytest.raises(
        FileNotFoundError, match=f"cannot load detector '{folder}': .*preprocessor_config.json"
    ):
        HFDetector(str(folder), classes=["cat"])
    (folder / "model.safetensors").unlink()
    with pytest.raises(
        FileNotFoundError, match=f"cannot load detector '{folder}': .*no file named model.safetensors"
    ):
        HFDetector(str(folder), classes=["cat"])
