"""tiny_matvec as the harness runs it: its data (spec.py) with torch's dtypes."""

from __future__ import annotations

from pathlib import Path

from okc.problems.projection import ProjectionProblem
from okc.problems.tiny_matvec.spec import SPEC


class TinyMatvec(ProjectionProblem):
    spec = SPEC

    @property
    def baseline_source(self) -> Path:
        return Path(__file__).with_name("baseline.py")


PROBLEM = TinyMatvec()
