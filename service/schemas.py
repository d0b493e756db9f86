"""Request and response bodies. Field names are the client contract: keep them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Matrix = list[list[float]]


class PredictRegionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"features": [[-62.0, -71.5, -80.2, -66.0, -90.1, -75.3, -58.9, -84.0,
                       -77.7, -69.2, -92.4, -81.3, -73.8, -88.6, -64.1, -70.0]],
         "coverage": 0.9, "boundary_points": 32}]})

    features: Matrix = Field(description="raw feature vectors, one row per query (N, d)")
    coverage: float | None = Field(default=None, description="coverage level in (0, 1); default: the bundle's")
    boundary_points: int | None = Field(default=None, description="if set, a closed boundary polygon of this many "
                                                                   "points per row (n = 2)")
    centers: Matrix | None = Field(default=None, description="your own position estimate per row (N, n), required "
                                   "by a bundle trained with --centre-columns and refused by the others")


class Region(BaseModel):
    center: list[float] = Field(description="centre mu(x)")
    shape: list[list[float]] = Field(description="calibrated C: region = {y : (y-c)^T C^-1 (y-c) <= 1}")
    volume: float = Field(description="true volume (area for n = 2)")
    coverage: float
    method: str
    semi_axes: list[float] = Field(description="semi-axis lengths, longest first")
    orientation: float | None = Field(description="angle of the major axis from the first target axis, "
                                                  "radians in (-pi/2, pi/2] (n = 2 only)")
    boundary: list[list[float]] | None = Field(default=None, description="closed polygon (first point repeated)")


class PredictRegionResponse(BaseModel):
    regions: list[Region]
    method: str
    fallback: bool = Field(description="true when the primary method (LMVE) could not serve and another did")
    fallback_reason: str | None = None
    coverage: float
    bundle_id: str


class ContainsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"features": [[-62.0, -71.5, -80.2, -66.0, -90.1, -75.3, -58.9, -84.0,
                       -77.7, -69.2, -92.4, -81.3, -73.8, -88.6, -64.1, -70.0]],
         "points": [[12.5, 8.0]], "coverage": 0.9}]})

    features: Matrix = Field(description="raw feature vectors (N, d)")
    points: Matrix = Field(description="one candidate position per row (N, n)")
    coverage: float | None = None
    centers: Matrix | None = Field(default=None, description="your own position estimate per row (N, n), required "
                                   "by a bundle trained with --centre-columns and refused by the others")


class ContainsResult(BaseModel):
    inside: bool
    distance: float = Field(description="scaled Mahalanobis distance; <= 1 inside")
    p_value: float = Field(description="conformal p-value of the point: (1 + #{alpha_i >= M}) / (m + 1)")


class ContainsResponse(BaseModel):
    results: list[ContainsResult]
    method: str
    fallback: bool
    fallback_reason: str | None = None
    coverage: float
    bundle_id: str


class MethodInfo(BaseModel):
    kind: Literal["ellipsoid", "box"]
    alpha_q: float | None
    n_calibration: int
    max_coverage: float = Field(description="the highest coverage this method answers with a bounded region: "
                                            "m / (m + 1)")


class ModelInfo(BaseModel):
    version: str = Field(description="bundle content hash")
    dataset: dict
    feature_names: list[str]
    target_names: list[str]
    d: int
    n: int
    coverage: float
    primary_method: str
    methods: dict[str, MethodInfo]
    metrics: dict
    calibration: dict = Field(default_factory=dict, description="the calibration rule, the grouping, the number "
                                                                "of calibration groups and the guarantee in words")
    centre: dict = Field(default_factory=dict, description="the centre: its type, how it was chosen (candidates' "
                                                           "cross-validated errors), or the client's estimate columns")
    requires_centers: bool = Field(default=False, description="true: every request must bring `centers`, the "
                                                              "client's own estimates (a --centre-columns bundle)")
    preprocess: str | None = Field(default=None, description="the fitted preprocessing step applied to features")
    created_at: str | None = None
    versions: dict = {}


class ReloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bundle: str | None = Field(default=None, description="directory to load; default: the configured bundle")


class ReloadResponse(BaseModel):
    reloaded: bool
    version: str
    previous_version: str | None
