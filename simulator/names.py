"""Names as each real format spells them: NCCL kernels, Kineto args, FR profiling names, NCCL enums."""
from __future__ import annotations

KINETO_DTYPE = {"f32": "Float", "bf16": "BFloat16", "f16": "Half", "f64": "Double", "i64": "Long", "i32": "Int",
                "u8": "Byte"}
NCCL_DTYPE = {"u8": 1, "i32": 2, "i64": 4, "f16": 6, "f32": 7, "f64": 8, "bf16": 9}
OLD_KERNEL_DTYPE = {"f32": "float", "bf16": "__nv_bfloat16", "f16": "half", "f64": "double", "i64": "int64_t",
                    "i32": "int32_t", "u8": "uint8_t"}
KINETO_COLL = {"allreduce": "allreduce", "allgather": "_allgather_base", "reducescatter": "_reduce_scatter_base",
               "alltoall": "all_to_allv", "send": "send", "recv": "recv"}
FR_NAME = {"allreduce": "nccl:all_reduce", "allgather": "nccl:_allgather_base",
           "reducescatter": "nccl:_reduce_scatter_base", "alltoall": "nccl:all_to_all"}
OPTYPE = {"allreduce": "ALLREDUCE", "allgather": "_ALLGATHER_BASE", "reducescatter": "_REDUCE_SCATTER_BASE",
          "alltoall": "ALLTOALL", "send": "SEND", "recv": "RECV"}
NCCL_OP = {"allreduce": "AllReduce", "allgather": "AllGather", "reducescatter": "ReduceScatter",
           "send": "Send", "recv": "Recv", "alltoall": "AlltoAll"}
DDP_FRAMES = {
    "allreduce": ("all_reduce", 2501), "allgather": ("all_gather_into_tensor", 3799),
    "reducescatter": ("reduce_scatter_tensor", 4247), "alltoall": ("all_to_all_single", 4388),
    "send": ("isend", 2068), "recv": ("irecv", 2113),
}


def proto(nbytes: int) -> str:
    return "LL" if nbytes < 65536 else "LL128" if nbytes < 4 << 20 else "SIMPLE"


def kernel_name(op: str, dtype: str, nbytes: int, old: bool) -> str:
    """`ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)` (NCCL ≥2.19) or `ncclKernel_AllReduce_RING_LL_Sum_float(...)`."""
    pr = proto(nbytes)
    if old:
        t = OLD_KERNEL_DTYPE[dtype]
        if op in ("send", "recv", "alltoall"):
            return "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"
        if op == "allgather":
            return f"ncclKernel_AllGather_RING_{pr}_Sum_int8_t(ncclWorkElem)"
        nm = "AllReduce" if op == "allreduce" else "ReduceScatter"
        return f"ncclKernel_{nm}_RING_{pr}_Sum_{t}(ncclWorkElem)"
    sig = "(ncclDevComm*, unsigned long, ncclWork*)"
    if op in ("send", "recv", "alltoall"):
        return "ncclDevKernel_SendRecv" + sig
    if op == "allgather":
        return f"ncclDevKernel_AllGather_RING_{pr}" + sig
    nm = "AllReduce" if op == "allreduce" else "ReduceScatter"
    return f"ncclDevKernel_{nm}_Sum_{dtype}_RING_{pr}" + sig
