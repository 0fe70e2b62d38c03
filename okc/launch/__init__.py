"""Launching jobs: the launcher (one per-GPU lock, one set of files, one time limit) and the agent
that runs it, on this machine and on pods. Standard library and okc.contract only: the agent is
sent to a pod as its source text, and the pod's watchdog runs the launcher from the synced copy.
"""
