"""Round 23 mutation tests of imgalign/commands/rewards_cmd.py."""

import pytest

from imgalign.cli import main


@pytest.mark.parametrize(
    ("second", "said"),
    [
        ("clipp", "unknown reward 'clipp' (did you mean 'clip'?)"),
        (
            "artifact",
            "artifact does not read the prompt, so it scores an image the same under the true and the",
        ),
    ],
)
def test_check_refuses_a_mistyped_or_prompt_free_later_reward_before_the_first_loads(
    second: str, said: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rewards check --reward clip --reward clipp` (or a second reward that reads no prompt) loaded clip and scored
    every pair (minutes) before the second --reward was refused; every --reward is checked before the first loads."""
    import imgalign.rewards.base as base

    monkeypatch.setattr(base, "build_reward", lambda *a, **k: pytest.fail("a reward's model loaded"))
    monkeypatch.setattr(
        "imgalign.rewards.sanity.true_vs_corrupted", lambda *a, **k: pytest.fail("a check ran")
    )
    assert main(["rewards", "check", "--reward", "geneval", "--reward", second, "--n", "4"]) == 2
    out = capsys.readouterr()
    assert said in out.err and not out.out


def test_one_folder_spelt_with_a_trailing_slash_is_named_once(
    tmp_path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--clean d --artifact d/` names one path, so the refusal names it once, not as two names that lead alike."""
    from tests.conftest import noise_pngs

    monkeypatch.chdir(tmp_path)
    noise_pngs(tmp_path / "d", 2)
    assert (
        main(["rewards", "fit-artifact", "--clean", "d", "--artifact", "d/", "--out", "h.safetensors"]) == 2
    )
    assert "--clean and --artifact are the same folder ('d'): the head learns" in capsys.readouterr().err


def test_a_file_named_shapes_is_said_not_to_be_read(
    tmp_path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'shapes' with a file of that name in the working folder: the warning calls it a file, not a folder; the
    statistics of a folder record its images, not --n."""
    import logging

    from imgalign.rewards.fid import load_stats
    from tests.conftest import noise_pngs

    monkeypatch.chdir(tmp_path)
    (tmp_path / "shapes").write_text("my notes")
    argv = [
        "rewards",
        "fid-stats",
        "--images",
        "shapes",
        "--features",
        "stats",
        "--n",
        "4",
        "--out",
        "s.safetensors",
    ]
    with caplog.at_level(logging.WARNING, logger="imgalign.commands.rewards_cmd"):
        assert main(argv) == 0
    said = [r.getMessage() for r in caplog.records if r.name == "imgalign.commands.rewards_cmd"]
    assert said == [
        "--images 'shapes' means renders of the shapes world, not the file named 'shapes' in this folder; to read "
        "that, give it as ./shapes"
    ]
    noise_pngs(tmp_path / "gen", 3)
    argv = ["rewards", "fid-stats", "--images", "gen", "--features", "stats", "--out", "g.safetensors"]
    assert main(argv) == 0
    assert load_stats(tmp_path / "g.safetensors")[2] == 3


def test_fd_reads_a_stats_file_whatever_its_suffix(
    tmp_path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stats file is read as one by what it is, not by its name: ``--out ref.stats`` is compared, not called
    'not a folder'; its FD to the folder it was made of is 0."""
    from tests.conftest import noise_pngs

    monkeypatch.chdir(tmp_path)
    noise_pngs(tmp_path / "gen", 3)
    assert main(["rewards", "fid-stats", "--images", "gen", "--features", "stats", "--out", "ref.stats"]) == 0
    capsys.readouterr()
    assert main(["rewards", "fd", "ref.stats", "gen", "--features", "stats"]) == 0
    assert capsys.readouterr().out == "FD(ref.stats, gen) in stats features: 0\n"
