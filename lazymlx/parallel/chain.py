"""The context-parallel chain's messages: who sends to whom, one message in flight, deadlines.

The ranks of a group form a chain (lazymlx/parallel/context_parallel.py) that runs
1 → 2 → … → n-1 → 0, so every hop is between ring neighbours (MLX's ring backend sends only to
rank ± 1). A receiver must know each message's shape in advance, and every rank does: the step's
`Plan` (the header rank 0 sends first) and the keep decisions are the same on all of them.

A follower's rows of a layer (positions, keys and values, and at a pruning layer the last
queries) travel as one message. It goes through a stream of the chain's own, posted before the
compute it overlaps (on the default stream) and waited for right after it; nothing else goes on
the chain meanwhile, and every other message is sent or received and waited for at once. One
message in flight, never two, is what keeps a lost rank from hanging the others: MLX's ring
backend fails what is pending on a socket whose peer is gone and then stops serving that socket
for good, so a message queued behind a failed one never ends, and neither does an evaluation
that meets the stream's error and, cleaning up, waits for that stream to drain (the old overlap,
reverted in 30893b4, hung there). With one in flight the failed message is the one waited for,
and its error ends the rank with its one line.

Every wait on a neighbour inside a step has a deadline (lazymlx/parallel/watchdog.py,
LAZYMLX_STALL_TIMEOUT): a rank that stalls with its connections open ends the chain with one
line per rank, naming the rank and what it waited for. The wait for the next header is idle by
design (rank 0 decodes, serves nobody, times one process) and has none: a rank 0 that dies
closes its connections, which ends the wait at once.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from lazymlx.parallel.watchdog import Watchdog

# A healthy chain's longest wait is its filling up, at the first layer and after each keep
# decision: a rank waits for every slice ahead of it to run a layer, under one process's time
# for the whole layer with balanced slices (plus the ranking and the messages). Four of them
# leave room for a rank on a machine up to ~4x slower than rank 0's, where the costs are
# timed, and for the timing's extrapolation from 1k tokens to long prompts.
STALL_LAYERS = 4
MESSAGES = {  # what each message carries, for the lines of a rank that waited too long
    "header": "the step's header",
    "kv": "the keys and values of layer {layer}",
    "decision": "the keep decision of layer {layer}",
    "slots": "the Aux slots of the pruned tokens",
}


@dataclass
class Traffic:
    """What this rank sent: (layer or -1 for the header and the end, what, bytes) per message."""

    messages: list[tuple[int, str, int]] = field(default_factory=list)

    def per_layer(self) -> dict[int, tuple[int, int]]:
        """layer → (messages, bytes)."""
        out: dict[int, tuple[int, int]] = {}
        for layer, _, size in self.messages:
            count, total = out.get(layer, (0, 0))
            out[layer] = (count + 1, total + size)
        return out


@dataclass
class Posted:
    """A send on its way (Chain.post): what to wait for, and what to record once it has passed."""

    sent: mx.array
    layer: int
    what: str
    nbytes: int


class Chain:
    """A group run as a context-parallel chain: rank 1 holds the first slice, rank 0 the last.

    Messages go through a stream of the chain's own (`stream`), so that a send runs beside the
    compute on the default stream; a receiver knows each message by its place in the order."""

    def __init__(self, group: mx.distributed.Group, watchdog: Watchdog) -> None:
        self.group, self.watchdog = group, watchdog
        self.rank, self.size = group.rank(), group.size()
        self.position = (self.rank - 1) % self.size  # in the chain
        self.next, self.previous = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        self.streams: dict[int, mx.Stream] = {}  # per thread
        self.posted: Posted | None = None  # the message in flight, if any
        self.traffic = Traffic()
        self.times: list[tuple[int, float]] = []  # (layer, seconds of own compute), last step
        self.plan: Plan | None = None  # the last step's

    @property
    def leads(self) -> bool:
        return self.rank == 0

    def deadline(self) -> float:
        """Seconds a wait of this step may take: STALL_LAYERS times its prompt's whole first
        layer as rank 0 models it, or the watchdog's shortest (LAZYMLX_STALL_TIMEOUT) if longer."""
        modelled = STALL_LAYERS * self.plan.layer_ms / 1000 if self.plan is not None else 0.0
        return max(self.watchdog.shortest, modelled)

    @property
    def stream(self) -> mx.Stream:
        """This thread's message stream: MLX's streams belong to the thread that made them, and
        a server runs its steps on a generation thread."""
        thread = threading.get_ident()
        if thread not in self.streams:
            self.streams[thread] = mx.new_stream(mx.cpu)
        return self.streams[thread]

    def post(self, array: mx.array, layer: int, what: str) -> Posted | None:
        """Start sending an evaluated array to the next rank and go on (an empty array sends
        nothing: the receiver knows). The caller waits for it (`wait`) before anything else
        goes on the chain: one message in flight, never two (see the module's docstring)."""
        if not array.size:
            return None
        self.check_idle()
        sent = mx.distributed.send(array, self.next, group=self.group, stream=self.stream)
        mx.async_eval(sent)
        self.posted = Posted(sent, layer, what, array.nbytes)
        return self.posted

    def wait(self, posted: Posted | None) -> None:
        """Until a posted send has passed (it blocks until the next rank takes the bytes), within
        the stall deadline; a lost rank raises here."""
        if posted is None:
            return
        what = _message(posted.what, posted.layer)
        with self.watchdog.waiting(f"rank {self.next} to take {what}", self.deadline()):
            mx.eval(posted.sent)
        self.posted = None
        self.traffic.messages.append((posted.layer, posted.what, posted.nbytes))

    def check_idle(self) -> None:
        """Refuse a second message while one is in flight: behind a message that fails, it
        would hang this rank for good (see the module's docstring)."""
        if self.posted is not None:
            raise RuntimeError(
                f"a message on the chain while {_message(self.posted.what, self.posted.layer)} "
                "is in flight"
            )

    def send(self, array: mx.array, layer: int, what: str) -> None:
        """Send to the next rank now, within the stall deadline."""
        self.wait(self.post(array, layer, what))

    def receive(
        self, shape: tuple[int, ...], dtype: mx.Dtype, layer: int, what: str, idle: bool = False
    ) -> mx.array:
        """Receive from the previous rank now (an empty shape receives nothing), within the
        stall deadline unless the wait is `idle` by design."""
        if not math.prod(shape):
            return mx.zeros(shape, dtype)
        self.check_idle()
        received = mx.distributed.recv(
            shape, dtype, self.previous, group=self.group, stream=self.stream
        )
        if idle:
            mx.eval(received)
            return received
        with self.watchdog.waiting(
            f"{_message(what, layer)} from rank {self.previous}", self.deadline()
        ):
            mx.eval(received)
        return received


def _message(what: str, layer: int) -> str:
    return MESSAGES[what].format(layer=layer)


def pack(*arrays: mx.array) -> mx.array:
    """Arrays of any shapes and dtypes as one message of bytes (`unpack` reads it)."""
    return mx.concatenate([mx.view(array.flatten(), mx.uint8) for array in arrays])


def unpack(message: mx.array, parts: list[tuple[tuple[int, ...], mx.Dtype]]) -> list[mx.array]:
    """The arrays of (shape, dtype) `parts` that `pack` put in `message`, in order."""
    arrays, at = [], 0
    for shape, dtype in parts:
        size = math.prod(shape) * dtype.size
        arrays.append(mx.view(message[at : at + size], dtype).reshape(shape))
        at += size
    return arrays


@dataclass
class Plan:
    """One chain step as every rank runs it: the prompt, the slices (bounds[p]..bounds[p+1] for
    chain position p), the chunk, the scoring window, the layers whose keep decision rank 0
    sends back, and the whole prompt's first layer in one process as rank 0 models it (ms),
    which sets the step's stall deadline."""

    tokens: np.ndarray
    bounds: list[int]
    chunk: int
    window: int
    decisions: list[int]
    layer_ms: int = 0

    def encode(self) -> mx.array:
        head = [self.chunk, self.window, self.layer_ms, len(self.decisions), *self.decisions]
        head += [len(self.bounds), *self.bounds]
        return mx.array(np.concatenate([np.array(head, np.int64), self.tokens]).astype(np.int32))

    @classmethod
    def decode(cls, array: mx.array) -> Plan:
        values = np.array(array).astype(np.int64)
        chunk, window, layer_ms, count = (int(v) for v in values[:4])
        decisions = values[4 : 4 + count].tolist()
        at = 4 + count
        bounds = values[at + 1 : at + 1 + int(values[at])].tolist()
        return cls(values[at + 1 + len(bounds) :], bounds, chunk, window, decisions, layer_ms)
