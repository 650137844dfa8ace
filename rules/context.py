"""What a rule sees: the report dict (never raw tables), the job for identification only, and thresholds."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class Context:
    """The analysed job as rules read it: report sections plus threshold values from the configuration."""

    report: dict
    thresholds: dict[str, float] = field(default_factory=dict)
    job: Any = None

    def t(self, name: str) -> float:
        """Current value of a threshold (configured, else its default)."""
        from rules.registry import THRESHOLDS
        if name in self.thresholds:
            return float(self.thresholds[name])
        return float(THRESHOLDS[name].default)

    def section(self, name: str) -> dict:
        """A report section as a dict ({} when absent or null)."""
        v = self.report.get(name)
        return v if isinstance(v, dict) else {}

    @property
    def cross(self) -> dict:
        return self.section("cross_rank")

    @property
    def hang(self) -> dict:
        return self.section("hang")

    @property
    def nccl(self) -> dict:
        return self.section("nccl")

    @property
    def summary(self) -> dict:
        return self.section("job").get("summary") or {}

    def per_step(self) -> list[dict]:
        return list((self.report.get("metrics") or {}).get("per_step") or [])

    def per_rank(self) -> list[dict]:
        return list((self.report.get("metrics") or {}).get("per_rank") or [])

    def device_types(self) -> set[str]:
        """Device types of the traced ranks ('gpu', 'cpu')."""
        return {str(r.get("device_type")) for r in self.report.get("ranks") or [] if r.get("device_type")}

    def cpu_only(self) -> bool:
        """True when every traced rank is a CPU-only (gloo) trace: GPU-centric rules do not apply."""
        d = self.device_types()
        return bool(d) and d <= {"cpu"}

    def whole_trace_only(self) -> bool:
        """True when no trace has ProfilerStep windows (metrics are over the whole trace, startup included)."""
        rows = self.per_step()
        return bool(rows) and all(bool(r.get("whole_trace")) for r in rows)

    def traced_time_us(self) -> Optional[float]:
        """Mean per-rank traced step time (sum of step times), µs: the denominator for cost fractions."""
        rows = [r for r in self.per_rank() if r.get("mean_step_time_us") and r.get("steps")]
        if not rows:
            return None
        return sum(float(r["mean_step_time_us"]) * int(r["steps"]) for r in rows) / len(rows)

    def n_steps(self) -> Optional[int]:
        """Number of step windows per rank (max over ranks)."""
        rows = [int(r["steps"]) for r in self.per_rank() if r.get("steps")]
        return max(rows) if rows else None

    def groups(self) -> list[dict]:
        """Process groups of the cross-rank section."""
        return list(self.cross.get("process_groups") or [])

    def group(self, name: Any) -> Optional[dict]:
        """The process group with this name, or None."""
        for g in self.groups():
            if str(g.get("name")) == str(name):
                return g
        return None

    def roles(self) -> set[str]:
        """Roles of the job's process groups (tp, dp, fsdp, pp, ep, world, unknown)."""
        return {str(g.get("role")) for g in self.groups() if g.get("role")}

    def n_hosts(self) -> int:
        """Distinct hosts seen in traces, the cross-rank host map or NCCL logs (0 when none)."""
        hosts = set((self.cross.get("hosts") or {}).get("rank_to_host", {}).values())
        hosts |= {r.get("host") for r in self.report.get("ranks") or [] if r.get("host")}
        hosts |= {p.get("host") for p in self.nccl.get("processes") or [] if p.get("host")}
        return len({h for h in hosts if h})
