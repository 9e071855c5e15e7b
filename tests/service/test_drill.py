"""The operator's fault drill (evalfarm.ops.drill) on CPU: three faults under a stream, every check passes."""

from __future__ import annotations

import json

import pytest

from evalfarm.ops import drill
from tests.sandbox_under_test import DAEMON_ARGS


@pytest.mark.long  # the operator fault drill (daemons killed and restarted): about 2 minutes on 2 cores
def test_the_fault_drill_passes_on_cpu(tmp_path):
    out = tmp_path / "drill"
    code = drill.main(["--device", "cpu", "--candidates", "8", "--group", "2", "--no-builds",
                       "--fault-wait", "60", "--timeout", "300", "--out", str(out), *DAEMON_ARGS])
    report = json.loads((out / "drill.json").read_text())
    assert code == 0, report
    assert report["answered"] == 8 and not report["missing"] and not report["answered_twice"]
    assert [f["fault"] for f in report["faults"]] == ["kill a busy worker", "kill a busy judge", "kill daemon 1"]
    assert all(f["done"] for f in report["faults"]), report["faults"]
    assert all(report["checks"].values()), report["checks"]
    assert (out / "daemon-0.log").exists()


def test_too_few_candidates_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as err:
        drill.main(["--candidates", "3"])
    assert err.value.code == 2 and "at least 6" in capsys.readouterr().err
