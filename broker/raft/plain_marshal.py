"""The Raft records' encoding: `marshal` of plain data, decoded only once its bytes justify what it builds.

`marshal.loads` trusts the counts it reads: a 9-byte record announcing a list of 200 million items makes it
allocate 1.6 GB before it finds the items missing, and a long integer's digit count is allocated the same way. Its
references (`r` entries of format version 3 and later) let a list hold itself (a cycle any walk over the value
never leaves) and let a few bytes name a container whose walk is exponential in them. So:

- values are written in marshal format version 2 (`dumps`): plain values, no references;
- `loads` first scans the bytes once, in order, and refuses (PlainDataError) anything but None, bool, int, float,
  str, bytes, tuple, list and dict (marshal can carry code objects, sets, complex numbers: refused, never built),
  a reference to a container (files written in version 4, such as snapshot footers of an earlier release, refer
  only to repeated scalars, which are accepted), a count or length the remaining bytes cannot hold (each item of a
  container takes at least one byte, each digit of a long integer two), nesting deeper than `DEPTH_MAX`, and bytes
  after the value. What `marshal.loads` then allocates is bounded by a small multiple of the input, and the value
  is a tree (no cycle, no shared container) of at most as many items as it has bytes.

The scan stands in for the walk over the decoded value that checked the types afterwards, at a similar cost per
item.
"""
from __future__ import annotations

import marshal
import struct

VERSION = 2  # no references: each value is written out where it occurs
DEPTH_MAX = 100  # nesting of containers (a Raft message nests a few levels; marshal's own limit is 2000)

_INT32 = struct.Struct("<i").unpack_from
# type code -> bytes after it: a fixed size (>= 0), a 4-byte length then that many bytes (-4), a 1-byte length
# (-1), a 4-byte count of 2-byte digits, signed (-2), or a container (-3)
_FIXED, _SIZED32, _SIZED8, _LONG, _CONTAINER = 0, -4, -1, -2, -3
_LAYOUT = {ord("N"): 0, ord("F"): 0, ord("T"): 0, ord("i"): 4, ord("g"): 8,
           ord("s"): -4, ord("t"): -4, ord("u"): -4, ord("a"): -4, ord("A"): -4,
           ord("z"): -1, ord("Z"): -1, ord("l"): -2,
           ord("("): -3, ord(")"): -3, ord("["): -3, ord("{"): -3}
_SMALL_TUPLE, _DICT, _NULL, _REF = ord(")"), ord("{"), ord("0"), ord("r")
_CONTAINERS = frozenset(map(ord, "()[{"))
_FLAG_REF = 0x80


class PlainDataError(ValueError):
    """The bytes are not plain marshal data of a size they justify."""


def dumps(value) -> bytes:
    return marshal.dumps(value, VERSION)


def loads(data):
    """The value marshal encoded in `data`, once `scan` accepted it; PlainDataError otherwise."""
    scan(data)
    try:
        return marshal.loads(data)
    except Exception as exc:  # the scan and marshal disagree: refuse rather than trust either
        raise PlainDataError(f"undecodable record: {exc!r}") from None


def scan(data) -> None:
    """Check that `data` is exactly one plain marshal value within the bounds of the module docstring."""
    size = len(data)
    layout, unpack = _LAYOUT.get, _INT32
    left: list[int] = []  # items still to read per open container; a dict counts down from -1 (-1 key, -2 value)
    referable: list[bool] = []  # per value flagged for reference (version 3+): whether it is a scalar
    pos = 0
    try:
        while True:
            code = data[pos]
            pos += 1
            if code & _FLAG_REF:
                code &= ~_FLAG_REF
                referable.append(code not in _CONTAINERS)
            kind = layout(code)
            if kind is None:
                if code == _NULL and left and left[-1] == -1:  # a dict ends where a key would start
                    left.pop()
                elif code == _REF:
                    (index,) = unpack(data, pos)
                    pos += 4
                    if not (0 <= index < len(referable) and referable[index]):
                        raise PlainDataError("a reference to a container or to nothing")
                else:
                    raise PlainDataError(f"a record carries marshal type {chr(code)!r}: not plain data")
            elif kind >= 0:
                pos += kind
            elif kind == -4:
                (length,) = unpack(data, pos)
                if length < 0:
                    raise PlainDataError("a negative length")
                pos += 4 + length
            elif kind == -1:
                pos += 1 + data[pos]
            elif kind == -2:
                (digits,) = unpack(data, pos)
                pos += 4 + 2 * abs(digits)
            else:
                if code == _DICT:
                    count = -1
                elif code == _SMALL_TUPLE:
                    count = data[pos]
                    pos += 1
                else:
                    (count,) = unpack(data, pos)
                    pos += 4
                    if count < 0:
                        raise PlainDataError("a negative count")
                if count > size - pos:
                    raise PlainDataError(f"a container of {count} items in {size - pos} bytes")
                if len(left) >= DEPTH_MAX:
                    raise PlainDataError(f"containers nested deeper than {DEPTH_MAX}")
                if count:
                    left.append(count)
                    continue  # its first item is next
            if pos > size:
                raise PlainDataError("record cut short")
            # one value is complete: count it into the containers it completes
            while left:
                n = left[-1]
                if n > 1:
                    left[-1] = n - 1
                    break
                if n == 1:
                    left.pop()  # that value was the last item: the container is complete in turn
                    continue
                left[-1] = -3 - n  # a dict: -1 (key read) -> -2, -2 (value read) -> -1
                break
            else:
                if pos != size:
                    raise PlainDataError(f"{size - pos} bytes after the value")
                return
    except (IndexError, struct.error):
        raise PlainDataError("record cut short") from None
