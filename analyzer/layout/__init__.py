"""The job's shape as data (between the per-rank tables and the cross-rank stage): named dimensions with sizes,
each rank's coordinate, each process group's dimension and role, with evidence and confidence; pipeline
neighbours, TP partners, DP peers. Every later stage asks :func:`mesh_of` instead of re-deriving roles from
group rows. Imports only load, rank and parsers. See docs/cross-rank.md ("Job shape").
"""
from analyzer.layout.mesh import Dimension, GroupInfo, Mesh, mesh_of

__all__ = ["Dimension", "GroupInfo", "Mesh", "mesh_of"]
