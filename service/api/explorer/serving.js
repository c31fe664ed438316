"use strict";
// The serving page: its form is POST /v1/analyze/serving's request as this service's OpenAPI document describes
// it, so a field the API gains appears here without a change to this page; every figure is the API's own answer.
(() => {
  const form = window.explorerForm, $ = form.$, api = form.api;
  const seconds = form.seconds, rate = form.number, row = (cells) => form.row(cells);
  // Nested objects shown as their own fieldset (one level); what a form cannot hold well (an inline config, pools
  // of a disaggregated deployment, lists) stays the API's (the documentation takes them).
  const NESTED = ["dtypes", "speculative", "scheduler", "workload"];
  const FIRST = ["model_id", "device_id", "input_len", "output_len", "concurrency", "engine", "tensor_parallel",
    "expert_parallel", "attention_data_parallel", "calibration"];
  const DEFAULTS = { model_id: "deepseek-v3", device_id: "nvidia-b200", input_len: 1024, output_len: 1024, concurrency: 64,
    tensor_parallel: 8, engine: "sglang", "dtypes.scheme": "w8a8-fp8", "dtypes.kv_cache": "fp8" };

  const FIGURES = [["TTFT", "ttft_s", seconds], ["TPOT", "tpot_s", seconds], ["ITL", "itl_s", seconds],
    ["end-to-end (mean request)", "e2e_latency_s", seconds], ["requests/s", "requests_per_s", rate],
    ["output tokens/s per device", "output_tokens_per_s_per_device", rate], ["tokens/s per user", "tokens_per_s_per_user", rate]];

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

  function show(answer) {
    const bound = answer.bound, expected = answer.expected;
    const tbody = $("figures").tBodies[0];
    FIGURES.forEach(([name, key, format]) => {
      tbody.appendChild(row([name, format(bound[key]), expected ? format(expected[key]) : "–"]));
    });
    tbody.appendChild(row(["fits in memory", bound.fits ? "yes" : "DOES NOT FIT", ""]));
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
        pt.appendChild(row([name, seconds(q.p50), seconds(q.p90), seconds(q.p99)])));
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
    const schemas = form.schemas();
    form.build(schemas, "ServingAnalysisRequest", $("fields"), { first: FIRST, nested: NESTED,
      legend: "Deployment and workload" });
    form.fill($("fields"), DEFAULTS);
    const page = { $, fields: $("fields"), path: api("/v1/analyze/serving"), working: "Analysing…", clear, show };
    $("inputs").addEventListener("submit", (event) => form.submit(page, event));
    await form.submit(page);
  }

  start().catch((error) => { $("error").textContent = String(error); $("error").hidden = false; });
})();
