"""Pods: pod.yaml, SSH, sync, the pod-side agent."""
