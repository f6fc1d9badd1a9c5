"""Rewards: one contract (:mod:`imgalign.rewards.base`), picked by name.

==================  ==========================================================================================
name                what (module)
==================  ==========================================================================================
``clip``            CLIPScore 2.5·max(cos, 0) with any open_clip model; default the shapes CLIP (``clip``)
``vlm_loglik``      mean log p(prompt | image) under a frozen VLM, EOS/end-of-turn masked (``vlm``)
``discriminator``   real-vs-generated logit on frozen features; fitted (DRL) or online (Adv-GRPO); clipped
                    linear option (IRRL) (``discriminator``)
``artifact``        log p(clean | image) from a light classifier; default the shipped shapes model (``artifact``)
``fid``             Fréchet-distance subset-replace reward, per sample or per group, exact or fast (``fid``)
``geneval``         the GenEval judge on the shapes detector, strict or partial (``geneval``)
==================  ==========================================================================================

Frozen feature encoders shared by discriminator / artifact / fid: :mod:`imgalign.rewards.features`.
Command line: ``imgalign score`` and ``imgalign rewards list|fit-discriminator|fit-artifact|fd|fid-stats|check``.
"""

from imgalign.rewards.base import Reward, RewardOutput, build_reward, list_rewards, parse_reward_spec

__all__ = ["Reward", "RewardOutput", "build_reward", "list_rewards", "parse_reward_spec"]
