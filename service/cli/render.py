"""Tables and summaries of the API's JSON answers, for a terminal. Decimal prefixes: k/M/G/T/P = 1e3..1e15."""

from __future__ import annotations

from typing import Any


def si(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    if 0 < abs(value) < 1 and unit == "s":
        for factor, prefix in ((1e-3, "m"), (1e-6, "u"), (1e-9, "n")):
            if abs(value) >= factor:
                return f"{value / factor:.3g} {prefix}s"
    return f"{value:.3g} {unit}".strip()


def number(value: float) -> str:
    """A swept value as it was given: 8, not 8.0."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def table(rows: list[list[Any]], headers: list[str]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows)]

    def line(cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def device_table(devices: list[dict]) -> str:
    def highest(d: dict) -> str:
        dtype = d.get("peak_tensor_dtype")
        return f"{si(d['peak_tensor_flops_per_s'], 'FLOP/s')} {dtype}" if dtype else "-"

    return table(
        [[d["id"], d["name"], si(d["memory_capacity_bytes"], "B"), si(d["hbm_bandwidth_bytes_per_s"], "B/s"),
          si(d.get("bf16_tensor_flops_per_s"), "FLOP/s"), highest(d)] for d in devices],
        ["id", "name", "memory", "HBM bandwidth", "bf16 tensor", "highest tensor (dtype)"]
    ) + "\n(dense peaks; units: k/M/G/T/P = 1e3/1e6/1e9/1e12/1e15)"


def model_list_table(models: list[dict]) -> str:
    return table([[m["id"], m["name"], m["family"], si(m["params_total"]), si(m["params_active"]), m["origin"]]
                  for m in models], ["id", "name", "family", "parameters", "active", "origin"]) + \
        "\n(active: what one text token uses, without the input embedding)"


def operator_table(r: dict) -> str:
    compute, memory = r["compute_roof"], r["memory_roof"]
    return table([
        ["FLOPs", si(r["flops"], "FLOP")], ["bytes", si(r["bytes"]["total"], "B")],
        ["intensity", f"{r['arithmetic_intensity']:.4g} FLOP/B"], ["ridge point", f"{r['ridge_point']:.4g} FLOP/B"],
        ["bound", r["bound"] + (f" ({r['binding_level']})" if r["binding_level"] else "")],
        ["time (bound)", si(r["time_s"], "s")], *expected_rows(r.get("expected")),
        ["attainable", si(r["attainable_flops_per_s"], "FLOP/s")],
        ["MFU", f"{r['mfu']:.3f}" if r["mfu"] is not None else "-"],
        ["compute roof", f"{si(compute['flops_per_s'], 'FLOP/s')} {compute['dtype']} {compute['unit']} ({compute['source']})"],
        ["memory roof", f"{si(memory['bytes_per_s'], 'B/s')} {memory['level']} ({memory['source']})"],
        *achieved_rows(r.get("achieved")),
    ], ["quantity", "value"])


def expected_rows(e: dict | None) -> list[list[str]]:
    """A calibrated expectation beside the bound, with how wrong its fit was on measurements held out."""
    if e is None:
        return []
    return [["time (expected)", f"{si(e['time_s'], 's')} ({e['engine']} fit: off by {e['median_error']:.1%} in the median "
                                f"where measured)"]]


def fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def achieved_rows(a: dict | None) -> list[list[str]]:
    """What a measured run reached, beside the bound: the bound's time over the measured one (at most 1 where the
    bound holds), achieved FLOP/s and bandwidth, and their shares of the nominal peaks (MFU, MBU)."""
    if a is None:
        return []
    rows = [["measured time", si(a["measured_time_s"], "s")], ["roofline / measured", fraction(a["roof_fraction"])],
            ["achieved", si(a["flops_per_s"], "FLOP/s")], ["achieved MFU", fraction(a["mfu"])],
            ["achieved bandwidth", si(a["bandwidth_bytes_per_s"], "B/s")]]
    if "mbu" in a:
        rows.append(["achieved MBU", fraction(a["mbu"])])
    return rows


def model_table(r: dict) -> str:
    rows = [[row["name"], row["group"], row["layers"] * row["count"], si(row["flops"], "FLOP"), si(row["bytes"], "B"),
             row["bound"], si(row["time_s"], "s"), si(row["total_time_s"], "s")] for row in r["rows"]]
    t = r["totals"]
    summary = [f"total {si(t['time_s'], 's')}, {si(t['flops'], 'FLOP')}, {si(t['bytes'], 'B')}; "
               f"memory-bound share {t['memory_bound_time_share']:.0%}; MFU {r['mfu'] or 0:.3f}"]
    if r["ttft_s"] is not None:
        summary.append(f"TTFT {si(r['ttft_s'], 's')}, {r['tokens_per_s']:,.0f} prompt tokens/s")
    if r["tpot_s"] is not None:
        summary.append(f"TPOT {si(r['tpot_s'], 's')}, {r['tokens_per_s']:,.0f} tokens/s over the batch")
    if r["e2e_latency_s"] is not None:
        summary.append(f"end-to-end latency {si(r['e2e_latency_s'], 's')}")
    if r.get("achieved"):
        summary.append("measured: " + ", ".join(f"{name} {value}" for name, value in achieved_rows(r["achieved"])))
    expected = r.get("expected")
    if expected:
        summary.append(f"expected {si(expected['time_s'], 's')} ({expected['engine']} kernels: the matmuls, "
                       f"{expected['calibrated_share']:.0%} of the bound's time, as calibrated; the rest at their bounds)")
    advice = next((note[note.index("would fit:"):].rstrip(")") for note in r["assumptions"] if "would fit:" in note), None)
    summary += [memory_line(r["memory"]) + (f"; {advice}" if advice and not r["memory"]["fits"] else ""),
                f"roofs: compute {r['compute_roof_source']}, memory {r['memory_roof_source']}"]
    return table(rows, ["row", "layers", "instances", "FLOPs", "bytes", "bound", "time", "total"]) + "\n" + "\n".join(summary)


def held(m: dict) -> str:
    """What a step needs against what a device offers, from a memory answer."""
    return f"{si(m['required_bytes'], 'B')} of {si(m['usable_bytes'], 'B')} usable per device"


def shortfall(m: dict) -> str:
    """Why a step does not fit, from a memory answer."""
    return f"needs {held(m)} (short by {si(m['shortfall_bytes'], 'B')})"


def memory_line(m: dict) -> str:
    """Whether a step fits, in words a reader cannot miss: the times of a step that does not are a what-if."""
    if m["fits"]:
        return f"memory: {held(m)}, fits"
    return f"memory: DOES NOT FIT, {shortfall(m)}: the times above are a what-if, not a deployment"


def serving_table(r: dict) -> str:
    b = r["bound"]
    rows = [[p["role"], p["workers"], p["tensor_parallel"], p["expert_parallel"], p["attention_data_parallel"],
             p["devices"], p["batch_per_group"], ("fits" if p["memory"]["fits"] else "DOES NOT FIT") + ", " + held(p["memory"])]
            for p in b["pools"]]
    lines = [f"bound (times from below, rates from above) on {b['devices']} device(s), {b['running_requests']} request(s) "
             f"decoding at once:",
             f"TTFT {si(b['ttft_s'], 's')}, TPOT {si(b['tpot_s'], 's')}, ITL {si(b['itl_s'], 's')}, end-to-end "
             f"{si(b['e2e_latency_s'], 's')} (of which waiting {si(b['waiting_s'], 's')})",
             f"{b['requests_per_s']:,.3g} requests/s, {b['output_tokens_per_s_per_device']:,.0f} output tokens/s per device, "
             f"{b['tokens_per_s_per_device']:,.0f} tokens/s per device, {b['tokens_per_s_per_user']:,.1f} tokens/s per "
             f"user; limited by {b['limited_by']}"]
    if not b["fits"]:
        lines.append("memory: DOES NOT FIT in a pool above: the figures are a what-if, not a deployment")
    e = r["expected"]
    lines.append("expected: " + ("none (no serving calibration or kernel tables for this device and engine)"
                                 if e is None else
                                 f"TTFT {si(e['ttft_s'], 's')}, TPOT {si(e['tpot_s'], 's')}, "
                                 f"{e['output_tokens_per_s_per_device']:,.0f} output tokens/s per device (basis "
                                 f"{e['basis']}{expected_source(e)}; calibration {e['calibration']['id']}: "
                                 f"{e['calibration']['fitted_on']} runs, TPOT off by "
                                 f"{e['calibration']['tpot_median_error']:.0%} in the median where checked"
                                 + (", extrapolated" if e["calibration"]["extrapolated"] else "") + ")"))
    if e is not None and e.get("percentiles"):
        lines.append(percentile_line(e))
    lines.append(f"roofs: compute {r['compute_roof_source']}, memory {r['memory_roof_source']}")
    return table(rows, ["pool", "workers", "tp", "ep", "dp", "devices", "batch/group", "memory per device"]) + "\n" + \
        "\n".join(lines)


def launch_text(r: dict) -> str:
    """The commands that start the deployment and benchmark it, its files, and what they leave to the reader."""
    launch = r.get("launch")
    if launch is None:
        return "no launch commands: give --engine sglang, vllm or trt"
    parts = [launch["command"] or "(no command: see the notes)"]
    parts += [f"--- {name}\n{content.rstrip()}" for name, content in launch["files"].items()]
    if launch["benchmark"]:
        parts.append("# benchmark (InferenceX's client)\n" + launch["benchmark"])
    parts += [f"# {note}" for note in launch["notes"]]
    return "\n".join(parts)


def percentile_line(e: dict) -> str:
    """The simulated percentiles and the scheduler that made them, on one line."""
    p, sim = e["percentiles"], e["simulation"]
    spread = ", ".join(f"{name} {si(p[key]['p50'], 's')} / {si(p[key]['p90'], 's')} / {si(p[key]['p99'], 's')}"
                       for name, key in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("end-to-end", "e2e_s")))
    scheduler = sim["scheduler"]
    return (f"simulated p50 / p90 / p99: {spread}; {scheduler['engine']} scheduler ({scheduler['batching']}, "
            f"{scheduler['step_tokens']:,} tokens a step, {scheduler['max_running']:,} running at most, a look every "
            f"{scheduler['recv_interval']} step(s)), {sim['requests']:,} requests, limited by {sim['limited_by']}; "
            f"calibration {sim['calibration'].split(':  ')[0].split(': ')[0]}")


def expected_source(e: dict) -> str:
    """Where a kernel-based expectation's tables came from, for the line that reports it."""
    kernels = e.get("kernels")
    if not kernels:
        return ""
    return (f": {kernels['stand_in_for']}'s kernel tables standing in" if kernels["stand_in_for"]
            else ": this device's kernel tables")


def kv_table(r: dict) -> str:
    capped = r.get("kv_bytes_capped_per_request") or 0.0
    return table([
        ["usable memory", si(r["usable_bytes"], "B")], ["weights", si(r["weights_bytes"], "B")],
        ["activations held back", si(r.get("activation_reserve_bytes") or 0.0, "B")],
        ["KV per token", si(r["kv_bytes_per_token"], "B")],
        *([["KV of window/chunk layers", si(capped, "B") + " per request at most"]] if capped else []),
        *([["recurrent state", si(r["state_bytes_per_request"], "B") + " per request, any length"]]
          if r.get("state_bytes_per_request") else []),
        ["KV per request", si(r["kv_bytes_per_request"], "B")],
        ["available for KV", si(r["available_kv_bytes"], "B")], ["fits", str(r["fits"])],
        ["max concurrent requests", str(r["max_concurrent_requests"])],
        ["max context (1 request)", str(r["max_context_len"])],
    ], ["quantity", "per device"])


def optional_seconds(value: float | None) -> str:
    return "-" if value is None else si(value, "s")


def sweep_table(rows: list[dict], parameter: str) -> str:
    fits = {"True": "yes", "False": "NO (what-if)", "None": "-"}
    lines = table([[number(r["value"]), si(r["time_s"], "s"), optional_seconds(r.get("expected_time_s")), r["bound"],
                    f"{r['tokens_per_s'] or 0:,.0f}", fits[str(r.get("fits"))]] for r in rows],
                  [parameter, "bound time", "expected", "bound", "tokens/s", "fits"])
    out = sum(1 for r in rows if r.get("fits") is False)
    return lines + (f"\n{out} of {len(rows)} values do not fit in memory: their rows are what-ifs" if out else "")


def compare_table(r: dict) -> str:
    rows = [[e["rank"], e["device_id"], si(e["time_s"], "s"), optional_seconds(e.get("expected_time_s")), e["bound"],
             f"{e['mfu']:.3f}" if e.get("mfu") is not None else "-",
             f"{e['tokens_per_s']:,.0f}" if e.get("tokens_per_s") else "-", f"{e['relative_time']:.2f}x"]
            for e in r["ranking"]]
    errors = "".join(f"\ncannot run on {e['device_id']}: {e['detail']}" for e in r.get("errors", []))
    infeasible = "".join(f"\ndoes not fit on {e['device_id']}: {shortfall(e)}" for e in r.get("infeasible", []))
    basis = (f"\nranked by {r['ranked_by']}: {r['time_meaning']}"
             + ("" if r["ranked_by"] == "expected" else " (a lower bound: not every device has a calibration)"))
    return (table(rows, ["rank", "device", "bound time", "expected", "bound", "MFU", "tokens/s", "vs fastest"]) + basis
            + infeasible + errors)


def fusion_summary(r: dict) -> str:
    unfused, fused, saved = r["unfused"], r["fused"], r["savings"]
    return "\n".join([
        f"unfused: {si(unfused['bytes'], 'B')}, {si(unfused['time_s'], 's')}, {unfused['launches']} launches",
        f"fused:   {si(fused['bytes'], 'B')}, {si(fused['time_s'], 's')}, {fused['launches']} launches",
        f"saves {si(saved['bytes'], 'B')} ({saved['fraction']:.0%}), {si(saved['time_s'], 's')} at the roofs, "
        f"{saved['launches']} launches ({si(saved['launch_time_s'], 's')})",
    ])


def plan_table(r: dict) -> str:
    def replicas(c: dict) -> str:
        split = c.get("prefill_replicas")
        return f"{c['replicas']} ({split}P+{c['decode_replicas']}D)" if split else str(c["replicas"])

    def cost(c: dict) -> str:
        price = c.get("cost_per_million_output_tokens")
        return f"{price:,.3g}" if price is not None else "-"

    def judged(c: dict) -> dict:
        """The figures the plan went by: the expectation where it has one, else the bound."""
        return c["expected"] or c

    def tails(c: dict) -> list[str]:
        p = (c["expected"] or {}).get("percentiles")
        return [si(p["ttft_s"]["p99"], "s"), si(p["tpot_s"]["p99"], "s")] if p else ["-", "-"]

    expected = r["slo_basis"] == "expected"
    simulated = any((c["expected"] or {}).get("percentiles") for c in r["configs"])
    rows = [[c["mode"], c["device_id"], c["tensor_parallel"], c["expert_parallel"], c["attention_data_parallel"],
             replicas(c), c["devices_used"], c["concurrency_per_replica"], si(judged(c)["ttft_s"], "s"),
             si(judged(c)["tpot_s"], "s"), *(tails(c) if simulated else []),
             *([si(c["tpot_s"], "s")] if expected else []), f"{judged(c)['requests_per_s']:,.3g}",
             f"{judged(c)['tokens_per_s']:,.0f}", f"{judged(c)['tokens_per_s_per_device']:,.0f}", cost(c),
             c.get("limited_by") or "-",
             *([c["expected"]["basis"], "yes" if c["expected"]["extrapolated"] else "no"] if expected else [])]
            for c in r["configs"]]
    basis = ("expected figures (a serving calibration's, or the device's kernel tables with the engine's carried-over "
             "costs), the TPOT bound beside them" if expected else "bounds (lower bounds on times, upper bounds on rates)")
    return (table(rows, ["mode", "device", "TP", "EP", "DP", "replicas", "devices", "concurrency", "TTFT", "TPOT",
                         *(["TTFT p99", "TPOT p99"] if simulated else []), *(["TPOT bound"] if expected else []),
                         "requests/s", "tokens/s", "per device", "cost/1M tok", "limited by",
                         *(["basis", "extrapolated"] if expected else [])])
            + f"\nSLOs and ranking judged on {basis}; {r['searched']:,} configurations searched"
            + ("; p99: the scheduling simulation's (the engine's preset scheduler)" if simulated else "")
            + ("; basis: runs (the device's own serving runs) or kernels (its kernel tables); extrapolated: the "
               "calibration was not fitted at that shape, concurrency or layout" if expected else "")
            + "".join(f"\nskipped: {s}" for s in r["skipped"]))


def training_table(r: dict) -> str:
    by_phase: dict[str, float] = {}
    for row in r["rows"]:
        by_phase[row["phase"]] = by_phase.get(row["phase"], 0.0) + row["total_time_s"]
    phases = [[phase, si(seconds, "s")] for phase, seconds in by_phase.items()]
    links = [[c["name"], c["tier"], c["group_size"], si(c["bytes_per_device"], "B"), c["count"], si(c["total_time_s"], "s")]
             for c in r["communication"]]
    m, t = r["memory"], r["time"]
    memory = (f"memory per device: parameters {si(m['parameters_bytes'], 'B')}, gradients {si(m['gradients_bytes'], 'B')}, "
              f"optimizer {si(m['optimizer_bytes'], 'B')}, activations {si(m['activations_bytes'], 'B')}: "
              f"{si(m['required_bytes'], 'B')} of {si(m['usable_bytes'], 'B')} ({'fits' if m['fits'] else 'DOES NOT FIT'})")
    schedule = r["pipeline_schedule"] + (f" v={r['virtual_pipeline_stages']}" if r["virtual_pipeline_stages"] > 1 else "")
    peft = r.get("peft")
    trains = (f"trains {r['trainable_parameters']:,.0f} adapter parameters ({peft['method']} rank {peft['rank']} on "
              f"{', '.join(peft['adapted_modules'])}; base in {peft['stored_base']}), "
              if peft else f"trains all {r['trainable_parameters']:,.0f} parameters, ")
    expected = r.get("expected")
    tables = (f"the {expected['stand_in_for']} kernel tables standing in" if expected and expected["stand_in_for"]
              else "its kernel tables")
    expectation = (f"expected from {tables}: "
                   f"step {si(expected['step_time_s'], 's')}, {expected['tokens_per_s']:,.0f} tokens/s, MFU "
                   f"{expected['mfu'] or 0:.3f} (checked on "
                   + ", ".join(f"{c['submitter']} {c['error']:+.0%}" for c in expected["checked"]) + ")"
                   if expected else "expected: none (no kernel tables for this device): the bound alone")
    summary = (f"{trains}{r['devices']} devices ({r['data_parallel']} DP x {r['tensor_parallel']} TP"
               f"{' with SP' if r['sequence_parallel'] else ''} x {r['pipeline_parallel']} PP {schedule}"
               f"{' x ' + str(r['context_parallel']) + ' CP' if r['context_parallel'] > 1 else ''}"
               f"{', EP ' + str(r['expert_parallel']) if r['expert_parallel'] > 1 else ''}, "
               f"ZeRO {r['zero_stage']}, recompute {r['recompute']}): step {si(r['step_time_s'], 's')} "
               f"(bubble {t['bubble_fraction']:.1%}, exposed DP sync {si(t['data_parallel_exposed_s'], 's')}), "
               f"{r['tokens_per_s']:,.0f} tokens/s, MFU {r['mfu'] or 0:.3f}, HFU {r['hfu'] or 0:.3f}")
    return "\n".join([table(phases, ["phase (one micro-batch, per device)", "time"]),
                      table(links, ["collective", "tier", "devices", "bytes/device", "count", "time"]) if links else
                      "no collectives", memory, r["recompute_advice"]["advice"], summary, expectation])


def training_plan_table(r: dict) -> str:
    rows = [[e["basis"], f"{e['mfu']:.3f}", f"{e['days']:,.2f}", f"{e['device_hours']:,.0f}",
             f"{e['cost']:,.0f}" if e["cost"] is not None else "-",
             e["devices_for_deadline"] if e["devices_for_deadline"] is not None else "-"] for e in r["estimates"]]
    return (f"{r['total_flops']:.3g} FLOP to train on {r['total_tokens']:,.0f} tokens "
            f"({si(r['model_flops_per_token'], 'FLOP')} per token) on {r['num_devices']:,} x {r['device_id']}\n"
            + table(rows, ["MFU basis", "MFU", "days", "device-hours", "cost", "devices for deadline"])
            + "\n" + training_memory_line(r["step"]) + (layout_search_table(r["search"]) if r.get("search") else ""))


def layout_search_table(search: dict) -> str:
    def layout(x: dict) -> list:
        schedule = x["pipeline_schedule"] + (f" v={x['virtual_pipeline_stages']}" if x["virtual_pipeline_stages"] > 1
                                             else "")
        return [x["data_parallel"], f"{x['tensor_parallel']}{' +SP' if x['sequence_parallel'] else ''}",
                x["pipeline_parallel"], schedule, x["context_parallel"], x["expert_parallel"], x["recompute"],
                x["gradient_accumulation_steps"], si(x["step_time_s"], "s"), f"{x['mfu'] or 0:.3f}",
                f"{si(x['required_bytes'], 'B')} of {si(x['usable_bytes'], 'B')}" + ("" if x["fits"] else " DOES NOT FIT")]

    rows = [layout(x) for x in search["layouts"]]
    if search["faster_unfitting"]:
        rows.append(layout(search["faster_unfitting"]))
    return (f"\nlayouts: {search['searched']} searched, {search['refused']} the model cannot take; fastest that fit"
            + (" (and the faster one that does not)" if search["faster_unfitting"] else "") + ":\n"
            + table(rows, ["DP", "TP", "PP", "schedule", "CP", "EP", "recompute", "micro-batches", "step", "MFU",
                           "memory per device"])
            + f"\nbinding: {search['binding']}")


def training_memory_line(step: dict) -> str:
    m = step["memory"]
    if m["fits"]:
        return f"memory of the step: {held(m)}, fits; roofs: compute {step['compute_roof_source']}, memory " \
               f"{step['memory_roof_source']}"
    return f"memory of the step: DOES NOT FIT, {shortfall(m)}: this plan is a what-if; {step['recompute_advice']['advice']}"
