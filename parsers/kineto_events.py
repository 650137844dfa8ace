"""The slim msgspec structs a Kineto / Chrome trace decodes into: only the fields the analysis reads.

A typed decoder skips every other key without building a dict per event (docs/performance.md). ``ShapeArgs`` /
``ShapeEvent`` add record_shapes' input shapes, decoded only for slices that hold gloo collective spans
(``GLOO_MARK``); the document structs hold the top-level members read besides the events.
"""
from __future__ import annotations

from typing import Any, Optional

import msgspec


class EventArgs(msgspec.Struct, gc=False):
    """The handful of event args the analysis reads; everything else is skipped by the decoder."""

    stream: Any = None
    device: Any = None
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    coll_name: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    name: Any = None  # metadata events: process/thread names
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")  # c10d::send/recv_: peer rank
    src_rank: Any = msgspec.field(default=None, name="Src Rank")  # NCCL recv metadata: the global peer rank
    dst_rank: Any = msgspec.field(default=None, name="Dst Rank")  # NCCL send metadata
    seq: Any = msgspec.field(default=None, name="Seq")  # the group's collective sequence number (recent Kineto)
    comms_id: Any = msgspec.field(default=None, name="Comms Id")  # one collective call's id (recent Kineto)


class Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Optional[EventArgs] = None


class ShapeArgs(EventArgs, gc=False):
    """EventArgs plus record_shapes' input shapes and dtypes: decoded only for slices that hold gloo collective spans
    (gloo writes no "In msg nelems"; see gloo_size), so GPU traces never build these lists."""

    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")


class ShapeEvent(Event, gc=False):
    args: Optional[ShapeArgs] = None


GLOO_MARK = b'"gloo:'
#: in every slice that holds a ``[memory]`` or ``[OutOfMemory]`` instant event (and almost never elsewhere)
MEM_MARK = b'emory]"'


class MemArgs(EventArgs, gc=False):
    """EventArgs plus the args of profile_memory's ``[memory]`` / ``[OutOfMemory]`` events: decoded only for slices
    that hold memory events (``MEM_MARK``), so traces profiled without profile_memory pay nothing for them."""

    nbytes: Any = msgspec.field(default=None, name="Bytes")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")


class MemShapeArgs(ShapeArgs, gc=False):
    """ShapeArgs plus the memory events' args (a slice with both gloo spans and memory events)."""

    nbytes: Any = msgspec.field(default=None, name="Bytes")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")


class MemEvent(Event, gc=False):
    args: Optional[MemArgs] = None


class MemShapeEvent(Event, gc=False):
    args: Optional[MemShapeArgs] = None


def event_type(shapes: bool, mem: bool) -> type:
    """The event struct a slice decodes into: shapes for gloo spans, memory args for memory events."""
    return (MemShapeEvent if shapes else MemEvent) if mem else (ShapeEvent if shapes else Event)


class DocMembers(msgspec.Struct):
    """The top-level members of a trace the analysis reads besides its events."""

    distributedInfo: Any = None
    deviceProperties: Any = None
    displayTimeUnit: Any = None
    baseTimeNanoseconds: Any = None
    host_name: Any = None
    traceName: Any = None
    profile_memory: Any = None  # torch writes 1 when profiled with profile_memory=True (ahead of traceEvents)


class TypedDoc(DocMembers):
    traceEvents: Optional[list[Event]] = None


class LenientDoc(DocMembers):
    """Events left undecoded, for documents where some of them have the wrong shape."""

    traceEvents: Optional[list[Any]] = None


class TypedShapeDoc(DocMembers):
    traceEvents: Optional[list[ShapeEvent]] = None


class TypedMemDoc(DocMembers):
    traceEvents: Optional[list[MemEvent]] = None


class TypedMemShapeDoc(DocMembers):
    traceEvents: Optional[list[MemShapeEvent]] = None
