"""The hang post-mortem's output types: one diagnosis per root cause, and the report holding them."""
from __future__ import annotations

from dataclasses import dataclass, field

from parsers.table import Table

Evidence = tuple[str, "int | None", str]
KIND_ALIASES = {"stalled_rank": "lagging_rank", "skipped_rank": "missing_rank"}  # other tools' names → ours
FIX = {
    "mismatched_op": "Make every rank of the group issue the same collective at this point: look for a collective "
                     "inside a rank-dependent branch (if rank == …) at the culprit's stack frame.",
    "order_mismatch": "Issue collectives in the same order on every rank (e.g. iterate parameters/buckets in a "
                      "deterministic order; do not order by dict/set iteration or by rank-dependent conditions).",
    "extra_collective": "Remove the collective only the culprit rank issues, or make the other ranks issue it too.",
    "skipped_collective": "The culprit skipped a collective the others issued; make the collective unconditional "
                          "(or the skip collective on every rank).",
    "mismatched_size": "Pass tensors of the same shape on every rank; for an uneven last batch use "
                       "DataLoader(drop_last=True) / DistributedSampler(drop_last=True) or pad the batch.",
    "mismatched_dtype": "Cast to one dtype before the collective on every rank (mixed-precision settings differ?).",
    "missing_rank": "The culprit never joined this collective: check its log for where it went (an uneven number of "
                    "batches → drop_last=True / join(); an early exit or exception on that rank).",
    "lagging_rank": "The culprit stopped issuing work (stalled): look at its last log lines and stack (data loader, "
                    "I/O, deadlock, GPU hang); py-spy dump on a live job shows where it sits.",
    "device_stalled": "The culprit's own GPU work stopped completing while its peers completed the same "
                      "collectives: check that GPU (dmesg / nvidia-smi for Xid and ECC errors, a hung kernel, "
                      "a CUDA error in its stderr) and drain or replace the node.",
    "crashed_rank": "The culprit died (no dump, no further log): read its last log lines / exit code for the "
                    "exception or signal, fix that, and restart.",
    "order_inversion": "Two process groups are used in a different order on different ranks (rank A enters group "
                       "X then Y, rank B Y then X): issue the groups' collectives in one fixed order on every rank.",
    "deadlock": "These ranks wait for each other: make the send/recv (or collective) order consistent, e.g. "
                "even ranks send first and odd ranks receive first, or use batch_isend_irecv.",
    "p2p_mismatch": "A send has no matching recv (wrong peer, wrong tag, or a recv that is never posted): make "
                    "every send/recv pair agree on peer, tag, shape and dtype.",
    "stuck_p2p": "Both ranks posted the transfer and neither completed: suspect the link between them (NCCL "
                 "WARN lines, NIC/NVLink errors) or a GPU that stopped on one side.",
    "nccl_error": "Fix the NCCL/network error on the culprit rank (see its last WARN lines), then restart.",
    "watchdog_timeout": "No cross-rank divergence was visible: check for a slow or stuck rank outside collectives, "
                        "or raise the timeout if the work is legitimately long.",
    "rendezvous_failure": "The job never formed: check MASTER_ADDR/MASTER_PORT (a port already in use, a wrong "
                          "address, a firewall) and that every node started within the rendezvous timeout.",
}


@dataclass
class HangDiagnosis:
    """One root cause of a hang or crash: where ranks diverge, who is responsible, who waits, evidence and fix.

    `tie` is True when the evidence cannot tell which of `culprit_ranks` is wrong (they are suspects, and the
    confidence stays below 0.5). `waiting_ranks` are the members of `process_group` (as the dumps' group tables
    give them) that wait on this root; `explains` lists the waits this root causes elsewhere (group, seq, waiting
    ranks, whom they wait for) — the chain from the symptom to this head.
    """

    kind: str
    process_group: str
    pg_desc: str
    seq: int | None
    op: str
    culprit_ranks: list[int]
    waiting_ranks: list[int]
    ops: dict[int, str] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    dtypes: dict[int, str] = field(default_factory=dict)
    evidence: list[Evidence] = field(default_factory=list)
    cause: str = ""
    fix: str = ""
    source: str = ""
    blocked_by: str = ""
    confidence: float = 0.5
    tie: bool = False
    p2p: dict | None = None
    explains: list[dict] = field(default_factory=list)


@dataclass
class HangReport:
    """Ranked diagnoses (most likely root cause first), per-group per-rank progress, groups, ranks without a dump."""

    diagnoses: list[HangDiagnosis]
    tables: Table
    groups: Table
    seqs: Table
    warnings: list[str] = field(default_factory=list)
    ranks_without_dump: dict[int, str] = field(default_factory=dict)
    waits: Table = field(default_factory=Table)
    #: what saved NCCL RAS reports held and the facts drawn from them (analyzer/hang/ras.py); {} without any
    ras: dict = field(default_factory=dict)
