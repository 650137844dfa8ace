"""Regenerate the post-mortem wait-for screenshots in this folder (needs Chromium):
python docs/screenshots/make_hang_screenshots.py

Each is the HTML report's "who waits for whom" figure, cut from the report as rendered: an 8-rank simulated stall,
a real 8-rank gloo failure whose waits form chains over six groups, and a 64-rank simulated stall."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
JOBS = {"hang-waitfor-8": "fixtures/sim/hang_stalled_rank",
        "hang-waitfor-chains-8": "fixtures/real-cpu-failures-2/two_culprits_crash_and_hang",
        "hang-waitfor-64": None}  # 64: simulated here from hang_stalled_rank's scenario on 8 hosts × 8 GPUs


def simulate_64(out: Path) -> Path:
    """hang_stalled_rank's scenario at 64 ranks, rank 37 stalled."""
    from simulator.cli import main as sim
    s = json.loads((ROOT / "fixtures/sim/hang_stalled_rank/scenario.json").read_text())
    s.update(hosts=8, gpus_per_host=8, name="hang_stalled_64")
    s["faults"][0]["ranks"] = [37]
    (out / "scenario.json").write_text(json.dumps(s))
    sim(["run", str(out / "scenario.json"), "--out", str(out / "job")])
    return out / "job"


def main() -> None:
    from PIL import Image

    from analyzer.api import load

    browser = next(b for b in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if b)
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in JOBS.items():
            job = simulate_64(Path(tmp)) if path is None else ROOT / path
            page = load(job, jobs=1).render("html")
            fig = re.search(r'<figure class="waitfor">.*?</figure>', page, re.S).group(0)
            html = Path(tmp) / f"{name}.html"
            html.write_text(f"<html><body style='margin:0;font-family:sans-serif'>{fig}</body></html>",
                            encoding="utf-8")
            png = Path(tmp) / f"{name}.png"
            subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            "--disable-background-networking", "--hide-scrollbars", f"--user-data-dir={tmp}/p",
                            f"--screenshot={png}", "--window-size=980,700", html.as_uri()],
                           check=True, capture_output=True, timeout=120)
            im = Image.open(png).convert("RGB")
            px = im.load()
            bottom = max((y for y in range(im.height) if any(px[x, y] != (255, 255, 255)
                                                              for x in range(0, im.width, 4))), default=im.height)
            im.crop((0, 0, im.width, min(im.height, bottom + 12))).quantize(colors=64).save(
                Path(__file__).parent / f"{name}.png", optimize=True)


if __name__ == "__main__":
    main()
