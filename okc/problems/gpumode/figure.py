"""A GPU MODE bench's second figure: what the folder's own eval.py says, beside okc's paired score.

The folder's eval.py is the authority for the figure its leaderboard shows (SPEC 5: one set times
eager calls and takes a mean, another replays graphs and takes a median). So okc runs it
(okc.problems.gpumode.evalrun) in ``leaderboard`` mode, the mode kernelbot ranks, twice a side in
ABBA order (against first), each run with the same ``POPCORN_SEED``, and ranks each
side's means by the task's ``ranking_by`` as kernelbot does (``last``: eval.py is given the last
benchmark alone, and its mean is the score). Beside it goes okc's paired speedup ranked the same
way (``last``: the last load's speedup and CI; ``geom``: okc's score; ``mean``: the ratio of the
loads' summed medians, without a CI).

A candidate eval.py fails (its check, a crash, a timeout) is a bench error: the folder's own
judge said no. A failure on the other side leaves okc's score standing and says why there is no
figure. A folder without eval.py gets okc's own loop instead (okc.judge.protocol.gpumode_timing),
labelled as okc's: it is not the folder's figure.
"""

from __future__ import annotations

import math
from pathlib import Path

from okc.judge.protocol import gpumode_timing, stats
from okc.judge.protocol.benchcases import BenchFailed, error_result
from okc.judge.protocol.capture import release_memory
from okc.problems.gpumode.evalrun import EVAL_FILE, EvalFailed, ran_indexes, run_eval
from okc.seeds import derive_seed

ROUNDS = 2  # eval.py runs a side (ABBA): their spread is the figure's error between processes (from_eval)
MODE = "leaderboard"  # kernelbot ranks this mode's means: inputs regenerated and re-checked every timed call
POPCORN_SEED_RANGE = 2**31  # their eval.py combines it with each case's seed; keep it an ordinary int
OKC_LABEL = ("okc's own timing, not the folder's figure: the folder has no eval.py (okc's loop after one set's "
             "leaderboard rules: CUDA events around one call after a 256 MB write fill, the mean per case)")
FIGURE_FLOOR = 0.01  # the figure's side of a dispute: two eval.py runs a side moved 1-3% between processes (NOTES)
Z95 = 1.96  # a run's own err (eval.py's std / sqrt(runs)) at 95%, two-sided
IDENTITY = ("problem", "candidate", "against", "aa", "seed", "device", "protocol")


def eval_label(mode: str, ranking_by: str) -> str:
    return f"the folder's eval.py, {mode} mode, ranked by {ranking_by}"


def paired_ranked(result: dict, ranking_by: str, benchmarks: int) -> dict:
    """okc's paired speedup ranked by ``ranking_by``: {"ranking_by", "speedup", "ci"} (ci None where there is none)."""
    loads = {load["name"]: load for load in result.get("loads", ())}
    if ranking_by == "last":
        load = loads.get(f"benchmark.{benchmarks - 1}")
        return {"ranking_by": ranking_by, "speedup": load and load["speedup"], "ci": load and list(load["ci"])}
    if ranking_by == "mean" and loads:
        ratio = sum(load["baseline_us"] for load in loads.values()) / sum(load["candidate_us"] for load in loads.values())
        return {"ranking_by": ranking_by, "speedup": ratio, "ci": None}
    ci = result.get("score_ci")
    return {"ranking_by": ranking_by, "speedup": result.get("score"), "ci": list(ci) if ci else None}


def _readings(device) -> dict | None:
    """The GPU's clocks, temperature, power and throttle reasons now (None off a GPU): each side's eval.py
    runs in a process of its own, one after the other, so a clock that moved between them moves the figure."""
    if device is None or getattr(device, "type", None) != "cuda":
        return None
    import torch

    from okc.judge.envinfo import gpu_readings

    readings = gpu_readings(torch.cuda.current_device()) or {}
    try:  # eval.py needs memory of its own (vectoradd's ranked case: over 8 GiB; NOTES 2026-12-06)
        free, total = torch.cuda.mem_get_info()
    except RuntimeError:  # a lost context (a systematic variant's candidate): the clocks still say something
        return readings
    readings.update({"memory.free_gib": round(free / 2**30, 2), "memory.total_gib": round(total / 2**30, 2),
                     "memory.held_by_okc_gib": round(torch.cuda.memory_reserved() / 2**30, 2)})
    return readings


def _side(problem, source: Path, *, side: str, seed: int, log, device=None) -> dict:
    task = problem.task
    timeout = dict(task.timeouts).get("ranked_timeout" if MODE == "leaderboard" else "benchmark_timeout")
    specs = [spec.as_dict() for spec in task.benchmarks]
    before = _readings(device)
    run = run_eval(problem.folder, source, submission_name=task.submission_name, mode=MODE, specs=specs,
                   ranking_by=task.ranking_by, timeout_s=timeout, seed=seed)
    readings = {"before": before, "after": _readings(device)}
    log(f"the folder's eval.py ({MODE} mode) on {side}: exit code {run.returncode}, "
        f"check {run.popcorn.get('check', 'not reported')}, {run.seconds:.1f} s"
        + "".join(f", SM {when} {value['clocks.sm']:.0f} MHz" for when, value in readings.items()
                  if value and value.get("clocks.sm") is not None)
        + (f", {before['memory.free_gib']:.1f} of {before['memory.total_gib']:.1f} GiB free before it"
           if before and "memory.free_gib" in before else ""))
    if not run.passed:
        raise EvalFailed(run.why())
    rows = run.benchmarks()
    indexes = ran_indexes(len(specs), task.ranking_by)
    if len(rows) != len(indexes):
        raise EvalFailed(f"eval.py {MODE} mode reported {len(rows)} benchmark(s), {len(indexes)} were given")
    cases = [{"case": f"benchmark.{index}", **row, "spec": task.benchmarks[index].text, "eval_spec": row["spec"]}
             for index, row in zip(indexes, rows)]
    score = gpumode_timing.combine([row["mean_us"] for row in cases], task.ranking_by)
    return {"score_us": score, "rel_err": score_rel_err(cases, task.ranking_by), "cases": cases,
            "seconds": run.seconds, "exit_code": run.returncode, "gpu_readings": readings}


def score_rel_err(cases: list[dict], ranking_by: str) -> float | None:
    """One eval.py run's score's own relative err, from its cases' (err: std / sqrt(runs), as eval.py reports it;
    None where a case reports none): the last case's, a geometric mean's sqrt(sum r_i^2) / n, a mean's
    sqrt(sum err_i^2) / sum mean_i. pmpp's eval.py stops once err/mean < 1%, pmpp_v2's at 0.1%."""
    errs = [row.get("err_us") for row in cases]
    if not cases or any(err is None for err in errs):
        return None
    if ranking_by == "last":
        return errs[-1] / cases[-1]["mean_us"]
    if ranking_by == "geom":
        return math.sqrt(sum((err / row["mean_us"]) ** 2 for err, row in zip(errs, cases))) / len(cases)
    return math.sqrt(sum(err ** 2 for err in errs)) / sum(row["mean_us"] for row in cases)


def with_errs(against: dict, candidate: dict) -> list[float] | None:
    """The figure's 95% range: every (against, candidate) pairing of runs' speedup, widened by those two runs' own
    relative errs (exp(+-1.96 sqrt(ra^2 + rc^2)): a ratio's range, never below 0). The runs' spread alone reads a
    noisy eval.py (pmpp's stops at 1% err after 3 calls) as precise: on an H100, two such runs a side read one file
    against itself 0.91-0.99 over five benches (NOTES 2026-12-06, fifth session). None without errs."""
    pairs = [(a, ra, c, rc) for a, ra in zip(against["runs"], against.get("rel_errs") or ())
             for c, rc in zip(candidate["runs"], candidate.get("rel_errs") or ())]
    if not pairs or any(ra is None or rc is None for _, ra, _, rc in pairs):
        return None
    spans = [(a / c, math.exp(Z95 * math.hypot(ra, rc))) for a, ra, c, rc in pairs]  # on a log scale: a run of a
    return [min(s / w for s, w in spans), max(s * w for s, w in spans)]  # noisy CPU's 50% err stays above 0


def run_order(rounds: int) -> list[str]:
    """The sides' eval.py runs: ABBA over the rounds (against, candidate, candidate, against, ...)."""
    pair = [["against", "candidate"], ["candidate", "against"]]
    return [side for index in range(rounds) for side in pair[index % 2]]


def from_eval(problem, candidate: Path, against: Path, *, seed: int, log, device=None, rounds: int = ROUNDS) -> dict:
    """The figure by the folder's eval.py, ``rounds`` runs a side in ABBA order; BenchFailed if it failed the candidate.

    A side's score is the mean of its runs' scores, and ``between_runs`` the spread of those scores and of
    every (against, candidate) pairing's speedup: on the H200, two processes running one file's eval.py
    read 10-30 of its own errs apart (benchmarks/NOTES.md, 2026-12-03), so one run's err says nothing of it."""
    popcorn_seed = derive_seed(seed, "gpumode", "eval") % POPCORN_SEED_RANGE
    order = run_order(rounds)
    figure = {"source": EVAL_FILE, "label": eval_label(MODE, problem.task.ranking_by), "mode": MODE,
              "ranking_by": problem.task.ranking_by, "popcorn_seed": popcorn_seed, "rechecked_outputs": None,
              "order": order}  # eval.py runs, one process each, in this order (see _readings)
    runs: dict[str, list[dict]] = {"against": [], "candidate": []}
    sources = {"against": against, "candidate": candidate}
    for side in order:
        try:
            runs[side].append(_side(problem, sources[side], side=side, seed=popcorn_seed, log=log, device=device))
        except EvalFailed as exc:
            if side == "against":
                return {**figure, "error": f"on the side benched against: {exc}"}
            raise BenchFailed(f"the folder's eval.py failed the candidate: {exc}") from None
    for side, done in runs.items():
        figure[side] = _merged(done, problem.task.ranking_by)
    figure["speedup"] = figure["against"]["score_us"] / figure["candidate"]["score_us"]
    speedups = [a / c for a in figure["against"]["runs"] for c in figure["candidate"]["runs"]]
    figure["between_runs"] = {side: [min(figure[side]["runs"]), max(figure[side]["runs"])] for side in runs}
    figure["between_runs"]["speedup"] = [min(speedups), max(speedups)]
    figure["with_errs"] = with_errs(figure["against"], figure["candidate"])
    return figure


def _merged(done: list[dict], ranking_by: str) -> dict:
    """One side's runs as one: each case's mean the mean of its runs' (err: the largest run's, calls: all of
    them), the score ranked from those, and each run's own score in ``runs``."""
    cases = []
    for rows in zip(*(run["cases"] for run in done)):
        means = [row["mean_us"] for row in rows]
        errs = [row["err_us"] for row in rows if row.get("err_us") is not None]
        cases.append({**rows[0], "mean_us": sum(means) / len(means), "run_means_us": means,
                      "err_us": max(errs, default=None), "runs": sum(row["runs"] for row in rows)})
    return {"score_us": gpumode_timing.combine([row["mean_us"] for row in cases], ranking_by), "cases": cases,
            "runs": [run["score_us"] for run in done], "rel_errs": [run.get("rel_err") for run in done],
            "seconds": sum(run["seconds"] for run in done),
            "exit_code": done[-1]["exit_code"], "gpu_readings": [run["gpu_readings"] for run in done]}


def runs_line(figure: dict) -> str | None:
    """The figure's eval.py runs at a glance: the GPU's SM clock before and after each, in ABBA order per
    side, and the spread of the runs' speedups (None: no runs recorded)."""
    def mhz(reading) -> str:
        value = (reading or {}).get("clocks.sm")
        return "-" if value is None else f"{value:.0f}"

    clocks = [f"{side} {mhz(run.get('before'))}->{mhz(run.get('after'))}" for side in ("against", "candidate")
              for run in (figure.get(side) or {}).get("gpu_readings") or [] if run]
    parts = [f"SM MHz {', '.join(clocks)}"] if clocks else []
    spread, errs = (figure.get("between_runs") or {}).get("speedup"), figure.get("with_errs")
    if spread:
        parts.append(f"runs' speedups {spread[0]:.4f}-{spread[1]:.4f}"
                     + (f" ({errs[0]:.4f}-{errs[1]:.4f} with their own errs)" if errs else ""))
    return "; ".join(parts) or None


def summary_line(figure: dict) -> str:
    """The one line a bench's reason and the ledger's note carry."""
    paired = figure.get("paired") or {}
    speedup, ci = paired.get("speedup"), paired.get("ci")
    okc = "" if speedup is None else f"; okc paired ({paired['ranking_by']}) {speedup:.4f}" + (
        f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")
    if "error" in figure:
        return f"GPU MODE figure ({figure['label']}): none, {figure['error']}{okc}"
    spread, errs = figure.get("between_runs"), figure.get("with_errs")
    runs = "" if not spread or len(figure["candidate"].get("runs", ())) < 2 else (
        f" (runs {spread['speedup'][0]:.4f}-{spread['speedup'][1]:.4f}"
        + (f"; with their own errs, 95%: {errs[0]:.4f}-{errs[1]:.4f})" if errs else ")"))
    return (f"GPU MODE figure ({figure['label']}): candidate {figure['candidate']['score_us']:.3f} us, "
            f"against {figure['against']['score_us']:.3f} us, speedup {figure['speedup']:.4f}{runs}{okc}")


def _direction(low: float, high: float, floor: float) -> str:
    return "faster" if low > 1.0 + floor else "slower" if high < 1.0 - floor else "same"


def disagreement(figure: dict, verdict: str | None, floor: float, clock: str = "graph") -> tuple[str | None, bool]:
    """(what to say, whether the verdict is disputed) where okc's ranked paired speedup and the figure part: okc's
    CI (its point where it has none) and the figure's runs' speedups, each widened by its runs' own errs
    (``with_errs``), do not meet. Disputed: a bench with a verdict
    (not an A/A) whose ranked speedup and the folder's eval.py also differ on which side is faster, the figure's
    side read beyond FIGURE_FLOOR (two runs a side are a thin spread). On the H100 (NOTES 2026-12-06, third
    session) pmpp_v2's sort read 1.0143 paired and 0.9639 by its eval.py, prefixsum 2.2659 and 2.4922."""
    paired = figure.get("paired") or {}
    speedup = paired.get("speedup")
    if speedup is None or "error" in figure or figure.get("speedup") is None:
        return None, False
    low, high = paired.get("ci") or (speedup, speedup)
    f_low, f_high = (figure.get("with_errs") or (figure.get("between_runs") or {}).get("speedup")
                     or (figure["speedup"], figure["speedup"]))
    if low <= f_high and f_low <= high:
        return None, False
    ours, theirs = _direction(low, high, floor), _direction(f_low, f_high, max(floor, FIGURE_FLOOR))
    disputed = verdict is not None and figure.get("source") == EVAL_FILE and ours != theirs
    which = (f"they differ on which side is faster (okc's ranked speedup: {ours}; the folder's eval.py: {theirs}); "
             if disputed else "")
    return (f"okc's paired speedup {speedup:.4f} and the folder's figure {figure['speedup']:.4f} disagree beyond "
            f"both spreads: {which}{_how_they_time(clock)}; the leaderboard ranks the folder's figure"), disputed


def _how_they_time(clock: str) -> str:
    """Why okc's clock and the folder's eval.py may part: okc's graph replays; on eager calls, okc times each as the
    eval.py does (its timer and its L2 clear: okc.problems.gpumode.taskfile.eager_timing)."""
    if clock != "eager":
        return ("okc times CUDA graph replays (the GPU's time alone), the folder's eval.py eager calls (the host's "
                "launch time counts where the GPU waits on it): okc bench without --clock graph times them as it does")
    return "both time eager calls, so the difference is elsewhere (the inputs, memory, the process)"


def add_figure(problem, result: dict, candidate: Path, against: Path, *, device, seed: int, log,
               floor: float = stats.DEFAULT_AA_FLOOR) -> dict:
    """The paired bench's ``result`` with the GPU MODE figure beside it (result.json's ``gpumode``); ``floor``:
    the verdict's (an A/A has no verdict, so no dispute)."""
    if result.get("status") != "ok":
        return result
    has_eval = (problem.folder / EVAL_FILE).is_file()
    if not has_eval:
        log(f"the folder has no {EVAL_FILE}: the second figure is okc's own timing, not the folder's")
    if getattr(device, "type", None) == "cuda":
        release_memory()  # what the bench dropped: eval.py runs in a process of its own, on the same GPU
    try:
        if has_eval:
            figure = from_eval(problem, candidate, against, seed=seed, log=log, device=device)
        else:
            figure = {"source": "okc", "label": OKC_LABEL,
                      **gpumode_timing.measure(problem, candidate, against, device=device, log=log)}
    except BenchFailed as exc:
        identity = {key: result[key] for key in IDENTITY if key in result}
        return error_result(str(exc), "usage" if exc.side == "against" else "candidate", **identity)
    figure["paired"] = paired_ranked(result, problem.task.ranking_by, len(problem.task.benchmarks))
    line = summary_line(figure)
    log(line)
    protocol = result.get("protocol") or {}
    said, disputed = disagreement(figure, result.get("verdict"), floor, protocol.get("clock", "graph"))
    lines = [line] + ([said] if said else [])
    if said:
        log(said)
        figure["disagreement"] = said
    reason = "; ".join(part for part in (result.get("reason"), *lines) if part)
    return {**result, "gpumode": figure, "reason": reason, "notes": [*result.get("notes", []), *lines],
            **({"verdict": "disputed"} if disputed else {})}
