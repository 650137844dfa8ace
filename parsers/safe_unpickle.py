"""Read pickled Flight Recorder dumps without executing anything: plain containers and scalars only.

Two readers:
- `safe_loads` subclasses `pickle.Unpickler` with a `find_class` that refuses every global, so no class,
  function or extension can be reached; `REDUCE`/`BUILD`/`NEWOBJ` then have nothing callable to call.
- `salvage_loads` is a tiny pure-Python interpreter of the container/scalar opcodes (driven by
  `pickletools.genops`, which only decodes) that returns what was built before a file was cut off.
"""
from __future__ import annotations

import io
import itertools
import pickle
import pickletools
from typing import Any

MAX_PICKLE_BYTES = 512 * 1024 * 1024
PLAIN_TYPES = (dict, list, tuple, str, bytes, int, float, bool, type(None), set, frozenset, bytearray)


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle asked for a global (class, function, extension): refused before anything ran."""


class RestrictedUnpickler(pickle.Unpickler):
    """An Unpickler that resolves no globals at all, so only plain data can be built."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - see class docstring
        raise UnsafePickleError(f"refused to load global {module}.{name} (dumps hold plain data only)")

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102
        raise UnsafePickleError("refused persistent id (dumps hold plain data only)")


_CONTAINERS = (dict, list, tuple, set, frozenset)
MAX_DEPTH = 100


def _children(o: Any) -> Any:
    """Iterator over a container's members (a dict's keys, then its values)."""
    return itertools.chain(o.keys(), o.values()) if isinstance(o, dict) else iter(o)


def check_plain(obj: Any, max_nodes: int = 50_000_000, max_depth: int = MAX_DEPTH) -> int:
    """Raise UnsafePickleError unless `obj` is a bounded tree of plain containers and scalars; return its size.

    The size counts every node as often as it would be visited when the object is walked or serialised, so a
    shared container repeated at every level (a 'billion laughs' pickle: 800 bytes, 10**10 leaves) is refused
    here; each distinct container's expanded size is computed once, so this costs one pass over the distinct
    objects. Reference cycles and nesting deeper than `max_depth` are refused too.
    """
    def kind(o: Any) -> None:
        if type(o) not in PLAIN_TYPES:
            raise UnsafePickleError(f"unexpected object type {type(o).__name__} in pickle")

    kind(obj)
    if not isinstance(obj, _CONTAINERS):
        return 1
    total: dict[int, int] = {}
    active = {id(obj)}
    stack: list[tuple[Any, Any, list[int]]] = [(obj, _children(obj), [1])]
    while stack:
        o, it, acc = stack[-1]
        for c in it:
            kind(c)
            if not isinstance(c, _CONTAINERS):
                acc[0] += 1
                continue
            k = id(c)
            if k in total:
                acc[0] += total[k]
                if acc[0] > max_nodes:
                    raise UnsafePickleError(f"pickle expands to more than {max_nodes} objects through repeated "
                                            "shared references (a 'pickle bomb')")
                continue
            if k in active:
                raise UnsafePickleError("pickle holds a container that contains itself (reference cycle)")
            if len(stack) >= max_depth:
                raise UnsafePickleError(f"nesting too deep (more than {max_depth} levels)")
            active.add(k)
            stack.append((c, _children(c), [1]))
            break
        else:
            stack.pop()
            active.discard(id(o))
            total[id(o)] = acc[0]
            if acc[0] > max_nodes:
                raise UnsafePickleError(f"pickle expands to more than {max_nodes} objects through repeated "
                                        "shared references (a 'pickle bomb')")
            if stack:
                stack[-1][2][0] += acc[0]
    return total[id(obj)]


def safe_loads(data: bytes) -> Any:
    """Unpickle `data` refusing every global; raises UnsafePickleError, or UnpicklingError/EOFError when cut off."""
    if len(data) > MAX_PICKLE_BYTES:
        raise UnsafePickleError(f"pickle larger than {MAX_PICKLE_BYTES} bytes")
    obj = RestrictedUnpickler(io.BytesIO(data)).load()
    check_plain(obj)
    return obj


_MARK = object()
_PUSH_ARG = {
    "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE", "BININT", "BININT1", "BININT2", "LONG1",
    "LONG4", "LONG", "BINFLOAT", "FLOAT", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BINSTRING",
    "SHORT_BINSTRING", "STRING",
}
_CONST = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False, "EMPTY_DICT": dict, "EMPTY_LIST": list,
          "EMPTY_TUPLE": tuple, "EMPTY_SET": set}


def _pop_mark(stack: list) -> list:
    """Pop items down to the last mark and return them in order."""
    i = len(stack) - 1
    while i >= 0 and stack[i] is not _MARK:
        i -= 1
    if i < 0:
        raise ValueError("mark missing")
    items = stack[i + 1:]
    del stack[i:]
    return items


def _fold(stack: list) -> Any:
    """Close every open mark into the container below it; return the bottom object (the partial top level)."""
    while _MARK in stack:
        items = _pop_mark(stack)
        if not stack:
            return items
        tgt = stack[-1]
        if isinstance(tgt, list):
            tgt.extend(items)
        elif isinstance(tgt, dict):
            tgt.update(zip(items[0::2], items[1::2]))
    return stack[0] if stack else None


def salvage_loads(data: bytes) -> tuple[Any, str]:
    """Interpret plain-data opcodes until the data ends or an unsupported opcode; return (partial object, reason)."""
    stack: list = []
    memo: dict[int, Any] = {}
    reason = "complete"
    try:
        for op, arg, _pos in pickletools.genops(io.BytesIO(data)):
            name = op.name
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                break
            if name in _PUSH_ARG:
                stack.append(arg)
            elif name in _CONST:
                v = _CONST[name]
                stack.append(v() if callable(v) else v)
            elif name == "INT":
                stack.append(arg)
            elif name == "MARK":
                stack.append(_MARK)
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[int(arg)] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                stack.append(memo[int(arg)])
            elif name == "APPEND":
                v = stack.pop()
                stack[-1].append(v)
            elif name == "APPENDS":
                items = _pop_mark(stack)
                stack[-1].extend(items)
            elif name == "SETITEM":
                v = stack.pop()
                k = stack.pop()
                stack[-1][k] = v
            elif name == "SETITEMS":
                items = _pop_mark(stack)
                stack[-1].update(zip(items[0::2], items[1::2]))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                t = tuple(stack[-n:])
                del stack[-n:]
                stack.append(t)
            elif name == "TUPLE":
                stack.append(tuple(_pop_mark(stack)))
            elif name == "LIST":
                stack.append(list(_pop_mark(stack)))
            elif name == "DICT":
                items = _pop_mark(stack)
                stack.append(dict(zip(items[0::2], items[1::2])))
            elif name == "ADDITEMS":
                items = _pop_mark(stack)
                stack[-1].update(items)
            elif name == "FROZENSET":
                stack.append(frozenset(_pop_mark(stack)))
            elif name == "POP":
                stack.pop()
            else:
                reason = f"stopped at unsupported opcode {name}"
                break
        else:
            reason = "data ended before the STOP opcode (file truncated)"
    except (ValueError, IndexError, KeyError, TypeError, AttributeError) as exc:
        reason = f"data ended or broke mid-opcode (file truncated): {exc}"
    try:
        obj = _fold(stack)
    except (ValueError, TypeError) as exc:
        return None, f"{reason}; could not rebuild: {exc}"
    return obj, reason
