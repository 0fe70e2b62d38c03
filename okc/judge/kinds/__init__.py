"""The job kinds the worker runs (okc.worker.KINDS): one module each, its ``run_kind`` the entry."""
