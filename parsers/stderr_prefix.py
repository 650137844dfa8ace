"""The launcher text before a stderr line's content: srun labels, mpirun tags, timestamps, tee tags, `[rankN]:`.

One small module so the prefix grammar (docs/stderr.md, "Prefixes") lives in one place. Every regex is anchored
at the position it is tried and has bounded repetitions, so peeling costs O(prefix length).
"""
from __future__ import annotations

import re

MAX_PEEL = 8  # prefixes peeled per line at most (they nest: `0: [default1]:[rank1]: ...`)

# `[rank3]: ` from PyTorch's distributed excepthook and c10 logging (one space after the colon, if any, is part of it)
_RANK = re.compile(r"\[rank(\d{1,7})\]: ?")
# Open MPI `--tag-output`: `[1,3]<stderr>:`
_MPI = re.compile(r"\[\d{1,7},(\d{1,7})\]<std(?:out|err)>: ?")
# torchrun `--tee` / `--redirects` console tag `[<role><local_rank>]:` (role `default` unless set)
_TEE = re.compile(r"\[([A-Za-z_][A-Za-z0-9_.-]{0,40}?)(\d{1,7})\]:")
# TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[${rank}]:" gives `[3]:` (global rank); never alone on a line
_TEMPLATE = re.compile(r"\[(\d{1,7})\]:(?=.)")
# `srun --label`: `3: ` (right-aligned with spaces when there are 10+ tasks)
_SRUN = re.compile(r" {0,6}(\d{1,6}): ")
_ISO_TS = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)? ?")
_BRACKET_TS = re.compile(
    r"\[(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?| {0,8}\d{1,10}\.\d{1,9})\] ?")
_CTIME_TS = re.compile(r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4} ?")  # mpirun --timestamp-output
_RAY = re.compile(r"\([\w.:-]{1,80} pid=\d{1,10}(?:, ip=[0-9a-fA-F.:]{1,45})?\) ?")


def peel(text: str) -> tuple[str, int, int, int, str]:
    """(label, local_rank, rank, mpi_rank, body): the launcher tags at the start of a line and what follows them.

    label is the launcher stream (`srun --label` task id) or ""; local_rank comes from a torchrun tee tag, rank
    from `[rankN]:` or a `[N]:` template tag, mpi_rank from an mpirun tag; -1 where absent.
    """
    label, local, rank, mpi = "", -1, -1, -1
    i, n = 0, len(text)
    for _ in range(MAX_PEEL):
        if i >= n:
            break
        c = text[i]
        m = None
        if c == "[":
            m = _RANK.match(text, i)
            if m:
                rank, i = int(m.group(1)), m.end()
                break  # the innermost tag: what follows is the process's own text
            m = _MPI.match(text, i)
            if m:
                mpi = int(m.group(1))
                label = label or f"mpi{mpi}"
            else:
                m = _TEE.match(text, i)
                if m and m.group(1) != "rank":
                    local = int(m.group(2))
                else:
                    m = _TEMPLATE.match(text, i)
                    if m:
                        rank = int(m.group(1))
                    else:
                        m = _BRACKET_TS.match(text, i)
        elif "0" <= c <= "9" or c == " ":
            m = _ISO_TS.match(text, i) if c != " " else None
            if m is None:
                m = _SRUN.match(text, i)
                if m and not label:
                    label = m.group(1)
        elif c == "(":
            m = _RAY.match(text, i)
        elif "A" <= c <= "Z":
            m = _CTIME_TS.match(text, i)
        if m is None or m.end() == i:
            break
        i = m.end()
    return label, local, rank, mpi, text[i:]
