"""The collectives of a tensor-parallel group, for the apps above the engine.

Every rank of a group (lazymlx/parallel/distributed.py joins one under mlx.launch) holds its
share of each block's heads. What must come out the same on every rank goes through here: what
rank 0 alone knows (a file, an HTTP request) handed to the others, a context file gathered from
every rank's heads and read back into them. The group itself is the engine's
(lazymlx/engine/hooks.py), whose pruning scores reduce over it. Every rank must call each
helper, in the same order; each evaluates its collective at once rather than leaving it in a
lazy graph only some ranks would read. In one process (no group) every helper does what one
process does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import mlx.core as mx
import mlx_lm.models.cache as mlx_lm_cache
import numpy as np

from lazymlx.engine import hooks
from lazymlx.errors import LazymlxError

T = TypeVar("T")
GROUP_SIZE = "group_size"  # context files: how many ranks saved them


def group() -> mx.distributed.Group | None:
    """The group this process's model is sharded over; None in one process (the engine holds
    it: lazymlx/engine/hooks.py)."""
    return hooks.heads_group()


def rank() -> int:
    joined = group()
    return 0 if joined is None else joined.rank()


def size() -> int:
    joined = group()
    return 1 if joined is None else joined.size()


def set_group(joined: mx.distributed.Group | None) -> None:
    """The group this process's model is now sharded over (lazymlx/parallel/distributed.py);
    None when its ranks run context-parallel instead (lazymlx/parallel/context_parallel.py),
    each model whole."""
    hooks.set_heads_group(joined)


def _stream() -> mx.Stream:
    """Where control messages go: mlx-lm's generation stream, after the model's own collectives,
    so a message never overtakes a decode step still in flight on the wire."""
    from mlx_lm.generate import generation_stream

    return generation_stream


def share(message: Any = None) -> Any:
    """Rank 0's JSON-able `message`, on every rank (the others pass nothing)."""
    joined = group()
    if joined is None:
        return message
    leader = joined.rank() == 0
    data = json.dumps(message).encode() if leader else b""
    count = mx.distributed.all_sum(mx.array(len(data)), group=joined, stream=_stream()).item()
    buffer = mx.array(np.frombuffer(data, np.uint8)) if leader else mx.zeros((count,), mx.uint8)
    received = mx.distributed.all_sum(buffer, group=joined, stream=_stream())
    return json.loads(np.array(received).tobytes())


def anyone(flag: bool) -> bool:
    """Whether `flag` is set on any rank: how ranks stop together (rank 0's client went away)."""
    joined = group()
    if joined is None:
        return flag
    total = mx.distributed.all_sum(mx.array(int(flag)), group=joined, stream=_stream())
    return total.item() > 0


def on_leader(function: Callable[..., T], *args: Any, shared: bool = False) -> T | None:
    """`function(*args)` on rank 0 only (files, sockets), its LazymlxError raised on every rank.

    Returns its result on rank 0 and None on the others, or, with `shared`, its (JSON-able)
    result on every rank.
    """
    if group() is None:
        return function(*args)
    leader = rank() == 0
    result, error = None, None
    if leader:
        try:
            result = function(*args)
        except LazymlxError as caught:
            error = caught
    outcome = share({"error": error and str(error), "result": result if shared else None})
    if outcome["error"] is not None:
        raise error or LazymlxError(outcome["error"])
    return result if leader else outcome["result"]


def whole_heads(
    entries: list[Any], metadata: dict[str, str] | None
) -> tuple[list[Any], dict[str, str] | None]:
    """A group's context as one file holds it: each KV cache with every rank's heads (rank order
    is head order, so the layout one process has), and the group's size in the metadata.

    Every rank must call it (it gathers); rank 0 writes what it returns.
    """
    if group() is None:
        return entries, metadata
    joined = []
    for entry in entries:
        state = [_gathered(item) for item in entry.state]
        joined.append(type(entry).from_state(state))
    return joined, {**(metadata or {}), GROUP_SIZE: str(size())}


def _gathered(item: Any) -> Any:
    if not isinstance(item, mx.array) or item.ndim != 4:  # (batch, heads, rows, dim) is sharded
        return item
    parts = mx.distributed.all_gather(item, group=group(), stream=_stream())
    mx.eval(parts)  # now, on every rank: only rank 0 ever reads the result
    return parts.reshape(1, -1, *item.shape[2:])


def read_context(
    read: Callable[[], tuple[list[Any], dict[str, str]]], path: Path
) -> tuple[list[Any], dict[str, str]]:
    """A context file's caches and metadata, read by rank 0 (`read`) and handed to every rank, each
    KV cache with this rank's heads; a file saved by a group of another size is refused."""
    if group() is None:
        entries, metadata = read()
        _check_group_size(metadata, path)
        return entries, metadata
    loaded = on_leader(read)
    layout = None
    if loaded is not None:  # rank 0
        entries, metadata = loaded
        layout = {
            "metadata": metadata,
            "classes": [type(entry).__name__ for entry in entries],
            "states": [[_describe(item) for item in entry.state] for entry in entries],
        }
    layout = share(layout)
    _check_group_size(layout["metadata"], path)
    mine = []
    for index, (name, described) in enumerate(
        zip(layout["classes"], layout["states"], strict=True)
    ):
        state = []
        for position, item in enumerate(described):
            if "shape" not in item:
                state.append(item["value"])
                continue
            own = loaded[0][index].state[position] if loaded is not None else None
            state.append(_heads_of_mine(_broadcast(own, item)))
        mine.append(getattr(mlx_lm_cache, name).from_state(state))
    return mine, layout["metadata"]


def _describe(item: Any) -> dict[str, Any]:
    if isinstance(item, mx.array):
        return {"shape": item.shape, "dtype": str(item.dtype).rsplit(".", 1)[-1]}
    return {"value": item}


def _broadcast(array: mx.array | None, described: dict[str, Any]) -> mx.array:
    shape, dtype = tuple(described["shape"]), getattr(mx, described["dtype"])
    if math.prod(shape) == 0:
        return mx.zeros(shape, dtype)
    mine = array if array is not None else mx.zeros(shape, dtype)
    received = mx.distributed.all_sum(mine, group=group(), stream=_stream())
    mx.eval(received)  # now, on every rank, in the same order
    return received


def _heads_of_mine(array: mx.array) -> mx.array:
    if array.ndim != 4:
        return array
    count = array.shape[1] // size()
    return array[:, rank() * count : (rank() + 1) * count]


def _check_group_size(metadata: dict[str, str], path: Path) -> None:
    saved = metadata.get(GROUP_SIZE, "1")
    if saved == str(size()):
        return
    if saved == "1":
        raise LazymlxError(f"{path} holds the context of one process; load it without mlx.launch")
    raise LazymlxError(
        f"{path} holds the context of a group of {saved} ranks; load it in a group of {saved} "
        f"(mlx.launch with {saved} ranks)"
    )
