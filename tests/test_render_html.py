"""The HTML report in a real headless browser: loads without console errors, figures visible (skipped without one)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from analyzer.report.assemble import Options, run_analysis
from analyzer.load.job import load_job
from analyzer.render.html import render_html

ROOT = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((b for b in map(shutil.which, BROWSERS) if b), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no Chromium/Chrome installed (apt-get install chromium)")
JOBS = {"sim-straggler": ROOT / "fixtures/sim/tp_pp_dp_1f1b_straggler",
        "dlrm": ROOT / "fixtures/corpus/param-dlrm_kineto"}
BLUE, ORANGE = (0x4C, 0x78, 0xA8), (0xF5, 0x85, 0x18)  # compute / comm in the timeline (analyzer.render.figures)


def browse(html_path: Path, tmp: Path, height: int = 2400) -> tuple[np.ndarray, str]:
    """Screenshot (H×W×3 uint8) and stderr log of headless Chromium opening a local file."""
    png = tmp / (html_path.stem + ".png")
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
           f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr", "--v=0",
           f"--screenshot={png}", f"--window-size=1366,{height}", html_path.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert png.exists(), proc.stderr[-2000:]
    import matplotlib.image as mpimg
    img = (mpimg.imread(str(png))[:, :, :3] * 255).round().astype(np.uint8)
    return img, proc.stderr


def console_errors(log: str) -> list[str]:
    """Page console messages and uncaught errors from Chromium's log (browser-internal dbus noise ignored)."""
    return [ln for ln in log.splitlines() if "CONSOLE" in ln or "Uncaught" in ln or "Refused to" in ln]


def near(img: np.ndarray, rgb: tuple[int, int, int], tol: int = 12) -> int:
    """Pixels within ``tol`` of a colour."""
    return int((np.abs(img.astype(int) - np.array(rgb)).max(axis=2) <= tol).sum())


@pytest.fixture(scope="module", params=sorted(JOBS))
def report_html(request, tmp_path_factory):
    job = load_job([JOBS[request.param]], jobs=1)
    report = run_analysis(job, Options())
    out = tmp_path_factory.mktemp("html") / f"{request.param}.html"
    out.write_text(render_html(report, job), encoding="utf-8")
    return request.param, out, report


def test_html_has_every_figure_for_a_job(report_html):
    name, path, report = report_html
    html = path.read_text()
    assert html.count("data:image/png;base64,") >= 5  # timelines, heatmaps, bars (+ wait matrix / bandwidth)
    assert "<h2>Timeline</h2>" in html and "<h2>Per rank and step</h2>" in html


@needs_browser
def test_browser_detects_console_errors(tmp_path):
    """Control: the log check below does see a page's console error (so its silence means something)."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom-marker')</script>x</body></html>")
    _, log = browse(bad, tmp_path, 300)
    assert any("boom-marker" in ln for ln in console_errors(log))


@needs_browser
def test_html_opens_without_errors_and_shows_figures(report_html, tmp_path):
    name, path, _ = report_html
    img, log = browse(path, tmp_path)
    assert console_errors(log) == []
    non_white = int((img.min(axis=2) < 245).sum())
    colours = len(np.unique(img.reshape(-1, 3) // 8, axis=0))
    assert non_white > 0.10 * img.shape[0] * img.shape[1], non_white
    assert colours > 200, colours
    # the timeline is on screen: compute blue and comm orange bars cover real area
    assert near(img, BLUE) > 5000 and near(img, ORANGE) > 5000, (near(img, BLUE), near(img, ORANGE))
