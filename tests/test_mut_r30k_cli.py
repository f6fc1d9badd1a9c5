"""Mutation round 30k: the advice after a write cut short (imgalign/cli.py's ROOM_ADVICE) follows the errno."""

import errno

from imgalign.cli import main


def test_a_quota_is_told_as_a_full_disk_not_as_the_file_size_limit(monkeypatch, capsys):
    """EDQUOT (a disk quota) has no advice of its own: it gets a full disk's, not the file-size limit's."""
    import imgalign.commands.report as report

    def over_quota(args):
        raise OSError(errno.EDQUOT, "Disk quota exceeded", "rep/summary.md")

    monkeypatch.setattr(report, "run_report", over_quota)
    assert main(["report", "run", "--out", "rep"]) == 2
    assert capsys.readouterr().err == (
        "imgalign report: error: Disk quota exceeded while writing 'rep/summary.md': free disk space (or raise the "
        "file-size limit, ulimit -f); then run the same command again\n"
    )
