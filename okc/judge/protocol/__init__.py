"""How a bench times (SPEC 4.5): the flush, the hold, captures, sides, pairs, the one loop and its clocks, re-checks, statistics."""
