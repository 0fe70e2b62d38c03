"""Make a copy of okc whose screen keeps torch's cached GPU memory between points (an experiment, never okc itself).

Issue 35: a 36-point sweep spent 2.5 s of 13.5 s releasing points on an H100 (benchmarks/NOTES.md, 2026-12-06
seventh session). The screen hands each point's memory back to the driver (`torch.cuda.empty_cache`) before the next
point allocates the same amount again. This copy skips that one call (the cuBLAS workspaces are still forgotten), so
`sweep_scaling.py` run on it says what the call costs:

    python3 benchmarks/keep_cache_variant.py /tmp/okc-keepcache
    PYTHONPATH=/tmp/okc-keepcache:$PYTHONPATH python3 benchmarks/sweep_scaling.py --points 36

(device_run.sh stage `keepcache` does both.) Prints the one changed line.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CALL = "        release_memory(step)"
KEEP = '''        gc.collect()  # keep_cache_variant.py: release_memory without empty_cache
        step("free")
        timing.synchronize()
        if (clear := getattr(torch._C, "_cuda_clearCublasWorkspaces", None)) is not None:
            clear()'''


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: python3 benchmarks/keep_cache_variant.py DEST  (DEST/okc is written)")
    dest = Path(argv[0]) / "okc"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(REPO / "okc", dest, ignore=shutil.ignore_patterns("__pycache__"))
    warm = dest / "judge" / "protocol" / "warm.py"
    source = warm.read_text()
    if source.count(CALL) != 1:
        sys.exit(f"{warm}: expected one {CALL.strip()!r} in CudaScreener.release; okc changed, so this variant must too")
    warm.write_text(source.replace(CALL, KEEP))
    print(f"{dest}: CudaScreener.release keeps the cache (no empty_cache between points)")


if __name__ == "__main__":
    main(sys.argv[1:])
