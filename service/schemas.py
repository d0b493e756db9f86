"""Request and response bodies. Field names are the client contract: keep them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, create_model

from models import answers

Matrix = list[list[float]]
#: feature rows: ``null`` is a reading not heard (an RSSI feature only; models.readings)
Features = list[list[Annotated[float, AllowInfNan(False)] | None]]
#: what the schema cannot say and the service checks: the bundle decides the row length (its features, `GET
#: /model`: `d`; the targets: `n`) and whether it takes `centers`, and every matrix has as many rows as `features`
ROWS_DOC = ("; at least one row, each as long as the bundle's feature count (GET /model: `d`), which the bundle "
            "decides: a row of another length is refused (422) though the schema allows it")
#: the longest device name a query carries (the body's ``device``, the ``X-LMVE-Device`` header, the Open Inference
#: Protocol's ``device`` parameter)
DEVICE_CHARS = 200
#: a level's bounds, for the schema (the service refuses the others, naming the field)
LEVEL = {"exclusiveMinimum": 0, "exclusiveMaximum": 1}
SAME_ROWS = "; as many rows as `features`, each of the bundle's target count (GET /model: `n`)"
FEATURES_DOC = ("; `null` in an RSSI feature means the access point was not heard: the bundle's not-detected code, "
                "or below the weakest reading the survey saw of it (said in `warnings`); other features refuse null")
WARNINGS = Field(default_factory=list, description="how the rows were read, when not as sent: a null taken as not "
                 "heard below the survey's weakest reading, a reading outside what the survey saw of its feature "
                 "(refused instead with LMVE_STRICT_INPUTS=1); empty otherwise")


class PredictRegionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"features": [[-62.0, -71.5, -80.2, -66.0, -90.1, -75.3, -58.9, -84.0,
                       -77.7, -69.2, -92.4, -81.3, -73.8, -88.6, -64.1, -70.0]],
         "coverage": 0.9, "boundary_points": 32}]})

    features: Features = Field(description="raw feature vectors, one row per query (N, d)" + ROWS_DOC + FEATURES_DOC,
                               json_schema_extra={"minItems": 1})
    coverage: float | None = Field(default=None, description="coverage level in (0, 1); default: the bundle's",
                                   json_schema_extra=LEVEL)
    boundary_points: int | None = Field(default=None, description="if set, a closed boundary polygon of this many "
                                                                   "points per row (n = 2)")
    centers: Matrix | None = Field(default=None, description="your own position estimate per row (N, n), required "
                                   "by a bundle trained with --centre-columns and refused by the others")
    model: str | None = Field(default=None, description="the model to answer (the alternative to the path "
                              "/models/{name}/...); default: the default model")
    device: str | None = Field(default=None, max_length=DEVICE_CHARS, description="the device that read the rows (a phone "
                               "model, a sensor id; or the header X-LMVE-Device): its own signal offset is followed "
                               "(service.radio_follower); default: the traffic's")
    format: Literal["json", "geojson"] | None = Field(
        default=None, description="geojson: an RFC 7946 FeatureCollection (as `Accept: application/geo+json`), one "
                                  "Feature per row: the ellipse as a Polygon (WGS84 when the bundle declares a CRS), "
                                  "with `accuracy_m`, `area_m2`, `semi_axes`, `orientation`, `coverage` and `floors`; "
                                  "default: json, or geojson when the Accept header asks for it")


class FloorCandidate(BaseModel):
    building: int | str | None = Field(default=None, description="the building (bundles trained with "
                                       "--building-column only)")
    floor: int | str = Field(description="the floor, as the training data's floor column spells it")
    probability: float = Field(description="the classifier's probability of this floor (building and floor)")


def answer_schema(answer: str, name: str, doc: str) -> type[BaseModel]:
    """The pydantic model of one JSON row of ``answer``, derived from the table of answers
    (:data:`models.answers.FIELDS`: each field's type, description and whether every row has it)."""
    specs = {}
    for f in answers.fields(answer):
        kind = ITEM_TYPES.get(f.name, f.schema)
        specs[f.name] = (kind, Field(description=f.doc) if f.required else Field(default=None, description=f.doc))
    return create_model(name, __doc__=doc, **specs)


#: the fields whose items have their own schema (the table's types are plain Python ones)
ITEM_TYPES = {"floors": list[FloorCandidate] | None}
Region = answer_schema(answers.REGION, "Region", "A calibrated ellipse: the region fields of the table of answers.")


class PredictRegionResponse(BaseModel):
    regions: list[Region]
    method: str
    fallback: bool = Field(description="true when the primary method (GET /model's primary_method) could not "
                                       "serve and the next in the bundle's order did")
    fallback_reason: str | None = None
    coverage: float = Field(description="the level asked for (the request's, else the bundle's)")
    effective_coverage: float = Field(description="the level the regions were computed at: `coverage`, or in "
                                                  "adaptive mode the level moved by feedback")
    adaptive: bool = Field(default=False, description="true when the adaptive mode chose `effective_coverage`")
    bundle_id: str
    model: str = Field(description="the model that answered")
    guarantee: str | None = Field(default=None, description="a floor bundle's joint guarantee in words (absent "
                                                           "for bundles without floors)")
    warnings: list[str] = WARNINGS


class ContainsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        # buildings go with floors: a non-null `buildings` needs a non-null `floors`
        "if": {"required": ["buildings"], "properties": {"buildings": {"type": "array"}}},
        "then": {"required": ["floors"], "properties": {"floors": {"type": "array"}}},
        "examples": [
        {"features": [[-62.0, -71.5, -80.2, -66.0, -90.1, -75.3, -58.9, -84.0,
                       -77.7, -69.2, -92.4, -81.3, -73.8, -88.6, -64.1, -70.0]],
         "points": [[12.5, 8.0]], "coverage": 0.9}]})

    features: Features = Field(description="raw feature vectors (N, d)" + ROWS_DOC + FEATURES_DOC,
                               json_schema_extra={"minItems": 1})
    points: Matrix = Field(description="one candidate position per row (N, n)" + SAME_ROWS)
    coverage: float | None = Field(default=None, description="coverage level in (0, 1); default: the bundle's",
                                   json_schema_extra=LEVEL)
    centers: Matrix | None = Field(default=None, description="your own position estimate per row (N, n), required "
                                   "by a bundle trained with --centre-columns and refused by the others")
    floors: list[int | str] | None = Field(default=None, description="a floor bundle only: each point's floor "
                                           "(N,); then `inside` needs the floor in the row's floor set too")
    buildings: list[int | str] | None = Field(default=None, description="each point's building (N,), with "
                                              "`floors`, for a bundle trained with --building-column")
    model: str | None = Field(default=None, description="the model to answer (the alternative to the path "
                              "/models/{name}/...); default: the default model")
    device: str | None = Field(default=None, max_length=DEVICE_CHARS, description="the device that read the rows (a phone "
                               "model, a sensor id; or the header X-LMVE-Device): its own signal offset is followed "
                               "(service.radio_follower); default: the traffic's")


ContainsResult = answer_schema(answers.CONTAINS, "ContainsResult",
                               "A point against its row's ellipse: the containment fields of the table of answers.")


class ContainsResponse(BaseModel):
    results: list[ContainsResult]
    method: str
    fallback: bool
    fallback_reason: str | None = None
    coverage: float
    effective_coverage: float
    adaptive: bool = False
    bundle_id: str
    model: str = Field(description="the model that answered")
    guarantee: str | None = Field(default=None, description="a floor bundle's joint guarantee in words (absent "
                                                           "for bundles without floors)")
    warnings: list[str] = WARNINGS


class MethodInfo(BaseModel):
    kind: Literal["ellipsoid", "box"]
    alpha_q: float | None
    n_calibration: int
    max_coverage: float = Field(description="the highest coverage this method answers with a bounded region: "
                                            "m / (m + 1)")
    learned_centre: bool = Field(default=False, description="true: this method's regions are centred on the bundle's "
                                                            "centre plus a correction it learned (LMVE trained with "
                                                            "--learned-centre), so their `center` differs from it")


class ModelInfo(BaseModel):
    name: str = Field(default="default", description="the model's name in the repository")
    version: str = Field(description="bundle content hash")
    dataset: dict
    feature_names: list[str]
    target_names: list[str]
    d: int
    n: int
    coverage: float
    primary_method: str = Field(description="the method the plain routes serve (the bundle's selection)")
    selection: dict = Field(default_factory=dict, description="how the served method was chosen: `order` (served "
                                                               "first, then the fallbacks), `rule` (auto or forced), "
                                                               "`rows`, `n_rows` and `folds` (the held-out rows: the "
                                                               "train part cross-fitted and the test part), and each "
                                                               "method's held-out volume and coverage; empty "
                                                               "for older bundles (then LMVE, NLE, GE)")
    methods: dict[str, MethodInfo]
    metrics: dict
    guarantee: dict = Field(default_factory=dict, description="what the level promises, as the training report "
                            "and terminal state it: `words`, `level`, `form` (exact: P >= level in finite samples; "
                            "approximate: P ~ level), `bound` (what a finite-sample result does promise, and "
                            "`bound_of`), `holds_for` (what a new query must be), the calibration `units` and "
                            "their count `n_units`, `n_rows`, `rule` and `mode`")
    calibration: dict = Field(default_factory=dict, description="how the calibration was drawn: the rule, the "
                                                                "mode, the grouping of the data (its `n_groups`: "
                                                                "groups in the data), the rows scored")
    scale: dict | None = Field(default=None, description="a survey's served regions against its extent: `mean_area` "
                               "(the served method over the survey's rows), the surveyed positions' `bbox_area` and "
                               "`hull_area`, `share_of_bbox`, `share_of_hull`, `warn_share` and `warning` (words "
                               "when the share exceeds it), and `survey_size` (a subsampling estimate of the area "
                               "with half and twice the positions); null for a bundle that is not a survey")
    centre: dict = Field(default_factory=dict, description="the centre: its type, how it was chosen (candidates' "
                                                           "cross-validated errors), or the client's estimate columns")
    requires_centers: bool = Field(default=False, description="true: every request must bring `centers`, the "
                                                              "client's own estimates (a --centre-columns bundle)")
    floors: dict | None = Field(default=None, description="a floor bundle's floor part (null without floors): "
                                "its `columns`, `labels`, `classifier` and how it was chosen (`selection`), the "
                                "held-out `metrics` per method and the joint `guarantee`")
    preprocess: str | None = Field(default=None, description="the fitted preprocessing step applied to features")
    created_at: str | None = None
    versions: dict = {}
    feedback: dict = Field(default_factory=dict, description="observed coverage per method over the feedback "
                                                             "window, the binomial margin and the adaptive level")
    shift: dict = Field(default_factory=dict, description="the shift alarm (concepts/shift-alarm): `evidence` "
                        "against queries exchangeable with the calibration rows (1 at the start), `alarm` (true once "
                        "it reached `threshold` = 1/`delta`, until a recalibration or reload), `queries` tested, "
                        "`delta` (LMVE_SHIFT_DELTA), `tolerance`, `alarm_at` (the query that raised it), `available` "
                        "(false for a bundle without the typicality step, with a `reason`); `drift`: which change "
                        "of the radio the radio watch sees, in words")
    radio: dict = Field(default_factory=dict, description="the radio watch (LMVE_RADIO; concepts/radio-drift): the "
                        "survey's transmitters (`surveyed`), those the queries no longer hear (`gone`, "
                        "`gone_names`), new ones (`new`, `new_names`), the signal offsets in dB (`offsets_db`, "
                        "`*` for the traffic as a whole, else per device), `queries_counted`, whether this worker "
                        "serves under it (`followed`), `drift` in words and the `guarantee` of that form")
    worker_pid: int = Field(description="the worker process that answered (several workers share one state)")


class ModelStatus(BaseModel):
    name: str = Field(description="the model's name: its directory in the repository")
    state: Literal["READY", "LOADING", "UNAVAILABLE", "UNLOADED"] = Field(
        description="READY: a verified bundle serves; UNAVAILABLE: its bundle was refused (see `reason`); "
                    "UNLOADED: an operator unloaded it; LOADING: not tried yet")
    default: bool = Field(description="true for the model the plain routes serve")
    bundle_id: str | None = Field(description="the served bundle's content hash (null when not ready)")
    path: str | None = Field(description="the bundle directory served, or configured")
    d: int | None = Field(default=None, description="features per row")
    n: int | None = Field(default=None, description="target dimensions (2: a plan position)")
    primary_method: str | None = Field(default=None, description="the method the model's plain routes serve")
    coverage: float | None = Field(default=None, description="the bundle's coverage level")
    reason: str | None = Field(default=None, description="why the model does not serve (null when READY)")
    loaded_at: float | None = Field(default=None, description="Unix time the served bundle was loaded")
    published_refused: dict | None = Field(
        default=None, description="null while this worker serves what the shared state publishes; else the "
                                  "published bundle it could not load (`bundle_id`, `path`, `reason`): it keeps "
                                  "serving `bundle_id` above until another is published or it is reloaded")


class ModelsResponse(BaseModel):
    models: list[ModelStatus]
    default: str | None = Field(description="the model the plain routes serve (null: none; name one)")
    ready: bool = Field(description="every model that should serve does (as /readyz)")
    repository: str | None = Field(description="the repository directory (null: one bundle, LMVE_BUNDLE)")


class RadioReset(BaseModel):
    name: str = Field(description="the model")
    reset: bool = Field(description="whether there was a watch to forget")
    radio: dict = Field(description="the watch now (as GET /model's `radio`): the survey's radio until the queries "
                        "decide again")


class ModelAction(BaseModel):
    name: str
    state: str
    bundle_id: str | None
    previous_bundle_id: str | None
    reason: str | None = None


class ReloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bundle: str | None = Field(default=None, description="directory to load; default: the model's bundle directory")
    model: str | None = Field(default=None, description="the model to reload; default: the default model")


class ReloadResponse(BaseModel):
    reloaded: bool
    version: str
    model: str = Field(description="the model now serving `version`")
    previous_version: str | None


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"features": [[-62.0, -71.5, -80.2, -66.0, -90.1, -75.3, -58.9, -84.0,
                       -77.7, -69.2, -92.4, -81.3, -73.8, -88.6, -64.1, -70.0]],
         "points": [[12.5, 8.0]], "site": "building-3", "device": "phone-13"}]})

    features: Matrix = Field(description="raw feature vectors of labelled readings (N, d)" + ROWS_DOC,
                             json_schema_extra={"minItems": 1})
    points: Matrix = Field(description="the true position of each reading (N, n)" + SAME_ROWS)
    centers: Matrix | None = Field(default=None, description="your own estimates (N, n), for a --centre-columns bundle")
    site: str | None = Field(default=None, max_length=200, description="tag stored with the rows")
    device: str | None = Field(default=None, max_length=200, description="tag stored with the rows")
    model: str | None = Field(default=None, description="the model to answer (the alternative to the path "
                              "/models/{name}/...); default: the default model")


class MethodFeedbackResult(BaseModel):
    inside: list[bool] = Field(description="per row: inside the region at the bundle's level")
    p_value: list[float]
    inside_served: list[bool] = Field(description="per row: inside the region served at this moment (adaptive "
                                                  "mode: at the level before this row's update)")


class FeedbackResponse(BaseModel):
    recorded: int
    bundle_id: str
    model: str = Field(description="the model whose regions were scored")
    methods: dict[str, MethodFeedbackResult]
    monitor: dict = Field(description="observed coverage per method after this batch (as in GET /model); "
                                      "`{\"unavailable\": reason}` when the state database went away after "
                                      "the batch was committed")
    worker_pid: int


class RecalibrateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    features: Matrix = Field(description="raw feature vectors of fresh labelled readings (k, d)")
    points: Matrix = Field(description="their true positions (k, n)")
    groups: list[str | int] | None = Field(default=None, description="a group label per row (a surveyed position, a "
                                           "day): one calibration score per group")
    centers: Matrix | None = Field(default=None, description="your own estimates (k, n), for a --centre-columns bundle")
    group_rule: Literal["subsample", "pooled"] = "subsample"
    seed: int = Field(default=0, ge=0, le=2**32 - 1)


class RecalibrateResponse(BaseModel):
    model: str = Field(description="the model recalibrated")
    version: str = Field(description="the new bundle's id, now served by every worker")
    previous_version: str
    path: str
    rows: int
    groups: int | None
    grouped_by: Literal["rows", "position", "labels"] = Field(
        description="how the fresh rows were grouped: `position` when most repeat a position (automatic), `labels` "
                    "when groups were given, `rows` otherwise")
    guarantee: str = Field(description="the new bundle's guarantee, in the report's words")
    alpha_q: dict[str, list[float]] = Field(description="per method: [old, new] calibrated threshold")
    worker_pid: int


class ProblemField(BaseModel):
    field: str = Field(description="the field, e.g. `features[0]` or `body`")
    expected: str | None = None
    received: str | None = None


class Problem(BaseModel):
    """An RFC 9457 problem: every error outside ``/v2`` (``application/problem+json``)."""

    model_config = ConfigDict(extra="allow")  # extension members, e.g. /readyz's `models`

    type: str = "about:blank"
    title: str
    status: int
    code: str = Field(description="the canonical code of the status (`INVALID_ARGUMENT`, `NOT_FOUND`, "
                                  "`UNAVAILABLE`, ...), the same a gRPC client reads")
    detail: str
    errors: list[ProblemField] = Field(default_factory=list, description="each bad field: what was expected, "
                                                                         "what came")
