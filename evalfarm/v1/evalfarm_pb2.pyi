from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERDICT_OK: _ClassVar[Verdict]
    VERDICT_COMPILE_ERROR: _ClassVar[Verdict]
    VERDICT_LOAD_ERROR: _ClassVar[Verdict]
    VERDICT_RUNTIME_ERROR: _ClassVar[Verdict]
    VERDICT_TIMEOUT: _ClassVar[Verdict]
    VERDICT_CUDA_FAULT: _ClassVar[Verdict]
    VERDICT_INCORRECT: _ClassVar[Verdict]
    VERDICT_HACK_DETECTED: _ClassVar[Verdict]
    VERDICT_INFRA_ERROR: _ClassVar[Verdict]

class InfraCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INFRA_CAUSE_UNSPECIFIED: _ClassVar[InfraCause]
    INFRA_CAUSE_OTHER: _ClassVar[InfraCause]
    INFRA_CAUSE_DEADLINE: _ClassVar[InfraCause]
    INFRA_CAUSE_DRAINING: _ClassVar[InfraCause]
    INFRA_CAUSE_TASK_TOO_LARGE: _ClassVar[InfraCause]
VERDICT_UNSPECIFIED: Verdict
VERDICT_OK: Verdict
VERDICT_COMPILE_ERROR: Verdict
VERDICT_LOAD_ERROR: Verdict
VERDICT_RUNTIME_ERROR: Verdict
VERDICT_TIMEOUT: Verdict
VERDICT_CUDA_FAULT: Verdict
VERDICT_INCORRECT: Verdict
VERDICT_HACK_DETECTED: Verdict
VERDICT_INFRA_ERROR: Verdict
INFRA_CAUSE_UNSPECIFIED: InfraCause
INFRA_CAUSE_OTHER: InfraCause
INFRA_CAUSE_DEADLINE: InfraCause
INFRA_CAUSE_DRAINING: InfraCause
INFRA_CAUSE_TASK_TOO_LARGE: InfraCause

class TaskRef(_message.Message):
    __slots__ = ("name", "source", "sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    source: TaskSource
    sha256: str
    def __init__(self, name: _Optional[str] = ..., source: _Optional[_Union[TaskSource, _Mapping]] = ..., sha256: _Optional[str] = ...) -> None: ...

class TaskSource(_message.Message):
    __slots__ = ("source", "name")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    source: bytes
    name: str
    def __init__(self, source: _Optional[bytes] = ..., name: _Optional[str] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("source", "sample_id", "tags")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_ID_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    source: bytes
    sample_id: str
    tags: _containers.ScalarMap[str, str]
    def __init__(self, source: _Optional[bytes] = ..., sample_id: _Optional[str] = ..., tags: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ScoreOptions(_message.Message):
    __slots__ = ("num_correctness_inputs", "tolerance", "timing_budget_s", "target_ci", "num_buckets", "max_bucket_variance", "min_timed_rounds", "warmup_rounds", "audit_fraction", "timeout_factor", "min_call_timeout_s", "load_timeout_s", "build_timeout_s", "size_profile", "memory_limit_bytes", "file_size_limit_bytes", "first_call_timeout_s", "guard_policy", "reverify_above", "check_other_sizes", "require_other_sizes", "charge_exchange", "gpu_lease_timeout_s", "correctness_block", "warm_call", "timing_protocol", "precision")
    NUM_CORRECTNESS_INPUTS_FIELD_NUMBER: _ClassVar[int]
    TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    TIMING_BUDGET_S_FIELD_NUMBER: _ClassVar[int]
    TARGET_CI_FIELD_NUMBER: _ClassVar[int]
    NUM_BUCKETS_FIELD_NUMBER: _ClassVar[int]
    MAX_BUCKET_VARIANCE_FIELD_NUMBER: _ClassVar[int]
    MIN_TIMED_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    WARMUP_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FRACTION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FACTOR_FIELD_NUMBER: _ClassVar[int]
    MIN_CALL_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    LOAD_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    BUILD_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    SIZE_PROFILE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    FIRST_CALL_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    GUARD_POLICY_FIELD_NUMBER: _ClassVar[int]
    REVERIFY_ABOVE_FIELD_NUMBER: _ClassVar[int]
    CHECK_OTHER_SIZES_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_OTHER_SIZES_FIELD_NUMBER: _ClassVar[int]
    CHARGE_EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    GPU_LEASE_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    CORRECTNESS_BLOCK_FIELD_NUMBER: _ClassVar[int]
    WARM_CALL_FIELD_NUMBER: _ClassVar[int]
    TIMING_PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    num_correctness_inputs: int
    tolerance: str
    timing_budget_s: float
    target_ci: float
    num_buckets: int
    max_bucket_variance: float
    min_timed_rounds: int
    warmup_rounds: int
    audit_fraction: float
    timeout_factor: float
    min_call_timeout_s: float
    load_timeout_s: float
    build_timeout_s: float
    size_profile: str
    memory_limit_bytes: int
    file_size_limit_bytes: int
    first_call_timeout_s: float
    guard_policy: str
    reverify_above: float
    check_other_sizes: bool
    require_other_sizes: bool
    charge_exchange: bool
    gpu_lease_timeout_s: float
    correctness_block: bool
    warm_call: bool
    timing_protocol: str
    precision: str
    def __init__(self, num_correctness_inputs: _Optional[int] = ..., tolerance: _Optional[str] = ..., timing_budget_s: _Optional[float] = ..., target_ci: _Optional[float] = ..., num_buckets: _Optional[int] = ..., max_bucket_variance: _Optional[float] = ..., min_timed_rounds: _Optional[int] = ..., warmup_rounds: _Optional[int] = ..., audit_fraction: _Optional[float] = ..., timeout_factor: _Optional[float] = ..., min_call_timeout_s: _Optional[float] = ..., load_timeout_s: _Optional[float] = ..., build_timeout_s: _Optional[float] = ..., size_profile: _Optional[str] = ..., memory_limit_bytes: _Optional[int] = ..., file_size_limit_bytes: _Optional[int] = ..., first_call_timeout_s: _Optional[float] = ..., guard_policy: _Optional[str] = ..., reverify_above: _Optional[float] = ..., check_other_sizes: _Optional[bool] = ..., require_other_sizes: _Optional[bool] = ..., charge_exchange: _Optional[bool] = ..., gpu_lease_timeout_s: _Optional[float] = ..., correctness_block: _Optional[bool] = ..., warm_call: _Optional[bool] = ..., timing_protocol: _Optional[str] = ..., precision: _Optional[str] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("task", "candidate", "options", "no_cache", "deadline_s", "reverification")
    TASK_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    NO_CACHE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    REVERIFICATION_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    candidate: Candidate
    options: ScoreOptions
    no_cache: bool
    deadline_s: float
    reverification: bool
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., candidate: _Optional[_Union[Candidate, _Mapping]] = ..., options: _Optional[_Union[ScoreOptions, _Mapping]] = ..., no_cache: _Optional[bool] = ..., deadline_s: _Optional[float] = ..., reverification: _Optional[bool] = ...) -> None: ...

class TimingEvidence(_message.Message):
    __slots__ = ("rounds", "raw_speedup", "ci_low", "ci_high", "bucket_variance", "stable", "remeasured", "ref_time_us_median", "cand_time_us_median", "seconds")
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    RAW_SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    CI_LOW_FIELD_NUMBER: _ClassVar[int]
    CI_HIGH_FIELD_NUMBER: _ClassVar[int]
    BUCKET_VARIANCE_FIELD_NUMBER: _ClassVar[int]
    STABLE_FIELD_NUMBER: _ClassVar[int]
    REMEASURED_FIELD_NUMBER: _ClassVar[int]
    REF_TIME_US_MEDIAN_FIELD_NUMBER: _ClassVar[int]
    CAND_TIME_US_MEDIAN_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    rounds: int
    raw_speedup: float
    ci_low: float
    ci_high: float
    bucket_variance: float
    stable: bool
    remeasured: int
    ref_time_us_median: float
    cand_time_us_median: float
    seconds: float
    def __init__(self, rounds: _Optional[int] = ..., raw_speedup: _Optional[float] = ..., ci_low: _Optional[float] = ..., ci_high: _Optional[float] = ..., bucket_variance: _Optional[float] = ..., stable: _Optional[bool] = ..., remeasured: _Optional[int] = ..., ref_time_us_median: _Optional[float] = ..., cand_time_us_median: _Optional[float] = ..., seconds: _Optional[float] = ...) -> None: ...

class Evidence(_message.Message):
    __slots__ = ("device", "device_name", "size_profile", "correctness_inputs", "timing", "guards", "versions", "cached")
    class VersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_PROFILE_FIELD_NUMBER: _ClassVar[int]
    CORRECTNESS_INPUTS_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    GUARDS_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    device: str
    device_name: str
    size_profile: str
    correctness_inputs: int
    timing: TimingEvidence
    guards: _containers.RepeatedScalarFieldContainer[str]
    versions: _containers.ScalarMap[str, str]
    cached: bool
    def __init__(self, device: _Optional[str] = ..., device_name: _Optional[str] = ..., size_profile: _Optional[str] = ..., correctness_inputs: _Optional[int] = ..., timing: _Optional[_Union[TimingEvidence, _Mapping]] = ..., guards: _Optional[_Iterable[str]] = ..., versions: _Optional[_Mapping[str, str]] = ..., cached: _Optional[bool] = ...) -> None: ...

class PhaseTimings(_message.Message):
    __slots__ = ("queue_s", "build_s", "load_s", "correctness_s", "timing_s", "total_s")
    QUEUE_S_FIELD_NUMBER: _ClassVar[int]
    BUILD_S_FIELD_NUMBER: _ClassVar[int]
    LOAD_S_FIELD_NUMBER: _ClassVar[int]
    CORRECTNESS_S_FIELD_NUMBER: _ClassVar[int]
    TIMING_S_FIELD_NUMBER: _ClassVar[int]
    TOTAL_S_FIELD_NUMBER: _ClassVar[int]
    queue_s: float
    build_s: float
    load_s: float
    correctness_s: float
    timing_s: float
    total_s: float
    def __init__(self, queue_s: _Optional[float] = ..., build_s: _Optional[float] = ..., load_s: _Optional[float] = ..., correctness_s: _Optional[float] = ..., timing_s: _Optional[float] = ..., total_s: _Optional[float] = ...) -> None: ...

class ItemError(_message.Message):
    __slots__ = ("code", "code_name", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    CODE_NAME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    code_name: str
    message: str
    def __init__(self, code: _Optional[int] = ..., code_name: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ScoredSample(_message.Message):
    __slots__ = ("sample_id", "verdict", "speedup", "detail", "evidence", "evidence_json", "host", "gpu_name", "phases", "task", "candidate_sha256", "tags", "error", "gpu_uuid", "slot", "infra_cause")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SAMPLE_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_JSON_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    GPU_NAME_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_SHA256_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    GPU_UUID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    INFRA_CAUSE_FIELD_NUMBER: _ClassVar[int]
    sample_id: str
    verdict: Verdict
    speedup: float
    detail: str
    evidence: Evidence
    evidence_json: str
    host: str
    gpu_name: str
    phases: PhaseTimings
    task: str
    candidate_sha256: str
    tags: _containers.ScalarMap[str, str]
    error: ItemError
    gpu_uuid: str
    slot: int
    infra_cause: InfraCause
    def __init__(self, sample_id: _Optional[str] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., speedup: _Optional[float] = ..., detail: _Optional[str] = ..., evidence: _Optional[_Union[Evidence, _Mapping]] = ..., evidence_json: _Optional[str] = ..., host: _Optional[str] = ..., gpu_name: _Optional[str] = ..., phases: _Optional[_Union[PhaseTimings, _Mapping]] = ..., task: _Optional[str] = ..., candidate_sha256: _Optional[str] = ..., tags: _Optional[_Mapping[str, str]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ..., gpu_uuid: _Optional[str] = ..., slot: _Optional[int] = ..., infra_cause: _Optional[_Union[InfraCause, str]] = ...) -> None: ...

class CapacityRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SlotStatus(_message.Message):
    __slots__ = ("index", "device", "gpu_name", "gpu_uuid", "busy", "in_service", "reason", "consecutive_faults")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    GPU_NAME_FIELD_NUMBER: _ClassVar[int]
    GPU_UUID_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    IN_SERVICE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAULTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    device: str
    gpu_name: str
    gpu_uuid: str
    busy: bool
    in_service: bool
    reason: str
    consecutive_faults: int
    def __init__(self, index: _Optional[int] = ..., device: _Optional[str] = ..., gpu_name: _Optional[str] = ..., gpu_uuid: _Optional[str] = ..., busy: _Optional[bool] = ..., in_service: _Optional[bool] = ..., reason: _Optional[str] = ..., consecutive_faults: _Optional[int] = ...) -> None: ...

class CapacityResponse(_message.Message):
    __slots__ = ("slots", "free_slots", "queue_depth", "queue_limit", "gpu_names", "device_mode", "version", "draining", "host", "running", "slot_status", "out_of_service", "gpu_model", "build_workers", "sandbox")
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    FREE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    QUEUE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    GPU_NAMES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_MODE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    SLOT_STATUS_FIELD_NUMBER: _ClassVar[int]
    OUT_OF_SERVICE_FIELD_NUMBER: _ClassVar[int]
    GPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    BUILD_WORKERS_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    slots: int
    free_slots: int
    queue_depth: int
    queue_limit: int
    gpu_names: _containers.RepeatedScalarFieldContainer[str]
    device_mode: str
    version: str
    draining: bool
    host: str
    running: int
    slot_status: _containers.RepeatedCompositeFieldContainer[SlotStatus]
    out_of_service: int
    gpu_model: str
    build_workers: int
    sandbox: str
    def __init__(self, slots: _Optional[int] = ..., free_slots: _Optional[int] = ..., queue_depth: _Optional[int] = ..., queue_limit: _Optional[int] = ..., gpu_names: _Optional[_Iterable[str]] = ..., device_mode: _Optional[str] = ..., version: _Optional[str] = ..., draining: _Optional[bool] = ..., host: _Optional[str] = ..., running: _Optional[int] = ..., slot_status: _Optional[_Iterable[_Union[SlotStatus, _Mapping]]] = ..., out_of_service: _Optional[int] = ..., gpu_model: _Optional[str] = ..., build_workers: _Optional[int] = ..., sandbox: _Optional[str] = ...) -> None: ...
