"""What differs between a Mac (Metal) and Linux (MLX's CPU backend), kept in one place.

On Linux the mlx-cpu wheel links netlib's reference BLAS, about 50-75x slower at fp32 matmul than
OpenBLAS. Loading the system OpenBLAS with RTLD_GLOBAL *before* MLX is imported makes the dynamic
linker resolve MLX's cblas_* symbols to it, the same effect as LD_PRELOAD but from inside the
process, so the CLI, the Python API and the tests all get it without a re-exec.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import platform
import sys
from pathlib import Path

OPENBLAS_ENV = "LAZYMLX_OPENBLAS"  # a library path, or "off" to keep MLX's bundled BLAS
OPENBLAS_INSTALL_HINT = "sudo apt-get install libopenblas0-pthread"
_OPENBLAS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)


def is_linux() -> bool:
    return sys.platform.startswith("linux")


def is_macos() -> bool:
    return sys.platform == "darwin"


def _binding_disabled() -> bool:
    return os.environ.get(OPENBLAS_ENV, "").lower() in ("off", "0", "none")


def find_openblas() -> str | None:
    if _binding_disabled():
        return None
    if chosen := os.environ.get(OPENBLAS_ENV):
        return chosen
    for candidate in _OPENBLAS_CANDIDATES:
        if Path(candidate).exists():
            return candidate
    return ctypes.util.find_library("openblas")


def use_fast_blas() -> None:
    """Load OpenBLAS globally so MLX binds to it; a no-op off Linux or once MLX is loaded."""
    if not is_linux() or "mlx.core" in sys.modules or openblas_loaded():
        return
    library = find_openblas()
    if library is None:
        return
    with contextlib.suppress(OSError):  # reported by blas_warning(): MLX keeps its slow BLAS
        ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)


def survive_new_shapes() -> None:
    """Keep MLX's CUDA backend from ending the process when shapes keep changing: its cuDNN
    plan and CUDA graph caches raise once their misses pass twice their size, counted over the
    process's life, and a chat or server meets new prompt shapes with every request (stock
    mlx-lm's too). A user's own setting stands; it must be made before MLX's first GPU work."""
    os.environ.setdefault("MLX_ENABLE_CACHE_THRASHING_CHECK", "0")


def openblas_loaded() -> bool:
    try:
        return "libopenblas" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def backend() -> str:
    """MLX's default device: "Metal" (Apple silicon), "CUDA" (NVIDIA) or "CPU"."""
    import mlx.core as mx

    if mx.default_device() == mx.cpu:
        return "CPU"
    return "Metal" if mx.metal.is_available() else "CUDA"


@functools.cache
def on_cuda() -> bool:
    """Whether MLX computes on an NVIDIA GPU (asked once: the engine asks on every layer)."""
    return backend() == "CUDA"


def on_gpu() -> bool:
    """Models keep their dtype (bf16, quantized) on a GPU backend; MLX's CPU backend has fast
    kernels for fp32 matmuls only, so models are run in fp32 there."""
    return backend() != "CPU"


def blas_name() -> str:
    """The BLAS MLX uses here, for benchmark headers."""
    if is_macos():
        return "Accelerate"
    if on_gpu():
        return "cuBLAS"
    return "OpenBLAS" if openblas_loaded() else "reference BLAS (slow)"


def blas_warning() -> str | None:
    """One line for the user when MLX computes on a Linux CPU without OpenBLAS, else None."""
    if not is_linux() or openblas_loaded() or on_gpu():
        return None
    if _binding_disabled():
        return None
    return (
        "OpenBLAS not found, MLX matmuls will be ~50x slower; "
        f"install it with `{OPENBLAS_INSTALL_HINT}`"
    )


def device_name() -> str:
    """The chip (macOS) or CPU model (Linux) with MLX's backend, for stats and benchmark headers."""
    if backend() == "CUDA":
        import mlx.core as mx

        return f"{mx.device_info().get('device_name', 'NVIDIA GPU')} (MLX CUDA)"
    return f"{_chip_name()} (MLX {backend()})"


def _chip_name() -> str:
    if is_macos():
        import subprocess

        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                check=True,
            )
            return out.stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
