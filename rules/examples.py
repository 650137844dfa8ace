"""One example finding per rule, as `analyze --explain ID` shows it: what a user would read in a report (the
numbers are illustrative, the wording is the rule's)."""
from __future__ import annotations

EXAMPLES: dict[str, str] = {
    "BASE001": "Step time regressed 12.4 % against the baseline (41.2 ms → 46.3 ms; threshold +5 %): "
               "ncclDevKernel_AllReduce +3.9 ms per step",
    "BASE002": "Exposed communication of the dp role rose from 4.1 % to 11.8 % of the step (threshold +5 points)",
    "BASE003": "Bus bandwidth of allreduce in group 0 fell 31 % against the baseline (182 → 126 GB/s)",
    "BASE004": "The baseline is a job of another shape: tp=4 there, tp=8 here; no regression verdict",
    "CLOCK001": "Rank clocks aligned with a 0.8 ms residual: cross-rank waits below that are uncertain",
    "COMM001": "dp communication overlaps compute only 22 % (threshold 90 %): 9.1 % of the step is exposed",
    "COMM002": "dp transfer takes 38 % of every step (threshold 25 %)",
    "COMM003": "Group 0 issues 212 all-reduces per step of 0.3 MB on average: latency-bound (bucket_cap_mb too small)",
    "HANG001": "Mismatched collective in group 0 at seq 1842: rank 3 calls allgather, ranks 0-2, 4-7 allreduce",
    "HANG002": "Rank 5 never joined allreduce seq 911 of group 0; ranks 0-4, 6-7 wait in it",
    "HANG003": "NCCL error on rank 2: ncclRemoteError (a peer closed the connection); its peers then time out",
    "HANG004": "Watchdog timeout on ranks 0-7: allreduce seq 911 ran 600 s (the timeout)",
    "HANG005": "Deadlock: rank 0 waits in group tp for rank 1, which waits in group dp for rank 0",
    "HANG006": "Rank 6's GPU work stopped completing: its last completed seq is 2040, its peers completed 2043",
    "HANG007": "The job could not form: the rendezvous store on node0:29500 refused connections (EADDRINUSE)",
    "INPUT001": "2 input files could not be read (rank3.json: unreadable gzip); the analysis covers the rest",
    "INPUT002": "rank5.pt.trace.json was cut off mid-write; steps 12-15 of rank 5 are left out of the metrics",
    "INPUT003": "Ranks 8-15 are missing from the inputs (world size 16, 8 traces read)",
    "INPUT004": "run1/rank0.json and run2/rank0.json both claim rank 0; the first was used",
    "INPUT005": "The inputs hold 2 jobs (sub-folders run1, run2); run2 (8 ranks) was analysed",
    "INPUT006": "Backend nccl but no GPU activity in the traces of ranks 0-7: profile with ProfilerActivity.CUDA",
    "LOAD001": "Rank 7 is a straggler: a slower GPU — the others waited for it alone 1.30 ms per step "
               "(8.1 % of the step; threshold 5 %)",
    "LOAD002": "Step time differs across ranks: step spread 45.8 % (threshold 5 %), the step waited for rank 7",
    "LOAD003": "GPU idle up to 78.7 % of step time on ranks 0-7: the host does not keep it busy (threshold 15 %)",
    "LOAD004": "In step 99 ranks 4-7 computed 61 % less than the others (a short last batch)",
    "LOAD005": "Rank 3 recorded steps 10-12, its peers 10-15: ranks are compared on steps 10-12",
    "MOE001": "Rank 2 receives 2.4× the median all-to-all bytes of its expert-parallel group",
    "NCCL001": "NCCL WARN on ranks 0-3: misc/socket.cc:540 Net : Connection closed by remote peer",
    "NET001": "Tensor-parallel group tp0 (ranks 0-7) spans hosts node0 and node1",
    "NET002": "NCCL uses NET/Socket between nodes (NCCL_IB_DISABLE=1)",
    "NET003": "NCCL_SOCKET_IFNAME=docker0: NCCL data goes over a container bridge",
    "NET004": "allreduce in group 0 reaches 42 GB/s bus bandwidth, 23 % of the 180 GB/s its NVLink delivers",
    "PIPE001": "Pipeline bubble 41 % against the schedule's 27 % (1f1b, p=4 m=8)",
    "PIPE002": "m=4 micro-batches over p=4 stages: the schedule alone idles 43 % of every stage (m ≥ 16 keeps it "
               "under 20 %)",
    "SYNC001": "Rank 3 lacks allreduce #57 of group 0 that ranks 0-2 ran (step 12)",
    "SYNC002": "Rank 0 calls allreduce #3 of group 0 after its forward, its peers before theirs: they wait 4.2 ms",
}
