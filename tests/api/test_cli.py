"""The roofline command, in-process and against a running service."""

import json
import re
from pathlib import Path

import pytest

from service import cli
from service.runtime.config import get_settings


@pytest.fixture
def local_database(database_url, monkeypatch):
    monkeypatch.setenv("ROOFLINE_DATABASE_URL", database_url)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def run(capsys, *argv):
    cli.main(list(argv))
    return capsys.readouterr()


def test_devices_table_and_json(local_database, capsys):
    out = run(capsys, "devices").out
    assert "nvidia-h100-sxm" in out and "HBM bandwidth" in out
    devices = json.loads(run(capsys, "devices", "--json").out)
    assert any(d["id"] == "nvidia-h100-sxm" for d in devices)


def test_analyze_operator_and_model(local_database, capsys):
    out = run(capsys, "analyze", "operator", "--device", "nvidia-h100-sxm", "--kind", "matmul",
              "--m", "1", "--n", "4096", "--k", "4096").out
    assert "memory (hbm)" in out and "0.9995 FLOP/B" in out
    result = json.loads(run(capsys, "analyze", "operator", "--device", "nvidia-h100-sxm", "--kind", "elementwise",
                            "--field", "op=silu", "--field", "shape=[1024]", "--json").out)
    assert result["flops"] == 4096
    out = run(capsys, "analyze", "model", "--device", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--phase", "decode",
              "--batch-size", "32", "--seq-len", "4096").out
    assert "TPOT" in out and "qkv_proj" in out


def test_a_measured_time_adds_what_was_achieved_beside_the_bound(local_database, capsys):
    # 4096^3 bf16 matmul: 2 * 4096^3 = 137,438,953,472 FLOP and 3 * 4096^2 * 2 B = 100,663,296 B. Its bound on an
    # H100 SXM is 137.44e9 / 989.4e12 = 138.91 us; measured at 200 us it reached 137.44e9 / 200e-6 = 687.2 TFLOP/s,
    # MFU 687.2 / 989.4 = 0.695, 100.66e6 / 200e-6 = 503 GB/s, and the bound is 138.91 / 200 = 0.695 of the time.
    out = run(capsys, "analyze", "operator", "--device", "nvidia-h100-sxm", "--kind", "matmul", "--m", "4096",
              "--n", "4096", "--k", "4096", "--measured-time", "200e-6").out
    assert "measured time        200 us" in out and "roofline / measured  0.695" in out
    # Beside the bound, the H100 bf16 GEMM calibration's expectation: its formula, 3.33 us + 138.91 us / 0.743 =
    # 190.4 us (compute-bound), times what it missed on the nearest fitted shapes (0.97 here): 185 us.
    assert re.search(r"time \(expected\) +185 us \(trtllm fit: off by 2\.8% in the median where measured\)", out)
    assert "achieved             687 TFLOP/s" in out and "achieved MFU         0.695" in out
    assert "achieved bandwidth   503 GB/s" in out
    # A decode step is judged by bandwidth: the table says MBU beside MFU.
    answer = json.loads(run(capsys, "analyze", "model", "--device", "nvidia-h100-sxm", "--model", "llama-3.1-8b",
                            "--phase", "decode", "--batch-size", "32", "--seq-len", "4096", "--measured-time", "0.012",
                            "--json").out)
    achieved = answer["achieved"]
    assert achieved["measured_time_s"] == 0.012
    assert achieved["roof_fraction"] == pytest.approx(answer["totals"]["time_s"] / 0.012)
    out = run(capsys, "analyze", "model", "--device", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--phase",
              "decode", "--batch-size", "32", "--seq-len", "4096", "--measured-time", "0.012").out
    assert f"achieved MBU {achieved['mbu']:.3f}" in out and f"roofline / measured {achieved['roof_fraction']:.3f}" in out
    # The service's own range check reaches the terminal, naming the field.
    with pytest.raises(SystemExit) as stop:
        run(capsys, "analyze", "operator", "--device", "nvidia-h100-sxm", "--kind", "matmul", "--m", "8", "--n", "8",
            "--k", "8", "--measured-time", "0")
    assert "measured_time_s" in str(stop.value)


def test_kv_capacity_and_sweep_progress(local_database, capsys):
    result = json.loads(run(capsys, "kv-capacity", "--device", "nvidia-h100-sxm", "--model", "llama-3.1-70b",
                            "--context-len", "8192", "--tensor-parallel", "4", "--memory-utilization", "0.9", "--json").out)
    assert result["max_concurrent_requests"] == 61  # derived in tests/api/test_models.py::test_kv_capacity
    captured = run(capsys, "sweep", "--device", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--phase", "decode",
                   "--seq-len", "1024", "--parameter", "batch_size", "--start", "1", "--stop", "300", "--json")
    assert len(json.loads(captured.out)) == 300
    assert "256/300 points" in captured.err and "300/300 points" in captured.err


def test_errors_exit_with_the_reason(local_database, capsys):
    with pytest.raises(SystemExit) as stop:
        run(capsys, "analyze", "operator", "--device", "nope", "--kind", "softmax", "--field", "shape=[8]")
    assert "device_not_found" in str(stop.value)


def test_against_a_running_service(live_server, capsys):
    out = run(capsys, "analyze", "model", "--url", live_server, "--device", "nvidia-a100-80gb-sxm",
              "--model", "mistral-7b-v0.1", "--phase", "prefill", "--seq-len", "2048", "--json").out
    assert json.loads(out)["ttft_s"] > 0


def test_db_upgrade(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROOFLINE_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    get_settings.cache_clear()
    try:
        assert "head revision" in run(capsys, "db", "upgrade").out
    finally:
        get_settings.cache_clear()


def test_in_process_runs_keep_the_access_log_off_the_terminal(local_database, capsys, monkeypatch):
    monkeypatch.delenv("ROOFLINE_LOG_LEVEL", raising=False)
    captured = run(capsys, "devices")
    assert "nvidia-h100-sxm" in captured.out
    assert "roofline.access" not in captured.err


def test_sweep_needs_the_context_it_holds_fixed_and_prints_integers_as_given(local_database, capsys):
    with pytest.raises(SystemExit) as stop:
        run(capsys, "sweep", "--device", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--phase", "decode",
            "--parameter", "batch_size", "--start", "1", "--stop", "4")
    assert "--seq-len is required" in str(stop.value)
    out = run(capsys, "sweep", "--device", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--phase", "decode",
              "--parameter", "seq_len", "--start", "1024", "--stop", "3072", "--step", "1024").out
    first_column = [line.split()[0] for line in out.splitlines()[2:]]
    assert first_column == ["1024", "2048", "3072"]


def test_compare_fusion_and_plot_commands(local_database, capsys, tmp_path):
    ranked = json.loads(run(capsys, "compare", "--devices", "nvidia-h100-sxm", "nvidia-a100-80gb-sxm", "--model",
                            "llama-3.1-8b", "--phase", "decode", "--seq-len", "4096", "--json").out)
    # H100 SXM 3.35 TB/s against A100 80GB 2.04 TB/s: the memory-bound decode step ranks the H100 first.
    assert [e["device_id"] for e in ranked["ranking"]] == ["nvidia-h100-sxm", "nvidia-a100-80gb-sxm"]
    assert "vs fastest" in run(capsys, "compare", "--devices", "nvidia-h100-sxm", "--kind", "matmul",
                               "--m", "4096", "--n", "4096", "--k", "4096").out

    # x [1024, 4096] bf16 -> silu -> y: unfused the silu reads x (8 MiB) and writes y (8 MiB); alone in its
    # group the fused kernel moves the same 16,777,216 bytes, so nothing is saved.
    graph = {"device_id": "nvidia-h100-sxm",
             "tensors": {"x": {"shape": [1024, 4096], "dtype": "bf16"}, "y": {"shape": [1024, 4096], "dtype": "bf16"}},
             "ops": [{"name": "act", "kind": "elementwise", "op": "silu", "inputs": ["x"], "outputs": ["y"]}]}
    (tmp_path / "graph.json").write_text(json.dumps(graph))
    fused = json.loads(run(capsys, "fusion", str(tmp_path / "graph.json"), "--json").out)
    assert fused["unfused"]["bytes"] == 2 * 1024 * 4096 * 2
    assert "launches" in run(capsys, "fusion", str(tmp_path / "graph.json")).out

    out = run(capsys, "plot", "--device", "nvidia-h100-sxm", "--output", str(tmp_path / "h100.svg")).out
    assert "wrote" in out and (tmp_path / "h100.svg").read_text().lstrip().startswith("<?xml")


def test_every_option_is_described():
    def walk(parser):
        for action in parser._actions:
            if isinstance(action, cli.argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from walk(sub)
            elif action.dest != "help":
                yield parser.prog, action

    undocumented = [f"{prog} {a.option_strings or a.dest}" for prog, a in walk(cli.parser()) if not a.help]
    assert undocumented == []


def test_plan_serving_command(local_database, capsys):
    out = run(capsys, "plan", "serving", "--devices", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--total-devices",
              "8", "--input-len", "4000", "--output-len", "500", "--ttft", "1", "--tpot", "0.02").out
    assert "configurations searched" in out and "tpot_s" in out
    plan = json.loads(run(capsys, "plan", "serving", "--devices", "nvidia-h100-sxm", "--model", "llama-3.1-8b",
                          "--total-devices", "8", "--input-len", "4000", "--output-len", "500", "--tpot", "0.02",
                          "--json").out)
    assert all(config["tpot_s"] <= 0.02 for config in plan["configs"])


def test_plan_serving_prices_each_device_and_shows_the_devices_used(local_database, capsys):
    argv = ["plan", "serving", "--devices", "nvidia-h200-sxm", "amd-mi300x", "--model", "llama-3.1-8b",
            "--total-devices", "8", "--input-len", "1000", "--output-len", "500", "--top-n", "4",
            "--price-per-device-hour", "nvidia-h200-sxm=3.5", "amd-mi300x=2"]
    assert "devices" in run(capsys, *argv).out.splitlines()[0].split()
    plan = json.loads(run(capsys, *argv, "--json").out)
    # Each configuration at its own device's price: price x devices an hour over the output tokens of that hour.
    for config in plan["configs"]:
        price = {"nvidia-h200-sxm": 3.5, "amd-mi300x": 2.0}[config["device_id"]]
        per_million = price * config["devices_used"] / (config["tokens_per_s"] * 3600) * 1e6
        assert config["cost_per_million_output_tokens"] == pytest.approx(per_million, rel=1e-9)
    with pytest.raises(SystemExit, match="neither a price nor DEVICE=PRICE"):
        run(capsys, *argv[:-2], "h200")


def test_batch_reads_json_lines_and_writes_one_result_per_line(local_database, capsys, tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(item) for item in [
        {"id": "a", "analysis": "operator", "request": {"device_id": "nvidia-h100-sxm",
                                                       "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}},
        {"id": "b", "analysis": "operator", "request": {"device_id": "nope", "operator": {"kind": "softmax", "shape": [8]}}},
    ]) + "\n")
    lines = run(capsys, "batch", str(items)).out.splitlines()
    results = [json.loads(line) for line in lines]
    assert [(r["id"], r["status"]) for r in results] == [("a", 200), ("b", 404)]
    assert results[0]["result"]["flops"] == 2 * 4096 * 4096


def test_train_and_plan_training(local_database, capsys):
    argv = ["--device", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--seq-len", "8192", "--tensor-parallel", "4",
            "--zero-stage", "1", "--gradient-accumulation-steps", "4"]
    out = run(capsys, "train", *argv, "--data-parallel", "16", "--recompute", "full").out
    assert "tensor-parallel all-reduces" in out and "inter_node" in out and "HFU" in out
    step = json.loads(run(capsys, "train", *argv, "--data-parallel", "16", "--json").out)
    assert step["devices"] == 64 and step["hfu"] == step["mfu"]
    plan = json.loads(run(capsys, "plan", "training", *argv, "--num-devices", "64", "--total-tokens", "1e12",
                          "--mfu", "0.4", "--json").out)
    assert plan["step"]["step_time_s"] == step["step_time_s"]  # 64 devices / TP 4 = the same 16 replicas
    assert [e["basis"] for e in plan["estimates"]] == ["roofline", "kernels", "stated"]
    # The H100's kernel tables expect the step slower than its bound: a lower MFU, more days.
    roofline, kernels, _ = plan["estimates"]
    assert kernels["mfu"] == plan["step"]["expected"]["mfu"] < roofline["mfu"] and kernels["days"] > roofline["days"]
    assert "days" in run(capsys, "plan", "training", *argv, "--num-devices", "64", "--total-tokens", "1e12").out


def test_train_a_lora_fine_tuning_step(local_database, capsys):
    argv = ["train", "--device", "amd-mi325x", "--model", "llama-2-70b", "--rope-scaling", "linear:2", "--seq-len",
            "8192", "--data-parallel", "8", "--fp8-recipe", "delayed", "--peft", "lora"]
    out = run(capsys, *argv).out
    # 16 x (16384 + 9216 + 9216 + 16384) adapter parameters a layer (q, k, v, o), 80 layers.
    assert "trains 65,536,000 adapter parameters (lora rank 16 on k_proj, o_proj, q_proj, v_proj; base in bf16)" in out
    assert "adapter gradient all-reduce" in out
    # AMD's recipe recomputes part of the layers: without it the step does not fit in an MI325X's memory.
    assert "DOES NOT FIT" in out and "fits only with recompute 'full'" in out
    step = json.loads(run(capsys, *argv, "--peft", "qlora", "--lora-targets", "all-linear", "--lora-rank", "64",
                          "--fp8-recipe", "none", "--json").out)
    assert step["peft"]["stored_base"] == "nf4" and len(step["peft"]["adapted_modules"]) == 7


def test_plan_training_searches_the_layout(local_database, capsys):
    argv = ["plan", "training", "--device", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--seq-len", "8192",
            "--global-batch-tokens", str(8192 * 64), "--num-devices", "16", "--total-tokens", "1e12", "--search",
            "--top-n", "2"]
    out = run(capsys, *argv).out
    assert "layouts:" in out and "binding:" in out and "micro-batches" in out
    plan = json.loads(run(capsys, *argv, "--json").out)
    best = plan["search"]["layouts"][0]
    assert len(plan["search"]["layouts"]) == 2 and plan["step"]["tensor_parallel"] == best["tensor_parallel"]
    # A layout flag beside --search is refused before anything is asked.
    with pytest.raises(SystemExit) as refused:
        run(capsys, *argv, "--pipeline-parallel", "2")
    assert "--search chooses the layout: leave out --pipeline-parallel" in str(refused.value)


def test_model_from_a_config_file_a_folder_and_the_hugging_face_cache(local_database, capsys, tmp_path, monkeypatch):
    from service.persistence.catalog import model_catalog

    config = next(m["config"] for m in model_catalog() if m["id"] == "gpt-oss-20b")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    args = ("kv-capacity", "--device", "nvidia-h200-sxm", "--context-len", "8192", "--json")
    by_id = json.loads(run(capsys, *args, "--model", "gpt-oss-20b").out)
    by_file = json.loads(run(capsys, *args, "--model", str(tmp_path / "ckpt" / "config.json")).out)
    by_folder = json.loads(run(capsys, *args, "--model", str(tmp_path / "ckpt")).out)
    # The same config three ways: the same answer, but an inline model is named by its family.
    assert by_file == by_folder == {**by_id, "model": "inline gpt_oss"}
    # With no dtypes flag, the checkpoint's own formats (mxfp4 experts); a flag overrides them.
    assert any("the checkpoint's own" in note for note in by_id["assumptions"])
    bf16 = json.loads(run(capsys, *args, "--model", "gpt-oss-20b", "--weights-dtype", "bf16").out)
    assert bf16["weights_bytes"] > 2.5 * by_id["weights_bytes"]

    # A repo id in the local Hugging Face cache is read offline; one that is not there is an error, not a download.
    cache = tmp_path / "hub"
    snapshot = cache / "models--openai--gpt-oss-20b" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))
    (cache / "models--openai--gpt-oss-20b" / "refs").mkdir()
    (cache / "models--openai--gpt-oss-20b" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(cache))
    assert json.loads(run(capsys, *args, "--model", "openai/gpt-oss-20b").out) == by_file
    with pytest.raises(SystemExit, match="not a Hugging Face repo id .org/name. in the local Hugging Face cache"):
        run(capsys, *args, "--model", "openai/not-there")
    # A mistyped path is no repo id either: the same message, not huggingface_hub's HFValidationError traceback.
    for mistyped in ("./models/llama/config.json", "~/checkpoints/x/y", "org/na me"):
        with pytest.raises(SystemExit, match="no such file or folder"):
            run(capsys, *args, "--model", mistyped)


def test_tables_say_when_a_step_does_not_fit(local_database, capsys):
    # Llama-3.1-70B at batch 256 and 4k context on one MI300X: 141 GB of bf16 weights plus 256 x 4,112 tokens (in
    # blocks) x 320 KiB of KV cache and the activations held back = 487 GB, against 0.9 of the 206 GB built (the
    # MI300X publishes no runtime figure) = 186 GB: every table says so.
    out = run(capsys, "analyze", "model", "--device", "amd-mi300x", "--model", "llama-3.1-70b", "--phase", "decode",
              "--batch-size", "256", "--seq-len", "4096").out
    assert "memory: DOES NOT FIT, needs 487 GB of 186 GB usable per device (short by 302 GB)" in out
    # What would: split over 2 devices it still needs 487 / 2 = 244 GB each, over 4 about 122 GB (the weights and
    # the cache divide, the activations about so); fp8 weights halve only the 141 GB (416 GB remain); the batch
    # that fits beside the weights is ~48 sequences less the activations' reserve.
    advice = next(line for line in out.splitlines() if line.startswith("memory: DOES NOT FIT"))
    assert "would fit: tensor_parallel 4 or batch_size " in advice and "fp8" not in advice
    assert "roofs: compute nominal, memory nominal" in out
    out = run(capsys, "sweep", "--device", "amd-mi300x", "--model", "llama-3.1-70b", "--phase", "decode",
              "--seq-len", "4096", "--parameter", "batch_size", "--start", "1", "--stop", "201", "--step", "100").out
    # Beside 141 GB of weights, 206 GB usable leave room for 1.34 GB of cache a sequence about 48 times: batch 1
    # fits, 101 and 201 do not.
    assert "2 of 3 values do not fit in memory: their rows are what-ifs" in out
    assert out.count("NO (what-if)") == 2 and out.count(" yes") == 1
    out = run(capsys, "compare", "--devices", "amd-mi300x", "nvidia-l4", "--model", "llama-3.1-70b", "--phase",
              "decode", "--batch-size", "1", "--seq-len", "4096").out
    assert "does not fit on nvidia-l4: needs" in out and "amd-mi300x" in out.splitlines()[2]
    out = run(capsys, "plan", "training", "--device", "nvidia-a100-80gb-sxm", "--model", "llama-2-7b", "--seq-len",
              "4096", "--num-devices", "1000", "--total-tokens", "2e12").out
    assert "memory of the step: DOES NOT FIT" in out and "this plan is a what-if" in out


def test_models_devices_and_plan_serving_say_what_people_ask(local_database, capsys):
    out = run(capsys, "models").out
    assert "gpt-oss-20b" in out and "3.61 G" in out  # gpt-oss-20b's card: 3.6B active
    out = run(capsys, "devices").out
    # The bf16 peak apart from the highest one, and the dtype of that: an H100's 989 TFLOP/s bf16, 1.98 PFLOP/s fp8.
    line = next(line for line in out.splitlines() if line.startswith("nvidia-h100-sxm "))
    assert "989 TFLOP/s" in line and "1.98 PFLOP/s fp8" in line
    out = run(capsys, "plan", "serving", "--devices", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--total-devices",
              "8", "--input-len", "1000", "--output-len", "200", "--price-per-device-hour", "2").out
    header = out.splitlines()[0]
    assert "requests/s" in header and "cost/1M tok" in header
    first = out.splitlines()[2]
    assert first.split()[-2] != "-"  # a cost per million output tokens, priced


def test_large_counts_are_read_as_people_write_them(local_database, capsys):
    # 16e6 tokens a step is read as 16,000,000: the service then says it is no whole multiple of the 524,288 tokens
    # one accumulation step of 64 replicas x 8,192 holds (the flag itself is no longer refused).
    with pytest.raises(SystemExit) as stop:
        run(capsys, "train", "--device", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--seq-len", "8192",
            "--data-parallel", "64", "--global-batch-tokens", "16e6")
    assert "16,000,000 is not a whole multiple" in str(stop.value)
    out = run(capsys, "train", "--device", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--seq-len", "8192",
              "--data-parallel", "64", "--global-batch-tokens", "16.777216e6").out
    assert "64 DP" in out


def test_a_modelopt_checkpoint_folder_carries_its_quantisation_record(local_database, capsys, tmp_path):
    # NVIDIA's GLM-5 NVFP4 checkpoint states its formats in hf_quant_config.json, not in config.json: read from the
    # folder, the model is NVFP4 with its attention left in bf16 (exclude_modules); its config alone reads as bf16.
    data = Path(__file__).resolve().parents[1] / "data" / "aiconfigurator_model_configs"
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text((data / "nvidia--GLM-5-NVFP4.json").read_text())
    args = ("kv-capacity", "--device", "nvidia-b200", "--context-len", "8192", "--tensor-parallel", "8", "--json")
    alone = json.loads(run(capsys, *args, "--model", str(tmp_path / "ckpt" / "config.json")).out)
    (tmp_path / "ckpt" / "hf_quant_config.json").write_text((data / "hf_quant_config" / "nvidia--GLM-5-NVFP4.json")
                                                            .read_text())
    folder = json.loads(run(capsys, *args, "--model", str(tmp_path / "ckpt")).out)
    notes = " ".join(folder["assumptions"])
    assert "modelopt: NVFP4" in notes and "left in 16 bits by its lists: attention" in notes
    assert folder["weights_bytes"] < 0.35 * alone["weights_bytes"]


def test_a_run_that_scales_rope_from_the_command_line(local_database, capsys):
    # Llama 2 70B (4,096 positions) trained at 8,192 tokens: refused, then answered with --rope-scaling linear:2.
    argv = ("train", "--device", "amd-mi300x", "--model", "llama-2-70b", "--seq-len", "8192", "--tensor-parallel", "8",
            "--sequence-parallel", "--json")
    with pytest.raises(SystemExit, match="max_position_embeddings"):
        run(capsys, *argv)
    answer = json.loads(run(capsys, *argv, "--rope-scaling", "linear:2").out)
    assert any("8,192 = 4,096 x 2, the request's rope_scaling (linear)" in note for note in answer["assumptions"])
    with pytest.raises(SystemExit, match="TYPE:FACTOR"):
        run(capsys, *argv, "--rope-scaling", "linear")


def test_compare_serving_ranks_deployments_as_the_api_does(local_database, capsys):
    """--serving compares one serving deployment on each device through POST /v1/analyze/compare: the same ranking
    the API gives for the same body; without the workload it says what it needs."""
    args = ["compare", "--devices", "nvidia-b200", "nvidia-h200-sxm", "--model", "deepseek-v3", "--scheme", "w8a8-fp8",
            "--kv-dtype", "fp8", "--serving", "--input-len", "1024", "--output-len", "1024", "--concurrency", "64",
            "--tensor-parallel", "8", "--engine", "sglang"]
    ranked = json.loads(run(capsys, *args, "--json").out)
    assert ranked["time_meaning"].startswith("TPOT")
    assert [e["device_id"] for e in ranked["ranking"]][0] == "nvidia-b200"
    assert all(e["expected_time_s"] >= e["time_s"] for e in ranked["ranking"])
    assert "vs fastest" in run(capsys, *args).out
    with pytest.raises(SystemExit) as stop:
        run(capsys, "compare", "--devices", "nvidia-b200", "--model", "deepseek-v3", "--serving")
    assert "--input-len" in str(stop.value)
