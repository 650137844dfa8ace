"""Everyday use on the user's path (the CLI, analyzer.load on a folder): labels that say something, fixture files
that are not inputs kept out of the skipped list, reports that say per what each figure is."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.cli import main
from tests.kineto_builder import kernel, step, trace, write

ROOT = Path(__file__).resolve().parents[1]


def _broadcast_job(folder: Path) -> Path:
    """Two ranks whose world group carries broadcasts only (traffic that says no role), beside a fixture's
    ground truth, a README and a script."""
    for r in range(2):
        ev = []
        for s in range(3):
            t0 = s * 1000
            ev += [step(s, t0, 900), kernel(t0 + 10, 500),
                   kernel(t0 + 520 + 30 * r, 100, "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, "
                          "ncclWork*)", stream=20)]
        write(folder / f"rank{r}.json", trace(ev, rank=r))
    (folder / "expected.json").write_text('{"straggler": null}')
    (folder / "scenario.json").write_text('{"ranks": 2}')
    (folder / "README.md").write_text("# how this was made\n")
    (folder / "make.py").write_text("print('made')\n")
    (folder / "notes.txt").write_text("just some words, not a log of anything at all\n")
    return folder


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_no_unknown_role_label_and_fixture_files_not_skipped(tmp_path, capsys, fmt):
    job = _broadcast_job(tmp_path / "job")
    out = tmp_path / f"r.{fmt}"
    assert main([str(job), "-q", "--jobs", "1", "--format", fmt, "-o", str(out), "--json", str(tmp_path / "r.json")]) == 0
    doc = out.read_text()
    assert "world" in doc and "as unknown" not in doc
    rep = json.loads((tmp_path / "r.json").read_text())
    skipped = [f["path"] for f in rep["inputs"]["files"] if f["status"] == "skipped"]
    assert [Path(p).name for p in skipped] == ["notes.txt"]  # a .txt could have been a log: still worth a line
    assert rep["inputs"]["skipped"] == 1 and rep["inputs"]["ignored"] == 4
    for name in ("expected.json", "scenario.json", "README.md", "make.py"):
        assert name not in doc


def test_only_fixture_files_say_so(tmp_path, capsys):
    (tmp_path / "truth.json").write_text('{"root": 3}')
    assert main([str(tmp_path), "-q"]) == 2
    err = capsys.readouterr().err
    assert "documentation, scripts or test ground truth" in err and "truth.json" in err


def test_no_pool_for_a_small_job(monkeypatch):
    """8 small real traces (PARAM DLRM, 7 MB inflated): starting worker processes costs more than parsing them,
    so analyzer.load with 8 jobs runs in this process (benchmarks/pool_choice.py)."""
    import concurrent.futures

    import analyzer

    def refuse(*a, **k):
        raise AssertionError("a worker pool was started for a small job")
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", refuse)
    monkeypatch.setattr("analyzer.load.engine.ProcessPoolExecutor", refuse)
    monkeypatch.delenv("ANALYZE_POOL_BYTES", raising=False)
    with analyzer.load(ROOT / "fixtures/corpus/param-dlrm_kineto", jobs=8) as a:
        assert len(a.report["ranks"]) == 8


def test_pool_size_follows_the_inflated_bytes(tmp_path, monkeypatch):
    import gzip

    from analyzer.load.engine import POOL_BYTES_PER_WORKER, pool_workers
    monkeypatch.delenv("ANALYZE_POOL_BYTES", raising=False)
    mb = 1 << 20
    big = tmp_path / "big.json.gz"  # 60 MB inflated, a few KB on disk: the gzip trailer says how much
    with gzip.open(big, "wb", compresslevel=1) as fh:
        for _ in range(60):
            fh.write(b" " * mb)
    small = tmp_path / "small.json"
    small.write_bytes(b"{}" * 1000)
    per = POOL_BYTES_PER_WORKER
    assert pool_workers([str(small)] * 8, 8) == 1
    assert pool_workers([str(big)] * 8, 16) == min(8, 8 * 60 * mb // per)
    assert pool_workers([str(big)] * 8, 2) == 2
    assert pool_workers([str(big), str(small)], 8) == max(1, min(2, 60 * mb // per))
    assert pool_workers([(len, str(big), "scratch")] * 4, 4) == min(4, 4 * 60 * mb // per)  # map_keep tasks
    assert pool_workers([(len, str(small), "scratch")] * 4, 4) == 1
    assert pool_workers([{"data": 1}] * 4, 4) == 4  # data of unknown size: as many as asked
    monkeypatch.setenv("ANALYZE_POOL_BYTES", "0")
    assert pool_workers([str(small)] * 8, 8) == 8


def test_explain_is_short_and_actionable(capsys):
    """--explain ID: what the rule checks, why, its thresholds, an example, the fix — no internal paths."""
    from rules.catalog import sorted_rules
    from rules.examples import EXAMPLES
    for r in sorted_rules():
        assert main(["--explain", r.id]) == 0
        text = capsys.readouterr().out
        lines = text.rstrip().splitlines()
        assert len(lines) <= 40, (r.id, len(lines))
        assert "fixtures/" not in text and "analyzer/" not in text and ".py" not in text, r.id
        assert lines[0].startswith(f"{r.id}: {r.title}")
        assert any(x.startswith("checks:") for x in lines), r.id
        for t in r.thresholds:
            assert any(x.lstrip().startswith(f"{t.name} = ") for x in lines), (r.id, t.name)
        if r.fix:
            assert any(x.startswith("fix:") for x in lines), r.id
        if r.id in EXAMPLES:
            assert any(x.startswith("example:") for x in lines), r.id
        assert f"docs/rules.md ({r.id})" in text
    assert main(["--threshold", "straggler_cost_min=0.1", "--explain", "LOAD001"]) == 0
    assert "straggler_cost_min = 0.1 (fraction, default 0.05)" in capsys.readouterr().out


def test_straggler_figures_say_per_what_and_confidence_says_of_what(tmp_path):
    """The 16-rank simulated 3D-parallel job with a compute straggler (rank 9): the two wait figures say per what
    each is, and the confidence says what it is of and why it is not higher (ranks of other groups hold their
    groups up almost as long)."""
    out = tmp_path / "r.txt"
    md = tmp_path / "r.md"
    assert main([str(ROOT / "fixtures/sim/tp_pp_dp_1f1b_straggler"), "-q", "--jobs", "1", "-o", str(out),
                 "--markdown", str(md), "--json", str(tmp_path / "r.json")]) in (0, 1)
    text = out.read_text()
    assert "alone 2.55 ms per step (the step's delay it caused: its longest hold-up in the step, counted once, " \
           "not per waiting rank" in text
    assert "summed over every rank that waited for it and every collective it was last in" in text
    assert "5.09 ms per step, 10.19 ms over 2 steps" in text
    line = next(x for x in text.splitlines() if "confidence 50%" in x)
    assert "(of the diagnosis: rank 9 is the rank the others wait for, and its compute is why; the cost is " \
           "measured; not higher: another rank holds its group up almost as long)" in line
    assert "not higher: another rank" in md.read_text()
    rep = json.loads((tmp_path / "r.json").read_text())
    top = rep["findings"][0]
    assert top["id"] == "LOAD001" and top["confidence"] == 0.5 and "not higher" in top["confidence_basis"]
    assert "imposed ms Σ: the waiting a rank made the others do by arriving last, summed over the ranks" in text


def test_a_sure_straggler_says_what_its_confidence_is_of(tmp_path):
    out = tmp_path / "r.txt"
    assert main([str(ROOT / "fixtures/sim/straggler_ddp"), "-q", "--jobs", "1", "-o", str(out)]) in (0, 1)
    text = out.read_text()
    assert "confidence 100% (of the diagnosis: rank 5 is the rank the others wait for, and its compute is why; " \
           "the cost is measured)" in text


def test_time_breakdown_in_every_human_report(tmp_path):
    """The DLRM job's top finding says the host does not keep the GPU busy; the reports now show what that rests
    on: per rank, HTA's temporal breakdown and the idle split (host / peers / launch / other), and the kernel time
    per class — the same numbers as the API's a.idle and a.kernels, cross-checked here."""
    import analyzer
    job = ROOT / "fixtures/corpus/param-dlrm_kineto"
    outs = {fmt: tmp_path / f"r.{fmt}" for fmt in ("text", "markdown", "html", "json")}
    args = [str(job), "-q", "--jobs", "1", "-o", str(outs["text"])]
    for fmt in ("markdown", "html", "json"):
        args += [f"--{fmt}", str(outs[fmt])]
    assert main(args) in (0, 1)
    rep = json.loads(outs["json"].read_text())
    rows = {r["rank"]: r for r in rep["breakdown"]["per_rank"]}
    assert sorted(rows) == list(range(8)) and rep["breakdown"]["device"] == "gpu"
    with analyzer.load(job, jobs=1) as a:
        idle = a.idle.groupby("rank")[["idle_us", "host_wait_us", "peer_wait_us", "kernel_wait_us", "other_us"]].sum()
        kern = a.kernels.groupby(["rank", "kind"])["total_us"].sum()
        per_rank = {r["rank"]: r for r in a.report["metrics"]["per_rank"]}
    for rank, r in rows.items():
        assert r["compute_us"] + r["non_compute_us"] + r["idle_us"] == pytest.approx(r["step_us"], abs=0.01)
        assert r["idle_us"] == pytest.approx(per_rank[rank]["idle_us"]) == pytest.approx(idle.loc[rank, "idle_us"])
        split = r["idle_split"]
        assert [split[k] for k in ("host", "peer", "kernel_wait", "other")] == pytest.approx(
            list(idle.loc[rank, ["host_wait_us", "peer_wait_us", "kernel_wait_us", "other_us"]]))
        assert sum(split.values()) == pytest.approx(r["idle_us"], abs=0.01)
        assert r["kernel_us"]["compute"] == pytest.approx(kern.loc[(rank, "compute")])
        assert r["kernel_us"]["comm"] == pytest.approx(kern.loc[(rank, "comm")])
    r7 = rows[7]["shares"]
    assert round(r7["idle"], 3) == 0.787 and round(r7["idle_host"], 3) == 0.622  # the most idle rank waits on its host
    text = outs["text"].read_text()
    assert "time breakdown per rank" in text
    line = next(x for x in text.splitlines() if x.startswith("  7 ") and "78.7%" in x and "62.2%" in x)
    assert "8.5%" in line  # its compute share
    md = outs["markdown"].read_text()
    assert "### Time breakdown per rank" in md and "| 7 | 12.509 | 8.5% | 12.8% | 78.7% | 62.2% |" in md
    html = outs["html"].read_text()
    assert '<h2>Time breakdown</h2><figure><img alt="time breakdown per rank"' in html
    assert "<h2>Time breakdown per rank</h2>" in html and "<td>62.2%</td>" in html


def _figures_of(folder: Path, monkeypatch) -> list:
    """The matplotlib figures the HTML report of ``folder`` draws (analyzer.load → render), kept open."""
    import analyzer
    from analyzer.render import figures
    kept = []
    real = figures._png

    def keep(fig):
        kept.append(fig)
        fig.canvas.draw()  # lay the figure out as the PNG has it
        return b"png"
    monkeypatch.setattr(figures, "_png", keep)
    with analyzer.load(folder, jobs=1) as a:
        a.render("html")
    monkeypatch.setattr(figures, "_png", real)
    return kept


def test_bus_bandwidth_axis_in_human_units_with_labels_off_the_markers(monkeypatch):
    """ddp_slow_link's all-reduces are 4 and 8 MiB: a log2 axis with a tick at each, labelled in MiB; the
    reference line's label sits in the right margin, outside every marker."""
    import matplotlib.pyplot as plt
    figs = _figures_of(ROOT / "fixtures/sim/ddp_slow_link", monkeypatch)
    ax = next(f.axes[0] for f in figs if f.axes and f.axes[0].get_xlabel().startswith("message size"))
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4 MiB", "8 MiB"]
    assert list(ax.get_xticks()) == [4 << 20, 8 << 20]
    labels = [t for t in ax.texts if "nominal" in t.get_text()]
    assert labels
    renderer = ax.figure.canvas.get_renderer()
    plot_area = ax.get_window_extent(renderer)
    for t in labels:  # every label starts right of the plot area, where no marker is drawn
        assert t.get_window_extent(renderer).x0 > plot_area.x1
    for f in figs:
        plt.close(f)


def test_pipeline_plot_says_its_bubbles_are_one_step(monkeypatch):
    import matplotlib.pyplot as plt
    figs = _figures_of(ROOT / "fixtures/sim/tp_pp_dp_1f1b_straggler", monkeypatch)
    ax = next(f.axes[0] for f in figs if f.axes and f.axes[0].get_title(loc="left").startswith("pipeline schedule"))
    title = ax.get_title(loc="left")
    assert "bubble per stage (left): this step's (over all steps and stages: 45%)" in title
    assert [t.get_text() for t in ax.get_yticklabels()][0].startswith("stage 0 (rank 0)  bubble ")
    for f in figs:
        plt.close(f)


def test_size_ticks_and_units():
    import numpy as np

    from analyzer.render.figures import human_bytes, size_ticks
    assert [human_bytes(x) for x in (512, 64 << 10, 8 << 20, 3 << 29, 2 << 30)] == \
        ["512 B", "64 KiB", "8 MiB", "1.5 GiB", "2 GiB"]
    many = np.array([2.0 ** k for k in range(10, 31)])  # 1 KiB .. 1 GiB: 21 sizes, too many to tick each
    t = size_ticks(many)
    assert len(t) <= 11 and t[0] == 1024 and all(np.log2(x).is_integer() for x in t)
    assert size_ticks(np.array([8 << 20, 8 << 20, 1 << 20])) == [1 << 20, 8 << 20]


def test_post_mortem_table_left_aligns_its_words(tmp_path):
    """The hang post-mortem's cause (a sentence), group and op are words: left-aligned, numbers right."""
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    main([str(ROOT / "fixtures/sim/hang_mismatched_op"), "-q", "--jobs", "1", "--html", str(html), "--markdown",
          str(md), "-o", str(tmp_path / "r.txt")])
    page = html.read_text()
    table = page[page.index("<h2>Hang post-mortem</h2>"):]
    table = table[:table.index("</table>")]
    head = table[table.index("<tr>"):table.index("</tr>")]
    assert head.count('<th class="txt">') == 3 and '<th class="txt">cause</th>' in head
    row = table[table.index("<tbody><tr"):]
    cells = row.split("<td")[1:]
    assert [c.startswith(' class="txt"') for c in cells] == [False, True, False, True, False, False, True]
    assert "td.txt,th.txt{text-align:left}" in page
    lines = md.read_text().splitlines()
    i = lines.index("### Hang post-mortem")
    assert lines[i + 3] == "| --- | --- | ---: | --- | ---: | ---: |"


def test_idle_finding_rests_on_the_idle_split_and_says_what_its_confidence_is_of(tmp_path):
    out = tmp_path / "r.json"
    assert main([str(ROOT / "fixtures/corpus/param-dlrm_kineto"), "-q", "--jobs", "1", "--json", str(out),
                 "-o", str(tmp_path / "r.txt")]) in (0, 1)
    top = json.loads(out.read_text())["findings"][0]
    assert top["id"] == "LOAD003"
    assert top["evidence"][0]["text"].startswith("rank 7's idle 78.7% of the step: 62.2% waiting for the host")
    # the cross-rank analysis blames rank 7's host for its lateness (LOAD001: "its GPU waits for the host"), so
    # the diagnosis is not only "every rank idles": 0.85, and nothing held it lower
    assert top["confidence"] == 0.85 and top["confidence_basis"] == (
        "of the diagnosis: the host, not the GPU's own work, leaves it idle; the idle share is measured")
    assert "confidence 85% (of the diagnosis" in (tmp_path / "r.txt").read_text()
