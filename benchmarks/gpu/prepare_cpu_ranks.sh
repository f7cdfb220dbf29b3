#!/usr/bin/env bash
# Stage benchmarks/gpu/cpu_ranks.sh for the GPU machine's CPU: MLX's CPU wheels, mlx-lm, this
# checkout and the two packages of its own that machine lacks, plus this machine's OpenBLAS and
# the Fortran runtime it needs (that machine has no OpenBLAS, and MLX's CPU backend without it is
# ~50x slower), all in the git-ignored .cpurun/ (~25 MB). Run it in the project root.
#   bash benchmarks/gpu/prepare_cpu_ranks.sh
set -euo pipefail
if [[ ${1-} == -h || ${1-} == --help ]]; then
  sed -n '2,/^set /{/^#/s/^# \{0,1\}//p;}' "$0"
  exit 0
fi
root=$(git rev-parse --show-toplevel); cd "$root"
py=${PYTHON:-.venv/bin/python}
version() { "$py" -c "import importlib.metadata as m; print(m.version('$1'))"; }
grep -qxF /.cpurun/ .git/info/exclude 2>/dev/null || echo /.cpurun/ >> .git/info/exclude
rm -rf .cpurun; mkdir -p .cpurun
plat="--platform manylinux_2_35_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat \
  -d .cpurun "mlx==$(version mlx)" "mlx-cpu==$(version mlx)" "mlx-lm==$(version mlx-lm)" \
  "gguf==$(version gguf)" "prompt_toolkit==$(version prompt_toolkit)" "wcwidth==$(version wcwidth)"
"$py" -m pip wheel -q --no-deps --no-build-isolation -w .cpurun . >/dev/null
blas=$(mktemp -d)
cp "$(readlink -f /usr/lib/x86_64-linux-gnu/libopenblas.so.0)" "$blas/libopenblas.so.0"
cp -L /lib/x86_64-linux-gnu/libgfortran.so.5 /lib/x86_64-linux-gnu/libquadmath.so.0 "$blas/"
tar czf .cpurun/blas.tgz -C "$blas" .
rm -rf "$blas"
du -sh .cpurun
