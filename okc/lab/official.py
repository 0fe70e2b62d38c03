"""Official results, typed in by hand from the competition's site, validated before the ledger."""

from __future__ import annotations

import math
import re

from okc.lab.candidates import Candidate
from okc.errors import ConfigError
from okc.lab.ledger import Run

OFFICIAL_KINDS = {"check": "official-check", "scored": "official-scored"}
RANK_PATTERN = re.compile(r"^(\d+)/(\d+)$")


def parse_ci(text: str) -> tuple[float, float]:
    parts = text.split(":")
    try:
        lo, hi = (float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"--ci must be LO:HI (e.g. 1.3036:1.3433), got {text!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise ConfigError(f"--ci must be LO:HI with LO <= HI, got {text!r}")
    return lo, hi


def official_run(candidate: Candidate, kind: str, score: float, ci: str, job: str,
                 rank: str | None = None, note: str | None = None) -> Run:
    if kind not in OFFICIAL_KINDS:
        raise ConfigError(f"--official must be check or scored, got {kind!r}")
    if not math.isfinite(score) or score <= 0:
        raise ConfigError(f"--score must be a positive number, got {score}")
    lo, hi = parse_ci(ci)
    if not lo <= score <= hi:
        raise ConfigError(f"the CI {lo}:{hi} does not contain the score {score}")
    if not job.strip():
        raise ConfigError("--job must name the official job id")
    if rank is not None:
        match = RANK_PATTERN.match(rank)
        if not match or not 1 <= int(match[1]) <= int(match[2]):
            raise ConfigError(f"--rank must be R/N with 1 <= R <= N (e.g. 66/796), got {rank!r}")
    return Run(
        candidate_number=candidate.number,
        candidate_name=candidate.name,
        candidate_sha256=candidate.sha256(),
        kind=OFFICIAL_KINDS[kind],
        status="official",
        passed=True,
        score=score,
        ci_lo=lo,
        ci_hi=hi,
        official_job=job.strip(),
        rank=rank,
        note=note,
    )
