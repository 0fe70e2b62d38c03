"""``okc bench --systematic``: the same candidate scored under each protocol variant okc supports.

A paired score's CI says how much the number moves with luck, not with the protocol. At the 1%
that competitors chase, two honest harnesses differ by more than that CI (benchmarks/NOTES.md,
issue 32: two independent harnesses 0.8% apart on one H200), so a systematic bench runs the
default protocol and then each variant in turn, in the same worker, with the same seed, each to
its own stopping rule, and reports the scores' spread beside the default's CI. Neither the judge
nor GPU MODE reports this. Only the default's score is the bench's score (and the ledger's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

# (name, the settings it changes): a variant that is the default already is left out
GPU_VARIANTS = (
    ("solo", {"layout": "solo"}),  # each side timed alone, in blocks of its own replays
    ("runs", {"layout": "runs"}),  # a case's four pairs back to back: one replay in four a side follows its own
    ("one in flight", {"in_flight": 1}),  # the host idle while a batch runs, as an each-side-alone harness
    ("sum flush", {"flush": "sum"}),  # L2 emptied by torch.sum's read of the same bytes, as independent harnesses do
    ("own outputs", {"shared_outputs": False}),  # each capture keeps its output's memory
    ("no re-checks", {"rechecks": False}),  # no timed output copied out for the verifier
)
CPU_VARIANTS = (("solo", {"layout": "solo"}), ("runs", {"layout": "runs"}), ("no re-checks", {"rechecks": False}))
DRAWS_APART = 10**9  # the first timed input's number in variant i: i * this (a bench draws far fewer a case)


def variants_for(settings, on_gpu: bool) -> list[tuple[str, dict]]:
    """The variants that differ from ``settings`` (an okc.judge.protocol.settings.BenchSettings)."""
    return [(name, knobs) for name, knobs in (GPU_VARIANTS if on_gpu else CPU_VARIANTS)
            if any(getattr(settings, key) != value for key, value in knobs.items())]


def systematic(result: dict, settings, variants: list[tuple[str, dict]], run: Callable[[object], dict],
               log: Callable[[str], None] = print) -> dict:
    """result.json's ``systematic``: each variant's score beside the default's, and their spread."""
    rows = [{"variant": "default", "settings": {}, "status": result["status"], "score": result.get("score"),
             "ci": result.get("score_ci")}]
    for index, (name, knobs) in enumerate(variants, start=1):
        log(f"systematic: the {name} variant ({', '.join(f'{k}={v}' for k, v in knobs.items())})")
        # its timed inputs are numbered past every earlier bench's: none reads an input one of them read
        other = run(dataclasses.replace(settings, **knobs, first_draw=index * DRAWS_APART))
        rows.append({"variant": name, "settings": knobs, "status": other.get("status"), "score": other.get("score"),
                     "ci": other.get("score_ci"), "reason": other.get("reason")})
    scores = [row["score"] for row in rows if row["status"] == "ok" and row["score"] is not None]
    spread = [min(scores), max(scores)] if scores else None
    default = rows[0]["score"]
    line = ("systematic: no score to spread" if spread is None or not default else
            f"systematic: {len(scores)} protocols score {spread[0]:.4f} to {spread[1]:.4f} "
            f"({(spread[1] - spread[0]) / default:.2%} of the default's {default:.4f}"
            + (f"; its 95% CI alone {(rows[0]['ci'][1] - rows[0]['ci'][0]) / default:.2%} wide)" if rows[0]["ci"] else ")"))
    log(line)
    return {"variants": rows, "spread": spread, "line": line}
