// lmve viewer: the survey, recent feedback and one row's region, drawn from the service's own routes.
// Nothing is fetched from elsewhere. The API key comes from the page's #key=... fragment (never sent to
// a server) or the key field, and is kept for this tab only (sessionStorage).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
const view = { survey: null, feedback: null, model: null, drawn: 0, pending: null, box: null, origin: [0, 0] };

function key() { return $("key").value.trim(); }

async function api(path, body) {
  const init = { headers: { "X-API-Key": key() } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);  // relative: the page's origin (and any prefix it is served under)
  const text = await r.text();
  let data = null;
  try { data = JSON.parse(text); } catch (e) { data = { detail: text }; }
  if (!r.ok) {
    const err = new Error(`${path}: ${r.status} ${data && data.detail ? data.detail : r.statusText}`);
    err.status = r.status;
    throw err;
  }
  return data;
}

function status(text, error) {
  $("status").textContent = text;
  $("status").classList.toggle("error", Boolean(error));
}

// target coordinates -> drawing coordinates (x right, y up; the SVG's y points down, hence -y), less the
// origin: SVG geometry is single precision, which at UTM's millions of metres keeps half a metre
function toXY(point) {
  const d = view.survey.display;
  return [point[d.x_index] * d.scale - view.origin[0], -(point[d.y_index] * d.scale - view.origin[1])];
}

function floorText(f) {
  if (!f) return "";
  return f.building === undefined || f.building === null ? String(f.floor) : `${f.building}/${f.floor}`;
}

function el(name, attrs, parent) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function frame(points) {
  // the viewBox around every surveyed, example and feedback position (equal aspect: preserveAspectRatio meet)
  const d = view.survey.display;
  view.origin = points.length ? [Math.round(points[0][d.x_index] * d.scale), Math.round(points[0][d.y_index] * d.scale)]
    : [0, 0];
  $("map").dataset.origin = view.origin.join(",");
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const p of points) {
    const [x, y] = toXY(p);
    x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
  }
  if (!isFinite(x0)) { x0 = -1; x1 = 1; y0 = -1; y1 = 1; }
  const pad = 0.08 * Math.max(x1 - x0, y1 - y0, 1e-9);
  view.box = [x0 - pad, y0 - pad, x1 - x0 + 2 * pad, y1 - y0 + 2 * pad];
  $("map").setAttribute("viewBox", view.box.join(" "));
}

function widen(xy) {
  // grow the viewBox to hold drawing points ``xy`` (a region reaching past the survey), never shrink it
  const [bx, by, bw, bh] = view.box;
  let x0 = bx, x1 = bx + bw, y0 = by, y1 = by + bh;
  for (const [x, y] of xy) { x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y); }
  if (x0 === bx && y0 === by && x1 === bx + bw && y1 === by + bh) return;
  const pad = 0.04 * Math.max(x1 - x0, y1 - y0);
  view.box = [x0 - pad, y0 - pad, x1 - x0 + 2 * pad, y1 - y0 + 2 * pad];
  $("map").setAttribute("viewBox", view.box.join(" "));
  drawBox();
}

// everything drawn to the viewBox's scale: the grid, the survey, the feedback
function drawBox() {
  drawGrid();
  drawSurvey();
  drawFeedback();
}

// a grid step of 1, 2 or 5 times a power of ten, about a sixth of ``span``
function niceStep(span) {
  const raw = span / 6;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

function num(v) { return Number(v.toPrecision(12)).toLocaleString("en-US", { maximumFractionDigits: 6 }); }

function drawGrid() {
  // grid lines every ``step`` drawing units (target units times the display's scale: metres in a metric CRS),
  // labelled with the absolute coordinate, and a scale bar of one step in the lower right corner
  const g = $("grid");
  g.replaceChildren();
  const [bx, by, bw, bh] = view.box;
  const [ox, oy] = view.origin;
  const step = niceStep(Math.max(bw, bh));
  const fs = Math.max(bw, bh) / 75;
  g.dataset.step = String(step);
  for (let k = Math.ceil((bx + ox) / step); k * step - ox <= bx + bw; k++) {
    const x = k * step - ox;
    el("line", { x1: x, y1: by, x2: x, y2: by + bh, class: "grid-x" }, g);
    const label = num(k * step);
    if (x + (0.3 + 0.62 * label.length) * fs > bx + bw) continue;  // it would run off the right edge
    el("text", { x: x + 0.3 * fs, y: by + bh - 0.4 * fs, "font-size": fs, class: "tick-x" }, g).textContent = label;
  }
  for (let k = Math.ceil((oy - by - bh) / step); oy - k * step >= by; k++) {  // drawing y = -(north - oy)
    const y = oy - k * step;
    el("line", { x1: bx, y1: y, x2: bx + bw, y2: y, class: "grid-y" }, g);
    el("text", { x: bx + 0.3 * fs, y: y - 0.3 * fs, "font-size": fs, class: "tick-y" }, g).textContent = num(k * step);
  }
  const unit = view.survey.display.unit;
  const x1 = bx + 0.96 * bw, x0 = x1 - step, y = by + bh - 2.2 * fs;
  const bar = el("g", { id: "scale-bar" }, g);
  el("line", { x1: x0, y1: y, x2: x1, y2: y }, bar);
  for (const x of [x0, x1]) el("line", { x1: x, y1: y - 0.4 * fs, x2: x, y2: y + 0.4 * fs }, bar);
  el("text", { x: (x0 + x1) / 2, y: y - 0.6 * fs, "font-size": fs, "text-anchor": "middle" }, bar).textContent =
    `${num(step)} ${unit || "(target units)"}`;
}

function dotRadius() { return Math.max(view.box[2], view.box[3]) / 300; }

function drawSurvey() {
  const g = $("survey");
  g.replaceChildren();
  const s = view.survey;
  const chosen = $("floor").value;
  const r = dotRadius();
  s.positions.forEach((p, i) => {
    const [x, y] = toXY(p);
    const other = chosen !== "" && s.floors && floorText(s.floors[i]) !== chosen;
    el("circle", { cx: x, cy: y, r: r, class: other ? "other-floor" : "" }, g);
  });
}

// a cell's colour: blue (the map's smallest expected area) through green to red (its largest), on a log scale
function ramp(t) { return `hsl(${Math.round(220 * (1 - t))}, 72%, 52%)`; }

async function drawMap() {
  // the survey map's cells coloured by expected region area, and with plan > 0 the positions to survey next,
  // numbered in walking order (the route's plane coordinates: the drawing's own)
  const cells = $("cells"), layer = $("plan-layer"), legend = $("map-legend");
  cells.replaceChildren();
  layer.replaceChildren();
  legend.hidden = true;
  document.body.dataset.mapCells = "0";
  document.body.dataset.planDrawn = "0";
  const field = $("survey-map").value;  // "area", "error" or "" (off)
  if (!field || !view.model) return;
  const add = Math.max(0, Math.floor(Number($("plan").value) || 0));
  const chosen = $("floor").value;
  const labels = (view.survey.floor_labels || []).map(floorText);
  const floor = chosen !== "" && labels.includes(chosen) ? `&floor=${labels.indexOf(chosen)}` : "";
  let map;
  try {
    map = await api(`models/${encodeURIComponent(view.model)}/survey-map?coordinates=plane&add=${add}${floor}`);
  } catch (err) {
    if (err.status === 409) { status(err.message, false); return; }
    throw err;
  }
  const key = field === "error" ? "expected_error_m" : "expected_area_m2";
  const cellFeatures = map.features.filter((f) => f.properties.kind === "cell");
  const values = cellFeatures.map((f) => f.properties[key]).filter((v) => v !== null);
  if (!values.length) { status(`this bundle keeps no ${field === "error" ? "centre errors" : "areas"} to map`, false); return; }
  const lo = Math.log(Math.min(...values)), hi = Math.log(Math.max(...values));
  const flat = hi - lo < 1e-6;  // one value everywhere (a global shape): one colour, not rounding noise
  widen(cellFeatures.flatMap((f) => f.geometry.coordinates[0].map(toXY)));
  const svgPoints = (coordinates) => coordinates.map((c) => toXY(c).join(",")).join(" ");
  for (const f of cellFeatures) {
    const p = f.properties;
    const t = flat || p[key] === null ? 0.5 : (Math.log(p[key]) - lo) / (hi - lo);
    const cell = el("polygon", { points: svgPoints(f.geometry.coordinates[0]), fill: ramp(t),
      "data-area": p.expected_area_m2, "data-error": p.expected_error_m }, cells);
    el("title", {}, cell).textContent = `expected area ${p.expected_area_m2.toPrecision(3)}` +
      (p.expected_error_m === null ? "" : `, centre error ${p.expected_error_m.toPrecision(3)}`);
  }
  const walk = map.features.find((f) => f.properties.kind === "walk");
  if (walk) el("polyline", { points: svgPoints(walk.geometry.coordinates) }, layer);
  const r = dotRadius() * 3;
  const proposals = map.features.filter((f) => f.properties.kind === "proposal");
  for (const f of proposals) {
    const [x, y] = toXY(f.geometry.coordinates);
    el("circle", { cx: x, cy: y, r: r }, layer);
    el("text", { x: x, y: y + r * 0.45, "font-size": r * 1.2, "text-anchor": "middle" }, layer).textContent =
      String(f.properties.order);
  }
  const unit = view.survey.display.unit || "target units";
  const loo = map.accuracy[field].median_abs_rel_error;
  const what = field === "error" ? "centre error" : `${map.method} area`, power = field === "error" ? "" : "\u00b2";
  const length = walk ? walk.properties.length_m.toPrecision(3) : 0;
  legend.replaceChildren(`expected ${what}: ${Math.exp(lo).toPrecision(3)}`, Object.assign(
    document.createElement("span"), { className: "ramp" }), `${Math.exp(hi).toPrecision(3)} ${unit}${power}` +
    (flat ? " (the same everywhere: the served shape is global)" : "") +
    (loo === null ? "" : ` (interpolated; ${(100 * loo).toFixed(0)} % median error at positions left out)`) +
    (proposals.length ? `; ${proposals.length} positions to survey next, walk ${length} ${unit}` : ""));
  legend.hidden = false;
  document.body.dataset.mapCells = String(cellFeatures.length);
  document.body.dataset.planDrawn = String(proposals.length);
}

function drawFeedback() {
  const g = $("feedback");
  g.replaceChildren();
  const r = dotRadius() * 1.4;
  for (const row of view.feedback.rows) {
    if (!row.point) continue;
    const [x, y] = toXY(row.point);
    el("circle", { cx: x, cy: y, r: r, class: row.inside_served ? "fb-in" : "fb-out" }, g);
  }
}

function fact(dl, name, value) {
  const dt = document.createElement("dt");
  dt.textContent = name;
  const dd = document.createElement("dd");
  dd.textContent = value;
  dl.append(dt, dd);
}

function shiftText(shift) {
  // the shift alarm of GET /models/{name}: quiet, alarm, or why there is none
  if (!shift.available) return ["unavailable", `shift alarm: none (${shift.reason})`];
  const evidence = `evidence ${shift.evidence.toPrecision(3)} of ${shift.threshold.toPrecision(3)} ` +
    `over ${shift.queries} queries`;
  if (shift.alarm) {
    return ["alarm", `shift alarm since query ${shift.alarm_at} (${evidence}): the queries no longer look like ` +
      "the calibration rows, so the coverage is at risk. Recalibrate with a few labelled readings " +
      "(lmve-recalibrate); that starts a new test."];
  }
  return ["quiet", `shift alarm quiet: ${evidence} (false alarms at most ${shift.delta})`];
}

async function drawShift() {
  const info = await api(`models/${encodeURIComponent(view.model)}`);
  const [state, text] = shiftText(info.shift);
  const p = $("shift");
  p.dataset.shift = state;
  p.textContent = text;
}

async function drawRegion() {
  const s = view.survey;
  const i = Number($("row").value);
  const example = s.examples[i];
  if (!example) { status("this bundle keeps no example rows to draw", false); return; }
  const coverage = Number($("coverage").value);
  $("coverage-value").textContent = coverage.toFixed(2);
  const ticket = {};
  view.pending = ticket;
  const answer = await api(`models/${encodeURIComponent(view.model)}/predict-region`,
    { features: [example.features], coverage: coverage, boundary_points: 128 });
  if (view.pending !== ticket) return;  // a newer slider position already asked
  const region = answer.regions[0];
  const ring = region.boundary.map(toXY);
  widen(ring);
  const path = ring.map((p, k) => (k ? "L" : "M") + p.join(",")).join(" ") + " Z";
  $("region").setAttribute("d", path);
  const [cx, cy] = toXY(region.center);
  const r = dotRadius() * 1.6;
  Object.entries({ cx: cx, cy: cy, r: r }).forEach(([k, v]) => $("centre").setAttribute(k, v));
  const [tx, ty] = toXY(example.point);
  Object.entries({ cx: tx, cy: ty, r: r * 1.5 }).forEach(([k, v]) => $("truth").setAttribute(k, v));
  const dl = $("facts");
  dl.replaceChildren();
  fact(dl, "method", answer.method + (answer.fallback ? ` (fallback: ${answer.fallback_reason})` : ""));
  fact(dl, "coverage", `${answer.effective_coverage}`);
  fact(dl, "area", `${region.volume.toPrecision(4)} (${s.target_names.join(" x ")})`);
  fact(dl, "semi-axes", region.semi_axes.map((a) => a.toPrecision(3)).join(", "));
  if (region.typicality !== null && region.typicality !== undefined) {
    fact(dl, "typicality", `${region.typicality.toPrecision(3)} (the row's p-value among the calibration rows')`);
  }
  if (region.floors) {
    fact(dl, "floor set", region.floors.map((f) => `${floorText(f)} (${(100 * f.probability).toFixed(0)} %)`).join(", "));
    fact(dl, "true floor", floorText(example.floor));
  }
  if (answer.guarantee) fact(dl, "guarantee", answer.guarantee);
  view.drawn += 1;
  document.body.dataset.drawn = String(view.drawn);
  document.body.dataset.state = "drawn";
  const misses = view.feedback.rows.filter((row) => row.point && !row.inside_served).length;
  status(`${view.model}: ${s.positions.length} surveyed positions, ${view.feedback.rows.length} recent feedback ` +
    `rows (${misses} outside their served region); row ${i} at coverage ${coverage.toFixed(2)}`, false);
}

async function loadModel(name) {
  view.model = name;
  document.body.dataset.state = "loading";
  const [survey, feedback] = await Promise.all([
    api(`models/${encodeURIComponent(name)}/survey`),
    api(`models/${encodeURIComponent(name)}/feedback/recent?limit=2000`)]);
  view.survey = survey;
  view.feedback = feedback;
  const floors = $("floor");
  floors.replaceChildren(new Option("all floors", ""));
  for (const f of survey.floor_labels || []) floors.add(new Option(floorText(f), floorText(f)));
  floors.disabled = !survey.floor_labels;
  const rows = $("row");
  rows.replaceChildren();
  survey.examples.forEach((e, i) => rows.add(new Option(
    `held-out row ${i}` + (e.floor ? ` (floor ${floorText(e.floor)})` : ""), String(i))));
  const slider = $("coverage");
  slider.max = String(Math.floor(survey.max_coverage * 100) / 100);
  slider.value = String(survey.coverage);
  $("map").setAttribute("aria-label", `${survey.display.x_label} against ${survey.display.y_label}`);
  $("axes").textContent = `x: ${survey.display.x_label}; y: ${survey.display.y_label} (equal scales)`;
  frame([...survey.positions, ...survey.examples.map((e) => e.point),
    ...feedback.rows.filter((row) => row.point).map((row) => row.point)]);
  drawBox();
  if (survey.note) status(survey.note, false);
  await drawRegion();
  await drawMap();
  await drawShift();
}

function report(err) {
  document.body.dataset.state = "error";
  status(err.status === 401 ? "the API key was refused: enter it above (or open /viewer#key=...)" : err.message, true);
}

async function start() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (!key()) $("key").value = fragment.get("key") || sessionStorage.getItem("lmve-key") || "";
  const listing = await api("models");
  const select = $("model");
  select.replaceChildren();
  for (const m of listing.models) {
    const option = new Option(`${m.name} (${m.state})`, m.name);
    option.disabled = m.state !== "READY";
    select.add(option);
  }
  const asked = new URLSearchParams(location.search).get("model");
  const name = asked || listing.default || (listing.models.find((m) => m.state === "READY") || {}).name;
  if (!name) { status("no model is ready", true); return; }
  select.value = name;
  await loadModel(name);
}

$("key").addEventListener("change", () => {
  sessionStorage.setItem("lmve-key", key());
  start().catch(report);
});
$("model").addEventListener("change", (e) => loadModel(e.target.value).catch(report));
$("floor").addEventListener("change", () => { drawSurvey(); drawMap().catch(report); });
$("survey-map").addEventListener("change", () => drawMap().catch(report));
$("plan").addEventListener("change", () => drawMap().catch(report));
$("row").addEventListener("change", () => drawRegion().catch(report));
$("coverage").addEventListener("input", () => drawRegion().catch(report));
start().catch(report);
setInterval(() => { if (view.model) drawShift().catch(() => {}); }, 10000);  // the alarm as queries come
