"""The GPU side of okc: the judge that runs where the jobs run.

Everything under okc.judge, okc.problems and okc.worker imports only the standard
library, torch, triton and numpy, so it runs on any pod image that has PyTorch.
"""
