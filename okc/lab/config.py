"""The lab: the repository okc works in, found from the working directory upward.

A lab is a folder whose pyproject.toml has a ``[tool.okc]`` table. Its settings are
parsed once into a frozen :class:`Lab`.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from okc.contract import LEDGER_FILE
from okc.errors import ConfigError
from okc.podfiles import is_numeric
from okc.problems import catalog, gpumode

LAB_ENV = "OKC_LAB"  # points okc at a lab explicitly (scripts, tests)
DEFAULT_PREPARE_TIMEOUT_S = 300.0
DEFAULT_JOB_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week: longer is a typo (1e400 is infinity), and the launcher's clock must hold it


@dataclass(frozen=True)
class Lab:
    root: Path
    problem: str = "muse_bf16_proj"
    baseline: str = "000"
    candidates_dir: str = "candidates"
    experiments_dir: str = "experiments"
    results_dir: str = "results"
    prepare_timeout_s: float = DEFAULT_PREPARE_TIMEOUT_S
    job_timeout_s: float = DEFAULT_JOB_TIMEOUT_S

    def __post_init__(self) -> None:
        for name in ("prepare_timeout_s", "job_timeout_s"):
            value = getattr(self, name)
            if not is_numeric(value) or not 0 < value <= MAX_TIMEOUT_S:
                raise ConfigError(f"[tool.okc] {name} must be a number of seconds above 0 and at most "
                                  f"{MAX_TIMEOUT_S:.0f} (a week), got {value!r}")
        for name in ("problem", "baseline", "candidates_dir", "experiments_dir", "results_dir"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip() or "\0" in value:
                raise ConfigError(f"[tool.okc] {name} must be a non-empty string, got {value!r}")
        for name in ("candidates_dir", "experiments_dir", "results_dir"):
            # A relative folder is the lab's: one that climbs out ("../../x") would write a ledger into
            # another folder or lab by accident. An absolute path (results on a bigger disk) is a choice.
            if Path(getattr(self, name)).is_absolute():
                continue
            inside = (self.root / getattr(self, name)).resolve()
            if inside != self.root.resolve() and self.root.resolve() not in inside.parents:
                raise ConfigError(f"[tool.okc] {name} = {getattr(self, name)!r} leads outside the lab ({inside}); "
                                  "use a folder inside it")
        if gpumode.is_gpumode(self.problem):
            if not self.problem[len(gpumode.PREFIX):].strip():
                raise ConfigError('[tool.okc] problem "gpumode:" needs the path of a GPU MODE problem folder')
        elif "." not in self.problem and catalog.shapes_of(self.problem) is None:
            raise ConfigError(f"[tool.okc] problem {self.problem!r} is not built in ({', '.join(catalog.BUILT_IN)}); "
                              "a problem of your own is named by its dotted module path, a GPU MODE folder as gpumode:PATH")

    @property
    def candidates(self) -> Path:
        return self.root / self.candidates_dir

    @property
    def experiments(self) -> Path:
        return self.root / self.experiments_dir

    @property
    def results(self) -> Path:
        return self.root / self.results_dir

    @property
    def ledger_path(self) -> Path:
        return self.results / LEDGER_FILE

    @property
    def pod_file(self) -> Path:
        return self.root / "pod.yaml"


def find_lab(start: Path | None = None) -> Lab:
    """The lab containing ``start`` (default: $OKC_LAB, else the working directory)."""
    if start is None:
        start = Path(os.environ.get(LAB_ENV) or Path.cwd())
    start = start.resolve()
    for folder in (start, *start.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            settings = _okc_table(pyproject)
            if settings is not None:
                return load_lab(folder, settings)
    raise ConfigError(f"no okc lab here: no pyproject.toml with a [tool.okc] table in {start} or above")


def _okc_table(pyproject: Path) -> dict | None:
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{pyproject}: not valid TOML ({exc})") from None
    return data.get("tool", {}).get("okc")


def load_lab(root: Path, settings: dict, check_baseline: bool = True) -> Lab:
    if not isinstance(settings, dict):
        raise ConfigError(f"{root / 'pyproject.toml'}: [tool.okc] must be a table")
    known = {f for f in Lab.__dataclass_fields__ if f != "root"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ConfigError(f"[tool.okc] has unknown setting(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    lab = Lab(root=root, **settings)
    if check_baseline:  # okc init checks its settings before it writes the baseline
        _check_baseline(lab)
    return lab


def _check_baseline(lab: Lab) -> None:
    """The baseline names a candidate that is there: every bench and score is measured against it."""
    from okc.errors import CandidateError
    from okc.lab.candidates import resolve

    if not lab.candidates.is_dir():
        return  # okc init makes it; a command that needs candidates says so itself
    try:
        resolve(lab.candidates, lab.baseline)
    except CandidateError as exc:
        raise ConfigError(f"[tool.okc] baseline = {lab.baseline!r}: {exc}") from None
