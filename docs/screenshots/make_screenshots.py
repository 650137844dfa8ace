"""Regenerate the HTML-report screenshots in this folder (needs Chromium): python docs/screenshots/make_screenshots.py"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
JOBS = {"sim-tp-pp-dp-straggler": "fixtures/sim/tp_pp_dp_1f1b_straggler", "dlrm-8rank": "fixtures/corpus/param-dlrm_kineto",
        "ranks8-straggler": "fixtures/sim/straggler_ddp", "ranks64-clean": "fixtures/sim/ddp_64_clean",
        "ranks512-simulated": None}  # 512: simulated here (tests/test_render_html.py SCENARIO_512)
HEIGHT = {"ranks64-clean": 5200, "ranks512-simulated": 5200}


def main() -> None:
    """Render each job's HTML report and take a 1366-wide screenshot of its first 3600 px (5200 at 64+ ranks)."""
    from PIL import Image

    from analyzer.report.assemble import Options, run_analysis
    from analyzer.load.job import load_job
    from analyzer.render.html import render_html

    browser = next(b for b in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if b)
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in JOBS.items():
            if path is None:
                from tests.test_render_html import simulate_512
                sim = Path(tmp) / "sim512"
                sim.mkdir()
                path = simulate_512(sim)
            job = load_job([ROOT / path], jobs=2)
            html = Path(tmp) / f"{name}.html"
            html.write_text(render_html(run_analysis(job, Options()), job), encoding="utf-8")
            png = Path(tmp) / f"{name}.png"
            subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            "--disable-background-networking", "--hide-scrollbars", f"--user-data-dir={tmp}/p",
                            f"--screenshot={png}", f"--window-size=1366,{HEIGHT.get(name, 3600)}", html.as_uri()],
                           check=True, capture_output=True, timeout=120)
            Image.open(png).convert("RGB").quantize(colors=128).save(Path(__file__).parent / f"{name}.png",
                                                                      optimize=True)


if __name__ == "__main__":
    main()
