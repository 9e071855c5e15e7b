"""Names the judge, its launcher and its workers share (no torch: the launcher starts the
workers before the judge imports it)."""

REFERENCE, CANDIDATE = "reference", "candidate"
# The subdirectory of a worker's own directory that stays on the host's disk: an extension the
# worker builds for itself goes there, and the judge checks its symbols afterwards.
EXT_DIR = "evalfarm-ext"
# Likewise the directory a --profile trace is written to.
PROFILE_DIR = "candidate-profile"
KEPT_DIRS = (EXT_DIR, PROFILE_DIR)
# Beside the workers' own directories: the extension-cache entries the candidate worker may load,
# copied there by the judge for its request, and shown to the worker read-only. The worker's
# sandbox never shows the build pool's cache itself.
STAGED_CACHE = "candidate-extensions"
# Set by the judge to the device whose context a worker creates while it waits for its task.
WARM_ENV = "EVALFARM_WORKER_WARM"
