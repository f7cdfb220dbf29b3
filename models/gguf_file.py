"""Read a GGUF file: its metadata and tensor table in well under a second, tensors on demand.

gguf-py's `GGUFReader` builds a numpy view per array element, so opening a file with a 150k-token
vocabulary takes ~16 s before anything can be checked. This reads the same header in one pass
(numeric arrays as numpy, strings decoded once) so an architecture or tensor type the import
can't handle is refused before a tensor byte is read. Tensor data is memory-mapped, and
dequantized with gguf-py's numpy dequantizers, which cover every type llama.cpp writes.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize, quant_shape_to_byte_shape

from lazymlx.errors import LazymlxError

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# what models/gguf.py converts (its ARCHITECTURES); here so a file is refused before mlx-lm loads
SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "gemma3")

# GGUF value types: struct format of the scalar ones, and the numpy dtype for numeric arrays
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]  # numpy order (rows, columns): GGUF stores dimensions reversed
    offset: int  # from the start of the data section


@dataclass
class GGUFFile:
    """A GGUF file's metadata and tensor table; tensors are read by `tensor(name)`."""

    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo]
    data_start: int
    buffer: mmap.mmap = field(repr=False)

    def tensor(self, name: str) -> np.ndarray:
        """The tensor as float32 numpy, dequantized from whatever type the file stores."""
        info = self.tensors[name]
        byte_shape = quant_shape_to_byte_shape(info.shape, info.qtype)
        start = self.data_start + info.offset
        raw = np.frombuffer(self.buffer, np.uint8, int(np.prod(byte_shape)), start)
        return np.asarray(dequantize(raw.reshape(byte_shape), info.qtype), dtype=np.float32)


class _Cursor:
    def __init__(self, buffer: mmap.mmap) -> None:
        self.buffer, self.at = buffer, 0

    def scalar(self, kind: str) -> Any:
        (value,) = struct.unpack_from("<" + kind, self.buffer, self.at)
        self.at += struct.calcsize(kind)
        return value

    def string(self) -> str:
        length = self.scalar("Q")
        text = self.buffer[self.at : self.at + length].decode("utf-8", errors="replace")
        self.at += length
        return text

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.scalar("I"), self.scalar("Q")
            if item in _SCALARS:
                dtype = np.dtype("<" + _SCALARS[item])
                values = np.frombuffer(self.buffer, dtype, count, self.at)
                self.at += count * dtype.itemsize
                return values.tolist()
            return [self.value(item) for _ in range(count)]
        raise ValueError(f"unknown GGUF value type {kind}")


def check_architecture(name: object) -> None:
    """Refuse an architecture the import can't convert, by name."""
    if name not in SUPPORTED_ARCHITECTURES:
        raise LazymlxError(
            f"GGUF architecture {name!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)}); run it with llama.cpp, or add "
            "the family to lazymlx/models/gguf.py"
        )


def preflight(path: Path) -> None:
    """Refuse a GGUF of an unsupported architecture at once: its general.architecture key comes
    first in files llama.cpp writes, so this reads a few hundred bytes, not the vocabulary."""
    gguf = read_header(path, stop_at="general.architecture")
    check_architecture(gguf.metadata.get("general.architecture"))


def read_header(path: Path, stop_at: str | None = None) -> GGUFFile:
    """The file's metadata and tensor table; one clear error for anything that is not a GGUF.
    stop_at: stop reading once this key is read (no tensor table then)."""
    try:
        with open(path, "rb") as f:
            buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if buffer[:4] != MAGIC:
            raise ValueError("no GGUF magic number")
        cursor = _Cursor(buffer)
        cursor.at = 4
        version = cursor.scalar("I")
        if version < 2:
            raise ValueError(f"GGUF version {version} predates 2023's format 2")
        tensor_count, kv_count = cursor.scalar("Q"), cursor.scalar("Q")
        metadata = {}
        for _ in range(kv_count):
            key = cursor.string()
            metadata[key] = cursor.value(cursor.scalar("I"))
            if key == stop_at:
                return GGUFFile(Path(path), metadata, {}, 0, buffer)
        tensors = {}
        for _ in range(tensor_count):
            name = cursor.string()
            dims = [cursor.scalar("Q") for _ in range(cursor.scalar("I"))]
            kind, offset = cursor.scalar("I"), cursor.scalar("Q")
            try:
                qtype = GGMLQuantizationType(kind)
            except ValueError:
                raise LazymlxError(
                    f"{path} holds tensor {name!r} of GGML type {kind}, which this import does "
                    "not know; convert the model with a current llama.cpp"
                ) from None
            tensors[name] = TensorInfo(name, qtype, tuple(reversed(dims)), offset)
    except (OSError, ValueError, struct.error, UnicodeDecodeError) as error:
        raise LazymlxError(f"cannot read {path} as GGUF ({error}); check the file") from None
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
    data_start = (cursor.at + alignment - 1) // alignment * alignment
    last = max(tensors.values(), key=lambda t: t.offset, default=None)
    if last is not None:
        block, size = GGML_QUANT_SIZES[last.qtype]
        end = data_start + last.offset + int(np.prod(last.shape)) // block * size
        if end > len(buffer):
            raise LazymlxError(
                f"{path} is truncated ({len(buffer):,} bytes, its tensors need {end:,}); "
                "download it again"
            )
    return GGUFFile(Path(path), metadata, tensors, data_start, buffer)
