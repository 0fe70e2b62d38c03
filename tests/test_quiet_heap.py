"""The timed loop's quiet heap (okc.judge.protocol.loop.quiet_heap) and a screen's freeze of its long-lived heap.

A screen freezes torch, Triton and its baseline once per job, so that the collection after each
point scans only what that point made. The timed loop of each point must not thaw that freeze.
"""

import gc
import weakref
from pathlib import Path

from okc.judge.protocol.loop import quiet_heap


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_a_freeze_made_before_the_loop_outlives_it_and_a_points_objects_stay_collectable():
    assert gc.get_freeze_count() == 0
    gc.collect()
    gc.freeze()  # the screen's setup
    try:
        frozen = gc.get_freeze_count()
        with quiet_heap():
            assert not gc.isenabled()
            point = Node()  # made by the point, inside its timed loop
            gone = weakref.ref(point)
        assert gc.isenabled()
        assert gc.get_freeze_count() > frozen // 2, "the loop thawed the screen's freeze"
        del point
        gc.collect()
        assert gone() is None, "the point's objects were frozen with the screen's"
    finally:
        gc.unfreeze()


def test_without_a_freeze_before_it_the_loop_thaws_what_it_froze():
    assert gc.get_freeze_count() == 0
    before = Node()
    gone = weakref.ref(before)
    with quiet_heap():
        assert gc.get_freeze_count() > 0
        assert not gc.isenabled()
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()
    del before
    gc.collect()
    assert gone() is None


def test_a_cpu_screen_keeps_its_setup_frozen_through_its_points_and_frees_each_point():
    import torch

    from okc.judge.protocol import stats
    from okc.judge.protocol.settings import BenchSettings
    from okc.judge.protocol.warm import CpuScreener
    from okc.problems.tiny_matvec import PROBLEM as TINY

    solution = Path(TINY.baseline_source).parent / "solutions" / "correct"
    points = [solution / "matmul.py", solution / "split_gate.py"]
    assert len(points) == 2
    settings = BenchSettings(rule=stats.StoppingRule(min_pairs=24, max_pairs=24), judge_overhead_us=0.0)
    screen = CpuScreener(TINY, Path(TINY.baseline_source), None, settings, torch.device("cpu"), 1, lambda line: None)
    assert gc.get_freeze_count() == 0
    try:
        screen.setup()
        frozen = gc.get_freeze_count()
        assert frozen > 0
        for point in points:
            rows, pairs = screen.time_point(point, lambda name: None)
            assert rows and pairs >= 24
            module = weakref.ref(screen.side.module)
            screen.release()
            assert gc.get_freeze_count() > frozen // 2, "a point's timed loop thawed the screen's heap"
            assert module() is None, "the point's module outlived its release"
    finally:
        gc.unfreeze()
