"""Names from a pod, checked before they become local paths."""

from __future__ import annotations

import pytest

from okc.errors import UnsafeRemote
from okc.pods.paths import checked_job_id, local_path_under


@pytest.mark.parametrize("job_id", ["../x", "..", "a/b", "/abs", "", "x" * 200, "-rf", "a b", 3, None, "ok..x"])
def test_checked_job_id_refuses(job_id):
    with pytest.raises(UnsafeRemote):
        checked_job_id(job_id)


def test_checked_job_id_accepts_job_ids():
    assert checked_job_id("20260101-120000-check-a1b2c3") == "20260101-120000-check-a1b2c3"


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "", "a\x00b", "a\nb", "a\\..\\b"])
def test_local_path_under_refuses(tmp_path, name):
    with pytest.raises(UnsafeRemote):
        local_path_under(tmp_path / "job", name)


def test_local_path_under_refuses_a_local_symlink_out(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "link").symlink_to(tmp_path)
    with pytest.raises(UnsafeRemote):
        local_path_under(job, "link/x")


def test_local_path_under_accepts_plain_names(tmp_path):
    job = tmp_path / "job"
    assert local_path_under(job, "candidate/000_baseline.py") == job / "candidate" / "000_baseline.py"
    assert local_path_under(job, "log.txt") == job / "log.txt"
