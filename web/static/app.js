// The what-if page: reads the controls, asks the server (/api/answer), draws what it answers.
// Every number drawn comes from the server's answer; the page computes nothing of its own.
"use strict";

const $ = (id) => document.getElementById(id);
const SLIDERS = ["mem_bw", "peak_flops", "link_bw", "acceptance_scale"];
const ALPHA = "__alpha__";          // the acceptance choice that reads the alpha slider
const DEBOUNCE_MS = 200;            // a dragged slider asks once it rests this long
const DEFAULTS = {model: "vicuna-7b", platform: "jetson-xavier-nx-204mhz", acceptance: "ghidorah-mbpp"};

const state = {options: null, timer: null, inFlight: false, pending: false, answers: 0};

function factor(id) {               // a slider holds log10 of its factor: -1..1 is x0.1..x10
  return Number(Math.pow(10, Number($(id).value)).toPrecision(3));
}

function setStatus(s, text) { $("status").dataset.state = s; $("status").textContent = text || s; }

function showError(message) {       // one line, as the CLI prints it
  $("error").textContent = message ? "error: " + String(message).replace(/\s+/g, " ") : "";
}

function fill(select, items, keep) {
  const old = keep ? select.value : null;
  select.innerHTML = "";
  for (const [value, label] of items) {
    const o = document.createElement("option");
    o.value = value; o.textContent = label; select.appendChild(o);
  }
  if (old && [...select.options].some((o) => o.value === old)) select.value = old;
}

function fillChoices(opt, keepSelection) {
  fill($("model"), opt.models.map((m) => [m, m]).concat(
    opt.uploaded_models.map((u) => [u.id, u.name + " (uploaded)"])), keepSelection);
  fill($("platform"), opt.platforms.map((p) => [p, p]), keepSelection);
  fill($("acceptance"), [["", "(none)"]].concat(opt.acceptances.map((a) => [a, a]), [[ALPHA, "alpha (slider)"]],
    opt.uploaded_acceptances.map((u) => [u.id, u.name + " (uploaded)"])), keepSelection);
}

function query() {
  const methods = $("method-all").checked ? ["all"]
    : [...document.querySelectorAll("#methods input:checked")].map((c) => c.value);
  const acc = $("acceptance").value;
  const q = {
    model: $("model").value, platform: $("platform").value, methods: methods,
    acceptance: acc === ALPHA ? state.options.alpha_prefix + Number($("alpha").value).toFixed(2) : acc || null,
    context: Number($("context").value), batch: Number($("batch").value), dtype: $("dtype").value || null,
  };
  for (const id of SLIDERS) q[id] = factor(id);
  return q;
}

async function post(url, body) {
  const r = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify(body)});
  if (!r.ok) {
    let message = r.status + " " + r.statusText;
    try { message = (await r.json()).error || message; } catch (e) { /* not JSON: keep the status */ }
    throw new Error(message);
  }
  return r;
}

function schedule() {
  document.body.dataset.busy = "1";     // until the answer to these controls is drawn
  clearTimeout(state.timer);
  state.timer = setTimeout(() => { state.timer = null; ask(); }, DEBOUNCE_MS);
}

async function ask() {
  if (state.inFlight) { state.pending = true; return; }   // the newest controls go once this answer is in
  state.inFlight = true;
  document.body.dataset.busy = "1";
  setStatus("busy", "computing");
  try {
    const t0 = performance.now();
    const a = await (await post("/api/answer", query())).json();
    draw(a);
    showError("");
    state.answers += 1;
    document.body.dataset.answers = String(state.answers);
    setStatus("ready", "answered in " + Math.round(performance.now() - t0) + " ms");
  } catch (e) {
    showError(e.message);
    setStatus("ready", "error");
  } finally {
    state.inFlight = false;
    if (state.pending) { state.pending = false; ask(); } else if (state.timer === null) {
      document.body.dataset.busy = "0";
    }
  }
}

const fmt = (v, d) => (v === null || v === undefined ? "-" : Number(v).toFixed(d));

function draw(a) {
  $("verdict").textContent = a.verdict.text;
  const table = $("best");
  for (const key of ["model", "platform", "acceptance", "context", "batch"]) table.dataset[key] = String(a[key]);
  $("verdict").dataset.pays = String(a.verdict.pays);
  const body = $("best").querySelector("tbody");
  body.innerHTML = "";
  for (const r of a.rows) {
    const tr = document.createElement("tr");
    tr.dataset.method = r.method;
    tr.dataset.tokensPerS = String(r.tokens_per_s);
    if (r.method === a.verdict.best) tr.className = "best";
    for (const text of [r.method, r.config, fmt(r.tokens_per_s, 2), fmt(r.step_ms, 3), fmt(r.tokens_per_step, 3),
                        fmt(r.speedup_vs_ar, 2)]) {
      const td = document.createElement("td"); td.textContent = text; tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  const un = $("unavailable");
  un.innerHTML = "";
  for (const u of a.unavailable) {
    const li = document.createElement("li");
    li.dataset.method = u.method;
    li.textContent = u.method + ": " + u.reason;
    un.appendChild(li);
  }
  drawCurves(a);
  drawRoofline(a.roofline);
}

function curvePlot(div, a, knob, title, xlabel) {
  const traces = [];
  for (const [method, c] of Object.entries(a.curves)) {
    const k = c[knob];
    if (!k) continue;
    traces.push({x: k.x, y: k.y, mode: "lines+markers", name: method});
    traces.push({x: [k.best_x], y: [k.best_y], mode: "markers", name: method + " optimum", showlegend: false,
                 marker: {symbol: "star", size: 14, line: {width: 1}}});
  }
  plot(div, traces, title, xlabel, "tokens/s", {});
}

function drawCurves(a) {
  curvePlot("plot-width", a, "tree_width", "tokens/s against the tree width", "tree width (tokens verified per step)");
  curvePlot("plot-depth", a, "draft_depth", "tokens/s against the draft depth", "draft depth");
  curvePlot("plot-ratio", a, "partition_ratio", "tokens/s against the partition ratio (best structure)",
            "partition ratio");
}

function drawRoofline(r) {
  const body = $("ops").querySelector("tbody");
  body.innerHTML = "";
  if (!r || r.error) {
    $("roofline-note").textContent = r ? `no roofline of ${r.method}'s step: ${r.error}` : "";
    plot("plot-roofline", [], "roofline", "", "", {});
    return;
  }
  $("roofline-note").textContent = `${r.method}'s verify step (q = ${r.tokens}, s = ${r.context}, b = ${r.batch}, ` +
    `${r.dtype}) on ${r.device}, all of it on that one device: ${r.total_ms.toFixed(3)} ms; the same as \`${r.command}\`.`;
  for (const o of r.ops) {
    const tr = document.createElement("tr");
    for (const text of [o.name, String(o.count), (o.flops / 1e9).toFixed(3), (o.bytes / 1e6).toFixed(2),
                        o.intensity.toFixed(2), o.time_ms.toFixed(4), o.bound]) {
      const td = document.createElement("td"); td.textContent = text; tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  const pts = r.ops.filter((o) => o.intensity > 0 && o.attained_flops > 0);
  const xs = pts.map((o) => o.intensity);
  const ridge = r.peak_flops / r.mem_bw;     // where the two roofs meet
  const lo = Math.min(...xs, 0.1) / 2, hi = Math.max(...xs, ridge) * 2;
  const grid = [...Array(60).keys()].map((i) => lo * Math.pow(hi / lo, i / 59));
  const roof = (flops, bw) => grid.map((x) => Math.min(flops, x * bw));
  const traces = [
    {x: grid, y: roof(r.peak_flops, r.mem_bw), mode: "lines", name: "peaks", line: {color: "#999"}},
    {x: grid, y: roof(r.peak_flops * r.compute_efficiency, r.mem_bw * r.bw_efficiency), mode: "lines",
     name: "achievable", line: {color: "#444", dash: "dash"}},
  ];
  for (const bound of [...new Set(pts.map((o) => o.bound))]) {
    const sel = pts.filter((o) => o.bound === bound);
    traces.push({x: sel.map((o) => o.intensity), y: sel.map((o) => o.attained_flops), mode: "markers",
                 name: bound + " bound", text: sel.map((o) => `${o.name}: ${o.time_ms.toFixed(3)} ms`)});
  }
  plot("plot-roofline", traces, `roofline of ${r.device}`, "intensity (FLOP/byte)", "attained FLOP/s",
       {xtype: "log", ytype: "log"});
}

function plot(div, traces, title, xlabel, ylabel, opt) {
  if (typeof Plotly === "undefined") { $(div).textContent = "(plots need the plotly package)"; return; }
  Plotly.react(div, traces, {
    title: {text: title, font: {size: 13}}, margin: {l: 60, r: 10, t: 35, b: 45},
    xaxis: {title: {text: xlabel}, type: opt.xtype || "linear", exponentformat: "e"},
    yaxis: {title: {text: ylabel}, type: opt.ytype || "linear", exponentformat: "e"}, legend: {font: {size: 10}},
  }, {displayModeBar: false, responsive: true});
}

async function upload(kind, input) {
  const file = input.files[0];
  if (!file) return;
  setStatus("busy", "reading " + file.name);
  try {
    const opt = state.options;    // of a checkpoint (GGUF), only the header is read: send the file's start
    const part = opt.header_suffixes.some((s) => file.name.toLowerCase().endsWith(s))
      ? file.slice(0, opt.max_upload_bytes) : file;
    const r = await fetch(`/api/upload?kind=${kind}&filename=${encodeURIComponent(file.name)}`,
                          {method: "POST", body: await part.arrayBuffer()});
    const j = await r.json();
    if (!r.ok) throw new Error(j.error || r.statusText);
    state.options = await (await fetch("/api/options")).json();
    fillChoices(state.options, true);
    $(kind === "model" ? "model" : "acceptance").value = j.id;
    showError("");
    schedule();
    setStatus("ready", "read " + file.name);
  } catch (e) {
    showError(e.message);
    setStatus("ready", "error");
  } finally {
    input.value = "";
  }
}

async function download(url, name, extra) {
  try {
    const r = await post(url, Object.assign(query(), extra || {}));
    const a = document.createElement("a");
    a.href = URL.createObjectURL(await r.blob());
    a.download = name;
    a.click();
    URL.revokeObjectURL(a.href);
  } catch (e) { showError(e.message); }
}

function showSlider(id) { $(id).nextElementSibling.textContent = "x" + factor(id); }

async function init() {
  state.options = await (await fetch("/api/options")).json();
  const opt = state.options;
  fillChoices(opt, false);
  for (const [id, value] of Object.entries(DEFAULTS)) {
    if ([...$(id).options].some((o) => o.value === value)) $(id).value = value;
  }
  fill($("dtype"), [["", "the model's"]].concat(opt.dtypes.map((d) => [d, d])), false);
  for (const m of opt.methods) {
    const l = document.createElement("label");
    l.innerHTML = `<input type="checkbox" value="${m}" disabled> ${m}`;
    $("methods").appendChild(l);
  }
  $("method-all").addEventListener("change", () => {
    for (const c of document.querySelectorAll("#methods input")) c.disabled = $("method-all").checked;
    schedule();
  });
  for (const id of ["model", "platform", "context", "batch", "dtype"]) $(id).addEventListener("change", schedule);
  $("methods").addEventListener("change", schedule);
  $("acceptance").addEventListener("change", () => { $("alpha-row").hidden = $("acceptance").value !== ALPHA; schedule(); });
  $("alpha").addEventListener("input", () => { $("alpha-value").textContent = Number($("alpha").value).toFixed(2); schedule(); });
  for (const id of SLIDERS) $(id).addEventListener("input", () => { showSlider(id); schedule(); });
  $("reset").addEventListener("click", () => { for (const id of SLIDERS) { $(id).value = 0; showSlider(id); } schedule(); });
  $("model-file").addEventListener("change", () => upload("model", $("model-file")));
  $("acceptance-file").addEventListener("change", () => upload("acceptance", $("acceptance-file")));
  $("dl-csv").addEventListener("click", () => download("/api/table.csv", "hetspec-table.csv"));
  $("dl-toml").addEventListener("click", () => download("/api/platform.toml", "platform.toml"));
  $("dl-trace").addEventListener("click", () => download("/api/trace.json", "hetspec-trace.json"));
  if (opt.platform_problems.length) showError(opt.platform_problems[0]);
  ask();
}

init().catch((e) => { showError(e.message); setStatus("ready", "error"); });
