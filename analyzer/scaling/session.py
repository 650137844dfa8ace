"""``analyzer.compare([...])``: analyse each run folder (or read a --record file), build the comparison and its
tables; the CLI's ``--compare`` is a layer over it (docs/scaling.md)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Union

import pandas as pd

from analyzer.scaling.compare import compare_rows
from analyzer.scaling.factors import FACTORS
from analyzer.scaling.record import append_rows, is_record_file, read_rows
from analyzer.scaling.rows import ROW_COLUMNS, run_row

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(repr=False)
class Comparison:
    """Several runs compared: ``document`` (the JSON comparison), and its tables as DataFrames."""

    document: dict
    rows: list[dict]
    #: how many rows --record added (None when no record file was asked for)
    recorded: Optional[int] = None
    _cache: dict = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        from analyzer.render.compare_text import render_text
        return render_text(self.document)

    @property
    def table(self) -> pd.DataFrame:
        """One row per run, smallest first: ROW_COLUMNS plus efficiency, expected_efficiency, judgement,
        computation_scalability and dominant."""
        cols = list(ROW_COLUMNS) + ["efficiency", "expected_efficiency", "judgement", "computation_scalability",
                                    "dominant"]
        return pd.DataFrame([{c: r.get(c) for c in cols} for r in self.document["runs"]], columns=cols)

    @property
    def factors(self) -> pd.DataFrame:
        """Per run and factor: the factor against the smallest run (``value``) and its share of the loss."""
        out = [{"run_id": r["run_id"], "label": r["label"], "world_size": r["world_size"], "factor": f,
                "value": r["factors"].get(f), "loss_share": r["loss_shares"].get(f)}
               for r in self.document["runs"] for f in FACTORS]
        return pd.DataFrame(out, columns=["run_id", "label", "world_size", "factor", "value", "loss_share"])

    @property
    def steps_up(self) -> pd.DataFrame:
        """Per step up in size and factor: the factor's ratio across the step and its share of the step's loss."""
        out = [{"from_label": s["from_label"], "to_label": s["to_label"], "from_world_size": s["from_world_size"],
                "to_world_size": s["to_world_size"], "efficiency": s["efficiency"], "factor": f,
                "value": s["factors"].get(f), "loss_share": s["loss_shares"].get(f),
                "dominant": s["dominant"] == f}
               for s in self.document["steps_up"] for f in FACTORS]
        return pd.DataFrame(out, columns=["from_label", "to_label", "from_world_size", "to_world_size",
                                          "efficiency", "factor", "value", "loss_share", "dominant"])

    def render(self, fmt: str = "text") -> str:
        """The comparison as ``text``, ``markdown``, ``json`` or ``html``."""
        from analyzer.render.compare_formats import render_comparison
        return render_comparison(fmt, self.document)


def compare(runs: Iterable[PathLike], *, batch_per_rank: Optional[float] = None, scaling: Optional[str] = None,
            thresholds: Optional[dict] = None, record: Optional[PathLike] = None, jobs: Optional[int] = 1,
            labels: Optional[list[str]] = None, load_options: Optional[dict] = None,
            loader: Any = None, check_paths: Any = None) -> Comparison:
    """Compare runs: each a run folder (analysed with analyzer.load) or a --record file (CSV / JSON lines).

    ``batch_per_rank``: samples per rank and step for every analysed folder (throughput in samples/s; without it
    steps/s). ``scaling``: "weak" or "strong" overrides the inference. ``thresholds``: the guide values
    (``efficiency_good_at_8``, ``efficiency_acceptable_at_64``). ``record``: append the analysed runs' rows to
    this CSV / JSON-lines file (rows already there are not added again). ``loader`` / ``check_paths``: how a folder
    is analysed and a path checked (analyzer.compare passes analyzer.load and its path check: this stage sits below
    the API and never imports it)."""
    if loader is None:
        raise TypeError("compare() needs loader=: call analyzer.compare, which passes analyzer.load")
    if scaling not in (None, "weak", "strong"):
        raise ValueError(f"scaling must be 'weak' or 'strong', not {scaling!r}")
    paths = [os.fspath(p) for p in runs]
    if check_paths is not None:
        check_paths(paths)
    rows, analysed = [], []
    for i, p in enumerate(paths):
        if is_record_file(p):
            rows += read_rows(p)
            continue
        for row in _folder_rows(loader, p, labels[i] if labels and i < len(labels) else None, batch_per_rank, jobs,
                                load_options or {}):
            rows.append(row)
            analysed.append(row)
    recorded = append_rows(os.fspath(record), analysed) if record else None
    return Comparison(compare_rows(rows, scaling=scaling, thresholds=thresholds), rows, recorded)


def _folder_rows(load: Any, path: str, label: Optional[str], batch_per_rank: Optional[float], jobs: Optional[int],
                 options: dict) -> list[dict]:
    """The rows of one folder: one run, or each of the sibling jobs the load stage tells apart in it
    (``runs/`` holding ``w1/``, ``w2/``, …: report ``inputs.jobs``)."""
    a = load(path, jobs=jobs, **options)
    try:
        found = (a.report.get("inputs") or {}).get("jobs") or []
        if len(found) <= 1 or options.get("job"):
            return [run_row(a.report, label=label or _label(path), source=path, batch_per_rank=batch_per_rank)]
        selected = next((j["label"] for j in found if j.get("selected")), None)
        rows = [run_row(a.report, label=f"{label or _label(path)}/{selected}", source=path,
                        batch_per_rank=batch_per_rank)]
    finally:
        a.close()
    for j in found:
        if j["label"] == selected:
            continue
        b = load(path, jobs=jobs, job=j["label"], **options)
        try:
            rows.append(run_row(b.report, label=f"{label or _label(path)}/{j['label']}", source=path,
                                batch_per_rank=batch_per_rank))
        finally:
            b.close()
    return rows


def _label(path: str) -> str:
    """A short name for a run folder: its last two path parts (``weak/w4``)."""
    parts = os.path.normpath(path).split(os.sep)
    return "/".join(parts[-2:]) if len(parts) >= 2 else parts[-1]
