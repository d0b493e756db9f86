"""GET /viewer (issue 41) in a real headless Chromium driven by selenium, against a real ``lmve-serve`` on
loopback: it draws the survey per floor, recent feedback coloured by whether its served region held it,
and the picked row's ellipse where the API puts it, redrawn when the coverage slider moves; no console
error, nothing fetched from elsewhere. And the two reads it draws from, with their errors."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.servers import KEY, chromium, serving_repository

STROKE = (0x21, 0x66, 0xAC)  # #region's stroke colour (service/viewer/viewer.css)


@pytest.fixture(scope="module")
def viewer_repository(tmp_path_factory):
    """A floor bundle in UTM zone 30N (the built-in three-floor survey moved to Castello), a plane bundle and a
    site survey grouped by position in UTM zone 30N (``site``: it has a survey map)."""
    from models.bundle import save_bundle
    from models.geo import TargetCRS
    from training.data.datasets import load_dataset
    from training.pipeline import TrainConfig, train

    root = tmp_path_factory.mktemp("viewer-repository")
    fl = load_dataset("floors", seed=0)
    fl = replace(fl, Y=fl.Y + np.array([750000.0, 4430000.0]))
    train(fl, TrainConfig(seed=0, methods=("ge", "nle"), floor_column="floor", crs=TargetCRS("EPSG:32630"),
                          use_groups=False)).save(root / "floors")  # its survey and CRS, as lmve-train writes
    ds = load_dataset("synthetic", n_samples=400, seed=0)
    plane = train(ds, TrainConfig(seed=0, methods=("ge",), fallbacks=False, use_groups=False))
    plane.model.survey = None  # no survey: a bundle from before it
    save_bundle(plane.model, root / "plane", dataset=ds.info)
    from training.data.datasets import Dataset, group_by_position
    from training.data.synthetic import make_survey

    X, Y, _, _, fn, tn = make_survey(n_points=40, readings=5, n_beacons=8, seed=3)
    site = group_by_position(Dataset("site", X, Y + np.array([750000.0, 4430000.0]), fn, tn, "-"), auto=True)
    train(site, TrainConfig(seed=0, methods=("ge", "nle"), crs=TargetCRS("EPSG:32630"))).save(root / "site")
    test = load_dataset("floors", seed=3)
    rows = np.random.default_rng(0).choice(len(test.Y), 60, replace=False)
    return root, test.X[rows], test.Y[rows] + np.array([750000.0, 4430000.0])


@pytest.fixture(scope="module")
def served(viewer_repository, tmp_path_factory):
    root, X, Y = viewer_repository
    logs = tmp_path_factory.mktemp("logs")
    with serving_repository(root, "floors", logs, LMVE_STATE_DB=str(logs / "state.sqlite")) as client:
        # feedback: 40 true positions (mostly inside), 20 moved 40 m east (outside)
        far = Y[40:] + np.array([40.0, 0.0])
        r = client.post("/models/floors/feedback", json={"features": X.tolist(),
                                                         "points": np.vstack([Y[:40], far]).tolist()})
        assert r.status_code == 200, r.text
        yield client


@pytest.mark.slow
def test_the_reads_behind_the_page(served, viewer_repository):
    X_COLUMNS = viewer_repository[1].shape[1]
    survey = served.get("/models/floors/survey").json()
    assert survey["display"]["x_label"].startswith("easting") and survey["crs"]["crs"] == "EPSG:32630"
    assert survey["display"]["unit"] == "m"  # the scale bar's
    assert len(survey["positions"]) == len(survey["floors"]) == len(survey["counts"]) > 0
    assert {f["floor"] for f in survey["floors"]} == {f["floor"] for f in survey["floor_labels"]}
    assert len(survey["examples"]) == 100 and len(survey["examples"][0]["features"]) == X_COLUMNS
    recent = served.get("/models/floors/feedback/recent", params={"limit": 1000}).json()
    assert recent["method"] == survey["primary_method"] and len(recent["rows"]) == 60
    outside = [r for r in recent["rows"] if not r["inside_served"]]
    assert len(outside) >= 20 and all(len(r["point"]) == 2 for r in recent["rows"])
    plane = served.get("/models/plane/survey").json()
    assert plane["positions"] == [] and "keeps no survey" in plane["note"] and plane["crs"] is None
    assert plane["display"]["unit"] is None


def test_the_page_is_public_and_the_reads_are_not(served):
    import httpx

    base = str(served.base_url)
    assert httpx.get(f"{base}/viewer").status_code == 200
    assert httpx.get(f"{base}/viewer/viewer.js").headers["content-type"].startswith("text/javascript")
    assert httpx.get(f"{base}/models/floors/survey").status_code == 401
    assert served.get("/viewer/secret.txt").status_code == 404
    assert served.get("/viewer/..%2Fapp.py").status_code == 404
    assert served.get("/models/nowhere/survey").status_code == 404
    r = served.get("/models/floors/feedback/recent", params={"limit": 0})
    assert r.status_code == 422 and "limit" in r.text
    r = served.get("/models/floors/feedback/recent", params={"method": "lmve"})
    assert r.status_code == 404 and r.json()["errors"][0]["field"] == "method"


@pytest.fixture(scope="module")
def browser():
    with chromium() as driver:
        yield driver


def expected_box(served, survey: dict, row: int, coverage: float, origin: tuple[float, float]) -> dict:
    """The bounding box of the row's ellipse in the drawing's coordinates (the display axes less the
    drawing's ``origin``), from the API itself."""
    example = survey["examples"][row]
    region = served.post("/models/floors/predict-region", json={"features": [example["features"]],
                         "coverage": coverage, "boundary_points": 128}).json()["regions"][0]
    d = survey["display"]
    b = np.asarray(region["boundary"])
    x, y = b[:, d["x_index"]] * d["scale"] - origin[0], -(b[:, d["y_index"]] * d["scale"] - origin[1])
    return {"x": x.min(), "y": y.min(), "width": np.ptp(x), "height": np.ptp(y)}


def drawn_box(driver) -> dict:
    return driver.execute_script("const b = document.getElementById('region').getBBox(); "
                                 "return {x: b.x, y: b.y, width: b.width, height: b.height};")


def assert_same_box(got: dict, want: dict, scale: float) -> None:
    for k in ("x", "y", "width", "height"):
        assert abs(got[k] - want[k]) < 1e-3 * scale, (k, got, want)  # a millimetre


def stroke_pixels(png: bytes, rect: dict, inside: bool) -> int:
    """Pixels of the ellipse's stroke colour inside (or, ``inside`` false, outside) ``rect`` (CSS pixels)."""
    import io

    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    match = (np.abs(image - np.array(STROKE)).sum(axis=2) <= 12)
    ys, xs = np.nonzero(match)
    within = ((xs >= rect["left"] - 2) & (xs <= rect["right"] + 2) & (ys >= rect["top"] - 2)
              & (ys <= rect["bottom"] + 2))
    return int(within.sum() if inside else (~within).sum())


@pytest.mark.slow
def test_viewer_draws_the_survey_feedback_and_the_ellipse_and_follows_the_slider(served, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    base = str(served.base_url).rstrip("/")
    survey = served.get("/models/floors/survey").json()
    recent = served.get("/models/floors/feedback/recent", params={"limit": 2000}).json()["rows"]
    browser.get(f"{base}/viewer?model=floors#key={KEY}")
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state")
                                     in ("drawn", "error"))
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "drawn", \
        browser.find_element(By.ID, "status").text

    # the shift alarm as GET /models/floors reports it (the page's own queries tested too)
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "shift").get_attribute("data-shift")
                                     in ("quiet", "alarm"))
    shift = served.get("/models/floors").json()["shift"]
    box = browser.find_element(By.ID, "shift")
    assert box.get_attribute("data-shift") == ("alarm" if shift["alarm"] else "quiet")
    assert f"of {shift['threshold']:.3g} over" in box.text and "queries" in box.text
    assert "typicality" in browser.find_element(By.ID, "facts").text

    # the survey per floor, the feedback coloured by its served region
    assert browser.execute_script("return document.querySelectorAll('#survey circle').length") == \
        len(survey["positions"])
    colours = browser.execute_script("return [document.querySelectorAll('circle.fb-in').length, "
                                     "document.querySelectorAll('circle.fb-out').length]")
    assert colours == [sum(r["inside_served"] for r in recent), sum(not r["inside_served"] for r in recent)]
    assert colours[1] >= 20
    floor = browser.find_element(By.ID, "floor")
    floor.find_elements(By.TAG_NAME, "option")[1].click()  # one floor: the other floors' positions fade
    faded = browser.execute_script("return document.querySelectorAll('#survey circle.other-floor').length")
    first = survey["floor_labels"][0]["floor"]
    assert faded == sum(f["floor"] != first for f in survey["floors"]) > 0

    # the ellipse of held-out row 0 where the API puts it, at the bundle's level, with its floor set
    scale = max(survey["display"]["scale"], 1.0)
    level = float(browser.find_element(By.ID, "coverage").get_attribute("value"))
    assert level == pytest.approx(survey["coverage"])
    origin = tuple(float(v) for v in browser.find_element(By.ID, "map").get_attribute("data-origin").split(","))
    assert abs(origin[0] - 750000) < 100 and abs(origin[1] - 4430000) < 100  # a surveyed position's
    before = drawn_box(browser)
    assert_same_box(before, expected_box(served, survey, 0, level, origin), scale)
    assert "floor set" in browser.find_element(By.ID, "facts").text
    rect = browser.execute_script("const r = document.getElementById('region').getBoundingClientRect(); "
                                  "const m = document.getElementById('map').getBoundingClientRect(); "
                                  "return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, "
                                  "inside: r.left >= m.left && r.right <= m.right && r.top >= m.top && "
                                  "r.bottom <= m.bottom, ratio: window.devicePixelRatio};")
    assert rect["inside"] and rect["ratio"] == 1 and rect["right"] - rect["left"] > 3, rect
    png = browser.get_screenshot_as_png()
    assert stroke_pixels(png, rect, inside=True) > 20   # the stroke is drawn there ...
    assert stroke_pixels(png, rect, inside=False) == 0  # ... and nowhere else
    # the grid and the scale bar, in the CRS's metres: each tick names its line's absolute coordinate, a
    # multiple of the step, and the bar is one step long
    grid = browser.execute_script("""
        const g = document.getElementById('grid'), bar = document.querySelector('#scale-bar line');
        const at = (cls, a) => [...g.querySelectorAll(cls)].map(e => Number(e.getAttribute(a)));
        const text = (cls) => [...g.querySelectorAll(cls)].map(e => Number(e.textContent.replaceAll(',', '')));
        const fs = Number(g.querySelector('text').getAttribute('font-size'));
        return {step: Number(g.dataset.step), xs: at('text.tick-x', 'x').map(x => x - 0.3 * fs),
                ys: at('text.tick-y', 'y').map(y => y + 0.3 * fs), lines: at('line.grid-x', 'x1'),
                xticks: text('text.tick-x'), yticks: text('text.tick-y'),
                bar: Number(bar.getAttribute('x2')) - Number(bar.getAttribute('x1')),
                label: document.querySelector('#scale-bar text').textContent};""")
    step = grid["step"]
    assert len(grid["xs"]) >= 3 and len(grid["ys"]) >= 2, grid
    assert all(min(abs(x - line) for line in grid["lines"]) < 1e-6 for x in grid["xs"]), grid  # labels on lines
    assert grid["xticks"] == pytest.approx([x + origin[0] for x in grid["xs"]], abs=1e-3)
    assert grid["yticks"] == pytest.approx([origin[1] - y for y in grid["ys"]], abs=1e-3)
    assert all(abs(v / step - round(v / step)) < 1e-9 for v in grid["xticks"] + grid["yticks"])
    assert grid["bar"] == pytest.approx(step) and grid["label"] == f"{step:g} m"
    shot = Path(os.environ.get("LMVE_VIEWER_SCREENSHOT") or tmp_path / "viewer.png")
    shot.write_bytes(png)

    # the slider: 20 steps down, one redraw per step, the last one the smaller ellipse of the new level
    drawn = int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-drawn"))
    slider = browser.find_element(By.ID, "coverage")
    slider.send_keys(*([Keys.ARROW_LEFT] * 20))
    target = round(level - 0.20, 2)
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "coverage-value").text == f"{target:.2f}")
    WebDriverWait(browser, 30).until(lambda d: int(d.find_element(By.TAG_NAME, "body").get_attribute("data-drawn"))
                                     > drawn and drawn_box(d)["width"] < before["width"])
    WebDriverWait(browser, 30).until(
        lambda d: abs(drawn_box(d)["width"] - expected_box(served, survey, 0, target, origin)["width"]) < 1e-3 * scale)
    after = drawn_box(browser)
    assert_same_box(after, expected_box(served, survey, 0, target, origin), scale)
    assert after["width"] * after["height"] < before["width"] * before["height"]

    # no console error; every resource from the service itself
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    resources = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources and all(r.startswith(base + "/") for r in resources), resources


def test_the_viewer_says_when_the_key_is_refused(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base = str(served.base_url).rstrip("/")
    browser.get(f"{base}/viewer#key=wrong")
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state")
                                     == "error")
    assert "API key was refused" in browser.find_element(By.ID, "status").text


@pytest.mark.slow
def test_the_survey_map_layer_draws_the_cells_and_the_plan_in_walking_order(served, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base = str(served.base_url).rstrip("/")
    browser.get_log("browser")  # what the tests before left there
    browser.get(f"{base}/viewer?model=site#key={KEY}")
    body = lambda d: d.find_element(By.TAG_NAME, "body")  # noqa: E731
    WebDriverWait(browser, 60).until(lambda d: body(d).get_attribute("data-state") in ("drawn", "error"))
    assert body(browser).get_attribute("data-state") == "drawn", browser.find_element(By.ID, "status").text
    assert browser.execute_script("return document.querySelectorAll('#cells polygon').length") == 0  # off at first
    plan = browser.find_element(By.ID, "plan")
    plan.clear()
    plan.send_keys("6")
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, "survey-map")).select_by_value("error")
    doc = served.get("/models/site/survey-map", params={"coordinates": "plane", "add": 6}).json()
    cells = [f for f in doc["features"] if f["properties"]["kind"] == "cell"]
    WebDriverWait(browser, 30).until(lambda d: body(d).get_attribute("data-map-cells") == str(len(cells))
                                     and body(d).get_attribute("data-plan-drawn") == "6")
    drawn = browser.execute_script("""return [...document.querySelectorAll('#cells polygon')].map(p => ({
        area: Number(p.dataset.area), error: Number(p.dataset.error), fill: getComputedStyle(p).fill}));""")
    assert [d["area"] for d in drawn] == pytest.approx([c["properties"]["expected_area_m2"] for c in cells])
    errors = [c["properties"]["expected_error_m"] for c in cells]
    assert [d["error"] for d in drawn] == pytest.approx(errors)
    fills = {d["fill"] for d in drawn}
    import colorsys

    rgb = lambda hue: "rgb({}, {}, {})".format(*(round(255 * c) for c in colorsys.hls_to_rgb(hue / 360, 0.52, 0.72)))  # noqa: E731
    assert drawn[int(np.argmax(errors))]["fill"] == rgb(0)  # the ramp's red end (service/viewer/viewer.js: ramp)
    assert drawn[int(np.argmin(errors))]["fill"] == rgb(220)  # its blue end
    assert len(fills) > 10
    # the plan's numbered positions where the route puts them, in the drawing's coordinates
    origin = [float(v) for v in browser.find_element(By.ID, "map").get_attribute("data-origin").split(",")]
    circles = browser.execute_script("""return [...document.querySelectorAll('#plan-layer circle')].map(c =>
        [Number(c.getAttribute('cx')), Number(c.getAttribute('cy'))]);""")
    labels = browser.execute_script("return [...document.querySelectorAll('#plan-layer text')].map(t => t.textContent)")
    P = np.array([f["geometry"]["coordinates"] for f in doc["features"] if f["properties"]["kind"] == "proposal"])
    np.testing.assert_allclose(circles, np.column_stack([P[:, 0] - origin[0], -(P[:, 1] - origin[1])]), atol=1e-3)
    assert labels == ["1", "2", "3", "4", "5", "6"]
    legend = browser.find_element(By.ID, "map-legend").text
    assert "expected centre error" in legend and "6 positions to survey next" in legend
    shot = Path(os.environ.get("LMVE_VIEWER_MAP_SCREENSHOT") or tmp_path / "viewer-survey-map.png")
    shot.write_bytes(browser.get_screenshot_as_png())
    # a bundle without a map says so and draws nothing
    browser.get(f"{base}/viewer?model=floors#key={KEY}")
    WebDriverWait(browser, 60).until(lambda d: body(d).get_attribute("data-state") == "drawn")
    Select(browser.find_element(By.ID, "survey-map")).select_by_value("area")
    WebDriverWait(browser, 30).until(lambda d: "retrain" in d.find_element(By.ID, "status").text)
    assert browser.execute_script("return document.querySelectorAll('#cells polygon').length") == 0
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"
            and "survey-map" not in e["message"]] == []
