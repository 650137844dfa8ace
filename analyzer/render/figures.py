"""Matplotlib figures (Agg backend) for the HTML report; each returns PNG bytes, or None when its data is absent."""
from __future__ import annotations

import io
from typing import Any, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analyzer.render import timeline_data as td  # noqa: E402

COLORS = {"compute": "#4C78A8", "comm": "#F58518", "memcpy": "#54A24B", "idle": "#E8E8E8", "bubble": "#E45756"}
LINK_PEAK_GBPS = {"nvlink": 150.0, "ib": 25.0, "socket": 1.25}  # nominal: V100 NVLink2, HDR 200 Gb/s, 10 GbE
MAX_RANKS = 64
WIDTH = 11.0


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _rank_label(r: int, straggler: Optional[int]) -> str:
    return f"rank {r} ◀ straggler" if r == straggler else f"rank {r}"


def timeline(job: Any, report: dict, step: int, title: str, link: bool = True) -> Optional[bytes]:
    """Aligned multi-rank timeline of one step: compute / memcpy (lower half), comm (upper half), idle grey."""
    offs, aligned = td.offsets_ns(report)
    ranks = sorted(job.traces)[:MAX_RANKS]
    straggler = ((report.get("cross_rank") or {}).get("stragglers") or {}).get("straggler")
    wins = {}
    for r in ranks:
        w = td.step_window(job.traces[r], step)
        if w is not None:
            wins[r] = w
    if not wins:
        return None
    shift = {r: (offs.get(r, 0) if aligned else -w[0]) for r, w in wins.items()}
    t0 = min(w[0] + shift[r] for r, w in wins.items())
    fig, ax = plt.subplots(figsize=(WIDTH, 1.2 + 0.32 * len(wins)))
    ys = {r: i for i, r in enumerate(sorted(wins))}
    for r, (lo, hi) in wins.items():
        y = ys[r]
        base = shift[r] - t0
        ax.broken_barh([((lo + base) / 1e6, (hi - lo) / 1e6)], (y - 0.4, 0.8), color=COLORS["idle"], zorder=0)
        lanes = td.rank_lanes(job.traces[r], lo, hi)
        for kind, (y0, h) in (("compute", (y - 0.4, 0.4)), ("memcpy", (y - 0.4, 0.4)), ("comm", (y, 0.4))):
            s, e = lanes[kind]
            if len(s):
                ax.broken_barh(list(zip((s + base) / 1e6, (e - s) / 1e6)), (y0, h), color=COLORS[kind], zorder=2)
    if link:
        inst = td.instances(job, report, [step])
        inst = inst[inst["rank"].isin(list(wins))] if not inst.empty else inst
        if not inst.empty:
            n = 0
            for _, grp in inst.groupby("iid"):
                if len(grp) < 2 or n >= 400:
                    continue
                grp = grp.sort_values("rank")
                ax.plot((grp["end"].to_numpy() - t0) / 1e6, [ys[r] for r in grp["rank"]], color="#333333",
                        lw=0.6, alpha=0.45, zorder=3)
                n += 1
    ax.set_yticks(range(len(ys)))
    ax.set_yticklabels([_rank_label(r, straggler) for r in sorted(wins)], fontsize=8)
    for lab, r in zip(ax.get_yticklabels(), sorted(wins)):
        if r == straggler:
            lab.set_color(COLORS["bubble"])
            lab.set_fontweight("bold")
    ax.invert_yaxis()
    ax.set_xlabel("ms from the first rank's step start" + ("" if aligned else " (clocks not aligned: each rank "
                                                                                "drawn from its own step start)"))
    ax.set_title(title, fontsize=11, loc="left")
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in ("compute", "comm", "memcpy", "idle")]
    labels = ["compute", "comm", "memcpy", "idle"]
    if link:
        handles.append(plt.Line2D([0], [0], color="#333333", lw=0.8))
        labels.append("same collective")
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.6 / max(len(ys), 4)), ncol=5,
              fontsize=8, frameon=False)
    ax.grid(axis="x", color="#cccccc", lw=0.5)
    return _png(fig)


def heatmap(report: dict, column: str, title: str, cmap: str = "viridis") -> Optional[bytes]:
    """Rank × step heatmap of a per-step metric (µs shown as ms)."""
    rows = (report.get("metrics") or {}).get("per_step") or []
    df = pd.DataFrame(rows)
    if df.empty or column not in df or df[column].isna().all():
        return None
    piv = df.pivot_table(index="rank", columns="step", values=column, aggfunc="mean") / 1000.0
    piv = piv.iloc[:MAX_RANKS]
    fig, ax = plt.subplots(figsize=(min(WIDTH, 2.5 + 0.7 * piv.shape[1]), 1.0 + 0.28 * piv.shape[0]))
    im = ax.imshow(piv.to_numpy(), aspect="auto", cmap=cmap, interpolation="nearest")
    ax.set_xticks(range(piv.shape[1]))
    ax.set_xticklabels(["all" if s == -1 else str(s) for s in piv.columns], fontsize=8)
    ax.set_yticks(range(piv.shape[0]))
    ax.set_yticklabels([str(r) for r in piv.index], fontsize=8)
    ax.set_xlabel("step")
    ax.set_ylabel("rank")
    ax.set_title(title, fontsize=10, loc="left")
    if piv.size <= 200:
        vals = piv.to_numpy()
        mid = np.nanmean(vals)
        for (i, j), v in np.ndenumerate(vals):
            if not np.isnan(v):
                ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=7,
                        color="white" if v < mid else "black")
    fig.colorbar(im, ax=ax, label="ms", fraction=0.05)
    return _png(fig)


def share_bars(report: dict) -> Optional[bytes]:
    """Per rank: overlap coverage, comm share and exposed comm share (grouped bars)."""
    rows = (report.get("metrics") or {}).get("per_rank") or []
    df = pd.DataFrame(rows)
    if df.empty:
        return None
    df = df.iloc[:MAX_RANKS]
    x = np.arange(len(df))
    fig, ax = plt.subplots(figsize=(WIDTH, 3.2))
    wdt = 0.27
    for i, (col, label, color) in enumerate((("overlap_coverage", "overlap coverage", "#4C78A8"),
                                             ("comm_share", "comm share", "#F58518"),
                                             ("exposed_comm_share", "exposed comm share", "#E45756"))):
        vals = pd.to_numeric(df.get(col), errors="coerce").fillna(0).to_numpy() * 100
        ax.bar(x + (i - 1) * wdt, vals, wdt, label=label, color=color)
    ax.set_xticks(x)
    ax.set_xticklabels([str(r) for r in df["rank"]], fontsize=8)
    ax.set_xlabel("rank")
    ax.set_ylabel("% (coverage of comm; share of step)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8, ncol=3, loc="upper right", frameon=False)
    ax.grid(axis="y", color="#dddddd", lw=0.5)
    return _png(fig)


def wait_matrix(job: Any, report: dict) -> Optional[bytes]:
    """Which rank waited for which: µs each rank (row) waited in collectives where another rank (column) came last."""
    ranks = sorted(job.traces)[:MAX_RANKS]
    w = td.wait_matrix(job, report, ranks)
    if not w.any():
        return None
    n = len(ranks)
    side = min(WIDTH * 0.7, 2.5 + 0.35 * n)
    fig, ax = plt.subplots(figsize=(side + 1.2, side))
    im = ax.imshow(w / 1000.0, cmap="Reds", interpolation="nearest")
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.set_xticklabels([str(r) for r in ranks], fontsize=7)
    ax.set_yticklabels([str(r) for r in ranks], fontsize=7)
    ax.set_xlabel("waited for (last to arrive)")
    ax.set_ylabel("waiting rank")
    fig.colorbar(im, ax=ax, label="total wait, ms", fraction=0.046)
    return _png(fig)


def bandwidth(job: Any, report: dict) -> Optional[bytes]:
    """Bus bandwidth per collective size (per instance when sizes are known, else per group/op) vs link class."""
    by_group = ((report.get("cross_rank") or {}).get("collectives") or {}).get("by_group_op") or []
    pts = td.bandwidth_points(job, report) if job is not None else pd.DataFrame()
    if pts.empty:
        pts = pd.DataFrame([{"op": g.get("op"), "bytes": g.get("bytes"), "busbw_gbps": g.get("mean_busbw_gbps")}
                            for g in by_group if g.get("bytes") and g.get("mean_busbw_gbps")])
        if not pts.empty:
            pts["bytes"] = pts["bytes"] / [max(1, g.get("count") or 1) for g in by_group
                                           if g.get("bytes") and g.get("mean_busbw_gbps")]
    if pts.empty:
        return None
    fig, ax = plt.subplots(figsize=(WIDTH * 0.8, 3.6))
    for op, grp in pts.groupby("op"):
        ax.scatter(grp["bytes"], grp["busbw_gbps"], s=14, alpha=0.7, label=str(op))
    classes = {g.get("link_class") for g in by_group} & set(LINK_PEAK_GBPS)
    for c in sorted(classes):
        ax.axhline(LINK_PEAK_GBPS[c], ls="--", lw=1, color="#666666")
        ax.text(pts["bytes"].min(), LINK_PEAK_GBPS[c], f" {c} nominal {LINK_PEAK_GBPS[c]:g} GB/s", fontsize=7,
                va="bottom", color="#444444")
    ax.set_xscale("log")
    ax.set_xlabel("message size, bytes")
    ax.set_ylabel("bus bandwidth, GB/s")
    ax.legend(fontsize=8, frameon=False)
    ax.grid(color="#dddddd", lw=0.5)
    return _png(fig)


def pipeline(job: Any, report: dict, step: int) -> Optional[bytes]:
    """Pipeline schedule of one step: each stage's compute, with bubbles (no compute inside its window) in red."""
    pipe = (report.get("cross_rank") or {}).get("pipeline") or {}
    stages = pipe.get("stage_ranks") or []
    if not pipe.get("detected") or not stages:
        return None
    offs, aligned = td.offsets_ns(report)
    rows = []
    for i, ranks in enumerate(stages):
        rs = [r for r in ranks if r in job.traces]
        if not rs:
            continue
        r = rs[0]
        w = td.step_window(job.traces[r], step)
        if w is None:
            continue
        lanes = td.rank_lanes(job.traces[r], *w)
        rows.append((i, r, w, lanes["compute"], offs.get(r, 0) if aligned else -w[0]))
    if not rows:
        return None
    t0 = min(w[0] + sh for _, _, w, _, sh in rows)
    fig, ax = plt.subplots(figsize=(WIDTH, 1.4 + 0.45 * len(rows)))
    for i, r, w, (s, e), sh in rows:
        base = sh - t0
        if len(s):
            ax.broken_barh(list(zip((s + base) / 1e6, (e - s) / 1e6)), (i - 0.35, 0.7), color=COLORS["compute"])
            gs, ge = e[:-1], s[1:]  # gaps inside the pipeline window (first to last compute) = bubbles
            keep = ge > gs
            ax.broken_barh(list(zip((gs[keep] + base) / 1e6, (ge[keep] - gs[keep]) / 1e6)), (i - 0.35, 0.7),
                           facecolor=COLORS["bubble"], alpha=0.35, hatch="//", edgecolor=COLORS["bubble"], lw=0)
    per = {(d.get("stage"), d.get("step")): d.get("bubble_rate") for d in pipe.get("per_stage") or []}
    ax.set_yticks([i for i, *_ in rows])
    labels = []
    for i, r, *_ in rows:
        b = per.get((i, step))
        labels.append(f"stage {i} (rank {r})" + (f"  bubble {100 * b:.0f}%" if b is not None else ""))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(f"pipeline schedule, step {step}: {pipe.get('schedule', 'unknown')}, p={pipe.get('p')}, "
                 f"m={pipe.get('m')}", fontsize=10, loc="left")
    ax.legend([plt.Rectangle((0, 0), 1, 1, color=COLORS["compute"]),
               plt.Rectangle((0, 0), 1, 1, facecolor=COLORS["bubble"], alpha=0.35, hatch="//")],
              ["compute", "bubble"], fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(fig)
