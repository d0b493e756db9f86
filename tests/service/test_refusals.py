"""Every exception a request can end in becomes one APIError, the same for every protocol."""

import json
import logging

import pytest
from starlette.requests import Request

from models.exceptions import InputError, UnattainableCoverageError, UnknownMethodError
from service.error_handlers import render
from service.exceptions import GRPC_CODES, APIError, V2Error
from service.refusals import UNEXPECTED, refusal
from service.state import StateUnavailable


def _scope(path: str) -> dict:
    return Request({"type": "http", "path": path, "root_path": "", "headers": []}).scope


def test_an_api_error_is_answered_as_it_is_with_the_code_of_its_status():
    err = APIError(413, "Payload Too Large", "features: at most 8 rows; received 9 rows")
    assert refusal(err) is err and refusal(err, v2=True) is err
    assert err.code == "RESOURCE_EXHAUSTED" and APIError(418, "I'm a teapot", "x").code == "UNKNOWN"
    assert APIError(404, "Unknown model", "x", code="ABORTED").code == "ABORTED"
    assert {status: APIError(status, "t", "d").code for status in GRPC_CODES} == GRPC_CODES
    several = [{"field": "features", "expected": "rows", "received": "1"}, {"field": "coverage", "expected": "a "
               "number", "received": "null"}]
    assert APIError(422, "Invalid request body", "x", errors=several).errors == several
    assert APIError(422, "Invalid input", "x").errors == []


def test_a_v2_error_is_an_api_error_titled_by_its_status():
    err = V2Error(404, "model 'a' has no version 'v0'; it serves 'v1'")
    assert isinstance(err, APIError) and (err.status, err.title, err.code) == (404, "Not Found", "NOT_FOUND")
    assert err.detail == str(err) == "model 'a' has no version 'v0'; it serves 'v1'"


def test_a_model_input_error_names_its_field_outside_v2_and_its_input_under_it():
    exc = InputError("features[1] has 7 values; the bundle expects 16", field="features[1]", expected="16 values",
                     received="7 values")
    rest, v2 = refusal(exc), refusal(exc, v2=True)
    assert (rest.status, rest.title, rest.code) == (422, "Invalid input", "INVALID_ARGUMENT")
    assert rest.errors == [{"field": "features[1]", "expected": "16 values", "received": "7 values"}]
    assert rest.detail == str(exc)
    assert (v2.status, v2.code) == (400, "INVALID_ARGUMENT")
    assert v2.detail == f"input 'features': {exc}"
    assert refusal(InputError("coverage must lie in (0, 1)", field="coverage"), v2=True).detail.startswith(
        "parameter 'coverage': ")


def test_an_unknown_method_is_a_404_and_an_unattainable_level_says_so():
    unknown = refusal(UnknownMethodError("no method 'x'", field="method", expected="ge", received="x"))
    assert (unknown.status, unknown.title, unknown.code) == (404, "Unknown method", "NOT_FOUND")
    level = refusal(UnattainableCoverageError("0.999 needs more scores", max_coverage=0.99))
    assert (level.status, level.title) == (422, "Coverage not attainable")


@pytest.mark.parametrize("unknown, words", [(False, "nothing was recorded: locked"),
                                            (True, "the outcome is unknown (it may have been recorded")])
def test_an_unreachable_state_is_a_503_that_says_whether_anything_was_recorded(caplog, unknown, words):
    with caplog.at_level(logging.WARNING, "lmve.service"):
        err = refusal(StateUnavailable("locked", outcome_unknown=unknown), where="POST /feedback")
    assert (err.status, err.code, err.headers) == (503, "UNAVAILABLE", {"Retry-After": "5"})
    assert words in err.detail and "locked" in err.detail
    assert any("state unavailable on POST /feedback: locked" in r.message for r in caplog.records)


def test_a_timeout_is_a_504_and_a_bug_a_logged_500_that_hides_its_words(caplog):
    late = refusal(TimeoutError())
    assert (late.status, late.code) == (504, "DEADLINE_EXCEEDED") and "LMVE_REQUEST_TIMEOUT_S" in late.detail
    with caplog.at_level(logging.ERROR, "lmve.service"):
        bug = refusal(KeyError("secret internals"), where="a gRPC call")
    assert (bug.status, bug.code, bug.detail) == (500, "INTERNAL", UNEXPECTED)
    assert "secret" not in bug.detail
    record = next(r for r in caplog.records if "unhandled error on a gRPC call" in r.message)
    assert record.exc_info[0] is KeyError


def test_render_writes_problem_json_with_the_code_and_v2_its_error_with_422_as_400():
    err = APIError(422, "Invalid input", "coverage: a number in (0, 1); received 2", field="coverage",
                   expected="a number in (0, 1)", received="2", headers={"Retry-After": "1"})
    rest = render(_scope("/predict-region"), err)
    assert rest.status_code == 422 and rest.media_type == "application/problem+json"
    assert rest.headers["retry-after"] == "1"
    body = json.loads(rest.body)
    assert body["code"] == "INVALID_ARGUMENT" and body["detail"] == err.detail and body["errors"] == err.errors
    v2 = render(_scope("/v2/models/site/infer"), err)
    assert v2.status_code == 400 and json.loads(v2.body) == {"error": err.detail}
    assert render(_scope("/v2x"), err).status_code == 422  # only /v2 and below speak the protocol
