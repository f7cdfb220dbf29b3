"""A built wheel installs lazymlx, lazymlx.models and lazymlx.cli (and no bare `models`/`cli`)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run(*command: str, cwd: Path) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_environment_and_runs(tmp_path: Path, tiny_model_dir: Path):
    run(
        sys.executable,
        "-m",
        "build",
        "--wheel",
        "--no-isolation",
        "--outdir",
        str(tmp_path / "dist"),
        str(REPO),
        cwd=tmp_path,
    )
    wheel = next((tmp_path / "dist").glob("lazymlx-*.whl"))
    fresh = tmp_path / "fresh"
    run(sys.executable, "-m", "venv", "--without-pip", str(fresh), cwd=tmp_path)
    python = fresh / "bin" / "python"
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "-q",
        "--no-deps",
        str(wheel),
        cwd=tmp_path,
    )
    site = Path(
        run(
            str(python),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            cwd=tmp_path,
        ).strip()
    )
    assert (site / "lazymlx" / "models" / "gguf.py").exists()
    assert (site / "lazymlx" / "cli" / "app.py").exists()
    assert not (site / "models").exists() and not (site / "cli").exists()
    # the registry models' data: calibrated presets and cached baselines
    assert (site / "lazymlx" / "engine" / "calibrated" / "smollm2-135m.json").exists()
    assert (site / "lazymlx" / "evals" / "baselines" / "smollm2-135m.json").exists()
    # dependencies come from this environment, without the network; its editable lazymlx is not seen
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = run(
        str(python),
        "-c",
        "import lazymlx.models.gguf, lazymlx.cli.app; print(lazymlx.__file__)",
        cwd=tmp_path,
    )
    assert where.startswith(str(site))
    assert "chat" in run(str(fresh / "bin" / "lazymlx"), "--help", cwd=tmp_path)
    out = run(
        str(fresh / "bin" / "lazymlx"),
        "generate",
        "-m",
        str(tiny_model_dir),
        "-p",
        "the",
        "--raw",
        "-n",
        "2",
        "--json",
        cwd=tmp_path,
    )
    assert '"prompt_tokens": 2' in out
