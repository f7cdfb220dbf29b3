#!/usr/bin/env bash
# Context parallelism's wall-clock scaling on the GPU machine's 16 CPU cores: one process, then
# 2 and 4 ranks (loopback ring) of Qwen2.5-Coder-0.5B's layer shape with random weights (no
# weights reach that machine), each rank and the one process pinned to 4 cores of their own, as
# on Macs of their own; greedy tokens and kept rows checked against the one process. Stage it here
# with benchmarks/gpu/prepare_cpu_ranks.sh, then there, from the project root, with .cpurun
# carried:  bash benchmarks/gpu/cpu_ranks.sh 2k,4k,8k   (one JSON per length in $OUT)
# The chain keeps every token (keep-all: the engine's whole computation, split over the ranks).
set -uo pipefail
if [[ ${1-} == -h || ${1-} == --help ]]; then
  sed -n '2,/^set /{/^#/s/^# \{0,1\}//p;}' "$0"
  exit 0
elif [[ -z ${1-} ]]; then
  echo "usage: bash benchmarks/gpu/cpu_ranks.sh LENGTHS (as 2k,4k,8k); --help says more" >&2
  exit 2
fi
py=${PYTHON:-python3} cores=${CORES:-4}
$py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .cpurun/*.whl || exit 1
mkdir -p /tmp/blas && tar xzf .cpurun/blas.tgz -C /tmp/blas
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/tmp/blas LAZYMLX_OPENBLAS=/tmp/blas/libopenblas.so.0
out=${OUT:-benchmarks/results}
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
echo "$(nproc) cores: $cpu"
$py -c "import lazymlx, lazymlx.platform as p, mlx.core as mx; print(mx.__version__, p.blas_name())"
$py benchmarks/context_parallel.py shape --out /tmp/qwen_shape || exit 1
machine="GPU machine's CPU ($cpu, $(nproc) cores), $cores cores per rank, MLX CPU (fp32, OpenBLAS), loopback ring"
for length in ${1//,/ }; do
  $py benchmarks/context_parallel.py chain -m /tmp/qwen_shape -l "$length" --lazy keep-all \
    --ranks 2,4 --runs 2 --cores-per-rank "$cores" --machine "$machine" \
    --output "$out/cp_cpu_ranks_${length}_keep-all.json"
done
