"""OpenBLAS is bound in-process on Linux; its absence is one clear warning."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lazymlx import platform

linux_only = pytest.mark.skipif(not platform.is_linux(), reason="OpenBLAS binding is Linux-only")


@linux_only
def test_openblas_is_bound_when_installed():
    if platform.find_openblas() is None:
        pytest.skip("no system OpenBLAS here; `make test` installs it")
    assert platform.openblas_loaded()
    assert platform.blas_name() == "OpenBLAS"
    assert platform.blas_warning() is None


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ, **env), capture_output=True, text=True
    )


@linux_only
def test_without_openblas_loading_a_model_warns_once_with_the_install_command(tiny_model_dir):
    result = _run(
        "import warnings, lazymlx\n"
        "from lazymlx import platform\n"
        "print(platform.blas_name())\n"
        f"lazymlx.load({str(tiny_model_dir)!r})",
        LAZYMLX_OPENBLAS="/nonexistent/libopenblas.so.0",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "reference BLAS (slow)"
    assert (
        "OpenBLAS not found" in result.stderr
        and "apt-get install libopenblas0-pthread" in result.stderr
    )


@linux_only
def test_cli_prints_the_blas_warning_as_one_line(tiny_model_dir):
    result = _run(
        "from lazymlx.cli.app import main\n"
        f"main(['generate', '-m', {str(tiny_model_dir)!r}, '-p', 'the', '--raw', '-n', '2'])",
        LAZYMLX_OPENBLAS="/nonexistent/libopenblas.so.0",
    )
    assert result.returncode == 0, result.stderr
    warning_lines = [line for line in result.stderr.splitlines() if "OpenBLAS" in line]
    assert warning_lines == [
        "warning: OpenBLAS not found, MLX matmuls will be ~50x slower; install it with "
        "`sudo apt-get install libopenblas0-pthread`"
    ]


def test_device_name_names_the_backend():
    name = platform.device_name()
    assert name.endswith("(MLX CPU)") or name.endswith("(MLX Metal)")


def test_importing_lazymlx_keeps_mlx_from_ending_the_process_on_new_shapes():
    """MLX's CUDA caches raise after twice their size in misses over the process's life; lazymlx
    turns that check off unless the user chose."""
    code = "import os, lazymlx; print(os.environ['MLX_ENABLE_CACHE_THRASHING_CHECK'])"
    env = {k: v for k, v in os.environ.items() if k != "MLX_ENABLE_CACHE_THRASHING_CHECK"}
    unset = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert unset.stdout.strip() == "0", unset.stderr
    assert _run(code, MLX_ENABLE_CACHE_THRASHING_CHECK="1").stdout.strip() == "1"
