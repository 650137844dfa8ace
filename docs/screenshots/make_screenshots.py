"""Regenerate the HTML-report screenshots in this folder (needs Chromium): python docs/screenshots/make_screenshots.py
(``--memory``: only the memory sections)"""
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
#: the Memory section alone: a real CPU run whose rank 1 leaks 1 MiB a step, HTA's public V100 trace
MEMORY = {"memory-leak-cpu": "fixtures/real-cpu-memory/dp2-leak1m-r1",
          "memory-v100-hta": "fixtures/corpus/hta-single_rank/df_index_resolver"}


def _shoot(browser: str, html: Path, png: Path, tmp: str, height: int) -> None:
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--hide-scrollbars", f"--user-data-dir={tmp}/p",
                    f"--screenshot={png}", f"--window-size=1366,{height}", html.as_uri()],
                   check=True, capture_output=True, timeout=120)


def memory_sections() -> None:
    """The HTML report's Memory section (figure and peak table) of each MEMORY job, cut out and screenshotted."""
    from PIL import Image

    from analyzer.report.assemble import Options, run_analysis
    from analyzer.load.job import load_job
    from analyzer.render.html import render_html

    browser = next(b for b in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if b)
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in MEMORY.items():
            job = load_job([ROOT / path], jobs=1)
            page = render_html(run_analysis(job, Options()), job)
            a = page.index("<h2>Memory</h2>")
            b = page.index("<h2>", a + 5)
            html = Path(tmp) / f"{name}.html"
            html.write_text(page[:page.index("<main>") + 6] + page[a:b] + "</main></body></html>", encoding="utf-8")
            png = Path(tmp) / f"{name}.png"
            _shoot(browser, html, png, tmp, 720)
            Image.open(png).convert("RGB").quantize(colors=64).save(Path(__file__).parent / f"{name}.png",
                                                                     optimize=True)


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
    memory_sections() if "--memory" in sys.argv else main()
