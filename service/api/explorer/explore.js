"use strict";
// The roofline explorer: every figure is asked of this service's own API, nothing is fetched from elsewhere.
(() => {
  const $ = (id) => document.getElementById(id);
  const base = new URL(".", window.location.href).pathname.replace(/\/explore\/?$/, "/");
  const api = (path) => base.replace(/\/$/, "") + path;
  let generation = 0;

  function si(value, unit) {
    if (value === null || value === undefined) return "–";
    if (unit === "s") {
      const abs = Math.abs(value);
      if (abs >= 1) return value.toPrecision(3) + " s";
      if (abs >= 1e-3) return (value * 1e3).toPrecision(3) + " ms";
      return (value * 1e6).toPrecision(3) + " µs";
    }
    return window.rooflineChart.si(value, unit);
  }

  // An operator row's name as the table and the chart both show it: its group where it is not the model's own.
  function rowName(r) { return r.name + (r.group === "model" ? "" : " [" + r.group + "]"); }

  async function call(method, path, body) {
    const response = await fetch(api(path), {
      method, headers: body ? { "Content-Type": "application/json" } : {}, body: body ? JSON.stringify(body) : undefined,
    });
    const type = response.headers.get("content-type") || "";
    const payload = type.includes("json") ? await response.json() : await response.text();
    if (!response.ok) {
      const where = payload.fields && payload.fields.length ? " (" + payload.fields.map((f) => f.loc + ": " + f.msg).join("; ") + ")" : "";
      throw new Error((payload.detail || response.statusText) + where);
    }
    return payload;
  }

  function option(select, value, text) {
    const element = document.createElement("option");
    element.value = value;
    element.textContent = text;
    select.appendChild(element);
  }

  function mode() { return document.querySelector("input[name=mode]:checked").value; }

  function integer(id) {
    const value = Number($(id).value);
    if (!Number.isInteger(value) || value < 1) throw new Error($(id).labels[0].textContent + ": a whole number of at least 1");
    return value;
  }

  function fraction(id, low, high) {
    const value = Number($(id).value);
    if (!Number.isFinite(value) || value < low || value > high) {
      throw new Error($(id).labels[0].textContent + ": a number from " + low + " to " + high);
    }
    return value;
  }

  function cell(row, text) {
    const td = document.createElement("td");
    td.textContent = text;
    row.appendChild(td);
  }

  function summary(items) {
    const box = $("summary");
    box.replaceChildren();
    for (const [label, value, className] of items) {
      const div = document.createElement("div");
      const strong = document.createElement("b");
      strong.textContent = value;
      if (className) strong.className = className;
      div.append(strong, label);
      box.appendChild(div);
    }
  }

  function table(rows) {
    const body = $("rows").querySelector("tbody");
    body.replaceChildren();
    rows.forEach((r, index) => {
      const tr = document.createElement("tr");
      [index + 1, r.name, r.layers, si(r.flops, "FLOP"), si(r.bytes, "B"),
       r.intensity === null ? "–" : r.intensity.toPrecision(3), r.bound, si(r.time, "s"),
       (100 * r.share).toFixed(1) + " %"].forEach((v) => cell(tr, String(v)));
      body.appendChild(tr);
    });
  }

  // The roofs a step's operators run under: the HBM bandwidth, the tensor peaks of the types models compute in
  // (one line for types that share a peak) and the fp32 vector peak of the norms and activations.
  const STEP_ROOFS = [["bf16", "tensor"], ["fp8", "tensor"], ["int8", "tensor"], ["fp4", "tensor"], ["fp32", "vector"]];

  function stepRoofs(deviceRoofs, which) {
    const value = (entry, kind) => (which === "nominal" ? entry["nominal_" + kind] : entry["effective_" + kind]);
    const source = (entry) => (which === "nominal" ? "nominal" : entry.source);
    const hbm = deviceRoofs.memory.find((entry) => entry.level === "hbm");
    const computes = [];
    for (const [dtype, unit] of STEP_ROOFS) {
      const entry = deviceRoofs.compute.find((c) => c.dtype === dtype && c.unit === unit);
      if (!entry || !value(entry, "flops_per_s")) continue;
      const same = computes.find((c) => c.flops_per_s === value(entry, "flops_per_s") && c.unit === unit && c.source === source(entry));
      if (same) same.label = same.label.replace(" " + unit, "/" + dtype + " " + unit);
      else computes.push({ label: dtype + " " + unit, unit, flops_per_s: value(entry, "flops_per_s"), source: source(entry) });
    }
    return { memory: { label: "HBM", bytes_per_s: value(hbm, "bytes_per_s"), source: source(hbm) }, computes };
  }

  async function showRoofs(device) {
    const roofs = await call("GET", "/v1/devices/" + encodeURIComponent(device) + "/roofs");
    const box = $("device-roofs");
    box.replaceChildren();
    const entries = roofs.memory.map((m) => [m.level.toUpperCase() + " " + si(m.effective_bytes_per_s, "B/s"), m.source])
      .concat(roofs.compute.filter((c) => c.unit === "tensor").map((c) => [c.dtype + " " + si(c.effective_flops_per_s, "FLOP/s"), c.source]));
    for (const [text, source] of entries) {
      const span = document.createElement("span");
      span.textContent = text + " (" + source + ")";
      if (source === "measured") span.className = "measured";
      box.appendChild(span);
    }
  }

  async function update() {
    const mine = ++generation;
    $("error").hidden = true;
    $("status").textContent = "Updating…";
    try {
      const device = $("device").value, roofs = $("roofs").value;
      let chart, rows, items, caption;
      if (mode() === "model") {
        const body = { device_id: device, model_id: $("model").value, phase: $("phase").value,
                       batch_size: integer("batch"), seq_len: integer("context"), tensor_parallel: integer("tp"), roofs };
        if ($("scheme").value) body.dtypes = { scheme: $("scheme").value };
        if ($("output").value !== "") body.output_len = integer("output");
        if ($("utilization").value !== "") body.memory_utilization = fraction("utilization", 0.05, 1);
        const price = $("price").value === "" ? null : fraction("price", 0, 1e9);
        const [analysis, deviceRoofs] = await Promise.all([
          call("POST", "/v1/analyze/model", body), call("GET", "/v1/devices/" + encodeURIComponent(device) + "/roofs")]);
        const total = analysis.totals.time_s;
        chart = {
          title: analysis.model + " " + analysis.phase + ", batch " + analysis.batch_size + ", " + analysis.seq_len +
                 " tokens" + (analysis.tensor_parallel > 1 ? ", TP " + analysis.tensor_parallel : "") + " on " + device,
          ...stepRoofs(deviceRoofs, roofs),
          shown: analysis.rows.filter((r) => r.bound !== "interconnect" && r.flops > 0 && r.bytes > 0 && r.time_s > 0)
            .map((r) => ({ name: rowName(r), intensity: r.flops / r.bytes,
                           flops_per_s: r.flops / r.time_s, share: r.total_time_s / total, bound: r.bound })),
        };
        rows = analysis.rows.map((r) => ({ name: rowName(r), layers: r.layers * r.count,
          flops: r.flops, bytes: r.bytes, intensity: r.arithmetic_intensity, bound: r.bound, time: r.total_time_s,
          share: r.total_time_s / total })).sort((a, b) => b.time - a.time);
        const m = analysis.memory;
        items = [
          ["step time", si(total, "s")],
          // The matmuls as measured GEMMs calibrate them, the rest at their bounds: beside the bound, never for it.
          ...(analysis.expected === null ? [] : [["expected step time", si(analysis.expected.time_s, "s") + " (" +
            analysis.expected.engine + " matmuls, " + Math.round(100 * analysis.expected.calibrated_share) +
            "% of the bound's time; the rest at their bounds)"]]),
          [analysis.phase === "prefill" ? "TTFT" : "TPOT", si(analysis.phase === "prefill" ? analysis.ttft_s : analysis.tpot_s, "s")],
          ["tokens/s", Math.round(analysis.tokens_per_s).toLocaleString("en")],
          ["MFU", analysis.mfu === null ? "–" : analysis.mfu.toFixed(3)],
          ...(analysis.e2e_latency_s === null ? [] : [["end-to-end latency", si(analysis.e2e_latency_s, "s")]]),
          ["memory per device", si(m.required_bytes, "B") + " of " + si(m.usable_bytes, "B")],
          ["memory fit", m.fits ? "fits" : "does not fit", m.fits ? "fits" : "no-fit"],
          // The replica's devices for an hour over the tokens it makes in that hour, at the bound's rate: a floor.
          ...(price === null ? [] : [["cost per million tokens (at the bound)",
            (price * body.tensor_parallel / (analysis.tokens_per_s * 3600) * 1e6).toPrecision(3)]]),
        ];
        caption = analysis.model + " " + analysis.phase + ", batch " + analysis.batch_size + ", " + analysis.seq_len +
                  " tokens: each operator at its HBM intensity, sized by its share of the step's time.";
      } else {
        const operator = { kind: "matmul", m: integer("m"), n: integer("n"), k: integer("k"), dtype: $("dtype").value };
        const analysis = await call("POST", "/v1/analyze/operator", { device_id: device, operator, roofs });
        const name = "matmul " + operator.m + "x" + operator.n + "x" + operator.k + " " + operator.dtype;
        const c = analysis.compute_roof, m = analysis.memory_roof;
        chart = {
          title: name + " on " + device,
          memory: { label: m.level.toUpperCase(), bytes_per_s: m.bytes_per_s, source: m.source },
          computes: [{ label: c.dtype + " " + c.unit, flops_per_s: c.flops_per_s, source: c.source }],
          shown: [{ name, intensity: analysis.arithmetic_intensity, flops_per_s: analysis.flops / analysis.time_s,
                    share: 1, bound: analysis.bound }],
        };
        rows = [{ name: "matmul", layers: 1, flops: analysis.flops, bytes: analysis.bytes.total, intensity: analysis.arithmetic_intensity,
                  bound: analysis.bound, time: analysis.time_s, share: 1 }];
        items = [["time (bound)", si(analysis.time_s, "s")],
                 // A calibrated expectation sits beside the bound where the service ships one, with its fit's error.
                 ...(analysis.expected === null ? [] : [["time (expected)", si(analysis.expected.time_s, "s") + " (" +
                   analysis.expected.engine + " fit, off by " + (100 * analysis.expected.median_error).toFixed(1) +
                   "% in the median where measured)"]]),
                 ["bound", analysis.bound + (analysis.binding_level ? " (" + analysis.binding_level + ")" : "")],
                 ["FLOP/byte (HBM)", analysis.arithmetic_intensity.toPrecision(4)], ["ridge", analysis.ridge_point.toPrecision(4)],
                 ["MFU", analysis.mfu === null ? "–" : analysis.mfu.toFixed(3)]];
        caption = "The matmul at its HBM intensity and the FLOP/s its bound allows, under the roof it runs on.";
      }
      if (mine !== generation) return;  // a newer change has answered, or will
      $("chart").replaceChildren(window.rooflineChart.draw(chart));
      $("chart").setAttribute("aria-label", "Roofline chart: " + chart.title);
      $("chart-caption").textContent = caption;
      summary(items);
      table(rows);
      $("status").textContent = "Updated: " + caption;
    } catch (error) {
      if (mine !== generation) return;
      // The figures of the previous inputs would read as the answer to these: take them away with the error.
      $("chart").replaceChildren();
      $("chart").setAttribute("aria-label", "No chart: the inputs were refused");
      $("chart-caption").textContent = "";
      summary([]);
      table([]);
      $("error").textContent = error.message;
      $("error").hidden = false;
      $("status").textContent = "Not updated: the figures are cleared until the inputs are accepted.";
    }
  }

  let timer = null;
  function soon() { clearTimeout(timer); timer = setTimeout(update, 250); }

  async function start() {
    try {
      const [devices, models] = await Promise.all([call("GET", "/v1/devices"), call("GET", "/v1/models")]);
      devices.forEach((d) => option($("device"), d.id, d.name + " (" + d.id + ")"));
      models.forEach((m) => option($("model"), m.id, m.name + " (" + m.id + ")"));
      if (devices.some((d) => d.id === "nvidia-h100-sxm")) $("device").value = "nvidia-h100-sxm";
      if (models.some((m) => m.id === "llama-3.1-8b")) $("model").value = "llama-3.1-8b";
      await showRoofs($("device").value);
    } catch (error) {
      $("error").textContent = "The catalog could not be read: " + error.message;
      $("error").hidden = false;
      return;
    }
    $("inputs").addEventListener("input", soon);
    $("inputs").addEventListener("change", (event) => {
      if (event.target.name === "mode") {
        $("model-inputs").hidden = mode() !== "model";
        $("operator-inputs").hidden = mode() !== "operator";
        $("rows").querySelector("caption").textContent = mode() === "model" ? "Operators of the step, slowest first" : "The operator";
      }
      if (event.target.id === "device" || event.target.id === "roofs") showRoofs($("device").value).catch(() => {});
      soon();
    });
    $("inputs").addEventListener("submit", (event) => { event.preventDefault(); update(); });
    update();
  }
  start();
})();
