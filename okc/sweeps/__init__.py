"""Sweeps: experiment definitions, the funnel, fan-out over GPUs."""
