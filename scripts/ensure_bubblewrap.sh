#!/usr/bin/env bash
# Before a test run: bubblewrap, so that the tests exercise the sandbox a farm daemon requires
# (evalfarm.sandbox.isolation). Installs it where this machine lets us (apt-get as root, or with sudo
# that needs no password); says loudly where it cannot, and what the run then does not test.
# Never fails the run itself: the tests decide what they can check (tests/sandbox_under_test.py).
#   bash scripts/ensure_bubblewrap.sh [PYTHON]
set -u
PY="${1:-python3}"
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO="none"; fi
  fi
  if [ "$SUDO" != none ]; then
    echo "installing bubblewrap (the sandbox under test) ..."
    timeout 300 $SUDO sh -c 'apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null 2>&1; }' ||
      echo "bubblewrap could not be installed"
  fi
fi
"$PY" - <<'PYEOF'
from evalfarm.sandbox import isolation

found = isolation.assess("cpu")
if found.strong:
    print(f"sandbox under test: {found.summary()}")
else:
    bar = "!" * 100
    print(f"{bar}\n!! The real sandbox is NOT tested on this machine: {'; '.join(found.missing)}.\n"
          f"!! Fix: {found.fix}.\n"
          f"!! Until then the daemons the tests start run with --allow-weak-sandbox, and the sandbox tests skip.\n{bar}")
PYEOF
exit 0
