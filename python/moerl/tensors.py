"""Named tensors as one flat byte string in the safetensors layout (what moerl's external
trainer publishes as a policy version and what ``RolloutWorker.weights(v)`` maps back).

Layout (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N,
N bytes of JSON ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{str: str}}`` padded with spaces to a multiple of 8, then the tensors' bytes back to back.
Tensors are written largest element first, so every tensor starts aligned to its element size
and ``torch.frombuffer`` views it in place. No dependency on the ``safetensors`` package (not
packaged for this machine's Python); files written here load with it.
"""

from __future__ import annotations

import json
import mmap
import struct
from typing import Any, Dict, Mapping, Optional, Tuple

import torch

_DTYPES: Dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def _prepared(tensors: Mapping[str, Any]) -> Dict[str, torch.Tensor]:
    if hasattr(tensors, "state_dict"):  # an nn.Module
        tensors = tensors.state_dict()
    out = {}
    for name, t in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise TypeError(f"tensor name {name!r}: expected a str other than __metadata__")
        if not isinstance(t, torch.Tensor):
            t = torch.as_tensor(t)
        if t.dtype not in _NAMES:
            raise TypeError(f"tensor {name!r} has dtype {t.dtype}, which the layout lacks")
        out[name] = t.detach().to("cpu").contiguous()
    return out


def _header(tensors: Dict[str, torch.Tensor], metadata: Optional[Mapping[str, str]]
            ) -> Tuple[bytes, list]:
    order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header: Dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name in order:
        t = tensors[name]
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, order


def _raw(t: torch.Tensor) -> memoryview:
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: the same bits as int16
        t = t.view(torch.int16)
    return memoryview(t.numpy()).cast("B")


def save_file(tensors: Mapping[str, Any], path: str,
              metadata: Optional[Mapping[str, str]] = None) -> int:
    """Writes the tensors (a mapping or an nn.Module's state_dict) to `path`; the byte size."""
    prepared = _prepared(tensors)
    head, order = _header(prepared, metadata)
    size = len(head)
    with open(path, "wb") as f:
        f.write(head)
        for name in order:
            if prepared[name].numel():
                size += f.write(_raw(prepared[name]))
    return size


def dumps(tensors: Mapping[str, Any], metadata: Optional[Mapping[str, str]] = None) -> bytes:
    prepared = _prepared(tensors)
    head, order = _header(prepared, metadata)
    return head + b"".join(bytes(_raw(prepared[n])) for n in order if prepared[n].numel())


def loads(buf: Any) -> Tuple[Dict[str, torch.Tensor], Dict[str, str]]:
    """(name -> tensor, metadata) viewing `buf` (bytes, bytearray, mmap): no copy when the
    buffer is writable (a bytearray, a copy-on-write mmap); read-only bytes are copied once."""
    view = memoryview(buf)
    if view.readonly:
        view = memoryview(bytearray(view))
    if len(view) < 8:
        raise ValueError(f"{len(view)} bytes: too short for a safetensors header")
    (n,) = struct.unpack("<Q", view[:8])
    if 8 + n > len(view):
        raise ValueError(f"header of {n} bytes in a buffer of {len(view)}")
    header = json.loads(bytes(view[8:8 + n]))
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    out: Dict[str, torch.Tensor] = {}
    for name, h in header.items():
        dtype = _DTYPES.get(h.get("dtype"))
        if dtype is None:
            raise ValueError(f"tensor {name!r}: unknown dtype {h.get('dtype')!r}")
        begin, end = h["data_offsets"]
        shape = h["shape"]
        count = 1
        for d in shape:
            count *= d
        if end - begin != count * torch.tensor([], dtype=dtype).element_size() or \
                base + end > len(view):
            raise ValueError(f"tensor {name!r}: offsets {begin}..{end} do not fit shape {shape}")
        if count == 0:
            out[name] = torch.empty(shape, dtype=dtype)
            continue
        out[name] = torch.frombuffer(view, dtype=dtype, count=count,
                                     offset=base + begin).view(shape)
    return out, meta


def map_file(path: str) -> Tuple[mmap.mmap, Dict[str, torch.Tensor], Dict[str, str]]:
    """Maps `path` copy-on-write (nothing copied until a tensor is written to) and views its
    tensors; the mmap must stay referenced while they are used."""
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    tensors, meta = loads(m)
    return m, tensors, meta


def load_file(path: str) -> Tuple[Dict[str, torch.Tensor], Dict[str, str]]:
    """Reads `path` into memory (the file may be removed afterwards)."""
    with open(path, "rb") as f:
        return loads(bytearray(f.read()))


__all__ = ["save_file", "dumps", "loads", "map_file", "load_file"]
