"""A sweep template for tiny_matvec (CPU): the projection computed in chunks of weight rows.

Parameters (okc sweep rewrites PARAMS for each point; see experiments/README.md):
- CHUNK: weight rows per F.linear call. Small chunks pay Python and dispatch overhead per
  chunk, so on a CPU the time falls as CHUNK grows: a sweep has something real to find.
- UPCAST: compute in float32 and cast back (True) or in the input dtype (False).

PARAMS_BY_SHAPE (written by ``okc sweep --emit``) maps (layer, m) to the parameters that
serve that layer for every m up to that m and above the next smaller tabled m; calls
beyond the largest tabled m, and layers without entries, take the plain torch path.
"""

import torch
import torch.nn.functional as F

PARAMS = {"CHUNK": 96, "UPCAST": False}
PARAMS_BY_SHAPE = {}

NARROW_MAX_M = 2  # proj at m <= 2 computes only its first 32 rows (the problem's slice)
NARROW_ROWS = 32

_weights: dict[str, torch.Tensor] = {}


def params_for(layer: str, m: int) -> dict | None:
    """The parameters serving ``layer`` at ``m`` rows; None: the plain torch path."""
    if not PARAMS_BY_SHAPE:
        return PARAMS
    tabled = sorted(tm for (name, tm) in PARAMS_BY_SHAPE if name == layer and tm >= m)
    return PARAMS_BY_SHAPE[(layer, tabled[0])] if tabled else None


def prepare(weights: dict[str, torch.Tensor]) -> None:
    _weights.clear()
    _weights.update(weights)


def _chunked(x: torch.Tensor, w: torch.Tensor, out_dtype: torch.dtype, params: dict) -> torch.Tensor:
    compute = torch.float32 if params["UPCAST"] or out_dtype == torch.float32 else x.dtype
    xc, wc = x.to(compute), w.to(compute)
    parts = [F.linear(xc, wc[start:start + params["CHUNK"]]) for start in range(0, w.shape[0], params["CHUNK"])]
    return torch.cat(parts, dim=1).to(out_dtype)


def kernel_fn(x: torch.Tensor, layer: str) -> torch.Tensor:
    w = _weights[layer]
    if layer == "proj" and x.shape[0] <= NARROW_MAX_M:
        w = w[:NARROW_ROWS]
    out_dtype = torch.float32 if layer == "gate" else x.dtype
    params = params_for(layer, x.shape[0])
    if params is None:
        return F.linear(x.to(w.dtype), w).to(out_dtype)
    return _chunked(x, w, out_dtype, params)
