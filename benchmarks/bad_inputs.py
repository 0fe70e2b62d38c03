"""Replay a catalogue of bad inputs against okc and count what still goes wrong (issue 24).

Each input runs in a fresh lab made by `okc init` (tiny_matvec unless it says muse), through the
CLI in this process (typer's CliRunner: what a terminal would see, without a process start per
input). For each it records the exit code, whether a traceback escaped, how many lines the
answer took, and whether a refused input (exit 2) left a job folder behind. The target is 0
tracebacks, and every exit-2 answer one line with nothing written.

Usage: PYTHONPATH=. python3 benchmarks/bad_inputs.py [--only WORD] [--verbose]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from typer.testing import CliRunner  # noqa: E402

from okc.cli import app  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
Setup = Callable[[Path], None]


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    setup: Setup | None = None
    problem: str = "tiny_matvec"
    codes: tuple[int, ...] = (2,)  # acceptable exit codes
    no_find_torch: bool = False  # importlib can't find torch: a machine without it
    dev_full: bool = False  # stdout is /dev/full (run as a process)


@dataclass
class Outcome:
    case: Case
    code: int | None
    traceback: bool
    lines: int
    left_jobs: int
    output: str = field(repr=False, default="")
    seconds: float = 0.0
    no_json: bool = False  # asked for JSON (--json) and stdout is not one JSON document

    @property
    def bad(self) -> list[str]:
        why = []
        if self.traceback:
            why.append("traceback")
        if self.code not in self.case.codes:
            why.append(f"exit {self.code}, wanted {'/'.join(map(str, self.case.codes))}")
        if self.code == 2 and self.lines != 1:
            why.append(f"{self.lines} lines")
        if self.code == 2 and self.left_jobs:
            why.append(f"{self.left_jobs} job folder(s) left")
        if self.no_json:
            why.append("--json without a JSON document")
        return why


# -- setups ---------------------------------------------------------------------------------


def write(rel: str, text: str = "X = 1\n") -> Setup:
    def setup(root: Path) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return setup


def copy_candidate(name: str, source: str = "001_matmul.py") -> Setup:
    return lambda root: shutil.copy(root / "candidates" / source, root / "candidates" / name)


def both(*setups: Setup) -> Setup:
    def setup(root: Path) -> None:
        for one in setups:
            one(root)
    return setup


def settings(line: str) -> Setup:
    def setup(root: Path) -> None:
        path = root / "pyproject.toml"
        key = line.split("=")[0].strip()
        kept = [row for row in path.read_text().splitlines() if not row.startswith(f"{key} =")]
        path.write_text("\n".join(kept).replace("\n[tool.okc]\n", f"\n[tool.okc]\n{line}\n") + "\n")
    return setup


def sweep(name: str, old: str, new: str) -> Setup:
    def setup(root: Path) -> None:
        text = (root / "experiments" / "tiny_demo.yaml").read_text()
        lines = [(new if row.strip().startswith(old) else row) for row in text.splitlines()]
        (root / "experiments" / f"{name}.yaml").write_text("\n".join(lines) + "\n")
    return setup


def ledger_with(sql: str) -> Setup:
    def setup(root: Path) -> None:
        from okc.lab.ledger import open_ledger

        conn = open_ledger(root / "results" / "ledger.db")
        conn.execute("INSERT INTO runs (candidate_number, candidate_name, candidate_sha256, kind, status, "
                     "created_at, job_id) VALUES (1, '001_matmul', 'x', 'check', 'pass', 'now', 'j1')")
        conn.executescript(sql)
        conn.close()
    return setup


def damaged_ledger(offset: int, size: int = 4096) -> Setup:
    def setup(root: Path) -> None:
        from okc.lab.ledger import open_ledger

        conn = open_ledger(root / "results" / "ledger.db")
        for i in range(200):  # rows enough that page 4 (offset 12288) holds some of them
            conn.execute("INSERT INTO runs (candidate_number, candidate_name, candidate_sha256, kind, status, "
                         "created_at, job_id, note) VALUES (1, '001_matmul', 'x', 'check', 'pass', 'now', ?, ?)",
                         (f"job{i}", "n" * 100))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        with open(root / "results" / "ledger.db", "r+b") as handle:
            handle.seek(offset)
            handle.write(b"\xa5" * size)
    return setup


def symlink(name: str, target: str) -> Setup:
    return lambda root: (root / "candidates" / name).symlink_to(target)


# -- the catalogue ------------------------------------------------------------------------------

BAD_YAML_SHAPE = sweep("bad_shape", "shapes:", "shapes: [nosuch/m=1]")

CASES: list[Case] = [
    # 1-4: a ledger that cannot take or give results
    Case("1 damaged ledger: okc ledger", ("ledger",), damaged_ledger(12288)),
    Case("1 damaged ledger: okc ledger --json", ("ledger", "--json"), damaged_ledger(12288)),
    Case("1 damaged ledger: okc ledger --calibration", ("ledger", "--calibration"), damaged_ledger(12288)),
    Case("1 damaged ledger: okc record", ("record", "001", "--official", "scored", "--score", "1.2", "--ci", "1.1:1.3",
                                          "--job", "j"), damaged_ledger(12288)),
    Case("1 damaged ledger: okc plot", ("plot",), damaged_ledger(12288)),
    Case("1 damaged ledger: okc cost", ("cost",), damaged_ledger(12288), codes=(0, 2)),  # costs may be intact
    Case("1 damaged ledger header", ("ledger",), damaged_ledger(0, 100)),
    Case("1 not a database", ("ledger",), write("results/ledger.db", "not a database" * 300)),
    Case("1 damaged ledger: --rebuild", ("ledger", "--rebuild"), damaged_ledger(12288), codes=(0,)),
    Case("4 score 'abc'", ("ledger",), ledger_with("DROP TRIGGER runs_append_only; UPDATE runs SET score = 'abc'")),
    Case("4 score 'abc' --json", ("ledger", "--json"),
         ledger_with("DROP TRIGGER runs_append_only; UPDATE runs SET score = 'abc'")),
    Case("4 speedups not JSON", ("ledger", "--calibration"),
         ledger_with("DROP TRIGGER runs_append_only; UPDATE runs SET speedups = '{', kind = 'bench', score = 1.0")),
    Case("4 a table dropped", ("ledger",), ledger_with("DROP TABLE floors")),
    Case("3 okc ledger > /dev/full", ("ledger",), dev_full=True),
    Case("3 okc ledger --json > /dev/full", ("ledger", "--json"), dev_full=True),
    # 5-8: cannot run here, found before a job folder exists
    Case("5 muse bench on a CPU", ("bench", "001"), problem="muse_bf16_proj"),
    Case("5 muse bench --aa on a CPU", ("bench", "000", "--aa"), problem="muse_bf16_proj"),
    Case("5 muse floor on a CPU", ("floor",), problem="muse_bf16_proj"),
    Case("5 muse sweep on a CPU", ("sweep", "gemv_decode"), problem="muse_bf16_proj"),
    Case("6 no torch: check", ("check", "001"), no_find_torch=True),
    Case("6 no torch: bench", ("bench", "001"), no_find_torch=True),
    Case("6 no torch: sweep", ("sweep", "tiny_demo"), no_find_torch=True),
    Case("6 no torch: floor", ("floor",), no_find_torch=True),
    Case("7 --overhead-us 1e9", ("bench", "001", "--overhead-us", "1e9")),
    Case("7 --overhead-us 1000", ("bench", "001", "--overhead-us", "1000")),
    Case("7 --overhead-us -1", ("bench", "001", "--overhead-us", "-1")),
    Case("7 --overhead-us nan", ("bench", "001", "--overhead-us", "nan")),
    Case("8 sweep shape nosuch/m=1", ("sweep", "bad_shape"), BAD_YAML_SHAPE),
    Case("8 sweep shape not a key", ("sweep", "bad_key"), sweep("bad_key", "shapes:", "shapes: [nope]")),
    Case("8 sweep grid not a list", ("sweep", "bad_grid"), sweep("bad_grid", "CHUNK:", "  CHUNK: 5")),
    Case("8 sweep not YAML", ("sweep", "broken"), write("experiments/broken.yaml", "a: [1,\n")),
    Case("8 sweep unknown", ("sweep", "nosuch"),),
    # 11: a candidate against itself
    Case("11 bench 001 --against 001", ("bench", "001", "--against", "001")),
    Case("11 bench 000 (the baseline, no --aa)", ("bench", "000")),
    Case("11 bench --aa --against", ("bench", "001", "--aa", "--against", "000")),
    # 12-13: stray files in candidates/
    Case("12 helpers.py: ledger", ("ledger",), write("candidates/helpers.py"), codes=(0,)),
    Case("12 a name with a space", ("ledger",), write("candidates/015_with space.py"), codes=(0,)),
    Case("12 a unicode name", ("ledger",), write("candidates/016_ünïcödé.py"), codes=(0,)),
    Case("12 a folder without submission.py", ("ledger",), lambda root: (root / "candidates" / "017_f").mkdir(),
         codes=(0,)),
    Case("12 two files numbered 014: ledger", ("ledger",), both(copy_candidate("014_a.py"), copy_candidate("014_b.py")),
         codes=(0,)),
    Case("12 two files numbered 014: check 014", ("check", "014"),
         both(copy_candidate("014_a.py"), copy_candidate("014_b.py"))),
    Case("12 check helpers.py", ("check", "helpers.py"), write("candidates/helpers.py")),
    Case("13 symlink to /etc/passwd", ("check", "025"), symlink("025_x.py", "/etc/passwd")),
    Case("13 symlink to /etc/passwd by path", ("check", "candidates/025_x.py"), symlink("025_x.py", "/etc/passwd")),
    Case("13 a dangling symlink", ("check", "026"), symlink("026_x.py", "/nonexistent/x.py")),
    # 15-16: attach and pull of jobs that are not there
    Case("16 attach a job that is not there", ("attach", "20260101-000000-check-abcdef", "--on", "local")),
    Case("16 attach not a job id", ("attach", "../etc", "--on", "local")),
    Case("16 pull not a job id", ("pull", "../x", "--on", "local")),
    Case("16 logs of nothing", ("logs", "20260101-000000-check-abcdef", "--on", "local")),
    # 19: click's usage errors
    Case("19 check -1", ("check", "-1")),
    Case("19 --target abc", ("bench", "001", "--target", "abc")),
    Case("19 --min-pairs x", ("bench", "001", "--min-pairs", "x")),
    Case("19 --seed 1.5", ("check", "001", "--seed", "1.5")),
    Case("19 check without a candidate", ("check",)),
    Case("19 record without options", ("record", "001")),
    Case("19 an unknown command", ("nosuch",)),
    Case("19 an unknown option", ("ledger", "--bogus")),
    Case("19 report --job without a value", ("report", "--job")),
    Case("19 init without a folder", ("init",)),
    Case("19 sweep without a name", ("sweep",)),
    Case("19 plot --nope", ("plot", "--nope")),
    Case("19 --on a pod without pod.yaml", ("check", "001", "--on", "h200")),
    Case("19 check two candidates", ("check", "001", "002")),
    Case("19 --format xml", ("ledger", "--format", "xml")),
    Case("19 --json and --nl", ("ledger", "--json", "--nl")),
    Case("19 --cases nope/m=1", ("check", "001", "--cases", "nope/m=1")),
    Case("19 --device tpu", ("check", "001", "--device", "tpu")),
    Case("19 --seed -1", ("check", "001", "--seed", "-1")),
    Case("19 record a bad CI", ("record", "001", "--official", "scored", "--score", "1.2", "--ci", "x", "--job", "j")),
    Case("19 record a score outside its CI", ("record", "001", "--official", "scored", "--score", "2", "--ci",
                                              "1.1:1.3", "--job", "j")),
    Case("19 record a missing table", ("record", "001", "--official", "scored", "--score", "1.2", "--ci", "1.1:1.3",
                                       "--job", "j", "--table", "/nonexistent.csv")),
    Case("19 ledger --sweep and --calibration", ("ledger", "--sweep", "tiny_demo", "--calibration")),
    Case("19 ledger --rebuild and --calibration", ("ledger", "--rebuild", "--calibration")),
    # 20: completion
    Case("20 --show-completion tcsh", ("--show-completion", "tcsh")),
    Case("20 --show-completion zsh", ("--show-completion", "zsh"), codes=(0,)),
    # 21-22: init and [tool.okc]
    Case("21 init into a lab", ("init", ".")),
    Case("22 results_dir ../../escape", ("ledger",), settings('results_dir = "../../escape"')),
    Case("22 job_timeout_s = 1e400", ("ledger",), settings("job_timeout_s = 1e400")),
    Case("22 job_timeout_s = 0", ("ledger",), settings("job_timeout_s = 0")),
    Case("22 prepare_timeout_s = nan", ("ledger",), settings("prepare_timeout_s = nan")),
    Case("22 baseline = '999'", ("ledger",), settings('baseline = "999"')),
    Case("22 problem = 'nosuch'", ("ledger",), settings('problem = "nosuch"')),
    Case("22 an unknown setting", ("ledger",), settings('colour = "red"')),
    Case("22 pyproject.toml not TOML", ("ledger",), write("pyproject.toml", "[tool.okc\n")),
    Case("22 candidates folder gone", ("ledger",), lambda root: shutil.rmtree(root / "candidates")),
    # issue 34: a candidate's own failure is exit 1 with its line; refusals before any trace; true words
    Case("34 check: raises at import", ("check", "010", "--quick"),
         write("candidates/010_raises.py", "def f():\n    raise RuntimeError('boom')\n\nf()\n"), codes=(1,)),
    Case("34 check: an empty file", ("check", "012", "--quick"), write("candidates/012_empty.py", ""), codes=(1,)),
    Case("34 check: no kernel_fn", ("check", "013", "--quick"),
         write("candidates/013_nokfn.py", "def prepare(weights):\n    pass\n"), codes=(1,)),
    Case("34 check: os._exit at import", ("check", "014", "--quick"),
         write("candidates/014_exit.py", "import os\nos._exit(0)\n"), codes=(1,)),
    Case("34 bench --json of a failing candidate", ("bench", "010", "--json"),
         write("candidates/010_raises.py", "raise RuntimeError('boom')\n"), codes=(1,)),
    Case("34 profile --json of a failing candidate", ("profile", "010", "--json"),
         write("candidates/010_raises.py", "raise RuntimeError('boom')\n"), codes=(1,)),
    Case("34 muse profile on a CPU", ("profile", "001"), problem="muse_bf16_proj"),
    Case("34 init ''", ("init", "")),
    Case("34 report 999", ("report", "999")),
    Case("34 --quick --cases proj/m=500", ("check", "001", "--quick", "--cases", "proj/m=500")),
    Case("34 --cases ,", ("check", "001", "--cases", ",")),
    Case("34 pod stop an SSH-only pod", ("pod", "stop", "lo"),
         write("pod.yaml", "pods:\n  lo: {host: 127.0.0.1, port: 22, user: root, remote_dir: /tmp/okc}\n")),
    Case("34 sync without pod.yaml", ("sync",)),
    Case("34 pod status without pod.yaml", ("pod", "status")),
    Case("34 pod up without pod.yaml", ("pod", "up", "h200")),
    Case("34 pod create --volume-gb 5", ("pod", "create", "x", "--volume-gb", "5")),
]


# -- running ------------------------------------------------------------------------------------


@contextmanager
def torch_hidden(hide: bool):
    real = importlib.util.find_spec
    if hide:
        importlib.util.find_spec = lambda name, *a: None if name == "torch" else real(name, *a)
    try:
        yield
    finally:
        importlib.util.find_spec = real


def make_lab(base: Path, problem: str) -> Path:
    root = base / "lab"
    result = CliRunner().invoke(app, ["init", str(root), "--problem", problem])
    assert result.exit_code == 0, result.output
    return root


def job_count(root: Path) -> int:
    results = root / "results"
    if not results.is_dir():
        return 0
    return sum(1 for p in results.iterdir() if p.is_dir() and p.name[:8].isdigit())


def okc_traceback(output: str) -> bool:
    """A traceback through okc's own code. A candidate's traceback (its own frames, which okc shows
    since issue 34) is the answer, not a crash."""
    return "Traceback" in output and f'File "{REPO / "okc"}' in output


def json_document(stdout: str):
    import json

    try:
        return json.loads(stdout)
    except ValueError:
        return None


def run_case(case: Case) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="okc-bad-") as tmp:
        root = make_lab(Path(tmp), case.problem)
        os.environ["OKC_LAB"] = str(root)
        old_cwd = os.getcwd()
        os.chdir(root)
        try:
            if case.setup is not None:
                case.setup(root)
            before = job_count(root)
            started = time.monotonic()
            no_json = False
            if case.dev_full:
                with open("/dev/full", "w") as full:
                    done = subprocess.run([sys.executable, "-m", "okc", *case.args], stdout=full,
                                          stderr=subprocess.PIPE, text=True, cwd=root,
                                          env={**os.environ, "PYTHONPATH": str(REPO)})
                output, code = done.stderr, done.returncode
                escaped = "Traceback" in output
            else:
                with torch_hidden(case.no_find_torch):
                    result = CliRunner().invoke(app, list(case.args), prog_name="okc")
                output, code = result.output, result.exit_code
                escaped = result.exception is not None and not isinstance(result.exception, SystemExit)
                if escaped:
                    output += "".join(traceback.format_exception(result.exception))
                escaped = escaped or okc_traceback(output)
                document = json_document(result.stdout)
                if document is not None:  # a script's answer (issue 34): the document, and one red line on stderr
                    output = result.stderr
                # two formats at once choose none: then the red line alone is the answer
                one_format = not {"--nl", "--csv", "--format", "--markdown"} & set(case.args)
                no_json = "--json" in case.args and one_format and document is None
            seconds = time.monotonic() - started
            return Outcome(case, code, escaped, len(output.strip().splitlines()), job_count(root) - before,
                           output, seconds, no_json)
        finally:
            os.chdir(old_cwd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the cases whose name contains this")
    parser.add_argument("--verbose", action="store_true", help="print every answer")
    options = parser.parse_args()
    cases = [c for c in CASES if options.only is None or options.only in c.name]
    outcomes = []
    for case in cases:
        outcome = run_case(case)
        outcomes.append(outcome)
        mark = "BAD " + ", ".join(outcome.bad) if outcome.bad else "ok"
        first = (outcome.output.strip().splitlines() or [""])[0][:110]
        print(f"{outcome.code!s:>4} {outcome.seconds:5.1f}s  {case.name:45.45}  {mark}")
        if options.verbose or outcome.bad:
            print(f"        {first}")
    tracebacks = sum(o.traceback for o in outcomes)
    bad = sum(bool(o.bad) for o in outcomes)
    print(f"{len(outcomes)} bad inputs: {tracebacks} traceback(s), {bad} not answered as they should be")
    return 1 if tracebacks or bad else 0


if __name__ == "__main__":
    sys.exit(main())
