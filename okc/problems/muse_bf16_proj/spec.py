"""muse_bf16_proj's data, torch-free: read by its problem module and by the local side (okc.problems.catalog)."""

from okc.problems.shapes import LayerShape, ProblemShapes, ToleranceSpec

BF16 = ToleranceSpec(whole=1e-2, row_factor=5.0, probe=1e-3)
ROUTER = ToleranceSpec(whole=1e-4, row_factor=5.0, probe=1e-3)  # its outputs pick experts

SPEC = ProblemShapes(
    name="muse_bf16_proj",
    layers=(
        LayerShape("qkv_gate", 2304, 8192, tolerance=BF16),
        LayerShape("o", 8192, 1024, tolerance=BF16),
        LayerShape("pooler", 4096, 8192, tolerance=BF16),
        # At m <= 8 the unpooler computes only the first 1024 rows of its weight (this GPU's slice).
        LayerShape("unpooler", 8192, 4096, narrow_max_m=8, narrow_rows=1024, tolerance=BF16),
        LayerShape("router", 256, 8192, weight_dtype="float32", out_dtype="float32", tolerance=ROUTER),
    ),
    loads=(("decode1", 1), ("decode16", 16), ("decode32", 32), ("verify1", 8), ("verify16", 128), ("verify32", 256)),
    check_ms=(5, 7, 9, 33, 130, 512, 1000),
    weight_seeds=2,
    replays=3,
    # The official 036 baseline times (seeds) against SPEC 4.5's speed of light give each load
    # at most 1.8-2.6x, a score of about 2.0; 3 leaves room for a faster official baseline.
    max_score=3.0,
    max_score_why="at the H200's speed of light the official baseline's loads would score about 2.0",
)
