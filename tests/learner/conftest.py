"""Learner tests: make the repo root and this folder importable, keep JAX on CPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
for p in (str(REPO_ROOT), str(Path(__file__).resolve().parent)):
    if p not in sys.path:
        sys.path.insert(0, p)

os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Fixtures shared with the service tests: an in-process daemon (fake backend) and test certificates.
from tests.service.conftest import daemon_factory  # noqa: E402, F401
from tests.service.test_tls import pki  # noqa: E402, F401
