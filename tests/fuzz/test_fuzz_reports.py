"""End to end on hostile folders: every output format parses, is valid Unicode and steers no terminal or CI log.

Each example is a folder holding one damaged, hostile-named file of a kind next to clean companions (so the
report has findings, tables and hang sections for the hostile text to reach), analysed by the real command.
"""
from __future__ import annotations

import random
import shutil

import pytest

from analyzer.cli import EXIT_INTERNAL, main, render
from analyzer.load.job import load_job
from analyzer.report.assemble import run_analysis
from tests.fuzz import mutators as mu
from tests.fuzz.checks import CHECKS

#: Clean companions per kind: a small real DDP job (traces + logs) or a real hang (dumps + stderr).
COMPANIONS = {
    "trace": ["real-cpu/ddp-straggler/rank1.pt.trace.json.gz", "sim/ddp_clean/nccl_rank1.log"],
    "log": ["sim/ddp_clean/rank1.pt.trace.json.gz", "sim/ddp_clean/nccl_rank1.log"],
    "fr_pickle": ["real-cpu-hang/mismatched_op/nccl_trace_rank_1", "real-cpu-hang/mismatched_op/rank1.stderr"],
    "stderr": ["real-cpu-hang/size_mismatch_abort/nccl_trace_rank_0", "real-cpu-hang/size_mismatch_abort/rank1.stderr"],
    "fr_json": ["sim/hang_mismatched_op/nccl_trace_rank_1.json", "sim/hang_mismatched_op/nccl_trace_rank_2.json"],
    "ras": ["sim/hang_stalled_rank/nccl_trace_rank_1.json", "sim/hang_stalled_rank/nccl_rank2.log"],
}
FORMATS = ("text", "json", "markdown", "html", "junit", "sarif", "github")


def _folder(tmp_path, rng, kind, i):
    d = tmp_path / f"ex{i}"
    d.mkdir()
    for rel in COMPANIONS[kind]:
        shutil.copy(mu.FIXTURES / rel, d / rel.replace("/", "_"))
    data = mu.mutate(rng, mu.read_fixture(rng.choice(mu.SEEDS[kind])), kind)
    (d / mu.hostile_name(rng, kind)).write_bytes(data)
    return d


_FIGURES = ("timeline", "pipeline", "heatmap", "share_bars", "wait_matrix", "bandwidth")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["trace", "log", "stderr", "fr_pickle", "fr_json", "ras"])
def test_every_format_parses_and_steers_nothing(kind, tmp_path, fuzz_size, fuzz_seed, monkeypatch):
    import analyzer.render.figures as fg
    real = {name: getattr(fg, name) for name in _FIGURES}
    rng = random.Random(f"{fuzz_seed}-report-{kind}")
    for i in range(fuzz_size[1]):
        # the PNG figures carry no text a reader could be steered by, but cost seconds each: drawn for the
        # first example of each kind only (a crash there still counts), stubbed for the others
        for name in _FIGURES:
            monkeypatch.setattr(fg, name, real[name] if i == 0 else (lambda *a, **k: None))
        d = _folder(tmp_path, rng, kind, i)
        where = f"seed {fuzz_seed} {kind} example {i}"
        try:
            job = load_job([d], jobs=1)
            report = run_analysis(job)
        except BaseException as exc:
            raise AssertionError(f"{where}: analysis raised {type(exc).__name__}: {exc}") from exc
        for fmt in FORMATS:
            try:
                out = render(fmt, report, job)
                CHECKS[fmt](f"{where} --format {fmt}", out)
            except AssertionError:
                raise
            except BaseException as exc:
                raise AssertionError(f"{where} --format {fmt}: {type(exc).__name__}: {exc}") from exc
        shutil.rmtree(d)


@pytest.mark.slow
def test_the_command_on_hostile_folders_never_exits_as_a_crash(tmp_path, fuzz_seed, capsys):
    """The CLI path (all outputs at once, exit code, stderr): a crash would be exit 3."""
    rng = random.Random(f"{fuzz_seed}-cli")
    for i, kind in enumerate(["trace", "log", "stderr", "fr_pickle", "fr_json"]):
        d = _folder(tmp_path, rng, kind, i)
        out = tmp_path / f"out{i}"
        out.mkdir()
        code = main([str(d), "-q", "--jobs", "1", "--format", "text", "-o", str(out / "r.txt"),
                     "--json", str(out / "r.json"), "--markdown", str(out / "r.md"), "--junit", str(out / "r.xml"),
                     "--sarif", str(out / "r.sarif"), "--github", str(out / "r.gh")])
        err = capsys.readouterr().err
        assert code in (0, 1, 2) and code != EXIT_INTERNAL, f"seed {fuzz_seed} {kind}: exit {code}: {err[-2000:]}"
        for fmt, name in (("text", "r.txt"), ("json", "r.json"), ("markdown", "r.md"), ("junit", "r.xml"),
                          ("sarif", "r.sarif"), ("github", "r.gh")):
            CHECKS[fmt](f"cli {kind} {fmt}", (out / name).read_text(encoding="utf-8"))
