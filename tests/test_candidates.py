import hashlib

import pytest

from okc.lab.candidates import discover, parse_name, resolve
from okc.errors import CandidateError


def write(path, text="def prepare(w):\n    pass\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("ref", ["36", "036", "036_c10_vector", "036_c10_vector.py", "candidates/036_c10_vector.py"])
def test_resolve_by_number_name_or_path(lab, ref):
    write(lab.candidates / "036_c10_vector.py")
    assert resolve(lab.candidates, ref).name == "036_c10_vector"


def test_resolve_absolute_path(lab):
    path = write(lab.candidates / "036_c10_vector.py")
    assert resolve(lab.candidates, str(path.resolve())).number == 36


def test_folder_candidate_hash_covers_every_file(lab):
    folder = lab.candidates / "007_split"
    write(folder / "submission.py")
    write(folder / "helpers" / "tables.py", "A = 1\n")
    write(folder / "__pycache__" / "x.pyc", "junk")
    candidate = resolve(lab.candidates, "7")
    assert candidate.is_folder and candidate.entry.name == "submission.py"
    before = candidate.sha256()
    (folder / "__pycache__" / "x.pyc").write_text("other junk")
    assert candidate.sha256() == before  # caches are not part of the candidate
    (folder / "helpers" / "tables.py").write_text("A = 2\n")
    assert candidate.sha256() != before


def test_file_hash_is_the_plain_sha256_of_its_bytes(lab):
    path = write(lab.candidates / "001_x.py", "print('hi')\n")
    assert resolve(lab.candidates, "1").sha256() == hashlib.sha256(path.read_bytes()).hexdigest()


def test_folder_hash_is_stable_across_locations(tmp_path):
    for root in (tmp_path / "a", tmp_path / "b"):
        write(root / "005_f" / "submission.py")
        write(root / "005_f" / "k.py", "K = 3\n")
    assert parse_name(tmp_path / "a" / "005_f").sha256() == parse_name(tmp_path / "b" / "005_f").sha256()


@pytest.mark.parametrize(
    "files, message",
    [
        (["036_a.py", "036_b.py"], "two candidates have number 036"),
        (["36_short.py"], "NNN_slug"),
        (["abc.py"], "NNN_slug"),
    ],
)
def test_bad_candidates_folder_is_refused(lab, files, message):
    for name in files:
        write(lab.candidates / name)
    with pytest.raises(CandidateError, match=message):
        discover(lab.candidates)


def test_folder_without_submission_is_refused(lab):
    (lab.candidates / "009_empty").mkdir()
    with pytest.raises(CandidateError, match="submission.py"):
        discover(lab.candidates)


def test_missing_candidate(lab):
    with pytest.raises(CandidateError, match="no candidate 042"):
        resolve(lab.candidates, "42")


def test_non_python_files_are_ignored(lab):
    write(lab.candidates / "README.md", "notes")
    assert [c.number for c in discover(lab.candidates)] == [0]


def test_the_labs_baseline_is_the_problems_reference_baseline():
    # The harness scripts time the problem's baseline, the CLI times candidates/000: they must not drift.
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    lab_copy = (repo / "candidates" / "000_baseline.py").read_bytes()
    assert lab_copy == (repo / "okc" / "problems" / "muse_bf16_proj" / "baseline.py").read_bytes()
