"""Matplotlib figures (Agg backend) for the HTML report; each returns PNG bytes, or None when its data is absent."""
from __future__ import annotations

import io
from typing import Any, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402,F401  (the size axis' locators)
import matplotlib.transforms  # noqa: E402,F401  (the reference lines' labels in the margin)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analyzer.rank.intervals import empty as iv_empty  # noqa: E402
from analyzer.render import timeline_data as td  # noqa: E402

COLORS = {"compute": "#4C78A8", "comm": "#F58518", "memcpy": "#54A24B", "idle": "#E8E8E8", "bubble": "#E45756"}
LINK_PEAK_GBPS = {"nvlink": 150.0, "ib": 25.0, "socket": 1.25}  # nominal: V100 NVLink2, HDR 200 Gb/s, 10 GbE
MAX_RANKS = 64      # rank rows labelled one by one up to this many
SCREENFUL = 32      # timeline rows: past this, a sample of ranks (said in the title)
MAX_TICKS = 32      # tick labels on a rank axis
WIDTH = 11.0


def sample_ranks(ranks: list[int], keep: int, first: Optional[list[int]] = None) -> list[int]:
    """``keep`` ranks out of ``ranks``: those in ``first`` (straggler, slowest, fastest), then evenly spaced."""
    if len(ranks) <= keep:
        return list(ranks)
    chosen = [r for r in dict.fromkeys(first or []) if r in set(ranks)][:keep]
    rest = [r for r in ranks if r not in set(chosen)]
    need = keep - len(chosen)
    if need > 0:
        idx = np.unique(np.linspace(0, len(rest) - 1, num=need).round().astype(int))
        chosen += [rest[i] for i in idx]
    return sorted(chosen)


def _thin_ticks(n: int) -> np.ndarray:
    """Positions of at most MAX_TICKS evenly spaced tick labels over n rows."""
    if n <= MAX_TICKS:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, num=MAX_TICKS).round().astype(int))


def _notable_ranks(report: dict, step: Optional[int] = None) -> list[int]:
    """The straggler, then the slowest and fastest rank (of ``step``, else overall)."""
    out = []
    strag = ((report.get("cross_rank") or {}).get("stragglers") or {}).get("straggler")
    if strag is not None:
        out.append(int(strag))
    rows = [r for r in (report.get("metrics") or {}).get("per_step") or []
            if r.get("step_time_us") is not None and (step is None or r.get("step") == step)]
    if rows:
        out.append(int(max(rows, key=lambda r: r["step_time_us"])["rank"]))
        out.append(int(min(rows, key=lambda r: r["step_time_us"])["rank"]))
    return out


def timeline_ranks(job: Any, report: dict, step: int) -> tuple[list[int], int]:
    """(ranks the timeline draws, ranks there are): all up to a screenful, else a stated sample."""
    ranks = sorted(job.traces)
    return sample_ranks(ranks, SCREENFUL, _notable_ranks(report, step)), len(ranks)


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _rank_label(r: int, straggler: Optional[int]) -> str:
    return f"rank {r} ◀ straggler" if r == straggler else f"rank {r}"


def timeline(job: Any, report: dict, step: int, title: str, link: bool = True) -> Optional[bytes]:
    """Aligned multi-rank timeline of one step: compute / memcpy (upper half of a row), comm (lower half), idle
    grey. Past a screenful of ranks, a sample: the straggler, the ranks with the longest and shortest step, then evenly spaced."""
    offs, aligned = td.offsets_ns(report)
    ranks, total = timeline_ranks(job, report, step)
    if len(ranks) < total:
        title += f" — {len(ranks)} of {total} ranks (straggler, longest and shortest step, then evenly spaced)"
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
    all_lanes = td.rank_lanes(job, wins)
    for r, (lo, hi) in wins.items():
        y = ys[r]
        base = shift[r] - t0
        ax.broken_barh([((lo + base) / 1e6, (hi - lo) / 1e6)], (y - 0.4, 0.8), color=COLORS["idle"], zorder=0)
        lanes = all_lanes.get(r) or {k: iv_empty() for k in ("compute", "comm", "memcpy")}
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
    ax.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.0, 1.0 + 0.25 / max(len(ys), 1)), ncol=5,
              fontsize=8, frameon=False, borderaxespad=1.2)
    ax.grid(axis="x", color="#cccccc", lw=0.5)
    return _png(fig)


def step_columns(report: dict, column: str) -> Optional[pd.DataFrame]:
    """rank, step and ``column`` of the report's per-step rows as a three-column table (None without rows or
    without the column in any row): what a heatmap needs, not a table of every metric of every row."""
    rows = (report.get("metrics") or {}).get("per_step") or []
    if not rows or not any(column in r for r in rows):
        return None
    n = len(rows)
    return pd.DataFrame({"rank": np.fromiter((r["rank"] for r in rows), np.int64, n),
                         "step": np.fromiter((r["step"] for r in rows), np.int64, n),
                         column: np.fromiter((np.nan if r.get(column) is None else r[column] for r in rows),
                                             np.float64, n)})


def heatmap(report: dict, column: str, title: str, cmap: str = "viridis", relative: bool = False
            ) -> Optional[bytes]:
    """Rank × step heatmap of a per-step metric. ``relative``: colour = % above/below the step's median rank
    (diverging, at least ±10 % so a clean job looks flat); else ms from 0 to the largest value. Every rank is
    drawn; past MAX_RANKS rows only evenly spaced ranks are labelled."""
    df = step_columns(report, column)
    if df is None or df[column].isna().all():
        return None
    piv = df.pivot_table(index="rank", columns="step", values=column, aggfunc="mean") / 1000.0
    n = piv.shape[0]
    vals = piv.to_numpy()
    height = min(9.0, 1.2 + 0.28 * n) if n <= MAX_RANKS else 7.0
    fig, ax = plt.subplots(figsize=(min(WIDTH, 3.0 + 0.7 * piv.shape[1]), height))
    if relative:
        cols = np.isfinite(vals).any(axis=0)  # a column with no value has no median (and no warning)
        med = np.full((1, vals.shape[1]), np.nan)
        med[:, cols] = np.nanmedian(vals[:, cols], axis=0, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            dev = 100.0 * (vals / med - 1.0)
        lim = max(10.0, float(np.nanmax(np.abs(dev))) if np.isfinite(dev).any() else 10.0)
        im = ax.imshow(dev, aspect="auto", cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
        label = "% vs the step's median rank"
    else:
        top = float(np.nanmax(vals)) if np.isfinite(vals).any() else 1.0
        im = ax.imshow(vals, aspect="auto", cmap=cmap, vmin=0.0, vmax=top or 1.0, interpolation="nearest")
        label = "ms"
    ax.set_xticks(range(piv.shape[1]))
    ax.set_xticklabels(["all" if s == -1 else str(s) for s in piv.columns], fontsize=8)
    ticks = _thin_ticks(n)
    ax.set_yticks(ticks)
    ax.set_yticklabels([str(piv.index[i]) for i in ticks], fontsize=8)
    ax.set_xlabel("step")
    ax.set_ylabel("rank" if len(ticks) == n else f"rank (all {n}; evenly spaced ones labelled)")
    ax.set_title(title, fontsize=10, loc="left")
    if piv.size <= 200 and n <= MAX_TICKS:  # the values themselves, in a colour that reads on the cell
        shown = dev if relative else vals
        for (i, j), v in np.ndenumerate(vals):
            if not np.isnan(v):
                r, g, b, _ = im.cmap(im.norm(shown[i, j]))
                ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=7,
                        color="black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white")
    fig.colorbar(im, ax=ax, label=label, fraction=0.05)
    return _png(fig)


def share_bars(report: dict) -> Optional[bytes]:
    """Per rank: overlap coverage, comm share and exposed comm share (grouped bars)."""
    rows = (report.get("metrics") or {}).get("per_rank") or []
    df = pd.DataFrame(rows)
    if df.empty:
        return None
    x = np.arange(len(df))
    fig, ax = plt.subplots(figsize=(WIDTH, 3.2))
    wdt = 0.27
    series = (("overlap_coverage", "overlap coverage", "#4C78A8"), ("comm_share", "comm share", "#F58518"),
              ("exposed_comm_share", "exposed comm share", "#E45756"))
    for i, (col, label, color) in enumerate(series):
        vals = pd.to_numeric(df.get(col), errors="coerce").fillna(0).to_numpy() * 100
        if len(df) <= MAX_RANKS:
            ax.bar(x + (i - 1) * wdt, vals, wdt, label=label, color=color)
        else:  # too many ranks for bars: one line per share, every rank a point
            ax.plot(x, vals, lw=1.0, label=label, color=color)
    ticks = _thin_ticks(len(df))
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(df["rank"].iloc[i]) for i in ticks], fontsize=8)
    ax.set_xlabel("rank")
    ax.set_ylabel("% (coverage of comm; share of step)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8, ncol=3, loc="upper right", frameon=False)
    ax.grid(axis="y", color="#dddddd", lw=0.5)
    return _png(fig)


def memory(report: dict) -> Optional[bytes]:
    """Per rank over the traced steps: peak allocated (solid), allocated at the step's end (dotted) and peak reserved
    (dashed, where the allocator reserves), one colour per rank; a rank's accelerator when it has one, else its host."""
    rows = (report.get("memory") or {}).get("per_rank") or []
    pick: dict = {}
    for r in rows:
        if r.get("steps") and (r["rank"] not in pick or r.get("device_type") == 1):
            pick[r["rank"]] = r
    if not pick:
        return None
    big = max(r.get("peak_reserved") or r.get("peak_allocated") or 0 for r in pick.values()) >= 10 * 2**30
    unit, div = ("GiB", 2**30) if big else ("MiB", 2**20)
    fig, ax = plt.subplots(figsize=(WIDTH, 3.6))
    cmap = plt.get_cmap("tab10" if len(pick) <= 10 else "viridis")
    for i, (rank, r) in enumerate(sorted(pick.items())):
        st = r["steps"]
        x = [s["step"] for s in st]
        c = cmap(i % 10) if len(pick) <= 10 else cmap(i / max(1, len(pick) - 1))
        label = f"rank {rank} {r['device']}" if len(pick) <= MAX_TICKS else None
        ax.plot(x, [s["peak_allocated"] / div for s in st], color=c, lw=1.6, marker="o", ms=3, label=label)
        ax.plot(x, [s["allocated_end"] / div for s in st], color=c, lw=1.0, ls=":")
        if any(s["peak_reserved"] > 0 for s in st):
            ax.plot(x, [s["peak_reserved"] / div for s in st], color=c, lw=1.0, ls="--")
    caps = {r.get("capacity_bytes") for r in pick.values() if r.get("capacity_bytes")}
    for cap in caps:
        ax.axhline(cap / div, color="#E45756", lw=0.8)
        ax.text(ax.get_xlim()[0], cap / div, " device capacity", color="#E45756", fontsize=7, va="bottom")
    ax.set_xlabel("step")
    ax.set_ylabel(unit)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(color="#dddddd", lw=0.5)
    ax.set_ylim(bottom=0)
    if len(pick) <= MAX_TICKS:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
                  ncol=1 if len(pick) <= 16 else 2)
    return _png(fig)


def wait_matrix(job: Any, report: dict) -> Optional[bytes]:
    """Which rank waited for which: µs each rank (row) waited in collectives where another rank (column) came last.
    Past MAX_TICKS ranks, ranks are summed in blocks of consecutive ranks (said in the axis labels)."""
    ranks = sorted(job.traces)
    w = td.wait_matrix(job, report, ranks)
    if not w.any():
        return None
    n = len(ranks)
    block = int(np.ceil(n / MAX_TICKS)) if n > MAX_TICKS else 1
    labels = [str(r) for r in ranks]
    if block > 1:
        k = int(np.ceil(n / block))
        pad = np.zeros((k * block, k * block))
        pad[:n, :n] = w
        w = pad.reshape(k, block, k, block).sum(axis=(1, 3))
        labels = [f"{ranks[i * block]}-{ranks[min(n, (i + 1) * block) - 1]}" for i in range(k)]
    m = len(labels)
    side = min(WIDTH * 0.7, 2.5 + 0.3 * m)
    fig, ax = plt.subplots(figsize=(side + 1.2, side))
    im = ax.imshow(w / 1000.0, cmap="Reds", interpolation="nearest")
    ax.set_xticks(range(m))
    ax.set_yticks(range(m))
    fs = 7 if block == 1 else 6
    ax.set_xticklabels(labels, fontsize=fs, rotation=90 if block > 1 else 0)
    ax.set_yticklabels(labels, fontsize=fs)
    what = "" if block == 1 else f" (ranks summed in blocks of {block})"
    ax.set_xlabel("waited for (last to arrive)" + what)
    ax.set_ylabel("waiting rank" + what)
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
    pts = pts[pd.to_numeric(pts["bytes"], errors="coerce") > 0]
    if pts.empty:
        return None
    fig, ax = plt.subplots(figsize=(WIDTH * 0.8, 3.6))
    for (op, grp), marker in zip(pts.groupby("op"), "oxs^vD+*"):
        ax.scatter(grp["bytes"], grp["busbw_gbps"], s=16, alpha=0.7, label=str(op), marker=marker)
    peaks = {}  # the nominal of each link class as the report decided it (cross_rank.links), else the old table
    for g in by_group:
        c, nominal = g.get("link_class"), g.get("nominal_busbw_gbps")
        if c and (nominal or c in LINK_PEAK_GBPS):
            peaks.setdefault(c, float(nominal) if nominal else LINK_PEAK_GBPS[c])
    right = matplotlib.transforms.blended_transform_factory(ax.transAxes, ax.transData)
    for c in sorted(peaks):  # the line across the plot, its label in the right margin: never under a marker
        ax.axhline(peaks[c], ls="--", lw=1, color="#666666")
        ax.text(1.01, peaks[c], f"{c} nominal\n{peaks[c]:g} GB/s", transform=right, fontsize=7, va="center",
                ha="left", color="#444444", clip_on=False)
    ax.set_xscale("log", base=2)
    lo, hi = float(pts["bytes"].min()), float(pts["bytes"].max())
    ax.set_xlim(lo / 1.6, hi * 1.6)
    ticks = size_ticks(pts["bytes"].to_numpy(dtype=float))
    ax.set_xticks(ticks)
    ax.set_xticklabels([human_bytes(t) for t in ticks], fontsize=8)
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("message size (log\u2082 scale)")
    ax.set_ylabel("bus bandwidth, GB/s")
    ax.set_ylim(0, max([float(pts["busbw_gbps"].max())] + list(peaks.values())) * 1.12)
    ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=8)
    ax.grid(color="#dddddd", lw=0.5)
    return _png(fig)


def human_bytes(n: float) -> str:
    """'512 B', '64 KiB', '8 MiB', '1.5 GiB': binary units, as message sizes are powers of two."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.3g} B"


def size_ticks(sizes: np.ndarray, most: int = 10) -> list[float]:
    """Ticks of a message-size axis: the sizes themselves when few are distinct (a tick at every size the
    collectives used), else powers of two over their range, every one or every few."""
    distinct = np.unique(sizes[sizes > 0])
    if 0 < len(distinct) <= most:
        return [float(x) for x in distinct]
    lo, hi = int(np.floor(np.log2(distinct[0]))), int(np.ceil(np.log2(distinct[-1])))
    step = max(1, int(np.ceil((hi - lo + 1) / most)))
    return [float(2 ** k) for k in range(lo, hi + 1, step)]


def pipeline(job: Any, report: dict, step: int) -> Optional[bytes]:
    """Pipeline schedule of one step: each stage's compute, with bubbles (no compute inside its window) in red."""
    pipe = (report.get("cross_rank") or {}).get("pipeline") or {}
    stages = pipe.get("stage_ranks") or []
    if not pipe.get("detected") or not stages:
        return None
    offs, aligned = td.offsets_ns(report)
    rows, wins = [], {}
    for i, ranks in enumerate(stages):
        rs = [r for r in ranks if r in job.traces]
        if not rs:
            continue
        r = rs[0]
        w = td.step_window(job.traces[r], step)
        if w is None:
            continue
        rows.append((i, r, w))
        wins[r] = w
    all_lanes = td.rank_lanes(job, wins)
    rows = [(i, r, w, (all_lanes.get(r) or {}).get("compute", iv_empty()), offs.get(r, 0) if aligned else -w[0])
            for i, r, w in rows]
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
    mean = pipe.get("mean_bubble_rate")
    ax.set_title(f"pipeline schedule, step {step}: {pipe.get('schedule', 'unknown')}, p={pipe.get('p')}, "
                 f"m={pipe.get('m')}; bubble per stage (left): this step's"
                 + (f" (over all steps and stages: {100 * mean:.0f}%)" if isinstance(mean, (int, float)) else ""),
                 fontsize=10, loc="left")
    ax.legend([plt.Rectangle((0, 0), 1, 1, color=COLORS["compute"]),
               plt.Rectangle((0, 0), 1, 1, facecolor=COLORS["bubble"], alpha=0.35, hatch="//")],
              ["compute", "bubble"], fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(fig)


#: the stacked parts of the time-breakdown bars: report.breakdown shares, label, colour (compute blue, the other
#: device work orange, then the idle parts from the host's red to the neutral rest)
BREAKDOWN_PARTS = (("compute", "compute", "#4C78A8"), ("non_compute", "communication / memory only", "#F58518"),
                   ("idle_host", "idle: waiting for the host", "#E45756"),
                   ("idle_peer", "idle: host in a collective (peers)", "#B279A2"),
                   ("idle_kernel_wait", "idle: launch latency", "#EECA3B"), ("idle_other", "idle: other", "#BAB0AC"))


def breakdown_bars(report: dict) -> Optional[bytes]:
    """Per rank, a stacked bar of its step time: compute, communication / memory only, and the idle time split by
    what it waited for (report.breakdown); past MAX_RANKS ranks, stacked areas over the rank axis."""
    rows = (report.get("breakdown") or {}).get("per_rank") or []
    if not rows:
        return None
    ranks = [r["rank"] for r in rows]
    split = all(r.get("idle_split") for r in rows)
    parts = [p for p in BREAKDOWN_PARTS if split or not p[0].startswith("idle_")]
    if not split:
        parts.append(("idle", "idle", COLORS["idle"]))
    vals = np.array([[float((r.get("shares") or {}).get(k) or 0.0) * 100 for k, _, _ in parts] for r in rows])
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(WIDTH, 3.4))
    bottom = np.zeros(len(rows))
    for i, (_, label, color) in enumerate(parts):
        if len(rows) <= MAX_RANKS:
            ax.bar(x, vals[:, i], 0.8, bottom=bottom, label=label, color=color, edgecolor="white", linewidth=0.3)
        else:
            ax.fill_between(x, bottom, bottom + vals[:, i], step="mid", label=label, color=color, lw=0)
        bottom = bottom + vals[:, i]
    ticks = _thin_ticks(len(rows))
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(ranks[i]) for i in ticks], fontsize=8)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("rank")
    ax.set_ylabel("% of step time")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
    ax.grid(axis="y", color="#dddddd", lw=0.5)
    fig.subplots_adjust(bottom=0.34)
    return _png(fig)
