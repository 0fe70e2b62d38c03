"""The profile's PNG (results/plots/NNN_profile.png): each shape's kernel times stacked, candidate beside baseline.

Drawn from the ledger's summary of the candidate's latest profile (of its current source when
there is one), so it needs no job folder. The kernels that take most time get their own
colour, the same on both sides; the rest are stacked as "other".
"""

from __future__ import annotations

from okc.errors import ConfigError
from okc.lab.candidates import resolve
from okc.lab.config import Lab
from okc.lab.ledger import ledger
from okc.lab.profiles import ProfileRow, latest_profile, profile_rows
from okc.reports.plot import Plotted, plots_dir, pyplot, save
from okc.reports.report import candidate_number

NAMED_KERNELS = 9  # kernels with a colour of their own; the others are "other"
BAR_WIDTH = 0.38
INCHES_PER_SHAPE = 0.45  # a pair of bars
HEIGHT_IN = 6.0
SIDE_LABELS = {"candidate": "candidate", "against": "baseline"}


def candidate_profile(lab: Lab, ref: str) -> tuple[int, ProfileRow | None]:
    """The candidate's number and its latest finished profile: of its current source, else of any."""
    number = candidate_number(lab, ref)
    try:
        candidate = resolve(lab.candidates, ref)
    except ConfigError:  # its file is gone: its profiles in the ledger still show
        candidate = None
    with ledger(lab.ledger_path) as conn:
        row = latest_profile(conn, candidate.sha256()) if candidate else None
        if row is None:
            finished = [r for r in profile_rows(conn, number) if r.status == "ok"]
            row = finished[-1] if finished else None
    return number, row


def draw_profile(row: ProfileRow, title: str, path) -> None:
    items = row.summary
    if not items:
        raise ConfigError(f"profile job {row.job_id} has no kernels to plot")
    shapes = list(dict.fromkeys((i["load"], i["layer"], i["m"]) for i in items))
    totals: dict[str, float] = {}
    for item in items:
        for name, _launches, us in item["kernels"]:
            totals[name] = totals.get(name, 0.0) + us
    named = sorted(totals, key=lambda n: -totals[n])[:NAMED_KERNELS]
    plt = pyplot()
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(max(8.0, INCHES_PER_SHAPE * len(shapes) + 2.5), HEIGHT_IN))
    by_key = {(i["load"], i["layer"], i["m"], i["side"]): i for i in items}
    labelled: set[str] = set()  # one legend entry a kernel, from the first side that ran it
    positions = range(len(shapes))
    tallest = 0.0
    for offset, side in ((-BAR_WIDTH / 2, "candidate"), (BAR_WIDTH / 2, "against")):
        stacks = {name: [0.0] * len(shapes) for name in [*named, "other"]}
        for x, shape in enumerate(shapes):
            for name, _launches, us in (by_key.get((*shape, side)) or {"kernels": []})["kernels"]:
                stacks[name if name in stacks else "other"][x] += us
        bottom = [0.0] * len(shapes)
        for index, (name, values) in enumerate(stacks.items()):  # one call per kernel and side: 20 at most
            if not any(values):
                continue
            # matplotlib leaves labels that start with "_" out of the legend (aten::_to_copy is one)
            label = None if name in labelled else ("\u200b" + name if name.startswith("_") else name)
            labelled.add(name)
            ax.bar([x + offset for x in positions], values, BAR_WIDTH, bottom=bottom, label=label,
                   color="lightgray" if name == "other" else colours(index % 10),
                   edgecolor="black" if side == "candidate" else "white", linewidth=0.6,
                   hatch=None if side == "candidate" else "//")
            bottom = [b + v for b, v in zip(bottom, values)]
        tallest = max(tallest, max(bottom))
    ax.set_xticks(range(len(shapes)), [f"{load}\n{layer}" for load, layer, _m in shapes], rotation=90, fontsize=7)
    ax.set_ylim(0, tallest * 1.05 or 1.0)  # stacked bars: autoscaling saw only each segment's own height
    ax.set_ylabel("kernel time per call (µs, median over replays)")
    ax.set_title(title + "\n(left bar: candidate, right bar, hatched: baseline)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, title="kernel")
    fig.tight_layout()
    save(fig, path)


def plot_profile(lab: Lab, ref: str) -> Plotted | None:
    """results/plots/NNN_profile.png from the candidate's latest profile; None when it has none."""
    number, row = candidate_profile(lab, ref)
    if row is None:
        return None
    where = "the CPU" if row.device == "cpu" else row.gpu or "an unknown GPU"
    title = f"{row.candidate_name} against {row.against_name or 'the baseline'}: kernels per shape on {where}"
    path = plots_dir(lab) / f"{number:03d}_profile.png"
    draw_profile(row, title, path)
    return Plotted(path, "a CPU profile: aten ops by self time, not the GPU's kernels" if row.device == "cpu" else None)


def plot_candidate(lab: Lab, ref: str | None, job: str | None = None) -> list[Plotted]:
    """``okc plot NNN``: its latest bench's per-shape bars and its latest profile's kernels (either may be missing,
    not both); with ``--job``, that bench's bars only."""
    from okc.reports.plot import plot_shapes

    try:
        drawn = [plot_shapes(lab, ref, job)]
    except ConfigError:
        profiled = plot_profile(lab, ref) if ref is not None and job is None else None
        if profiled is None:
            raise
        return [profiled]
    profiled = plot_profile(lab, ref) if ref is not None and job is None else None
    return drawn + ([profiled] if profiled else [])
