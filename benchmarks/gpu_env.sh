# Sourced by the GPU host scripts (run from the repository root): makes $OUT, installs the
# wheels carried in .whl/ (pure-Python packages the host lacks) into /tmp/site, sets PYTHONPATH.
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export OUT PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
elif ls ../shared/wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site ../shared/wheels/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
