"""A built wheel installs lazymlx, lazymlx.models and lazymlx.cli (and no bare `models`/`cli`),
with its data files, and neither it nor an editable install prints setuptools' warnings."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# what setuptools says of a folder inside a package that `packages` does not list (the data
# folders were), 40 lines each, at every install and build
UNLISTED = "is absent from the `packages` configuration"


def completed(*command: str, cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result


def run(*command: str, cwd: Path) -> str:
    """The command's stdout; it must succeed."""
    return completed(*command, cwd=cwd).stdout


def printed(*command: str, cwd: Path) -> str:
    """All the command printed, stdout and stderr (where a build's warnings go)."""
    result = completed(*command, cwd=cwd)
    return result.stdout + result.stderr


def fresh_environment(where: Path) -> tuple[Path, Path]:
    """A venv without lazymlx that sees this one's dependencies (no network): its python and
    its site-packages."""
    run(sys.executable, "-m", "venv", "--without-pip", str(where), cwd=where.parent)
    python = where / "bin" / "python"
    site = Path(
        run(
            str(python),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            cwd=where.parent,
        ).strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, site


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_environment_and_runs(tmp_path: Path, tiny_model_dir: Path):
    build = printed(
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
    assert UNLISTED not in build
    wheel = next((tmp_path / "dist").glob("lazymlx-*.whl"))
    fresh = tmp_path / "fresh"
    python, site = fresh_environment(fresh)
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
    assert (site / "lazymlx" / "models" / "gguf.py").exists()
    assert (site / "lazymlx" / "cli" / "app.py").exists()
    assert not (site / "models").exists() and not (site / "cli").exists()
    # the registry models' calibrated presets ship; the shelf's stock answers do not
    assert (site / "lazymlx" / "engine" / "calibrated" / "smollm2-135m.json").exists()
    assert not (site / "lazymlx" / "evals" / "baselines").exists()
    # dependencies come from this environment (deps.pth); its editable lazymlx is not seen
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


@pytest.mark.slow
def test_an_editable_install_prints_no_setuptools_warning(tmp_path: Path):
    """`make setup`'s install, quiet (`pip install -q -e .`), into a fresh environment."""
    python, _ = fresh_environment(tmp_path / "fresh")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    install = printed(*install, "--no-deps", "--no-build-isolation", "-e", str(REPO), cwd=tmp_path)
    assert UNLISTED not in install
    # the data folders are read from the work tree: the shipped presets are found
    check = "from lazymlx.engine.presets import calibrated; print(calibrated('smollm2-135m'))"
    assert run(str(python), "-c", check, cwd=tmp_path).strip() == "True"
