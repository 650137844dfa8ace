"""Regenerate the HTML-report screenshots in this folder (needs Chromium): python docs/screenshots/make_screenshots.py"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
JOBS = {"sim-tp-pp-dp-straggler": "fixtures/sim/tp_pp_dp_1f1b_straggler", "dlrm-8rank": "fixtures/corpus/param-dlrm_kineto"}


def main() -> None:
    """Render each job's HTML report and take a 1366-wide screenshot of its first 3600 px."""
    from PIL import Image

    from analyzer.report.assemble import Options, run_analysis
    from analyzer.load.job import load_job
    from analyzer.render.html import render_html

    browser = next(b for b in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if b)
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in JOBS.items():
            job = load_job([ROOT / path], jobs=1)
            html = Path(tmp) / f"{name}.html"
            html.write_text(render_html(run_analysis(job, Options()), job), encoding="utf-8")
            png = Path(tmp) / f"{name}.png"
            subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            "--disable-background-networking", "--hide-scrollbars", f"--user-data-dir={tmp}/p",
                            f"--screenshot={png}", "--window-size=1366,3600", html.as_uri()],
                           check=True, capture_output=True, timeout=120)
            Image.open(png).convert("RGB").quantize(colors=128).save(Path(__file__).parent / f"{name}.png",
                                                                      optimize=True)


if __name__ == "__main__":
    main()
