import hashlib

import pytest

from okc.errors import CandidateError
from okc.lab.candidates import discover, parse_name, resolve, scan


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


def test_two_files_with_one_number_refuse_only_that_number(lab):
    write(lab.candidates / "036_a.py")
    write(lab.candidates / "036_b.py")
    write(lab.candidates / "037_c.py")
    assert [c.number for c in discover(lab.candidates)] == [0, 37]  # the others still work
    with pytest.raises(CandidateError, match="two candidates have number 036: 036_a.py and 036_b.py"):
        resolve(lab.candidates, "36")
    assert resolve(lab.candidates, "37").name == "037_c"


@pytest.mark.parametrize("name", ["36_short.py", "abc.py", "helpers.py", "015_with space.py", "016_ünïcödé.py"])
def test_files_not_named_as_candidates_are_ignored_with_a_note(lab, name):
    write(lab.candidates / name)
    found = scan(lab.candidates)
    assert [c.number for c in found.candidates] == [0]
    assert [note.startswith(repr(name)) for note in found.ignored] == [True]


def test_folder_without_submission_is_ignored_with_a_note(lab):
    (lab.candidates / "009_empty").mkdir()
    found = scan(lab.candidates)
    assert [c.number for c in found.candidates] == [0] and "without submission.py" in found.ignored[0]


def test_a_number_whose_folder_lacks_its_submission_says_so(lab):
    """`okc check 9` with candidates/009_fast/submision.py (a typo) said "no candidate 009": its folder is there
    (a bad-luck pass, 2026-12-07)."""
    write(lab.candidates / "009_fast" / "submision.py")
    with pytest.raises(CandidateError, match="no candidate 009 in .*: '009_fast': a folder without submission.py"):
        resolve(lab.candidates, "9")


def test_a_symlink_out_of_the_lab_is_refused(lab):
    (lab.candidates / "025_x.py").symlink_to("/etc/passwd")
    with pytest.raises(CandidateError, match="025_x.py is a symlink to /etc/passwd, outside the lab"):
        resolve(lab.candidates, "25")
    with pytest.raises(CandidateError, match="outside the lab"):
        resolve(lab.candidates, "candidates/025_x.py")
    assert [c.number for c in discover(lab.candidates)] == [0]


def test_a_folder_candidate_with_a_link_out_is_refused(lab, tmp_path):
    folder = lab.candidates / "026_f"
    write(folder / "submission.py")
    (folder / "k.py").symlink_to(write(tmp_path / "elsewhere.py"))
    with pytest.raises(CandidateError, match="k.py is a symlink"):
        resolve(lab.candidates, "26")


def test_a_symlink_inside_the_lab_is_the_file_it_names(lab):
    shared = write(lab.root / "shared" / "kernel.py", "K = 1\n")
    (lab.candidates / "027_linked.py").symlink_to(shared)
    candidate = resolve(lab.candidates, "27")
    assert candidate.sha256() == hashlib.sha256(shared.read_bytes()).hexdigest()


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


def test_a_name_longer_than_a_job_can_carry_is_refused_before_any_job(lab):
    """A 244-character name was listed, then failed inside the worker ("job.json.candidate.name must be text of at
    most 200 characters"), and left job folders that `okc pull` could never take (a bad-luck pass, 2026-12-07)."""
    write(lab.candidates / f"003_{'x' * 240}.py")
    write(lab.candidates / f"004_{'y' * 196}.py")  # 200 exactly: fine
    assert [c.number for c in discover(lab.candidates)] == [0, 4]
    with pytest.raises(CandidateError, match="at most 200 characters, this one has 244; rename it"):
        resolve(lab.candidates, "3")
