"""The GPU side of okc: the judge that runs where the jobs run.

- ``kinds/``: one module per job kind the worker runs (okc.worker.KINDS): check, bench, floor,
  sweep (a sweep point's ``time`` job), screen, trial (``try``), profile;
- ``protocol/``: how a bench times (SPEC 4.5): the flush and hold (timing, kernels), captures
  and the two sides' placement, the pairs, the one loop over the GPU's and the CPU's clocks,
  the re-checks, the statistics, the settings, the warm screen;
- ``verdict/``: what passes (SPEC 4.4): the rules, and the verifier process that applies them
  out of the candidate's reach;
- here: what all of them share (the Problem interface, the candidate loader, the machine's
  description), and the profile's trace and counter helpers.

The judge never names a problem: the process entry points above it (okc.worker, okc.ahead,
okc.counters_child) load the job's problem and hand it down, and okc.problems builds its
problems from the judge's parts. Everything under okc.judge, okc.problems and those entry
points imports only the standard library, torch, triton and numpy (and okc's own
standard-library modules), so it runs on any pod image that has PyTorch.
"""
