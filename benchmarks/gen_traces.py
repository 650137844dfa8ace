"""Write large, realistic modern Kineto traces by streaming (benchmark input when no simulator scale mode).

Each rank gets a PyTorch-2.x-style trace: header with deviceProperties/distributedInfo(pg_config), then per
training step python_function frames, cpu_op trees, cudaLaunchKernel runtime calls with ac2g flow pairs,
compute kernels on stream 7, gradient all-reduces (record_param_comms + ncclDevKernel on stream 20) that
overlap the backward pass, a memcpy, ProfilerStep#N on the CPU and GPU tracks. The layout and argument sets
follow what real Kineto writes (one event per line block, ns-fraction µs timestamps, baseTimeNanoseconds).

    python benchmarks/gen_traces.py --ranks 8 --mb-per-rank 200 --out bench-data/r8x200 [--gzip]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

KERNELS = [
    "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass_80_tensorop_s1688gemm_"
    "128x128_32x3_nn_align4::Params)",
    "ampere_sgemm_128x64_tn",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, "
    "at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, "
    "at::detail::Array<char*, 2>)",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, "
    "float const*, float const*, float*, float*, float*)",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::AddFunctor<float> >"
    "(at::TensorIteratorBase&, at::native::AddFunctor<float> const&)::{lambda(int)#1}>(int, "
    "at::native::gpu_kernel_impl<at::native::AddFunctor<float> >(at::TensorIteratorBase&, "
    "at::native::AddFunctor<float> const&)::{lambda(int)#1})",
]
OPS = [("aten::linear", "aten::addmm"), ("aten::matmul", "aten::mm"), ("aten::gelu", "aten::gelu"),
       ("aten::layer_norm", "aten::native_layer_norm"), ("aten::add", "aten::add")]
PYFUNCS = ["torch/nn/modules/module.py(1736): _call_impl", "torch/nn/modules/linear.py(125): forward",
           "model.py(88): forward", "torch/nn/functional.py(2900): layer_norm"]

EVENT_X = ('  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},\n'
           '    "ts": {ts:.3f}, "dur": {dur:.3f},\n    "args": {{\n      {args}\n    }}\n  }}')
FLOW = ('  {{\n    "ph": "{ph}", "id": {id}, "pid": {pid}, "tid": {tid}, "ts": {ts:.3f},\n'
        '    "cat": "ac2g", "name": "ac2g"{bp}\n  }}')


def header(rank: int, world: int, base_ns: int) -> str:
    props = [{"id": i, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85031714816, "computeMajor": 9,
              "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
              "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132,
              "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448,
              "sharedMemPerMultiprocessor": 233472} for i in range(8)]
    ranks = list(range(world))
    dist = {"backend": "nccl", "rank": rank, "world_size": world, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                           "pg_size": world, "ranks": ranks if world <= 64 else []}],
            "nccl_version": "2.21.5"}
    head = {"schemaVersion": 1, "deviceProperties": props, "distributedInfo": dist, "record_shapes": 1,
            "with_stack": 1, "profile_memory": 0, "traceName": f"rank{rank}.pt.trace.json",
            "displayTimeUnit": "ms", "baseTimeNanoseconds": str(base_ns)}
    return json.dumps(head, indent=2)[:-2] + ',\n  "traceEvents": [\n'


class RankWriter:
    """Emits one rank's events step by step until the byte budget is used."""

    def __init__(self, rank: int, world: int, seed: int):
        self.rank, self.world = rank, world
        self.rng = random.Random(seed * 100003 + rank)
        self.pid, self.tid, self.dev = 1000 + rank, 1000 + rank, rank % 8
        self.ext = 1_000_000  # real ids are process-wide counters, far past int16 (HTA downcasts columns)
        self.corr = 2_000_000
        self.t = 1000.0 + self.rng.random() * 50  # µs since baseTimeNanoseconds
        self.gpu_t = self.t

    def x(self, cat, name, pid, tid, ts, dur, args) -> str:
        return EVENT_X.format(cat=cat, name=name, pid=pid, tid=tid, ts=ts, dur=dur, args=args)

    def launch(self, out: list[str], name: str, ts: float, stream: int, comm: str = "") -> float:
        """cudaLaunchKernel + ac2g flow pair + kernel; returns the kernel end."""
        c, e = self.corr, self.ext
        self.corr += 1
        out.append(self.x("cuda_runtime", "cudaLaunchKernel", self.pid, self.tid, ts, 4.123,
                          f'"External id": {e},"cbid": 211, "correlation": {c}'))
        out.append(FLOW.format(ph="s", id=c, pid=self.pid, tid=self.tid, ts=ts, bp=""))
        k_start = max(self.gpu_t if not comm else ts + 6.0, ts + 5.0)
        dur = self.rng.uniform(20, 300) if not comm else self.rng.uniform(400, 2500)
        out.append(FLOW.format(ph="f", id=c, pid=self.dev, tid=stream, ts=k_start, bp=', "bp": "e"'))
        args = (f'"External id": {e},\n      "queued": 0, "device": {self.dev}, "context": 1,\n      '
                f'"stream": {stream}, "correlation": {c},\n      "registers per thread": 128, '
                f'"shared memory": 49152,\n      "blocks per SM": 1.939394, "warps per cycle": 15.515151,\n'
                f'      "grid": [256, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %": 25')
        if comm:
            args += comm
        out.append(self.x("kernel", name, self.dev, stream, k_start, dur, args))
        if not comm:
            self.gpu_t = k_start + dur
        return k_start + dur

    def step(self, n: int) -> list[str]:
        """Events of training step ``n`` (ProfilerStep#n on the CPU and GPU tracks, and everything inside)."""
        out: list[str] = []
        rng = self.rng
        step_start = self.t
        step_ext = self.ext
        self.ext += 1
        body: list[str] = []
        gpu_step_start = max(self.gpu_t, step_start + 10)
        comm_args_base = (',\n      "Collective name": "allreduce", "In msg nelems": {n}, "Out msg nelems": {n},'
                          '\n      "Group size": {g}, "dtype": "Float", "In split size": "[]", '
                          '"Out split size": "[]",\n      "Process Group Name": "0", '
                          '"Process Group Description": "default_pg", "Process Group Ranks": "[0, ..., {last}]"')
        t = step_start + 5
        for layer in range(24):
            for phase in ("fwd", "bwd"):
                for k in range(3):
                    outer, inner = OPS[(layer + k) % len(OPS)]
                    kname = KERNELS[(layer * 3 + k) % len(KERNELS)]
                    py = PYFUNCS[k % len(PYFUNCS)]
                    body.append(self.x("python_function", py, self.pid, self.tid, t, 60.0, '"Python id": 1, '
                                       '"Python parent id": 0, "Python thread": 0'))
                    e0 = self.ext
                    body.append(self.x("cpu_op", outer if phase == "fwd" else outer + "_backward", self.pid,
                                       self.tid, t + 1, 40.0,
                                       f'"External id": {e0},"Record function id": 0, "Sequence number": {e0}, '
                                       f'"Fwd thread id": 0, "Ev Idx": {e0},\n      "Input Dims": [[4096, 1024], '
                                       f'[1024, 1024]], "Input type": ["float", "float"], "Input Strides": '
                                       f'[[1024, 1], [1024, 1]], "Concrete Inputs": ["", ""]'))
                    self.ext += 1
                    body.append(self.x("cpu_op", inner, self.pid, self.tid, t + 3, 30.0,
                                       f'"External id": {self.ext},"Record function id": 0, "Ev Idx": {self.ext}'))
                    body.append(self.x("cpu_op", "aten::empty", self.pid, self.tid, t + 4, 2.0,
                                       f'"External id": {self.ext + 1},"Record function id": 0'))
                    self.ext += 2
                    self.launch(body, kname, t + 20, 7)
                    t += 60.0 + rng.uniform(0, 5)
                if phase == "bwd" and layer % 4 == 3:
                    nelems = rng.choice([1 << 20, 1 << 22, 1 << 24])
                    body.append(self.x("cpu_op", "record_param_comms", self.pid, self.tid, t, 30.0,
                                       f'"External id": {self.ext},"Record function id": 0, '
                                       f'"Collective name": "allreduce", "dtype": "Float", "Group size": '
                                       f'{self.world}, "Process Group Name": "0"'))
                    self.ext += 1
                    self.launch(body, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                                t + 10, 20, comm_args_base.format(n=nelems, g=self.world, last=self.world - 1))
                    t += 40
        m = rng.uniform(5, 50)
        body.append(self.x("cuda_runtime", "cudaMemcpyAsync", self.pid, self.tid, t, 8.0,
                           f'"External id": {self.ext},"cbid": 41, "correlation": {self.corr}'))
        body.append(self.x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", self.dev, 7, self.gpu_t + 1, m,
                           f'"External id": {self.ext},\n      "device": {self.dev}, "context": 1,\n      "stream": 7, '
                           f'"correlation": {self.corr},\n      "bytes": 4096, "memory bandwidth (GB/s)": 0.5'))
        self.corr += 1
        self.ext += 1
        self.gpu_t += m + 2
        t += 20
        step_end = max(t, self.gpu_t) + rng.uniform(0, 30)
        out.append(self.x("user_annotation", f"ProfilerStep#{n}", self.pid, self.tid, step_start,
                          step_end - step_start, f'"External id": {step_ext},"Record function id": 0, '
                          f'"Ev Idx": {step_ext}'))
        out.append(self.x("gpu_user_annotation", f"ProfilerStep#{n}", self.dev, 7, gpu_step_start,
                          self.gpu_t - gpu_step_start, f'"External id": {step_ext}'))
        out.extend(body)
        self.t = step_end + 1
        return out


def write_rank(path: Path, rank: int, world: int, mb: float, seed: int, use_gzip: bool) -> int:
    """Stream one rank's trace to ``path`` until it holds ~``mb`` MB; returns the uncompressed size."""
    budget = int(mb * 1e6)
    w = RankWriter(rank, world, seed)
    base_ns = 1_700_000_000_000_000_000 + rank * 1_000_000
    opener = (lambda p: gzip.open(p, "wb", compresslevel=1)) if use_gzip else (lambda p: open(p, "wb"))
    size = 0
    with opener(path) as fh:
        head = header(rank, world, base_ns).encode()
        fh.write(head)
        size += len(head)
        meta = (f'  {{\n    "name": "process_name", "ph": "M", "ts": 0.000, "pid": {w.pid}, "tid": 0,\n'
                f'    "args": {{\n      "name": "python3.11"\n    }}\n  }},\n'
                f'  {{\n    "name": "thread_name", "ph": "M", "ts": 0.000, "pid": {w.dev}, "tid": 7,\n'
                f'    "args": {{\n      "name": "stream 7 "\n    }}\n  }}').encode()
        fh.write(meta)
        size += len(meta)
        n = 100
        while size < budget:
            block = (",\n" + ",\n".join(w.step(n))).encode()
            fh.write(block)
            size += len(block)
            n += 1
        tail = b'\n],\n  "traceName": "rank%d.pt.trace.json"\n}\n' % rank
        fh.write(tail)
        size += len(tail)
    return size


def _one(a):
    return write_rank(*a)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--mb-per-rank", type=float, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--gzip", action="store_true", help="write .json.gz (level 1)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    ext = ".pt.trace.json.gz" if a.gzip else ".pt.trace.json"
    work = [(out / f"rank{r}{ext}", r, a.ranks, a.mb_per_rank, a.seed, a.gzip) for r in range(a.ranks)]
    with ProcessPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        sizes = list(pool.map(_one, work, chunksize=1))
    print(f"wrote {a.ranks} ranks, {sum(sizes) / 1e6:.1f} MB uncompressed, to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
