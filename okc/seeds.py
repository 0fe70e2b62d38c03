"""Seeds: a fresh one per job (unpredictable by the candidate), and named seeds derived from it."""

from __future__ import annotations

import hashlib
import os

SEED_BITS = 63  # fits a signed 64-bit integer: JSON, SQLite and torch.Generator all take it


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") >> (64 - SEED_BITS)


def derive_seed(seed: int, *parts: object) -> int:
    """A seed for one named draw (``derive_seed(s, "x", "o/m=1", 2)``), independent of draw order."""
    digest = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> (64 - SEED_BITS)
