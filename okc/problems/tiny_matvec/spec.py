"""tiny_matvec's data, torch-free: read by its problem module and by the local side (okc.problems.catalog)."""

from okc.problems.shapes import LayerShape, ProblemShapes, ToleranceSpec

SPEC = ProblemShapes(
    name="tiny_matvec",
    layers=(
        # Small calls compute only the first rows, like muse's unpooler.
        LayerShape("proj", 96, 128, narrow_max_m=2, narrow_rows=32,
                   tolerance=ToleranceSpec(whole=1e-2, row_factor=5.0, probe=1e-3)),
        LayerShape("gate", 24, 128, weight_dtype="float32", out_dtype="float32",
                   tolerance=ToleranceSpec(whole=1e-4, row_factor=5.0, probe=1e-3)),
    ),
    loads=(("single", 1), ("batch", 8)),
    check_ms=(3, 17, 500),  # 500: enough rows that one bad row hides in the whole-output error
    weight_seeds=2,
    replays=3,
    peak_bytes_per_s=1e11,  # a modest CPU: the floor only has to be finite and positive
    peak_flops=1e11,
    bench_devices=("cuda", "cpu"),  # meant for a laptop: benched on the CPU when there is no GPU
)
