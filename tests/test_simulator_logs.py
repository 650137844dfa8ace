"""Every simulated NCCL / PyTorch log line matches the tested regexes of nccl-log-formats.md for its version."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

SIM = Path(__file__).resolve().parent.parent / "fixtures" / "sim"
LOGGED = sorted(p.name for p in SIM.iterdir() if (p / "nccl_rank0.log").is_file())

# --- copied from /work/shared/reference/nccl-log-formats.md -------------------------------------------------
# §1.3 envelope
NCCL_LINE = re.compile(
    r'^(?P<launcher>.*?)'
    r'(?:\[(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)\] )?'
    r'(?P<host>[^\s:]*):(?P<pid>\d+):(?P<tid>\d+) '
    r'(?:\[(?P<dev>-?\d+)\] )?'
    r'(?:(?P<ttime>\d+\.\d+) )?'
    r'(?:(?P<src>[^\s]+):(?P<srcline>\d+)(?: \((?P<func>[^)]*)\))? )?'
    r'NCCL (?P<level>INFO|WARN|TRACE|CALL)(?: (?P<msg>.*))?$')
# §2.1
VERSION = re.compile(r'NCCL version (?P<ver>\d+\.\d+\.\d+)(?P<suffix>[^+\s]*)\+cuda(?P<cuda>[\w.]+)')
# §2.2
BOOTSTRAP = re.compile(r'^Bootstrap ?: Using (?P<ifs>.+)$')
NET_SOCKET = re.compile(r'^NET/Socket ?: Using (?P<ifs>.+)$')
NET_IB = re.compile(r'^NET/IB ?: Using (?P<devs>(?:\[\d+\][^ ;]+ ?)+)(?P<ro>\[RO\])?; OOB (?P<oobif>[^:]+):(?P<oobaddr>.+)$')
USING_NET = re.compile(r'^Using network (?P<net>\S+)$')
# §2.3
ENV = re.compile(r'^(?P<var>NCCL_[A-Z0-9_]+) (?:set by environment to|set to) (?P<val>.*?)\.?$')
# §2.4
INIT = re.compile(
    r'(?:\[Rank (?P<jobrank>\d+)\] )?(?:(?P<fn>nccl\w+) )?'
    r'comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<cudaDev>\d+)'
    r'(?: nvmlDev (?P<nvmlDev>\d+))?(?: busId (?P<busId>[0-9a-f]+))?'
    r'(?: parent (?P<parent>0x[0-9a-f]+|\(nil\)))?(?: (?:splitCount|childCount) (?P<splitCount>\d+))?'
    r'(?: color (?P<color>-?\d+) key (?P<key>-?\d+))?(?: commId (?P<commId>0x[0-9a-f]+))?'
    r' ?- Init (?P<phase>START|COMPLETE)')
COMM_SHAPE = re.compile(r'comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nNodes>\d+) '
                        r'localRanks (?P<localRanks>\d+) localRank (?P<localRank>\d+) MNNVL (?P<mnnvl>\d+)')
# §2.5
RING_LIST = re.compile(r'^(?:Channel (?P<ch>\d+)/(?P<nch>\d+)|Channel (?P<ch_old>\d+)|Ring (?P<ring_old>\d+)) :'
                       r'(?P<ranks>(?: +\d+)*)(?: *\.\.\.)? *$')
TREES = re.compile(r'^Trees(?P<trees>(?: \[\d+\] [-\d/|>]+)+)\s*$')
CONN = re.compile(r'^(?P<kind>Channel|Ring) (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)(?:\[(?P<srcdev>[0-9a-f]+)\])?'
                  r' -> (?P<dst>\d+)(?:\[(?P<dstdev>[0-9a-f]+)\])?(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)\s*$')
CONNECTED = re.compile(r'^Connected (?P<what>all rings|all trees|NVLS tree|binomial trees|collnet \+ chain|Collnet Chains.*?)'
                       r'(?:, use ring PXN (?P<pxn>\d+) GDR (?P<gdr>\d+))?$')
THRESHOLDS = re.compile(r'^threadThresholds (?P<t>[\d/ |]+)$')
CHANNELS = re.compile(r'^(?P<coll>\d+) coll channels,(?: (?P<collnet>\d+) collnet channels,)?(?: (?P<nvls>\d+) nvls channels,)?'
                      r' (?P<p2p>\d+) p2p channels, (?P<p2ppeer>\d+) p2p channels per peer$')
# §2.6
COLL = re.compile(r'(?P<op>[A-Za-z]+): opCount (?P<opcount>[0-9a-f]+) sendbuff (?P<sendbuff>0x[0-9a-f]+|\(nil\))'
                  r' recvbuff (?P<recvbuff>0x[0-9a-f]+|\(nil\)) count (?P<count>\d+) datatype (?P<datatype>\d+)'
                  r' op (?P<redop>\d+) root (?P<root>-?\d+) comm (?P<comm>0x[0-9a-f]+|\(nil\))'
                  r' \[nranks=(?P<nranks>\d+)\] stream (?P<stream>0x[0-9a-f]+|\(nil\))'
                  r'(?: task (?P<task>\d+) globalrank (?P<globalrank>\d+))?')
# §2.7
ERRCHAIN = re.compile(r'^(?P<file>[\w/.\-]+\.(?:cc|cu|h|c)):(?P<line>\d+) -> (?P<code>\d+)(?: \((?P<why>[^)]*)\))?'
                      r'(?: \[(?P<thread>[^\]]+)\])?\s*$')
# §4.1–4.3
PT_PREFIX = re.compile(r'(?:\[rank(?P<grank>\d+)\]:)?\[(?P<sev>[EWIF])(?:(?P<mmdd>\d{3,4}) (?P<time>\d{2}:\d{2}:\d{2}\.\d+))? '
                       r'?(?P<file>[\w.]+):(?P<line>\d+)\] ')
WATCHDOG = re.compile(r'Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)'
                      r'(?:, NumelIn=(?P<numel_in>-?\d+), NumelOut=(?P<numel_out>-?\d+))?, Timeout\(ms\)=(?P<timeout_ms>\d+)\)'
                      r' ran for (?P<ran_ms>\d+) milliseconds before timing out')
PG_STATUS_NEW = re.compile(r'\[PG ID (?P<pgid>\d+) PG GUID (?P<guid>[^ \]]+?)(?:\((?P<desc>[^)]*)\))? Rank (?P<rank>\d+)\]\s+'
                           r'failure detected by watchdog at work sequence id: (?P<work>\d+)'
                           r' PG status: last enqueued work: (?P<enq>-?\d+), last completed work: (?P<comp>-?\d+)')
# -------------------------------------------------------------------------------------------------------------

MESSAGE_FAMILIES = [ENV, BOOTSTRAP, NET_SOCKET, NET_IB, USING_NET, INIT, COMM_SHAPE, CONN, RING_LIST, TREES,
                    CONNECTED, THRESHOLDS, CHANNELS, COLL, ERRCHAIN, VERSION]
# lines the reference quotes verbatim without a regex (§2.2 plugin table, §2.5 chunksize, §2.5 CC line)
LITERAL = re.compile(r'^(NET/Plugin ?: .*|P2P Chunksize set to \d+|CC Off, workFifoBytes \d+|'
                     r'Using non-device net plugin version 0)$')


def _version_shapes(ver: tuple, msg: str) -> None:
    """Version-dependent details from the §0 table."""
    if msg.startswith("Bootstrap"):
        assert msg.startswith("Bootstrap: Using" if ver >= (2, 24) else "Bootstrap : Using"), msg
    if "Init START" in msg or "Init COMPLETE" in msg:
        assert msg.startswith("ncclCommInitRank comm") == (ver >= (2, 21)), msg
        assert "commId 0x" in msg and " nvmlDev " in msg  # 2.18.3+
    m = CONN.match(msg)
    if m:
        assert m["srcdev"].isdigit() and m["conn"] is not None  # nvmlDev decimal (2.18.3+), /connIndex (2.14+)
    m = CHANNELS.match(msg)
    if m:
        assert (m["collnet"] is not None) == (ver >= (2, 20)), msg
    if msg.startswith("Connected all rings"):
        assert ("use ring PXN" in msg) == (ver >= (2, 24)), msg


@pytest.mark.parametrize("name", LOGGED)
def test_every_nccl_line_matches_its_version(name):
    e = json.loads((SIM / name / "expected.json").read_text())
    ver = tuple(int(x) for x in e["nccl_version"].split("."))
    n_coll = 0
    for r in range(e["world_size"]):
        lines = (SIM / name / f"nccl_rank{r}.log").read_text().splitlines()
        for ln in lines:
            m = NCCL_LINE.match(ln)
            if m is None:
                launcher_only = re.fullmatch(r"(\[default\d+\]:)?", ln)
                banner = VERSION.search(ln)
                assert launcher_only or (banner and ver < (2, 22)), (name, ln)
                if banner:
                    assert banner["ver"] == e["nccl_version"]
                continue
            assert m["host"] == e["rank_host"][r] and int(m["dev"]) == e["rank_local_gpu"][r]
            msg = m["msg"]
            if m["level"] == "WARN":
                assert (m["ts"] is not None) == (ver >= (2, 26)) and m["src"] == "enqueue.cc"
                continue
            fam = [rx for rx in MESSAGE_FAMILIES if rx.match(msg)]
            assert fam or LITERAL.match(msg), (name, msg)
            if COLL.match(msg):
                n_coll += 1
            if VERSION.match(msg):
                assert ver >= (2, 22)
            _version_shapes(ver, msg)
    if e["hang"]:
        assert n_coll > 0


def test_socket_and_interface_faults_show_in_logs():
    s = (SIM / "nccl_socket" / "nccl_rank4.log").read_text()
    assert "Using network Socket" in s and "NET/Socket : Using [0]eth0:" in s and "via NET/Socket/0" in s
    w = (SIM / "nccl_wrong_interface" / "nccl_rank0.log").read_text()
    assert "NCCL_SOCKET_IFNAME set by environment to docker0" in w and "NET/Socket : Using [0]docker0:172.17.0." in w
    c = (SIM / "ddp_clean" / "nccl_rank0.log").read_text()
    assert "Using network IB" in c and "NET/IB : Using [0]mlx5_0:1/IB" in c and "via NET/IB/0/GDRDMA" in c


@pytest.mark.parametrize("name", sorted(p.name for p in SIM.iterdir() if p.name.startswith("hang_")))
def test_watchdog_stderr_lines(name):
    e = json.loads((SIM / name / "expected.json").read_text())
    for r in range(e["world_size"]):
        text = (SIM / name / f"stderr_rank{r}.log").read_text()
        wd = e["watchdog"].get(str(r))
        if wd is None:
            assert "Watchdog caught" not in text
            continue
        m = WATCHDOG.search(text)
        assert m and int(m["seq"]) == wd["seq"] and int(m["timeout_ms"]) == 600000 and int(m["ran_ms"]) >= 600000
        p = PG_STATUS_NEW.search(text)
        assert p and p["pgid"] == wd["process_group"] and int(p["work"]) == wd["seq"]
        assert int(p["enq"]) == wd["last_enqueued"] and int(p["comp"]) == wd["last_completed"]
        first = text.splitlines()[0]
        pre = PT_PREFIX.search(first)
        assert pre and int(pre["grank"]) == r and pre["sev"] == "E" and len(pre["time"].split(".")[1]) == 9
