"use strict";
// The serving page: its form is POST /v1/analyze/serving's request as this service's OpenAPI document describes
// it, so a field the API gains appears here without a change to this page; every figure is the API's own answer.
(() => {
  const $ = (id) => document.getElementById(id);
  const root = new URL("../", window.location.href).pathname;
  const api = (path) => root.replace(/\/$/, "") + path;
  const SCHEMA = "ServingAnalysisRequest";
  // Nested objects shown as their own fieldset (one level); what a form cannot hold well (an inline config, pools
  // of a disaggregated deployment, lists) stays the API's (the documentation takes them).
  const NESTED = ["dtypes", "speculative", "scheduler", "workload"];
  const DEFAULTS = { model_id: "deepseek-v3", device_id: "nvidia-b200", input_len: 1024, output_len: 1024, concurrency: 64,
    tensor_parallel: 8, engine: "sglang", "dtypes.scheme": "w8a8-fp8", "dtypes.kv_cache": "fp8" };
  let components = {};

  function resolve(schema) {
    if (!schema) return {};
    if (schema.$ref) return resolve(components[schema.$ref.split("/").pop()]);
    const options = schema.anyOf || schema.oneOf;
    if (options) {
      const chosen = options.find((s) => s.type !== "null") || {};
      return { ...resolve(chosen), description: schema.description || resolve(chosen).description, default: schema.default };
    }
    return schema;
  }

  function scalar(schema) {
    return ["integer", "number", "string", "boolean"].includes(schema.type) || Array.isArray(schema.enum);
  }

  function input(name, schema, labelText) {
    const id = "f-" + name.replace(/\./g, "-");
    const wrapper = document.createElement("div");
    const label = document.createElement("label");
    label.htmlFor = id;
    label.textContent = labelText;
    let field;
    if (Array.isArray(schema.enum)) {
      field = document.createElement("select");
      field.appendChild(new Option("(default)", ""));
      schema.enum.forEach((v) => field.appendChild(new Option(String(v), String(v))));
    } else if (schema.type === "boolean") {
      field = document.createElement("select");
      [["(default)", ""], ["true", "true"], ["false", "false"]].forEach(([t, v]) => field.appendChild(new Option(t, v)));
    } else {
      field = document.createElement("input");
      field.type = schema.type === "string" ? "text" : "number";
      if (schema.type !== "string") field.step = schema.type === "integer" ? "1" : "any";
      if (schema.minimum !== undefined) field.min = schema.minimum;
      if (schema.maximum !== undefined) field.max = schema.maximum;
    }
    field.id = id;
    field.name = name;
    field.dataset.type = schema.type || "string";
    if (schema.description) {
      const help = document.createElement("small");
      help.id = id + "-help";
      help.textContent = schema.description;
      field.setAttribute("aria-describedby", help.id);
      wrapper.append(label, field, help);
    } else {
      wrapper.append(label, field);
    }
    return wrapper;
  }

  function build(openapi) {
    components = openapi.components.schemas;
    const request = components[SCHEMA];
    const fields = $("fields");
    const main = document.createElement("fieldset");
    main.appendChild(Object.assign(document.createElement("legend"), { textContent: "Deployment and workload" }));
    const nested = [];
    // The fields a planner sets first, then the rest in the document's order.
    const first = ["model_id", "device_id", "input_len", "output_len", "concurrency", "engine", "tensor_parallel",
      "expert_parallel", "attention_data_parallel", "calibration"];
    const ordered = [...first.filter((n) => n in request.properties),
      ...Object.keys(request.properties).filter((n) => !first.includes(n))];
    ordered.map((name) => [name, request.properties[name]]).forEach(([name, raw]) => {
      const schema = resolve(raw);
      if (NESTED.includes(name) && schema.properties) nested.push([name, schema]);
      else if (scalar(schema)) main.appendChild(input(name, schema, name));
    });
    fields.appendChild(main);
    nested.forEach(([name, schema]) => {
      const set = document.createElement("fieldset");
      set.appendChild(Object.assign(document.createElement("legend"), { textContent: name }));
      Object.entries(schema.properties).forEach(([child, raw]) => {
        const sub = resolve(raw);
        if (scalar(sub)) set.appendChild(input(name + "." + child, sub, name + "." + child));
      });
      fields.appendChild(set);
    });
  }

  function fill() {
    const query = new URLSearchParams(window.location.search);
    const given = query.toString() ? Object.fromEntries(query) : DEFAULTS;
    document.querySelectorAll("#fields [name]").forEach((field) => {
      if (given[field.name] !== undefined) field.value = String(given[field.name]);
    });
  }

  function body() {
    const out = {};
    const state = new URLSearchParams();
    document.querySelectorAll("#fields [name]").forEach((field) => {
      if (field.value === "") return;
      state.set(field.name, field.value);
      const type = field.dataset.type;
      const value = type === "integer" ? parseInt(field.value, 10) : type === "number" ? parseFloat(field.value)
        : type === "boolean" ? field.value === "true" : field.value;
      const [head, tail] = field.name.split(".");
      if (tail) (out[head] = out[head] || {})[tail] = value;
      else out[head] = value;
    });
    return [out, state];
  }

  function seconds(value) {
    if (value === null || value === undefined) return "–";
    if (Math.abs(value) >= 1) return value.toPrecision(3) + " s";
    if (Math.abs(value) >= 1e-3) return (value * 1e3).toPrecision(3) + " ms";
    return (value * 1e6).toPrecision(3) + " µs";
  }
  const rate = (value) => (value === null || value === undefined ? "–" : Number(value.toPrecision(4)).toLocaleString("en-US"));
  const FIGURES = [["TTFT", "ttft_s", seconds], ["TPOT", "tpot_s", seconds], ["ITL", "itl_s", seconds],
    ["end-to-end (mean request)", "e2e_latency_s", seconds], ["requests/s", "requests_per_s", rate],
    ["output tokens/s per device", "output_tokens_per_s_per_device", rate], ["tokens/s per user", "tokens_per_s_per_user", rate]];

  function row(cells, header) {
    const tr = document.createElement("tr");
    cells.forEach((text, i) => {
      const cell = document.createElement(i === 0 && header ? "th" : "td");
      if (i === 0 && header) cell.scope = "row";
      cell.textContent = text;
      tr.appendChild(cell);
    });
    return tr;
  }

  function chart(percentiles) {
    // Bars of p50, p90, p99 for TTFT and TPOT, each figure on its own scale (its p99 the full width).
    const groups = [["TTFT", percentiles.ttft_s], ["TPOT", percentiles.tpot_s]];
    const width = 560, bar = 16, gap = 6, label = 70;
    let y = 10, parts = [];
    groups.forEach(([name, p]) => {
      parts.push(`<text x="0" y="${y + 30}" font-size="13">${name}</text>`);
      ["p50", "p90", "p99"].forEach((q) => {
        const w = Math.max(1, (width - label - 120) * p[q] / p.p99);
        parts.push(`<rect x="${label}" y="${y}" width="${w.toFixed(1)}" height="${bar}" fill="#1f77b4" data-quantile="${q}" data-figure="${name}"><title>${name} ${q}: ${seconds(p[q])}</title></rect>`);
        parts.push(`<text x="${label + w + 6}" y="${y + 12}" font-size="12">${q} ${seconds(p[q])}</text>`);
        y += bar + gap;
      });
      y += 12;
    });
    $("chart").innerHTML = `<svg viewBox="0 0 ${width} ${y}" xmlns="http://www.w3.org/2000/svg">${parts.join("")}</svg>`;
  }

  function clear() {
    ["figures", "percentiles", "tails", "launch"].forEach((id) => { $(id).hidden = true; });
    $("figures").tBodies[0].replaceChildren();
    $("percentiles").tBodies[0].replaceChildren();
    $("chart").replaceChildren();
    $("basis").textContent = "";
  }

  async function analyse(event) {
    if (event) event.preventDefault();
    const [request, state] = body();
    window.history.replaceState(null, "", "?" + state.toString());
    clear();
    $("error").hidden = true;
    $("status").textContent = "Analysing…";
    const response = await fetch(api("/v1/analyze/serving"), {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(request) });
    const answer = await response.json();
    if (!response.ok) {
      const where = answer.fields && answer.fields.length ? " (" + answer.fields.map((f) => f.loc + ": " + f.msg).join("; ") + ")" : "";
      $("error").textContent = (answer.detail || response.statusText) + where;
      $("error").hidden = false;
      $("status").textContent = "The service refused the request.";
      return;
    }
    const bound = answer.bound, expected = answer.expected;
    const tbody = $("figures").tBodies[0];
    FIGURES.forEach(([name, key, format]) => {
      tbody.appendChild(row([name, format(bound[key]), expected ? format(expected[key]) : "–"], true));
    });
    tbody.appendChild(row(["fits in memory", bound.fits ? "yes" : "DOES NOT FIT", ""], true));
    $("figures").hidden = false;
    const simulation = expected && expected.simulation;
    $("basis").textContent = expected
      ? `expected: basis ${expected.basis}${expected.calibration.extrapolated ? ", extrapolated" : ""}; ` +
        (simulation ? `${simulation.scheduler.engine} scheduler simulated (${simulation.requests} requests, limited by ` +
          `${simulation.limited_by}): ${simulation.basis}` : expected.calibration.basis)
      : "expected: none — " + (answer.assumptions.find((a) => a.startsWith("expected")) || "");
    if (expected && expected.percentiles) {
      const p = expected.percentiles, pt = $("percentiles").tBodies[0];
      [["TTFT", p.ttft_s], ["TPOT", p.tpot_s], ["end-to-end", p.e2e_s]].forEach(([name, q]) =>
        pt.appendChild(row([name, seconds(q.p50), seconds(q.p90), seconds(q.p99)], true)));
      $("percentiles").hidden = false;
      chart(p);
      $("tails").hidden = false;
    }
    if (answer.launch && answer.launch.command) {
      $("launch-command").textContent = answer.launch.command + Object.entries(answer.launch.files)
        .map(([n, c]) => "\n\n# " + n + "\n" + c).join("");
      $("launch-benchmark").textContent = answer.launch.benchmark;
      $("launch").hidden = false;
    }
    $("status").textContent = `${answer.model} on ${answer.device_id}: bound and expected below.`;
  }

  async function start() {
    const openapi = await (await fetch(api("/openapi.json"))).json();
    build(openapi);
    fill();
    $("inputs").addEventListener("submit", analyse);
    await analyse();
  }

  start().catch((error) => { $("error").textContent = String(error); $("error").hidden = false; });
})();
