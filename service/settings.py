"""Service configuration: every field is also an environment variable ``LMVE_<FIELD>``."""

from __future__ import annotations

from pathlib import Path

from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    """Every setting of ``lmve-serve``, read from ``LMVE_*`` environment variables.

    Each field's description says what it sets; the configuration reference lists every variable with its
    default.
    """
    model_config = SettingsConfigDict(env_prefix="LMVE_", env_file=None)

    bundle: Path | None = Field(default=None, description="bundle directory to serve: a model repository of one, "
                                "its model named after the directory")
    model_repository: Path | None = Field(default=None, description="a directory of bundles, one model per "
                                          "subdirectory (named after it), each served at /models/{name}/...; "
                                          "instead of LMVE_BUNDLE")
    default_model: str | None = Field(default=None, description="the model the plain routes (/predict-region, "
                                      "/contains, /model, /feedback, /admin/reload) serve; default: the only one")
    host: str = Field(default="127.0.0.1", description="bind address")
    port: int = Field(default=8000, ge=0, le=65535, description="port")
    grpc_port: int = Field(default=8081, ge=0, le=65535, description="the Open Inference Protocol's gRPC port "
                           "(GRPCInferenceService), on the same address; 0 turns gRPC off")
    workers: int = Field(default=1, ge=1, description="worker processes (one per core; they share LMVE_STATE_DB)")
    allow_missing_bundle: bool = Field(default=False, description="lmve-serve starts (alive, not ready) when "
                                       "LMVE_BUNDLE or LMVE_MODEL_REPOSITORY does not exist yet, and loads it on "
                                       "POST /admin/reload once written; otherwise it refuses to start")
    log_level: str = Field(default="info", description="uvicorn's and the service's log level")

    api_key: SecretStr | None = Field(default=None, description="required on every route but health/metrics "
                                                                  "when set; always required for /admin/*")
    cors_origins: list[str] = Field(default_factory=list, description="allowed CORS origins; none by default")

    max_rows: int = Field(default=1024, ge=1, description="rows per request")
    max_body_bytes: int = Field(default=2_000_000, ge=1024, description="request body size limit")
    max_boundary_points: int = Field(default=512, ge=3, description="the most boundary points a region may ask for")
    max_concurrency: int = Field(default=32, ge=1, description="requests in flight per worker, REST and gRPC "
                                 "together; more get 503 (UNAVAILABLE over gRPC)")
    request_timeout_s: float = Field(default=10.0, gt=0, description="a request running longer gets 504")
    compute_threads: int = Field(default=1, ge=1, description="BLAS/OpenMP threads per worker",
                                 validation_alias=AliasChoices("compute_threads", "LMVE_COMPUTE_THREADS",
                                                               "LMVE_TORCH_THREADS"))
    search_threads: int | None = Field(default=None, ge=1, description="threads per request for the fingerprint "
                                       "neighbour searches (kNN centre, NLE) and the LMVE network's pass over a batch "
                                       "of 128 rows or more; default: the cores divided among the workers, at least 1 "
                                       "and at most 4")
    heap_keep_mb: int = Field(default=256, ge=0, description="freed memory a worker keeps for its next requests "
                              "instead of returning it to the kernel (glibc; service.memory); 0: glibc's defaults")
    otel: bool = Field(default=False, description="FastAPI's native OpenTelemetry (traces, metrics and logs through "
                       "the globally configured OTel providers; FastAPI >= 0.165). Off by default: the Prometheus "
                       "metrics at /metrics cover every request, and FastAPI's per-request check whether OTel is "
                       "configured costs time on every request")
    enable_noop: bool = Field(default=False, description="expose POST /noop (the framework's ceiling, for load "
                                                         "tests)")


    state_url: str | None = Field(default=None, description="the state (the served bundle per model, feedback, "
                                  "counters, the adaptive level) every worker shares and that outlives restarts: "
                                  "sqlite:///relative/path or sqlite:////absolute/path (one host, WAL), "
                                  "postgresql://user:password@host:port/db (a fleet of hosts); unset: in memory, "
                                  "one worker")
    state_db: Path | None = Field(default=None, description="a SQLite state file: the same as "
                                  "LMVE_STATE_URL=sqlite:///<path> (kept for existing deployments)")
    sync_interval_s: float = Field(default=1.0, gt=0, le=60, description="how often each worker checks the state "
                                   "for a bundle published by another worker (reload, recalibrate)")
    feedback_window: int = Field(default=500, ge=10, description="labelled rows behind the observed coverage")
    adaptive: Literal["off", "aci", "quantile"] = Field(
        default="off", description="feedback moves what is served so that long-run coverage tracks the target: aci "
        "moves the level (adaptive conformal inference), quantile the threshold itself (quantile tracking)")
    adaptive_gamma: float = Field(default=0.005, gt=0, lt=1, description="aci: the step size gamma")
    adaptive_lr: float = Field(default=0.05, gt=0, lt=1, description="quantile: the step, as a share of the largest "
                               "score seen")
    adaptive_min_level: float = Field(default=0.5, gt=0, lt=1, description="the adaptive level never goes below this")
    shift_delta: float = Field(default=0.01, gt=0, lt=1, description="the shift alarm's false-alarm level: while "
                               "the queries stay exchangeable with the calibration rows, each model's test sounds "
                               "with probability at most this (its evidence reaching 1/delta)")
    radio: Literal["adapt", "watch", "off"] = Field(
        default="adapt", description="the radio watch (service.radio_follower): adapt follows what the queries' readings show "
        "(transmitters no longer heard leave the centre's distance, the regions are re-scored on the survey's rows, "
        "a device's signal offset is corrected); watch only reports it (GET /model); off neither counts nor reports")
    radio_build: Literal["process", "thread"] = Field(
        default="process", description="where a model under the radio's decision is built (service.radio_builds): "
        "process, a child process, so that no request waits for it; thread, the worker's flush thread")
    recalibrated_dir: Path | None = Field(default=None, description="where /admin/recalibrate writes new bundles; "
                                          "default: beside the served bundle")
    strict_inputs: bool = Field(default=False, description="refuse (422, naming the feature) a reading outside what "
                                "the survey saw of an RSSI feature (stronger than its strongest, or a not-detected "
                                "code it never used) instead of answering it with a warning")

    @model_validator(mode="after")
    def _one_state(self):
        if self.state_db is not None:
            url = f"sqlite:///{self.state_db}"
            if self.state_url is not None and self.state_url != url:
                raise ValueError(f"set LMVE_STATE_URL ({self.state_url}) or LMVE_STATE_DB ({self.state_db}), not both")
            self.state_url = url
        if self.state_url is not None:
            from service.state import sqlite_path

            if not self.state_url.startswith(("sqlite://", "postgresql://", "postgres://")):
                raise ValueError("LMVE_STATE_URL must start with sqlite:// or postgresql://; got "
                                 f"{self.state_url.split('://')[0]!r}")
            if self.state_url.startswith("sqlite://"):
                sqlite_path(self.state_url)  # a malformed path raises here, at start
        return self

    @model_validator(mode="after")
    def _one_source(self):
        if self.bundle is not None and self.model_repository is not None:
            raise ValueError(f"set LMVE_BUNDLE ({self.bundle}) or LMVE_MODEL_REPOSITORY ({self.model_repository}), "
                             "not both: a bundle is a repository of one")
        return self

    @field_validator("api_key", mode="before")
    @classmethod
    def _empty_key_is_no_key(cls, v):
        # LMVE_API_KEY="" (e.g. an unset compose variable) must mean "no key", never "the empty key"
        return None if v is None or (isinstance(v, str) and not v.strip()) else v
