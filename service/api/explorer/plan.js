"use strict";
// The planning page: POST /v1/plan/serving's request as the OpenAPI document describes it, its ranked table and the
// frontier it searched, drawn from the same figures the table ranks by (the expectation where the plan went by it).
(() => {
  const form = window.explorerForm, $ = form.$, api = form.api;
  const FIRST = ["model_id", "device_ids", "total_devices", "input_len", "output_len", "engine", "top_n", "calibration"];
  const NESTED = ["slo", "dtypes", "speculative"];
  const DEFAULTS = { model_id: "deepseek-v3", device_ids: "nvidia-b200", total_devices: 8, input_len: 1024,
    output_len: 1024, engine: "sglang", top_n: 5, "slo.tpot_s": 0.03, "dtypes.scheme": "w8a8-fp8", "dtypes.kv_cache": "fp8" };

  // The figures a configuration was ranked by: its expectation where the plan judged on expectations, else its bound.
  const judged = (config) => config.expected || config;
  const layout = (c) => `${c.device_id}, TP ${c.tensor_parallel} / EP ${c.expert_parallel} / DP ${c.attention_data_parallel}, ${c.replicas} replica(s), concurrency ${c.concurrency_per_replica}`;

  function chart(answer, request) {
    const slo = request.slo || {};
    const meets = (c) => ["ttft_s", "tpot_s", "e2e_latency_s"].every((k) => slo[k] === undefined || judged(c)[k] <= slo[k]);
    const points = [...answer.pareto.map((c) => ({ c, kind: meets(c) ? "meets the SLOs" : "misses an SLO" })),
      ...answer.configs.map((c, i) => ({ c, kind: i === 0 ? "chosen" : "ranked" }))];
    const x = (c) => judged(c).tokens_per_s_per_user, y = (c) => judged(c).tokens_per_s_per_device;
    const xs = points.map((p) => x(p.c)), ys = points.map((p) => y(p.c));
    const tpot = request.slo && request.slo.tpot_s;
    const xMax = Math.max(...xs, tpot ? 1 / tpot : 0) * 1.1, yMax = Math.max(...ys) * 1.1;
    const W = 640, H = 360, L = 70, B = 40;
    const px = (v) => L + (W - L - 10) * v / xMax, py = (v) => H - B - (H - B - 10) * v / yMax;
    const parts = [`<line x1="${L}" y1="${H - B}" x2="${W - 10}" y2="${H - B}" stroke="#333"/>`,
      `<line x1="${L}" y1="10" x2="${L}" y2="${H - B}" stroke="#333"/>`,
      `<text x="${(W + L) / 2}" y="${H - 8}" font-size="12" text-anchor="middle">tokens/s per user (1 / TPOT)</text>`,
      `<text x="14" y="${(H - B) / 2}" font-size="12" transform="rotate(-90 14 ${(H - B) / 2})" text-anchor="middle">tokens/s per device</text>`,
      `<text x="${L}" y="${H - B + 14}" font-size="11" text-anchor="middle">0</text>`,
      `<text x="${W - 10}" y="${H - B + 14}" font-size="11" text-anchor="end">${form.number(xMax)}</text>`,
      `<text x="${L - 4}" y="14" font-size="11" text-anchor="end">${form.number(yMax)}</text>`];
    if (tpot) {
      parts.push(`<line class="slo" x1="${px(1 / tpot)}" y1="10" x2="${px(1 / tpot)}" y2="${H - B}" stroke="#a50f15" stroke-dasharray="5 4"><title>SLO: TPOT at most ${form.seconds(tpot)}</title></line>`);
    }
    points.forEach(({ c, kind }) => {
      const style = { chosen: 'r="8" fill="#ff7f0e" stroke="#333"', ranked: 'r="5" fill="#1f77b4"',
        "meets the SLOs": 'r="4" fill="#9ecae1"', "misses an SLO": 'r="4" fill="none" stroke="#777"' }[kind];
      parts.push(`<circle class="point ${kind.replace(/ /g, "-")}" cx="${px(x(c)).toFixed(1)}" cy="${py(y(c)).toFixed(1)}" ${style}><title>${layout(c)}: ${form.number(y(c))} tokens/s per device, ${form.number(x(c))} tokens/s per user (${kind})</title></circle>`);
    });
    $("chart").innerHTML = `<svg viewBox="0 0 ${W} ${H}" xmlns="http://www.w3.org/2000/svg">${parts.join("")}</svg>`;
    $("chart-caption").textContent = `${answer.pareto.length} frontier shapes searched (hollow: missing an SLO, pale: ` +
      `meeting them), the ` +
      `ranked configurations (the chosen one larger), the TPOT SLO dashed; on ${answer.slo_basis} figures, as the table.`;
  }

  function clear() {
    $("configs").hidden = true;
    $("frontier").hidden = true;
    $("configs").tBodies[0].replaceChildren();
    $("chart").replaceChildren();
    $("basis").textContent = "";
  }

  function show(answer, request) {
    const tbody = $("configs").tBodies[0];
    answer.configs.forEach((c, i) => {
      const e = judged(c), p = c.expected && c.expected.percentiles;
      tbody.appendChild(form.row([String(i + 1), c.device_id, `${c.tensor_parallel} / ${c.expert_parallel} / ${c.attention_data_parallel}`,
        String(c.replicas), String(c.concurrency_per_replica), form.seconds(e.ttft_s), form.seconds(e.tpot_s),
        p ? form.seconds(p.ttft_s.p99) : "–", form.number(e.tokens_per_s_per_device), form.number(e.tokens_per_s_per_user),
        c.expected ? c.expected.basis : "bound"]));
    });
    $("configs").hidden = false;
    chart(answer, request);
    $("frontier").hidden = false;
    $("basis").textContent = `ranked on ${answer.slo_basis} figures; ${answer.searched.toLocaleString("en-US")} configurations searched`;
    $("status").textContent = `${answer.configs.length} configuration(s) of ${answer.model} meet the SLOs.`;
  }

  async function start() {
    const schemas = form.schemas();
    form.build(schemas, "ServingPlanRequest", $("fields"), { first: FIRST, nested: NESTED, legend: "Candidates and workload" });
    form.fill($("fields"), DEFAULTS);
    const page = { $, fields: $("fields"), path: api("/v1/plan/serving"), working: "Planning…", clear, show };
    $("inputs").addEventListener("submit", (event) => form.submit(page, event));
    await form.submit(page);
  }

  start().catch((error) => { $("error").textContent = String(error); $("error").hidden = false; });
})();
