"""Distributed-training trace analyzer: traces, NCCL logs and dumps in, ranked diagnoses out."""

__version__ = "0.1.0"
