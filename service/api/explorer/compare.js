"use strict";
// The comparison page: POST /v1/analyze/compare with endpoint "serving": the devices to compare and the serving
// request each gets, both as the OpenAPI document describes them; the ranking as the API answers it, drawn as bars of
// the ranked time relative to the first device's.
(() => {
  const form = window.explorerForm, $ = form.$, api = form.api;
  const NESTED = ["dtypes", "speculative", "scheduler", "workload"];
  const FIRST = ["model_id", "input_len", "output_len", "concurrency", "engine", "tensor_parallel", "expert_parallel",
    "attention_data_parallel", "calibration"];
  const DEFAULTS = { device_ids: "nvidia-b200,nvidia-h200-sxm,amd-mi300x", model_id: "deepseek-v3", input_len: 1024,
    output_len: 1024, concurrency: 64, tensor_parallel: 8, engine: "sglang", "dtypes.scheme": "w8a8-fp8",
    "dtypes.kv_cache": "fp8" };

  // The comparison's body: the devices beside the serving request every device gets.
  const wrap = ({ device_ids, ...request }) => ({ endpoint: "serving", device_ids, request });

  function chart(answer) {
    const width = 620, bar = 18, gap = 8, label = 170;
    const longest = Math.max(...answer.ranking.map((e) => e.relative_time));
    const parts = [];
    answer.ranking.forEach((entry, i) => {
      const y = 8 + i * (bar + gap), w = Math.max(1, (width - label - 90) * entry.relative_time / longest);
      parts.push(`<text x="0" y="${y + 13}" font-size="12">${entry.device_id}</text>`);
      parts.push(`<rect class="device" x="${label}" y="${y}" width="${w.toFixed(1)}" height="${bar}" fill="${i === 0 ? "#ff7f0e" : "#1f77b4"}" data-device="${entry.device_id}"><title>${entry.device_id}: ${entry.relative_time.toFixed(3)} x the first device's TPOT</title></rect>`);
      parts.push(`<text x="${label + w + 6}" y="${y + 13}" font-size="12">${entry.relative_time.toFixed(2)} x</text>`);
    });
    const height = 16 + answer.ranking.length * (bar + gap);
    $("chart").innerHTML = `<svg viewBox="0 0 ${width} ${height}" xmlns="http://www.w3.org/2000/svg">${parts.join("")}</svg>`;
    $("chart-caption").textContent = `Each device's ${answer.ranked_by === "expected" ? "expected" : "bound"} TPOT over ` +
      `the fastest's (${answer.ranking[0].device_id}, marked), as the table ranks them.`;
  }

  function clear() {
    ["ranking", "bars", "left-out"].forEach((id) => { $(id).hidden = true; });
    $("ranking").tBodies[0].replaceChildren();
    $("left-out").replaceChildren();
    $("chart").replaceChildren();
    $("basis").textContent = "";
  }

  function show(answer) {
    const tbody = $("ranking").tBodies[0];
    answer.ranking.forEach((e) => {
      tbody.appendChild(form.row([String(e.rank), e.device_id, form.seconds(e.time_s), form.seconds(e.expected_time_s),
        e.relative_time.toFixed(3), form.number(e.tokens_per_s), e.bound, e.calibration_id || "–"]));
    });
    const left = [...answer.infeasible.map((i) => `${i.device_id}: does not fit (needs ${form.number(i.required_bytes / 1e9)} GB ` +
        `a device of ${form.number(i.usable_bytes / 1e9)} GB usable)`),
      ...answer.errors.map((e) => `${e.device_id}: not analysed (${e.detail})`)];
    left.forEach((text) => $("left-out").appendChild(Object.assign(document.createElement("li"), { textContent: text })));
    $("left-out").hidden = left.length === 0;
    if (answer.ranking.length) {
      $("ranking").hidden = false;
      chart(answer);
      $("bars").hidden = false;
    }
    $("basis").textContent = `ranked by ${answer.ranked_by === "expected" ? "the expected" : "the bound"} figures; ` +
      answer.time_meaning;
    $("status").textContent = `${answer.ranking.length} device(s) ranked, ${left.length} left out.`;
  }

  async function start() {
    const schemas = form.schemas();
    form.build(schemas, "CompareRequest", $("fields"), { first: ["device_ids"], omit: ["endpoint"], legend: "Devices" });
    form.build(schemas, "ServingAnalysisRequest", $("fields"), { first: FIRST, nested: NESTED, omit: ["device_id"],
      legend: "The deployment each device gets" });
    form.fill($("fields"), DEFAULTS);
    const page = { $, fields: $("fields"), path: api("/v1/analyze/compare"), working: "Comparing…", clear, show, wrap };
    $("inputs").addEventListener("submit", (event) => form.submit(page, event));
    await form.submit(page);
  }

  start().catch((error) => { $("error").textContent = String(error); $("error").hidden = false; });
})();
