"use strict";
// The calibrations page: GET /v1/calibrations as a table, one calibration's parameters and (where its measurements are
// stored) its residuals drawn as a parity chart, and measurements submitted: kernel timings as CSV, serving benchmark
// result files. The address holds the device shown and the calibration chosen.
(() => {
  const form = window.explorerForm, $ = form.$, api = form.api;
  const percent = (value) => (value === null || value === undefined ? "–" : (100 * value).toFixed(1) + " %");
  let all = [];

  function state(changes) {
    const query = new URLSearchParams(window.location.search);
    Object.entries(changes).forEach(([key, value]) => (value ? query.set(key, value) : query.delete(key)));
    window.history.replaceState(null, "", "?" + query.toString());
    return query;
  }

  function list() {
    const device = $("device-filter").value;
    const shown = all.filter((c) => !device || c.device_id === device);
    const tbody = $("calibrations").tBodies[0];
    tbody.replaceChildren();
    shown.forEach((c) => {
      const tr = form.row(["", c.kind, c.origin, c.device_id, c.engine, c.fitted_on.toLocaleString("en-US"),
        percent(c.median_error), percent(c.p90_error), percent(c.bound_median_error)]);
      const button = Object.assign(document.createElement("button"), { type: "button", textContent: c.id });
      button.className = "link";
      button.addEventListener("click", () => choose(c.id, true));
      tr.cells[0].appendChild(button);
      tbody.appendChild(tr);
    });
    $("calibrations").hidden = false;
    $("status").textContent = `${shown.length} of ${all.length} calibrations.`;
  }

  // Residuals as [measured, expected, bound] of each measurement, with the quantity they measure.
  function points(detail) {
    if (detail.residuals) return ["a matmul's time", detail.residuals.map((r) => [r.measured_time_s, r.expected_time_s, r.bound_time_s])];
    if (detail.run_residuals) return ["TPOT", detail.run_residuals.map((r) => [r.measured_tpot_s, r.expected_tpot_s, r.bound_tpot_s])];
    return [null, []];
  }

  function parity(quantity, rows) {
    const W = 520, H = 420, L = 60, B = 40;
    const values = rows.flat().filter((v) => v > 0);
    const lo = Math.log10(Math.min(...values)) - 0.1, hi = Math.log10(Math.max(...values)) + 0.1;
    const px = (v) => L + (W - L - 10) * (Math.log10(v) - lo) / (hi - lo);
    const py = (v) => H - B - (H - B - 10) * (Math.log10(v) - lo) / (hi - lo);
    const low = 10 ** lo, high = 10 ** hi;
    const parts = [`<line x1="${px(low)}" y1="${py(low)}" x2="${px(high)}" y2="${py(high)}" stroke="#999" stroke-dasharray="4 3"/>`,
      `<text x="${(W + L) / 2}" y="${H - 8}" font-size="12" text-anchor="middle">measured ${quantity} (log)</text>`,
      `<text x="14" y="${(H - B) / 2}" font-size="12" transform="rotate(-90 14 ${(H - B) / 2})" text-anchor="middle">expected (filled) and bound (hollow)</text>`];
    rows.forEach(([measured, expected, bound]) => {
      parts.push(`<circle class="bound" cx="${px(measured).toFixed(1)}" cy="${py(bound).toFixed(1)}" r="3.5" fill="none" stroke="#777"><title>measured ${form.seconds(measured)}, bound ${form.seconds(bound)}</title></circle>`);
      parts.push(`<circle class="expected" cx="${px(measured).toFixed(1)}" cy="${py(expected).toFixed(1)}" r="3.5" fill="#1f77b4"><title>measured ${form.seconds(measured)}, expected ${form.seconds(expected)}</title></circle>`);
    });
    $("chart").innerHTML = `<svg viewBox="0 0 ${W} ${H}" xmlns="http://www.w3.org/2000/svg">${parts.join("")}</svg>`;
    $("chart-caption").textContent = `${rows.length} measurement(s): the expectation (filled) and the bound (hollow) ` +
      "against what was measured; on the dashed diagonal a prediction is exact, below it faster than measured.";
  }

  async function choose(id, focus) {
    state({ id });
    const response = await fetch(api("/v1/calibrations/" + encodeURIComponent(id)));
    const detail = await response.json();
    if (!response.ok) {
      $("error").textContent = detail.detail || response.statusText;
      $("error").hidden = false;
      return;
    }
    $("chosen-title").textContent = detail.id;
    $("chosen-scope").textContent = `${detail.scope}. ${detail.model}. Fitted on ${detail.fitted_on.toLocaleString("en-US")} ` +
      `measurement(s) (${detail.source}); checked on ${detail.checked_on.toLocaleString("en-US")} (${detail.checked_by}): ` +
      `median error ${percent(detail.median_error)}, p90 ${percent(detail.p90_error)}, the bound's ${percent(detail.bound_median_error)}.`;
    const tbody = $("parameters").tBodies[0];
    tbody.replaceChildren();
    detail.parameters.forEach((p) => tbody.appendChild(form.row([p.name,
      p.value === null ? "not identified" : Number(p.value.toPrecision(4)).toString(), p.unit, p.meaning])));
    const [quantity, rows] = points(detail);
    $("parity").hidden = rows.length === 0;
    if (rows.length) parity(quantity, rows);
    // A shipped serving, engine or scheduling calibration's runs, and a measured scheduling one's, are simulated or
    // analysed by the service: it draws them (a kernel calibration's stored timings come as rows).
    const drawn = !rows.length && detail.kind !== "kernel";
    $("no-points").replaceChildren();
    if (drawn) {
      $("no-points").appendChild(Object.assign(document.createElement("img"), {
        src: api(`/v1/calibrations/${encodeURIComponent(detail.id)}/parity.svg`), className: "parity",
        alt: `${detail.id}: expected and bound TPOT against the runs it was fitted to, log-log` }));
    } else if (!rows.length) {
      $("no-points").textContent = "Its measurements are not stored here: a shipped kernel calibration's public " +
        "tables are not shipped, only its fit and its held-out error.";
    }
    $("chosen").hidden = false;
    if (focus) $("chosen").focus();
  }

  async function load() {
    const response = await fetch(api("/v1/calibrations"));
    all = await response.json();
    const devices = [...new Set(all.map((c) => c.device_id))].sort();
    const filter = $("device-filter");
    filter.replaceChildren(new Option("(every device)", ""), ...devices.map((d) => new Option(d, d)));
    const query = new URLSearchParams(window.location.search);
    filter.value = query.get("device") || "";
    list();
    if (query.get("id")) await choose(query.get("id"), false);
  }

  // POST a write with the token; the answer, or an Error in the API's words.
  async function write(path, body, type) {
    const response = await fetch(api(path), { method: "POST", body,
      headers: { "Content-Type": type, Authorization: "Bearer " + $("token").value } });
    const answer = await response.json();
    if (!response.ok) {
      const where = answer.fields && answer.fields.length ? " (" + answer.fields.map((f) => f.loc + ": " + f.msg).join("; ") + ")" : "";
      throw new Error((answer.detail || response.statusText) + where);
    }
    return answer;
  }

  // A write's outcome: what was stored and fitted (each fit with its error), then the list again and the first fit.
  async function stored(prefix, answer, what, device) {
    const fitted = answer.calibrations || [];
    $(prefix + "-status").textContent = `${answer.created.length} ${what} stored; ` + (fitted.length
      ? "fitted: " + fitted.map((c) => `${c.id} (median error ${percent(c.median_error)}, the bound's ` +
        `${percent(c.bound_median_error)})`).join(", ") + "."
      : "no calibration fitted: " + (answer.not_fitted || []).map((n) => `${n.scope}: ${n.reason}`).join("; "));
    state({ device });
    await load();
    if (fitted.length) await choose(fitted[0].id, true);
  }

  function submitting(prefix, work) {
    return (event) => {
      event.preventDefault();
      $(prefix + "-error").hidden = true;
      $(prefix + "-status").textContent = "Submitting…";
      work().catch((error) => {
        $(prefix + "-error").textContent = error.message;
        $(prefix + "-error").hidden = false;
        $(prefix + "-status").textContent = "The service refused them.";
      });
    };
  }

  async function submitTimings() {
    const device = $("t-device").value.trim();
    const query = new URLSearchParams({ engine: $("t-engine").value.trim(), source: $("t-source").value.trim() });
    const answer = await write(`/v1/devices/${encodeURIComponent(device)}/kernel-timings/csv?${query}`,
      $("t-csv").value, "text/csv");
    await stored("t", answer, "timing(s)", device);
  }

  async function submitRuns() {
    const files = [...$("r-files").files];
    const runs = await Promise.all(files.map(async (file) => {
      try { return JSON.parse(await file.text()); } catch (error) { throw new Error(`${file.name}: not JSON (${error.message})`); }
    }));
    const device = $("r-device").value.trim();
    const body = { format: "vllm-bench", device_id: device, model_id: $("r-model").value.trim(),
      engine: $("r-engine").value.trim(), source: $("r-source").value.trim(),
      deployment: { tensor_parallel: parseInt($("r-tp").value, 10) }, runs };
    const answer = await write("/v1/serving-runs", JSON.stringify(body), "application/json");
    await stored("r", answer, "run(s)", device);
  }

  // Files dropped on the field are its files, as if chosen.
  const drop = $("r-files");
  drop.addEventListener("dragover", (event) => event.preventDefault());
  drop.addEventListener("drop", (event) => { event.preventDefault(); drop.files = event.dataTransfer.files; });

  $("device-filter").addEventListener("change", () => { state({ device: $("device-filter").value }); list(); });
  $("timings").addEventListener("submit", submitting("t", submitTimings));
  $("runs").addEventListener("submit", submitting("r", submitRuns));
  load().catch((error) => { $("error").textContent = String(error); $("error").hidden = false; });
})();
