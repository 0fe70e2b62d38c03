"""``okc bench --systematic``: the same candidate scored under each protocol variant okc supports.

A paired score's CI says how much the number moves with luck, not with the protocol. At the 1%
that competitors chase, two honest harnesses differ by more than that CI (benchmarks/NOTES.md,
issue 32: two independent harnesses 0.8% apart on one H200), so a systematic bench runs the
default protocol and then each variant in turn, in the same worker, with the same seed, each to
its own stopping rule, and reports the scores' spread beside the default's CI. Neither the judge
nor GPU MODE reports this. Only the first row's score is the bench's score: the default's, or, where
the bench asked for another layout (``--layout``), that one's, with the default among the variants
(the ledger then keeps it as a scoped score, never the candidate's best).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from okc.benchrules import off_defaults

# (name, the settings it changes): a variant that is the bench's own protocol already is left out
GPU_VARIANTS = (
    ("paired", {"layout": "paired"}),  # the default layout, where the bench asked for another (--layout)
    ("solo", {"layout": "solo"}),  # each side timed alone, in blocks of its own replays
    ("runs", {"layout": "runs"}),  # a case's four pairs back to back: one replay in four a side follows its own
    ("one in flight", {"in_flight": 1}),  # the host idle while a batch runs, as an each-side-alone harness
    ("sum flush", {"flush": "sum"}),  # L2 emptied by torch.sum's read of the same bytes, as independent harnesses do
    ("own outputs", {"shared_outputs": False}),  # each capture keeps its output's memory
    ("no re-checks", {"rechecks": False}),  # no timed output copied out for the verifier
)
# the CPU clock has no flush, no batches in flight and no graphs' outputs: only its layout and re-checks vary
CPU_VARIANTS = tuple((name, knobs) for name, knobs in GPU_VARIANTS if set(knobs) <= {"layout", "rechecks"})
DRAWS_APART = 10**9  # the first timed input's number in variant i: i * this (a bench draws far fewer a case)


def variants_for(settings, on_gpu: bool) -> list[tuple[str, dict]]:
    """The variants that differ from ``settings`` (an okc.judge.protocol.settings.BenchSettings)."""
    return [(name, knobs) for name, knobs in (GPU_VARIANTS if on_gpu else CPU_VARIANTS)
            if any(getattr(settings, key) != value for key, value in knobs.items())]


def asked(settings) -> dict:
    """The protocol settings of ``settings`` that are not the default's (``okc bench --layout runs``: its layout)."""
    return off_defaults({key: getattr(settings, key) for _, knobs in GPU_VARIANTS for key in knobs})


def systematic(result: dict, settings, variants: list[tuple[str, dict]], run: Callable[[object], dict],
               log: Callable[[str], None] = print) -> dict:
    """result.json's ``systematic``: each variant's score beside the bench's own (the default's, unless it
    asked for another protocol: then that row is "asked", and the default is among the variants), and their spread."""
    own = asked(settings)
    rows = [{"variant": "asked" if own else "default", "settings": own, "status": result["status"],
             "score": result.get("score"), "ci": result.get("score_ci")}]
    for index, (name, knobs) in enumerate(variants, start=1):
        log(f"systematic: the {name} variant ({', '.join(f'{k}={v}' for k, v in knobs.items())})")
        # its timed inputs are numbered past every earlier bench's: none reads an input one of them read
        other = run(dataclasses.replace(settings, **knobs, first_draw=index * DRAWS_APART))
        rows.append({"variant": name, "settings": knobs, "status": other.get("status"), "score": other.get("score"),
                     "ci": other.get("score_ci"), "reason": other.get("reason")})
    scores = [row["score"] for row in rows if row["status"] == "ok" and row["score"] is not None]
    spread = [min(scores), max(scores)] if scores else None
    default, whose = rows[0]["score"], "the bench's own" if own else "the default's"
    line = ("systematic: no score to spread" if spread is None or not default else
            f"systematic: {len(scores)} protocols score {spread[0]:.4f} to {spread[1]:.4f} "
            f"({(spread[1] - spread[0]) / default:.2%} of {whose} {default:.4f}"
            + (f"; its 95% CI alone {(rows[0]['ci'][1] - rows[0]['ci'][0]) / default:.2%} wide)" if rows[0]["ci"] else ")"))
    log(line)
    return {"variants": rows, "spread": spread, "line": line}
