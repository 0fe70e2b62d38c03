"""okc plot: PNG files opened with PIL and checked for size and content."""

import errno

import pytest
import reportdata
from conftest import invoke
from PIL import Image

from okc.lab.ledger import Run, open_ledger, record_run
from okc.reports.plot import DPI, HISTORY_SIZE_IN, SHAPES_COLUMNS, SHAPES_PANEL_IN

# matplotlib's tab10 colours, as drawn at full opacity.
BLUE, ORANGE, GREEN, RED, GRAY = (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (127, 127, 127)
MIN_COLOURS = 50  # antialiased text and lines alone give hundreds; a blank image has one


def pixels_of(path, colour, tolerance=6) -> int:
    image = Image.open(path).convert("RGB")
    return sum(count for count, rgb in image.getcolors(image.width * image.height)
               if all(abs(a - b) <= tolerance for a, b in zip(rgb, colour)))


def assert_not_blank(path, size):
    image = Image.open(path).convert("RGB")
    assert image.size == size
    colours = image.getcolors(image.width * image.height)
    assert len(colours) >= MIN_COLOURS
    white = sum(count for count, rgb in colours if rgb == (255, 255, 255))
    assert white < 0.97 * image.width * image.height


def official(number, kind, score, lo, hi, sha):
    return Run(candidate_number=number, candidate_name=f"{number:03d}_x", candidate_sha256=sha, kind=kind,
               status="official", passed=True, score=score, ci_lo=lo, ci_hi=hi, official_job=f"j{number}")


def test_score_history_has_every_series(lab):
    for name in ("001_router", "002_split", "003_tiles"):
        reportdata.add_candidate(lab, name)
    for ref, speedup in (("1", 1.05), ("2", 1.15), ("3", 1.3)):
        reportdata.bench_job(lab, ref, speedups={layer: speedup for layer in reportdata.SPEEDUPS})
    conn = open_ledger(lab.ledger_path)
    record_run(conn, official(2, "official-check", 1.13, 1.11, 1.15, "s2"))
    record_run(conn, official(3, "official-scored", 1.2812, 1.26, 1.30, "s3"))
    result = invoke("plot")
    assert result.exit_code == 0, result.output
    path = lab.results / "plots" / "score_history.png"
    assert f"wrote {path}" in result.output.replace("\n", "")
    assert_not_blank(path, (int(HISTORY_SIZE_IN[0] * DPI), int(HISTORY_SIZE_IN[1] * DPI)))
    for colour in (BLUE, ORANGE, GREEN):  # local bench, official check, official scored
        assert pixels_of(path, colour) > 40, colour


@pytest.mark.parametrize("with_floor", [False, True])
def test_shape_bars_of_one_candidate(lab, with_floor):
    reportdata.add_candidate(lab, "036_fast")
    reportdata.bench_job(lab, "36")
    if with_floor:
        assert reportdata.record(lab, reportdata.floor_job(lab))
    result = invoke("plot", "candidate", "36")
    assert result.exit_code == 0, result.output
    path = lab.results / "plots" / "036_shapes.png"
    rows = 2  # six loads, three per row
    size = (int(SHAPES_PANEL_IN[0] * SHAPES_COLUMNS * DPI), int((SHAPES_PANEL_IN[1] * rows + 0.8) * DPI))
    assert_not_blank(path, size)
    for colour in (GRAY, BLUE, RED):  # baseline, candidate, SPEC floor
        assert pixels_of(path, colour) > 500, colour
    assert (pixels_of(path, GREEN) > 500) == with_floor  # the measured read floor


def test_nothing_to_plot_is_a_clear_error(lab):
    result = invoke("plot")
    assert result.exit_code == 2 and "nothing to plot yet" in result.output
    result = invoke("plot", "0")
    assert result.exit_code == 2 and "no finished bench of candidate 000" in result.output


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), OSError(errno.ENOSPC, "No space left on device")])
def test_a_plot_stopped_while_writing_leaves_the_last_png_whole(lab, monkeypatch, stop):
    """savefig wrote straight into NNN_shapes.png: Ctrl-C or a full disk in the middle left half a PNG where the last
    whole one was (a bad-luck pass, 2026-12-07)."""
    from matplotlib.figure import Figure

    reportdata.add_candidate(lab, "036_fast")
    reportdata.bench_job(lab, "36")
    assert invoke("plot", "36").exit_code == 0
    path = lab.results / "plots" / "036_shapes.png"
    whole = path.read_bytes()

    def half_then_stop(self, fname, **kwargs):
        with open(fname, "wb") as handle:
            handle.write(whole[: len(whole) // 2])
        raise stop

    monkeypatch.setattr(Figure, "savefig", half_then_stop)
    result = invoke("plot", "36")
    assert result.exit_code in (2, 130), result.output
    assert "Traceback" not in result.output
    assert path.read_bytes() == whole
    assert sorted(p.name for p in path.parent.iterdir()) == ["036_shapes.png"]  # no temporary left


@pytest.mark.parametrize("block", ["folder", "png"])
def test_a_plot_that_cannot_be_written_is_one_line(lab, block):
    """A file where results/plots belongs, or a folder where the PNG goes: a FileExistsError or IsADirectoryError
    traceback, exit 1 (a bad-luck pass, 2026-12-07)."""
    reportdata.add_candidate(lab, "036_fast")
    reportdata.bench_job(lab, "36")
    if block == "folder":
        (lab.results / "plots").write_text("")
    else:
        (lab.results / "plots" / "036_shapes.png").mkdir(parents=True)
    result = invoke("plot", "36")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert "036_shapes.png" in result.output or "plots" in result.output
