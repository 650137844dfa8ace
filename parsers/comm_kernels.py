"""The one table of communication kernel families: which GPU kernels move data between ranks, by name.

A kernel whose name matches a family's pattern is communication (`kind == "comm"`), whatever library launched it;
the family also says which collective the name spells (``op``), when it does. Everything else is compute. The
table is documented in docs/metrics.md ("Communication kernels"); users add their own patterns in
``[tool.analyze] comm-kernels`` (docs/rules.md), which are tried before the built-in ones.

Patterns are anchored on an identifier boundary: ``cdpsk::ep::cub_…`` (a CUB scan kernel in DeepSeek's traces) is not
DeepEP's ``dpsk::ep::``. Layout kernels of these libraries that only compute locally (DeepEP's
``get_dispatch_layout``) are excluded.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional

from parsers.collective_names import OPS, normalise_op

#: Canonical op names (parsers/collective_names.OPS) a family may assign.
_WORD_OPS = (  # (regex on the kernel name, op): the first that matches names the op; order matters
    (r"reduce_?scatter|ReduceScatter|_rs(?:_|\b|<)|reducescatter", "reducescatter"),
    (r"all_?gather|AllGather|_ag(?:_|\b|<)|fcollect|allgather", "allgather"),
    (r"all_?to_?all|AllToAll|AlltoAll|alltoall", "alltoall"),
    (r"all_?reduce|AllReduce|allreduce|rdxn|cross_device_reduce", "allreduce"),
    (r"broadcast|bcast|Broadcast", "broadcast"),
    (r"barrier|Barrier|\bsync_", "barrier"),
    (r"SendRecv|sendrecv", "sendrecv"),
    (r"push_?send|pull_?send|\bsend|Send\b", "send"),
    (r"push_?recv|pull_?recv|\brecv|Recv\b", "recv"),
)
_WORD_RE = tuple((re.compile(p), op) for p, op in _WORD_OPS)
_B = r"(?<![A-Za-z0-9_])"  # identifier boundary before a name


@dataclass(frozen=True)
class CommFamily:
    """One family of communication kernels: its name pattern, how to read the op, and where the names come from."""

    family: str
    library: str
    pattern: str
    op: str = ""            # the op when the name's words spell none ("" = unknown: ask the args / CPU op)
    what: str = ""
    source: str = ""
    exclude: str = ""       # kernels of the library that match `pattern` but only compute locally

    def compiled(self) -> tuple[re.Pattern, Optional[re.Pattern]]:
        return re.compile(self.pattern), (re.compile(self.exclude) if self.exclude else None)


#: Built-in families, tried in order (the first match wins). Each row's `source` says where its names were read.
FAMILIES: tuple[CommFamily, ...] = (
    CommFamily("nccl", "NCCL / RCCL",
               _B + r"(?:nccl|rccl)\w*Kernel",
               what="NCCL collectives and send/recv in every era: ncclAllReduceRingLLKernel_sum_f32 (≤ 2.6), "
                    "ncclKernel_AllReduce_RING_LL_Sum_float(…) (2.7-2.18), ncclDevKernel_AllGather_RING_LL(…) "
                    "(2.19+), ncclSymkDevKernel_AllReduce_… "
                    "(2.27+ symmetric kernels); RCCL's ncclDevKernel_Generic / _Generic_1 carry no op "
                    "(read from the args or the launching CPU op)",
               source="NVIDIA/nccl src/device (kernel name macros); corpus traces param-dlrm_kineto, "
                      "hta-single_rank, tracelens b200 and mi300 (RCCL)"),
    CommFamily("msccl", "MSCCL (Microsoft, and RCCL's built-in MSCCL)", _B + r"mscclKernel_",
               what="mscclKernel_<redop>_<type>_<proto>[_<fullOps>](ncclDevComm*, mscclAlgo*, mscclWork*): the name "
                    "gives the reduction, not the collective (op from the launching CPU op)",
               source="microsoft/msccl and ROCm/rccl src msccl kernel entry macro; public kernel tables of "
                      "MI300X vLLM traces"),
    CommFamily("mscclpp", "MSCCL++", r"mscclpp::",
               what="MSCCL++ kernels (allreduce7/8, allgather6/8, …) whose signature takes mscclpp:: device "
                    "handles (MemoryChannel, PortChannel, DeviceSyncer)",
               source="microsoft/mscclpp apps/nccl and test kernels (device handle types in every signature)"),
    CommFamily("deepep", "DeepEP (expert-parallel all-to-all)",
               _B + r"(?:deep_ep|dpsk::ep)::(?:intranode|internode|internode_ll)::"
                    r"(?:\w*dispatch\w*|\w*combine\w*|\w*notify\w*|barrier|clean\w*)",
               op="alltoall",
               exclude=r"get_dispatch_layout",
               what="MoE token dispatch/combine over NVLink and RDMA: deep_ep::intranode::dispatch, "
                    "internode::notify_dispatch / cached_notify / combine, internode_ll::dispatch (low latency); "
                    "DeepSeek's own builds name them dpsk::ep::internode::dispatch<…>, …::dispatch_ll, "
                    "…::combine_ll. get_dispatch_layout (routing statistics, local) is compute",
               source="deepseek-ai/DeepEP csrc/kernels/{intranode,internode,internode_ll}.cu; kernel names of "
                      "deepseek-ai/profile-data train/prefill/decode traces as quoted by public analyses"),
    CommFamily("nvshmem", "NVSHMEM / rocSHMEM",
               _B + r"(?:nvshmemi?_\w+|nvshmemx_\w+|rocshmem_\w+)|" + _B +
               r"(?:rdxn|broadcast\d*|fcollect|alltoall|barrier|sync|reducescatter)\w*_on_stream_kernel",
               what="NVSHMEM on-stream collectives (rdxn_<type>_<op>_on_stream_kernel, fcollect…, "
                    "alltoall…, barrier_on_stream_kernel) and its internal nvshmemi_* kernels",
               source="NVIDIA NVSHMEM src/host/coll (ON_STREAM_KERNEL macros); ROCm rocSHMEM"),
    CommFamily("symm_mem", "PyTorch symmetric memory (torch.distributed._symmetric_memory)",
               _B + r"(?:multimem_\w+_kernel|(?:one|two)_shot_\w*(?:reduce|gather)\w*_kernel|"
                    r"(?:all_to_all_vdev\w*|allToAllV\w*|exchangeSplitAndOffset\w*)\b)",
               what="multimem_all_reduce_kernel<…>, multimem_one_shot_reduce_kernel, multimem_all_gather_kernel, "
                    "one_shot_all_reduce_kernel, two_shot_all_reduce_kernel, all_to_all_vdev (NVSHMEM based); also "
                    "every kernel launched by a symm_mem::* CPU op",
               source="pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu, "
                      "nvshmem_extension.cu; corpus trace tracelens b200 (vLLM TP=8)"),
    CommFamily("custom_allreduce", "vLLM / SGLang / AITER / TensorRT-LLM custom all-reduce",
               _B + r"(?:\w+::)*(?:cross_device_reduce_[12]stage|(?:one|two)ShotAllReduce\w*|"
                    r"allreduce_fusion_kernel\w*|\w*lamport\w*all_?reduce\w*|quickreduce::\w+|"
                    r"custom_all_reduce\w*)",
               op="allreduce",
               what="one-shot / two-shot all-reduce over CUDA IPC or NVLink: vllm::cross_device_reduce_1stage / "
                    "_2stage, sglang:: and aiter:: copies of them, tensorrt_llm oneShotAllReduceKernel / "
                    "twoShotAllReduceKernel / allreduce_fusion_kernel_*, vLLM ROCm quickreduce::",
               source="vllm-project/vllm csrc/custom_all_reduce.cuh, csrc/quickreduce; sgl-project/sglang and "
                      "ROCm/aiter copies; NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/customAllReduceKernels.cu; "
                      "public MI300X trace kernel tables (aiter::cross_device_reduce_2stage)"),
    CommFamily("userbuffers", "TransformerEngine userbuffers (comm-GEMM overlap)",
               _B + r"k?userbuffers_\w+", op="allreduce",
               what="userbuffers_fp16_sum_inplace_gpu_rw / _rr / _rr_rs / _rw_ag / _mc (all-reduce, reduce-scatter, "
                    "all-gather, multicast), kuserbuffers_pushsend / pullrecv / pushsendrecv (ring exchange)",
               source="NVIDIA/TransformerEngine transformer_engine/common/comm_gemm_overlap/userbuffers/"
                      "userbuffers.cu; kernel names in public Megatron traces (userbuffers_fp16_sum_inplace_gpu_rr_rs<2>)"),
    CommFamily("oneccl", "Intel oneCCL (XPU)", _B + r"oneccl_\w+",
               what="oneCCL SYCL kernels: oneccl_allreduce_*, oneccl_reduce_scatter_large_read, "
                    "oneccl_alltoall_write_aligned, oneccl_invoke_barrier, oneccl_kernel_memcpy_typed (its copies "
                    "between ranks)",
               source="oneapi-src/oneCCL src/coll/algorithms/*/sycl (parallel_for<oneccl_…> kernel names)"),
)


def op_from_words(name: str) -> str:
    """The collective a kernel name spells in words (all_gather, _rs, fcollect, …); 'unknown' when none."""
    for rx, op in _WORD_RE:
        if rx.search(name):
            return op
    return "unknown"


class CommKernelTable:
    """Matches kernel names against user patterns (first) and the built-in families; results cached per name."""

    def __init__(self, extra: Iterable[CommFamily] = ()) -> None:
        self.families = tuple(extra) + FAMILIES
        self._compiled = [(f, *f.compiled()) for f in self.families]
        self._cache: dict[str, Optional[tuple[str, str]]] = {}

    def match(self, name: str) -> Optional[tuple[str, str]]:
        """(family, op) for a communication kernel, None for anything else; op may be 'unknown'."""
        hit = self._cache.get(name, 0)
        if hit != 0:
            return hit  # type: ignore[return-value]
        out = None
        for fam, rx, ex in self._compiled:
            if rx.search(name) and not (ex is not None and ex.search(name)):
                if fam.family == "nccl":
                    op = _nccl_op(name)
                else:
                    op = op_from_words(_short(name))
                    if op == "unknown" and fam.op:
                        op = fam.op
                out = (fam.family, op)
                break
        self._cache[name] = out
        return out


_NCCL_OP = re.compile(r"nccl(?:Symk)?(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)


def _nccl_op(name: str) -> str:
    m = _NCCL_OP.search(name)
    if m:
        return "unknown" if m.group(1).lower() == "generic" else normalise_op(m.group(1))
    return op_from_words(_short(name))  # ncclAllReduceRingLLKernel_sum_f32 (NCCL ≤ 2.6)


def _short(name: str) -> str:
    """The kernel's qualified name without its parameter list (``(anonymous namespace)`` kept out of the way)."""
    return name.replace("(anonymous namespace)", "anon").split("(")[0]


DEFAULT_TABLE = CommKernelTable()


def op_from_kernel_name(kernel: str) -> str:
    """The op a communication kernel's name spells (``ncclKernel_AllReduce_RING_LL_Sum_float`` → allreduce,
    ``userbuffers_fp16_sum_inplace_gpu_rr_rs<2>`` → reducescatter); 'unknown' for other kernels or when the name
    does not say (RCCL's ``ncclDevKernel_Generic``). The families: FAMILIES above."""
    hit = DEFAULT_TABLE.match(kernel)
    return hit[1] if hit is not None else "unknown"


def user_families(rows: Iterable[dict]) -> tuple[CommFamily, ...]:
    """CommFamily rows from configuration dicts {pattern, op?, family?}; raises ValueError naming the bad entry."""
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not isinstance(r.get("pattern"), str) or not r["pattern"]:
            raise ValueError(f"comm-kernels entry {i + 1}: needs a non-empty string 'pattern'")
        extra = set(r) - {"pattern", "op", "family"}
        if extra:
            raise ValueError(f"comm-kernels entry {i + 1}: unknown key(s) {sorted(extra)} (known: pattern, op, family)")
        try:
            re.compile(r["pattern"])
        except re.error as exc:
            raise ValueError(f"comm-kernels entry {i + 1}: pattern {r['pattern']!r} is not a regular expression "
                             f"({exc})") from None
        op = r.get("op", "")
        if op and (not isinstance(op, str) or op not in OPS):
            raise ValueError(f"comm-kernels entry {i + 1}: op {op!r} is not one of {', '.join(OPS)}")
        fam = r.get("family", "user")
        if not isinstance(fam, str) or not fam:
            raise ValueError(f"comm-kernels entry {i + 1}: family must be a non-empty string")
        out.append(CommFamily(fam, "user pattern", r["pattern"], op=op, what="[tool.analyze] comm-kernels",
                              source="configuration"))
    return tuple(out)


def table_for(rows: Optional[Iterable[dict]]) -> CommKernelTable:
    """The table with the user's patterns first (the default table when there are none)."""
    rows = list(rows or [])
    return CommKernelTable(user_families(rows)) if rows else DEFAULT_TABLE


def markdown_table() -> str:
    """The documented table (docs/metrics.md, "Communication kernels"): family, library, op, what, source."""
    lines = ["| family | library | op | kernels | names read from |", "|---|---|---|---|---|"]
    for f in FAMILIES:
        op = f"from the name, else {f.op}" if f.op else "from the name (else args / CPU op)"
        lines.append(f"| `{f.family}` | {f.library} | {op} | {f.what} | {f.source} |")
    return "\n".join(lines) + "\n"
