"""Regenerate the scaling comparison screenshots in this folder (needs Chromium):
python docs/screenshots/make_scaling_screenshots.py

scaling-3.png: the real weak series of fixtures/real-cpu-scaling at 1, 2 and 4 ranks (analyze --compare ... --format
html). scaling-12.png: 12 hand-built runs from 1 to 2048 ranks whose per-rank step decomposition loses a little
more transfer, waiting and balance at each size (the same reports the tests build)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def twelve_runs() -> list[dict]:
    from analyzer.scaling.rows import run_row
    rows = []
    for k in range(12):
        n = 2 ** k
        parts = [(1e5 * (1 + 0.02 * k), 2e3 * k, 1.5e3 * k, 1e3)] * (n - 1) + [(1e5 * (1 + 0.035 * k), 2e3 * k, 0, 1e3)]
        per_step = [{"rank": r, "step": s, "step_time_us": sum(p), "compute_us": p[0], "exposed_comm_us": p[1],
                     "exposed_wait_us": p[2], "idle_us": p[3]} for s in range(2) for r, p in enumerate(parts)]
        rep = {"job": {"world_size": n, "summary": {"comm_share": 0.02 * k}}, "metrics": {"per_step": per_step},
               "about": {"job": {"label": f"run-{n}", "collected_at": f"2026-01-{k + 1:02d}T00:00:00Z"}},
               "cross_rank": {"process_groups": [{"size": n, "judged_role": "dp"}] if n > 1 else []}}
        rows.append(run_row(rep, label=f"run-{n}", batch_per_rank=16))
    return rows


def shoot(html: str, name: str, tmp: str, height: int) -> None:
    from PIL import Image
    browser = next(b for b in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if b)
    page = Path(tmp) / f"{name}.html"
    page.write_text(html, encoding="utf-8")
    png = Path(tmp) / f"{name}.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--hide-scrollbars", f"--user-data-dir={tmp}/p",
                    f"--screenshot={png}", f"--window-size=1240,{height}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    Image.open(png).convert("RGB").quantize(colors=256).save(Path(__file__).parent / f"{name}.png", optimize=True)


def main() -> None:
    import analyzer
    from analyzer.render.compare_html import render_html
    from analyzer.scaling.compare import compare_rows
    bed = ROOT / "fixtures/real-cpu-scaling/weak"
    three = analyzer.compare([bed / "w1", bed / "w2", bed / "w4"], batch_per_rank=32).render("html")
    with tempfile.TemporaryDirectory() as tmp:
        shoot(three, "scaling-3", tmp, 1100)
        shoot(render_html(compare_rows(twelve_runs())), "scaling-12", tmp, 1700)


if __name__ == "__main__":
    main()
