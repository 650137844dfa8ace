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


class PickleLengthError(pickle.UnpicklingError):
    """An opcode's length prefix runs past the end of the data: a cut-off or damaged file, never unpickled.

    The C unpickler allocates an argument's buffer from its length prefix before reading it, so an 11-byte
    `BINBYTES8` naming 2**62 bytes is a MemoryError (or gigabytes reserved) rather than "truncated"; the prescan
    refuses it first and the caller salvages what comes before it.
    """


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


#: Largest memo index a pickle may name. A pickler numbers its memo entries 0, 1, 2, … in order, so a real
#: index is below the number of opcodes before it; the C unpickler allocates the memo up to the largest index
#: (an 18-byte pickle naming index 2**28 costs 4 GB), so anything beyond is refused before unpickling.
MAX_MEMO_INDEX = 1 << 24

# Argument layout of each opcode byte, from the standard library's own opcode table: a fixed size >= 0, or
# one of the markers below (text up to a newline, two such lines, or a length prefix of 1 / 4 / 8 bytes).
_NL, _NL2, _LEN1, _LEN4, _LEN8 = -1, -2, -3, -4, -5


def _arg_layouts() -> list:
    table: list = [None] * 256
    special = {pickletools.UP_TO_NEWLINE: _NL, pickletools.TAKEN_FROM_ARGUMENT1: _LEN1,
               pickletools.TAKEN_FROM_ARGUMENT4: _LEN4, pickletools.TAKEN_FROM_ARGUMENT4U: _LEN4,
               pickletools.TAKEN_FROM_ARGUMENT8U: _LEN8}
    for op in pickletools.opcodes:
        code = op.code.encode("latin-1")[0]
        if op.arg is None:
            table[code] = 0
        elif op.name in ("GLOBAL", "INST"):
            table[code] = _NL2
        else:
            table[code] = op.arg.n if op.arg.n >= 0 else special[op.arg.n]
    return table


_LAYOUT = _arg_layouts()
_BINPUT, _LONG_BINPUT, _PUT, _STOP = ord("q"), ord("r"), ord("p"), ord(".")


def check_memo_indices(data: bytes, max_index: int = MAX_MEMO_INDEX) -> None:
    """Walk the opcodes once (no object is built) and refuse a memo index no pickler would write.

    Linear in the data (about the unpickler's own time: one step per opcode, string arguments skipped by their
    length); stops quietly at an unknown opcode or a cut-off argument (the unpickler then reports the damage).
    Raises UnsafePickleError for an index above ``max_index`` or above the number of opcodes before it.
    """
    layout, frm, find = _LAYOUT, int.from_bytes, data.find
    i, n, ops = 0, len(data), 0
    while i < n:
        code = data[i]
        k = layout[code]
        i += 1
        ops += 1
        if k == 0:
            if code == _STOP:
                return
            continue
        if k is None:
            return
        idx = -1
        if k > 0:
            if code == _LONG_BINPUT:
                idx = frm(data[i:i + 4], "little")
            elif code == _BINPUT and i < n:
                idx = data[i]
            i += k
        elif k == _LEN1:
            if i >= n:
                return
            i += 1 + data[i]
        elif k == _LEN4 or k == _LEN8:
            w = 4 if k == _LEN4 else 8
            if i + w > n:
                return
            ln = frm(data[i:i + w], "little")
            if ln > n - i - w:
                raise PickleLengthError(f"opcode at byte {i - 1} announces {ln} bytes but only {n - i - w} "
                                        "remain (file cut off or damaged)")
            i += w + ln
        else:
            j = find(b"\n", i)
            if j < 0:
                return
            if code == _PUT:
                digits = data[i:j].strip()
                idx = int(digits) if digits.isdigit() and len(digits) <= 20 else max_index + 1
            if k == _NL2:
                j = find(b"\n", j + 1)
                if j < 0:
                    return
            i = j + 1
        if idx > ops or idx > max_index:
            raise UnsafePickleError(f"memo index {idx} at byte {i} is beyond what a pickler writes (refused before "
                                    f"unpickling: it would make the unpickler allocate a memo of that size)")


def safe_loads(data: bytes) -> Any:
    """Unpickle `data` refusing every global; raises UnsafePickleError, or UnpicklingError/EOFError when cut off."""
    if len(data) > MAX_PICKLE_BYTES:
        raise UnsafePickleError(f"pickle larger than {MAX_PICKLE_BYTES} bytes")
    check_memo_indices(data)
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


def _pop_mark(stack: list, marks: list[int]) -> list:
    """Pop items down to the last mark (its index kept in ``marks``) and return them in order."""
    while marks and (marks[-1] >= len(stack) or stack[marks[-1]] is not _MARK):
        marks.pop()  # a mark that damaged data popped some other way
    if not marks:
        raise ValueError("mark missing")
    i = marks.pop()
    items = stack[i + 1:]
    del stack[i:]
    return items


def _put_pairs(d: dict, items: list) -> None:
    """d[k] = v for each (k, v) of a flat list; an unhashable key (damage) is skipped."""
    for k, v in zip(items[0::2], items[1::2]):
        try:
            d[k] = v
        except TypeError:
            pass


def _fold(stack: list, marks: list[int]) -> Any:
    """Attach every half-built container to the one below it; return the bottom object (the partial top level).

    Items above a mark (protocol >= 1 batches) go into the container below the mark; then single pending
    SETITEM / APPEND operands (protocol 0 builds dicts and lists one item at a time) are attached from the top.
    """
    while marks:
        if marks[-1] >= len(stack) or stack[marks[-1]] is not _MARK:
            marks.pop()
            continue
        items = _pop_mark(stack, marks)
        if not stack:
            return items
        tgt = stack[-1]
        if isinstance(tgt, list):
            tgt.extend(items)
        elif isinstance(tgt, dict):
            _put_pairs(tgt, items)
    while len(stack) > 1:
        v = stack.pop()
        t = stack[-1]
        if isinstance(t, list):
            t.append(v)
        elif len(stack) >= 2 and isinstance(stack[-2], dict) and not isinstance(t, (dict, list, set)):
            k = stack.pop()
            _put_pairs(stack[-1], [k, v])
    return stack[0] if stack else None


_NAMES = [None] * 256
for _op in pickletools.opcodes:
    _NAMES[_op.code.encode("latin-1")[0]] = _op.name
_FIXED = {"BININT": ("<i", 4), "BININT1": ("<B", 1), "BININT2": ("<H", 2), "BINFLOAT": (">d", 8),
          "BINPUT": ("<B", 1), "LONG_BINPUT": ("<I", 4), "BINGET": ("<B", 1), "LONG_BINGET": ("<I", 4),
          "PROTO": ("<B", 1), "FRAME": ("<Q", 8), "EXT1": ("<B", 1), "EXT2": ("<H", 2), "EXT4": ("<i", 4)}
_COUNTED = {"SHORT_BINUNICODE": 1, "BINUNICODE": 4, "BINUNICODE8": 8, "SHORT_BINBYTES": 1, "BINBYTES": 4,
            "BINBYTES8": 8, "SHORT_BINSTRING": 1, "BINSTRING": 4, "BYTEARRAY8": 8, "LONG1": 1, "LONG4": 4}
#: Open marks beyond this depth are no Flight Recorder dump (check_plain refuses depth > MAX_DEPTH anyway).
MAX_SALVAGE_MARKS = 10 * MAX_DEPTH


def _ops(data: bytes):
    """(opcode name, argument) for each opcode: the standard decoding, about four times faster than genops.

    Raises ValueError when the data ends inside an argument; yields (name, None) for argument kinds the salvage
    does not interpret (it stops there).
    """
    import struct
    i, n = 0, len(data)
    names, fixed, counted = _NAMES, _FIXED, _COUNTED
    while i < n:
        name = names[data[i]]
        i += 1
        if name is None:
            raise ValueError(f"unknown opcode at byte {i - 1}")
        f = fixed.get(name)
        if f is not None:
            if i + f[1] > n:
                raise ValueError("data ended inside an argument")
            yield name, struct.unpack_from(f[0], data, i)[0]
            i += f[1]
            continue
        c = counted.get(name)
        if c is not None:
            if i + c > n:
                raise ValueError("data ended inside an argument")
            ln = int.from_bytes(data[i:i + c], "little", signed=(name == "LONG4"))
            i += c
            if ln < 0 or i + ln > n:
                raise ValueError("data ended inside an argument")
            raw = data[i:i + ln]
            i += ln
            if name.endswith("UNICODE") or name == "BINUNICODE8":
                yield name, raw.decode("utf-8", "surrogatepass")
            elif name.endswith("BINSTRING"):
                yield name, raw.decode("latin-1")
            elif name.startswith("LONG"):
                yield name, int.from_bytes(raw, "little", signed=True)
            elif name == "BYTEARRAY8":
                yield name, bytearray(raw)
            else:
                yield name, raw
            continue
        layout = _LAYOUT[data[i - 1]]
        if layout == 0:
            yield name, None
            continue
        if layout in (_NL, _NL2):
            j = data.find(b"\n", i)
            if j < 0:
                raise ValueError("data ended inside an argument")
            line = data[i:j]
            i = j + 1
            if name in ("PUT", "GET"):
                yield name, int(line) if line.isdigit() and len(line) <= 20 else -1
            elif name == "INT":
                yield name, (True if line == b"01" else False if line == b"00" else
                             int(line) if len(line) <= 4000 else 0)
            elif name == "LONG":
                line = line[:-1] if line.endswith(b"L") else line
                yield name, int(line) if len(line) <= 4000 else 0
            elif name == "FLOAT":
                yield name, float(line)
            elif name == "UNICODE":
                yield name, line.decode("raw-unicode-escape")
            elif name == "STRING":
                yield name, pickletools.stringnl.reader(io.BytesIO(line + b"\n"))
            else:
                yield name, None  # GLOBAL, INST, PERSID: nothing a dump holds
                return
            continue
        yield name, None
        return


def salvage_loads(data: bytes) -> tuple[Any, str]:
    """Interpret plain-data opcodes until the data ends or an unsupported opcode; return (partial object, reason)."""
    stack: list = []
    marks: list[int] = []  # stack indices of the open marks, so closing one never searches the stack
    memo: dict[int, Any] = {}
    reason = "complete"
    try:
        for name, arg in _ops(data):
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
                if len(marks) >= MAX_SALVAGE_MARKS:
                    reason = f"stopped: more than {MAX_SALVAGE_MARKS} nested marks (no dump nests so deep)"
                    break
                marks.append(len(stack))
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
                items = _pop_mark(stack, marks)
                stack[-1].extend(items)
            elif name == "SETITEM":
                v = stack.pop()
                k = stack.pop()
                stack[-1][k] = v
            elif name == "SETITEMS":
                items = _pop_mark(stack, marks)
                stack[-1].update(zip(items[0::2], items[1::2]))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                t = tuple(stack[-n:])
                del stack[-n:]
                stack.append(t)
            elif name == "TUPLE":
                stack.append(tuple(_pop_mark(stack, marks)))
            elif name == "LIST":
                stack.append(list(_pop_mark(stack, marks)))
            elif name == "DICT":
                items = _pop_mark(stack, marks)
                stack.append(dict(zip(items[0::2], items[1::2])))
            elif name == "ADDITEMS":
                items = _pop_mark(stack, marks)
                stack[-1].update(items)
            elif name == "FROZENSET":
                stack.append(frozenset(_pop_mark(stack, marks)))
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                _pop_mark(stack, marks)
            else:
                reason = f"stopped at unsupported opcode {name}"
                break
        else:
            reason = "data ended before the STOP opcode (file truncated)"
    except (ValueError, IndexError, KeyError, TypeError, AttributeError) as exc:
        reason = f"data ended or broke mid-opcode (file truncated): {exc}"
    try:
        obj = _fold(stack, marks)
    except (ValueError, TypeError) as exc:
        return None, f"{reason}; could not rebuild: {exc}"
    return obj, reason
