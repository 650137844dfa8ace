"""Scenario files (JSON or TOML) → a validated Scenario with every default filled in."""
from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from typing import Any

FAULT_KINDS = (
    "straggler", "data_loader_stall", "mismatched_op", "mismatched_size", "mismatched_dtype",
    "extra_collective", "skipped_collective", "stalled_rank", "crashed_rank", "uneven_last_batch",
    "tp_cross_host", "nccl_socket", "nccl_wrong_interface", "small_buckets", "no_overlap",
    "moe_imbalance", "slow_link",
    "memory_leak",  # trace.memory.leak_mib_per_step names the leaking ranks (simulator/memory.py): truth only
)
SCHEDULES = ("ddp", "fsdp", "pp_gpipe", "pp_1f1b", "pp_interleaved", "none")

DEFAULTS: dict[str, Any] = {
    "name": "unnamed",
    "description": "",
    "seed": 0,
    "hosts": 1,
    "gpus_per_host": 8,
    "host_prefix": "trn-node-",
    "gpu_name": "NVIDIA H100 80GB HBM3",
    "parallel": {"tp": 1, "pp": 1, "dp": None, "ep": 1, "order": ["tp", "dp", "pp"]},
    "model": {
        "layers": 4, "fwd_us": 400.0, "bwd_us": 800.0, "params_per_layer": 4_000_000,
        "activation_elems": 1_048_576, "dtype": "bf16", "grad_dtype": "f32", "optimizer_us": 300.0,
        "input_bytes": 4_194_304, "jitter": 0.02, "loss_us": None, "tail_us": 0.0,
    },
    "schedule": {
        "kind": "ddp", "microbatches": 1, "virtual_stages": 1, "bucket_mb": 25.0, "overlap": True,
        "tp_comm": "allreduce", "tp_overlap": 0, "moe": False, "moe_experts_us": 300.0,
    },
    "steps": 3,
    "first_step": 5,
    "network": {
        "nvlink": {"alpha_us": 6.0, "gbps": 150.0},
        "ib": {"alpha_us": 12.0, "gbps": 25.0},
        "socket": {"alpha_us": 60.0, "gbps": 2.5},
        "inter": "ib",
        "host_gbps": {},
        "zero_cost": False,
    },
    "cpu": {"launch_us": 7.0, "launch_dur_us": 4.5, "launch_latency_us": 5.0, "comm_op_us": 14.0,
            "step_gap_us": 25.0, "dataload_us": 40.0},
    "clock": {"max_offset_us": 40_000.0, "offsets_us": None, "epoch_ns": 1_732_867_200_000_000_000},
    "nccl": {"version": "2.21.5", "cuda": "12.4", "log": "init", "launcher": None,
             "socket_ifname": "eth0", "ib_hcas": 4, "timeout_ms": 600_000},
    "trace": {"format": "modern", "write": True},
    "flight_recorder": {"format": "json", "buffer": 2000},
    "faults": [],
}


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k not in ("host_gbps",):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def load_scenario(path: str | Path) -> dict:
    """Read a scenario file (.json or .toml) and return the full, validated config dict."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        data = tomllib.loads(raw.decode()) if path.suffix == ".toml" else json.loads(raw)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: not a readable scenario file: {exc}") from None
    return normalise(data, str(path))


def normalise(data: dict, where: str = "<scenario>") -> dict:
    """Fill defaults and check the numbers fit together; raise ValueError naming the problem."""
    cfg = _merge(DEFAULTS, data)
    par = cfg["parallel"]
    world = cfg["hosts"] * cfg["gpus_per_host"]
    tp, pp, ep = int(par["tp"]), int(par["pp"]), int(par["ep"])
    if par["dp"] is None:
        par["dp"] = world // (tp * pp)
    dp = int(par["dp"])
    if tp * pp * dp != world:
        raise ValueError(f"{where}: tp*pp*dp = {tp * pp * dp} but hosts*gpus_per_host = {world}")
    if dp % ep:
        raise ValueError(f"{where}: ep={ep} must divide dp={dp}")
    if sorted(par["order"]) != ["dp", "pp", "tp"]:
        raise ValueError(f"{where}: parallel.order must be a permutation of tp, dp, pp")
    sch = cfg["schedule"]
    if sch["kind"] not in SCHEDULES:
        raise ValueError(f"{where}: schedule.kind {sch['kind']!r} not one of {SCHEDULES}")
    if sch["kind"].startswith("pp_") and pp < 2:
        raise ValueError(f"{where}: pipeline schedule needs parallel.pp >= 2")
    if pp > 1 and not sch["kind"].startswith("pp_"):
        raise ValueError(f"{where}: parallel.pp > 1 needs a pp_* schedule")
    v = int(sch["virtual_stages"]) if sch["kind"] == "pp_interleaved" else 1
    sch["virtual_stages"] = v
    if cfg["model"]["layers"] % (pp * v):
        raise ValueError(f"{where}: layers must be divisible by pp*virtual_stages")
    if sch["kind"] == "pp_interleaved" and sch["microbatches"] % pp:
        raise ValueError(f"{where}: interleaved schedule needs microbatches divisible by pp")
    for f in cfg["faults"]:
        if f.get("kind") not in FAULT_KINDS:
            raise ValueError(f"{where}: unknown fault kind {f.get('kind')!r}")
    if cfg["trace"]["format"] not in ("modern", "old"):
        raise ValueError(f"{where}: trace.format must be modern or old")
    cfg["world_size"] = world
    return cfg
