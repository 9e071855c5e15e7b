"""The environment every worker gets (evalfarm.sandbox.clean_env): the same settings on both sides."""

from evalfarm import sandbox


def test_workers_openmp_threads_sleep_between_calls_rather_than_spin(tmp_path):
    # A worker's spinning OpenMP threads took the CPU from the other worker's next timed call.
    env = sandbox.clean_env(str(tmp_path))
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path)


def test_the_operator_s_environment_does_not_change_the_wait_policy(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert sandbox.clean_env(str(tmp_path))["OMP_WAIT_POLICY"] == "PASSIVE"
