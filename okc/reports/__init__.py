"""Reports: tables, views, per-shape reports, plots, calibration."""
