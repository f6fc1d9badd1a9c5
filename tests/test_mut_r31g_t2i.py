"""Round 31g mutants of imgalign/pretrain/t2i.py: lr_at stays at the floor past the last step; the autoencoder's
mixing term; a failed autoencoder save (round 31g's note)."""

import pytest
import torch

from imgalign.pretrain import t2i


def test_lr_at_stays_at_the_floor_past_the_last_step_and_does_not_rise_again() -> None:
    floor = t2i.LR_FLOOR
    for step in (100, 150, 190, 1000):
        assert t2i.lr_at(step, 2.0, 10, 100) == pytest.approx(2.0 * floor)


def test_the_mixing_step_decodes_a_blend_of_two_samples_latents_not_the_latents_themselves(
    tmp_path, monkeypatch
) -> None:
    """vae_mix decodes a·z + (1 - a)·z[perm] against the blended renders: decoding z itself trained the decoder to
    turn one render's latent into a blend of two."""
    from diffusers import AutoencoderKL
    from test_t2i import _renders, tiny_config

    inputs, real = [], AutoencoderKL.decode
    monkeypatch.setattr(
        AutoencoderKL,
        "decode",
        lambda self, z, *a, **kw: inputs.append(z.detach().clone()) or real(self, z, *a, **kw),
    )
    torch.manual_seed(0)
    t2i.train_vae(tiny_config(vae_steps=1, vae_mix=1.0, vae_noise=0.0), tmp_path, _renders(), False)
    z, mixed = inputs[0], inputs[1]  # the step's reconstruction, then its mixing term
    assert mixed.shape == z.shape
    assert not torch.allclose(mixed, z)
    # each blended latent lies between the smallest and largest latent of the batch, value by value
    assert (mixed >= z.amin(0) - 1e-5).all() and (mixed <= z.amax(0) + 1e-5).all()


def test_a_failed_autoencoder_save_leaves_no_vae_tmp(tmp_path, monkeypatch) -> None:
    """The autoencoder is saved into WORK/vae.tmp and moved into place; a save cut short (a full disk) left vae.tmp
    behind until the next run. It goes with the failure, which names the folder (as the model exports do)."""
    import errno

    from diffusers import AutoencoderKL
    from test_t2i import _renders, tiny_config

    def full(self, folder, *a, **kw):
        (folder / "partial.bin").parent.mkdir(parents=True, exist_ok=True)
        (folder / "partial.bin").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(AutoencoderKL, "save_pretrained", full)
    with pytest.raises(OSError, match="vae"):
        t2i.train_vae(tiny_config(vae_steps=1), tmp_path, _renders(), False)
    assert not (tmp_path / "vae.tmp").exists() and not (tmp_path / "vae").exists()
