"""Per-rank programs: the ordered CPU-side calls of each training step, built from the schedule, then faulted."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Optional

from simulator.cost import DTYPE_BYTES
from simulator.topology import Topology

GEMM_F = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
GEMM_B = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
ATTN_F = ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
          "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>"
          "(flash::Flash_fwd_params)")
ATTN_B = ("void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, "
          "false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, false, false, false, "
          "false, true, false>(flash::Flash_bwd_params)")
ROUTER = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, c10::BFloat16, "
          "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)")
EXPERT = "cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)"
LOSS = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
        "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)")
TAIL = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >(int, "
        "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
        "at::detail::Array<char*, 2>)")
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, "
        "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, "
        "double, double, double, double, bool, double*, double*>(at::native::(anonymous namespace)::TensorListMetadata<4>, "
        "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, "
        "double, double, double, double, bool, double*, double*)")


@dataclass
class Coll:
    """One communication call on one rank (collective or one side of a send/recv)."""

    pg: str
    op: str                  # allreduce allgather reducescatter alltoall send recv
    in_n: int
    out_n: int
    dtype: str
    dep: bool = True         # comm stream waits for the compute stream at call time
    seq: int = 0             # collective_seq_id (collectives) or p2p_seq_id (p2p)
    peer: int = -1           # p2p peer (global rank)
    tag: tuple = ()          # p2p matching tag
    handle: int = -1
    extra: bool = False      # injected by a fault

    @property
    def is_p2p(self) -> bool:
        return self.op in ("send", "recv")


@dataclass
class Program:
    """One rank's ordered calls; ops are tuples (see engine.py)."""

    rank: int
    ops: list = field(default_factory=list)
    halt: Optional[str] = None   # "stalled" | "crashed" at the end of ops


class Builder:
    """Builds the per-rank programs for one scenario."""

    def __init__(self, cfg: dict, topo: Topology):
        self.cfg, self.topo = cfg, topo
        self.m = cfg["model"]
        self.q = 1000 if cfg["trace"]["format"] == "old" else 1
        self.rng = random.Random(cfg["seed"] * 7919 + 17)
        self.factor = {}           # rank -> compute multiplier
        self.step_factor = {}      # (rank, step) -> compute multiplier
        self.stall = {}            # (rank, step) -> extra data-loading ns
        self.hot = {}              # rank -> MoE imbalance factor
        for f in cfg["faults"]:
            if f["kind"] == "straggler":
                for r in f["ranks"]:
                    self.factor[r] = float(f.get("factor", 1.5))
            elif f["kind"] == "data_loader_stall":
                for r in f["ranks"]:
                    for s in f.get("steps") or self.steps():
                        self.stall[(r, s)] = int(f.get("delay_us", 5000) * 1000)
            elif f["kind"] == "uneven_last_batch":
                for r in f["ranks"]:
                    self.step_factor[(r, self.steps()[-1])] = float(f.get("fraction", 0.5))
            elif f["kind"] == "moe_imbalance":
                for r in f["ranks"]:
                    self.hot[r] = float(f.get("factor", 3.0))

    def steps(self) -> list[int]:
        return [self.cfg["first_step"] + i for i in range(self.cfg["steps"])]

    def quant(self, ns: float) -> int:
        return max(self.q, int(round(ns / self.q)) * self.q)

    def dur(self, rank: int, step: int, us: float) -> int:
        j = self.m["jitter"]
        x = us * 1000.0 * self.factor.get(rank, 1.0) * self.step_factor.get((rank, step), 1.0)
        if j:
            x *= 1.0 + self.rng.uniform(-j, j)
        return self.quant(x)

    # ---- pieces --------------------------------------------------------------------------------
    def _coll(self, ops, pg, op, in_n, out_n, dtype, dep=True, wait=False):
        c = Coll(pg.name, op, in_n, out_n, dtype, dep)
        ops.append(("c", c))
        if wait:
            ops.append(("w", c))
        return c

    def _tp(self, ops, rank, kind, chunks=1, wait=True):
        """The TP collective before (pre) or after (post) a kernel; one of ``chunks`` pieces of it."""
        tp = self.cfg["parallel"]["tp"]
        if tp < 2:
            return None
        g = self.topo.group_of("tp", rank)
        n = self.m["activation_elems"]
        if self.cfg["schedule"]["tp_comm"] == "sp":
            op, i, o = ("allgather", n // tp, n) if kind == "pre" else ("reducescatter", n, n // tp)
        else:
            if kind == "pre":
                return None
            op, i, o = "allreduce", n, n
        return self._coll(ops, g, op, i // chunks, o // chunks, self.m["dtype"], True, wait)

    def _tp_k(self, ops, rank, name, dur, tag, pre: bool, post: bool):
        """A compute kernel with the TP collective before it (``pre``: sequence-parallel all-gather) and after
        it (``post``: all-reduce / reduce-scatter), blocking — or, with ``schedule.tp_overlap`` = k ≥ 2, as
        comm-GEMM overlap (TransformerEngine / async TP): the kernel and its collectives split in k chunks, the
        all-gather of chunk j+1 running under kernel chunk j and the reduce of chunk j under chunk j+1 (the
        first gather and the last reduce stay exposed)."""
        k = int(self.cfg["schedule"].get("tp_overlap") or 0)
        if k < 2 or self.cfg["parallel"]["tp"] < 2:
            if pre:
                self._tp(ops, rank, "pre")
            ops.append(("k", name, dur, tag))
            if post:
                self._tp(ops, rank, "post")
            return
        pieces = [dur // k] * (k - 1) + [dur - (dur // k) * (k - 1)]
        gather = pre and self.cfg["schedule"]["tp_comm"] == "sp"
        if gather:
            self._tp(ops, rank, "pre", k, True)
        reduces = []
        for j, d in enumerate(pieces):
            nxt = self._tp(ops, rank, "pre", k, False) if gather and j + 1 < k else None
            ops.append(("k", name, d, tag))
            if post:
                reduces.append(self._tp(ops, rank, "post", k, False))
            if nxt is not None:
                ops.append(("w", nxt))
        for c in reduces:
            ops.append(("w", c))

    def _moe(self, ops, rank, step, us, fwd):
        if not self.cfg["schedule"]["moe"] or self.cfg["parallel"]["ep"] < 2:
            return
        g = self.topo.group_of("ep", rank)
        n = self.m["activation_elems"]
        ops.append(("k", ROUTER, self.dur(rank, step, us * 0.05), None))
        hot = self.hot.get(rank, 1.0)
        self._coll(ops, g, "alltoall", n, int(n * hot), self.m["dtype"], True, True)
        ex = self.cfg["schedule"]["moe_experts_us"] * (1 if fwd else 2) * hot
        ops.append(("k", EXPERT, self.dur(rank, step, ex), None))
        self._coll(ops, g, "alltoall", int(n * hot), n, self.m["dtype"], True, True)

    def layer_fwd(self, ops, rank, step, tag=None):
        f = self.m["fwd_us"]
        self._tp_k(ops, rank, GEMM_F, self.dur(rank, step, f * 0.3), tag, True, False)
        self._tp_k(ops, rank, ATTN_F, self.dur(rank, step, f * 0.3), tag, False, True)
        self._moe(ops, rank, step, f, True)
        self._tp_k(ops, rank, GEMM_F, self.dur(rank, step, f * 0.4), tag, True, True)

    def layer_bwd(self, ops, rank, step, tag=None):
        b = self.m["bwd_us"]
        self._tp_k(ops, rank, GEMM_B, self.dur(rank, step, b * 0.4), tag, True, True)
        self._moe(ops, rank, step, b, False)
        self._tp_k(ops, rank, ATTN_B, self.dur(rank, step, b * 0.3), tag, True, False)
        self._tp_k(ops, rank, GEMM_B, self.dur(rank, step, b * 0.3), tag, False, True)

    def loss(self, ops, rank, step, tag):
        us = self.m["loss_us"]
        us = self.m["fwd_us"] * 0.1 if us is None else us
        if us:
            ops.append(("k", LOSS, self.dur(rank, step, us), tag))

    def step_head(self, ops, rank, step):
        ops.append(("step", step))
        ops.append(("load", self.quant(self.cfg["cpu"]["dataload_us"] * 1000) + self.stall.get((rank, step), 0)))
        nbytes = self.m["input_bytes"]
        ops.append(("h2d", nbytes, self.quant(nbytes / 50.0 + 2000)))  # ~50 GB/s PCIe-ish

    def step_tail(self, ops, rank, step, handles):
        for c in handles:
            ops.append(("w", c))
        if self.m["optimizer_us"]:
            ops.append(("k", ADAM, self.dur(rank, step, self.m["optimizer_us"]), None))
        ops.append(("end",))

    def buckets(self, n_layers_elems: list[int]) -> list[tuple[int, int]]:
        """DDP buckets over gradients in reverse layer order: [(ready after layer index, elems)]."""
        es = DTYPE_BYTES[self.m["grad_dtype"]]
        cap = max(1, int(self.cfg["schedule"]["bucket_mb"] * 1024 * 1024 // es))
        out, cur = [], 0
        for li, p in n_layers_elems:
            rem = p
            while rem:
                take = min(rem, cap - cur)
                cur += take
                rem -= take
                if cur == cap:
                    out.append((li, cur))
                    cur = 0
        if cur:
            out.append((n_layers_elems[-1][0], cur))
        return out

    def grad_sync(self, ops, rank, after_layer=None, buckets=None, overlap=True):
        """Launch the DDP bucket all-reduces whose last layer is `after_layer` (or all when not overlapped)."""
        g = self.topo.group_of("dp", rank)
        out = []
        for li, n in buckets:
            if after_layer is None or (overlap and li == after_layer):
                out.append(self._coll(ops, g, "allreduce", n, n, self.m["grad_dtype"], True))
        return out

    # ---- schedules -----------------------------------------------------------------------------
    def build(self) -> list[Program]:
        kind = self.cfg["schedule"]["kind"]
        progs = []
        for r in range(self.topo.world):
            p = Program(r)
            for s in self.steps():
                if kind in ("ddp", "none"):
                    self.ddp_step(p.ops, r, s, kind == "ddp")
                elif kind == "fsdp":
                    self.fsdp_step(p.ops, r, s)
                else:
                    self.pp_step(p.ops, r, s)
            progs.append(p)
        return progs

    def params(self) -> int:
        return self.m["params_per_layer"] // self.cfg["parallel"]["tp"]

    def ddp_step(self, ops, r, s, ddp):
        L = self.m["layers"]
        self.step_head(ops, r, s)
        for li in range(L):
            self.layer_fwd(ops, r, s)
        self.loss(ops, r, s, None)
        dp = self.cfg["parallel"]["dp"]
        overlap = self.cfg["schedule"]["overlap"]
        bks = self.buckets([(li, self.params()) for li in reversed(range(L))]) if ddp and dp > 1 else []
        handles = []
        for li in reversed(range(L)):
            self.layer_bwd(ops, r, s)
            if overlap and bks:
                handles += self.grad_sync(ops, r, li, bks, True)
        if not overlap and bks:
            handles += self.grad_sync(ops, r, None, bks, False)
        if self.m["tail_us"]:
            ops.append(("k", TAIL, self.dur(r, s, self.m["tail_us"]), None))
        self.step_tail(ops, r, s, handles)

    def fsdp_step(self, ops, r, s):
        L, dp = self.m["layers"], self.cfg["parallel"]["dp"]
        g = self.topo.group_of("dp", r)
        P, dt = self.params(), self.m["dtype"]
        self.step_head(ops, r, s)
        ag = [None] * L
        ag[0] = self._coll(ops, g, "allgather", P // dp, P, dt, False)
        for li in range(L):
            ops.append(("w", ag[li]))
            if li + 1 < L:
                ag[li + 1] = self._coll(ops, g, "allgather", P // dp, P, dt, True)
            self.layer_fwd(ops, r, s)
        self.loss(ops, r, s, None)
        handles = []
        bg = [None] * L
        bg[L - 1] = self._coll(ops, g, "allgather", P // dp, P, dt, True)
        for li in reversed(range(L)):
            ops.append(("w", bg[li]))
            if li > 0:
                bg[li - 1] = self._coll(ops, g, "allgather", P // dp, P, dt, True)
            self.layer_bwd(ops, r, s)
            handles.append(self._coll(ops, g, "reducescatter", P, P // dp, self.m["grad_dtype"], True))
        self.step_tail(ops, r, s, handles)

    def pp_order(self, stage: int) -> list[tuple[str, int, int]]:
        """(F|B, chunk, microbatch) order on one stage for GPipe, 1F1B or Megatron's interleaved 1F1B."""
        sch = self.cfg["schedule"]
        p, m, v = self.cfg["parallel"]["pp"], sch["microbatches"], sch["virtual_stages"]
        if sch["kind"] == "pp_gpipe":
            return [("F", 0, i) for i in range(m)] + [("B", 0, i) for i in reversed(range(m))]
        total = m * v

        def f_of(k):
            return (k // p) % v, (k // (p * v)) * p + k % p

        def b_of(k):
            c, mb = f_of(k)
            return v - 1 - c, mb

        if v == 1:
            warm = min(p - stage - 1, m)
        else:
            warm = min((p - stage - 1) * 2 + (v - 1) * p, total)
        seq = [("F",) + f_of(k) for k in range(warm)]
        for i in range(total - warm):
            seq.append(("F",) + f_of(warm + i))
            seq.append(("B",) + b_of(i))
        seq += [("B",) + b_of(k) for k in range(total - warm, total)]
        return seq

    def pp_step(self, ops, r, s):
        p, v = self.cfg["parallel"]["pp"], self.cfg["schedule"]["virtual_stages"]
        L = self.m["layers"]
        per_chunk = L // (p * v)
        stage = self.topo.coords[r]["pp"]
        g = self.topo.group_of("pp", r)
        n, dt = self.m["activation_elems"], self.m["dtype"]
        self.step_head(ops, r, s)
        last_vs = p * v - 1
        for kind, c, mb in self.pp_order(stage):
            vs = c * p + stage
            tag = (kind, c, mb)
            if kind == "F":
                if vs > 0:
                    src = g.ranks[(vs - 1) % p]
                    rc = Coll(g.name, "recv", n, n, dt, True, peer=src, tag=("act", vs - 1, mb, s))
                    ops += [("c", rc), ("w", rc)]
                for _ in range(per_chunk):
                    self.layer_fwd(ops, r, s, tag)
                if vs == last_vs:
                    self.loss(ops, r, s, tag)
                else:
                    ops.append(("c", Coll(g.name, "send", n, n, dt, True, peer=g.ranks[(vs + 1) % p],
                                          tag=("act", vs, mb, s))))
            else:
                if vs < last_vs:
                    src = g.ranks[(vs + 1) % p]
                    rc = Coll(g.name, "recv", n, n, dt, True, peer=src, tag=("grad", vs + 1, mb, s))
                    ops += [("c", rc), ("w", rc)]
                for _ in range(per_chunk):
                    self.layer_bwd(ops, r, s, tag)
                if vs > 0:
                    ops.append(("c", Coll(g.name, "send", n, n, dt, True, peer=g.ranks[(vs - 1) % p],
                                          tag=("grad", vs, mb, s))))
        handles = []
        if self.cfg["parallel"]["dp"] > 1:
            bks = self.buckets([(li, self.params()) for li in range(per_chunk * v)])
            handles = self.grad_sync(ops, r, None, bks, False)
        self.step_tail(ops, r, s, handles)


def number(progs: list[Program]) -> None:
    """Assign collective_seq_id and p2p_seq_id per (rank, pg), PyTorch style (each group counts both from 1)."""
    for p in progs:
        seq: dict = {}
        p2p: dict = {}
        for op in p.ops:
            if op[0] != "c":
                continue
            c = op[1]
            if c.is_p2p:
                p2p[c.pg] = p2p.get(c.pg, 0) + 1
                c.seq = p2p[c.pg]
            else:
                seq[c.pg] = seq.get(c.pg, 0) + 1
                c.seq = seq[c.pg]
