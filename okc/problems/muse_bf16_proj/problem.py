"""muse_bf16_proj as the harness runs it: its data (spec.py) with torch's dtypes."""

from __future__ import annotations

from pathlib import Path

from okc.problems.muse_bf16_proj.spec import SPEC
from okc.problems.projection import ProjectionProblem


class MuseBf16Proj(ProjectionProblem):
    spec = SPEC

    @property
    def baseline_source(self) -> Path:
        return Path(__file__).with_name("baseline.py")


PROBLEM = MuseBf16Proj()
