"""A client generated from the OpenAPI document by openapi-python-client calls the service."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.main import create_app


@pytest.fixture
def generated_client(tmp_path, settings):
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(create_app(settings).openapi()))
    package = tmp_path / "roofline_client"
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run([str(bin_dir / "openapi-python-client"), "generate", "--path", str(spec), "--output-path",
                           str(package), "--meta", "none"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("roofline_client")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "roofline_client" or n.startswith("roofline_client.")]:
            del sys.modules[name]


def test_generated_client_calls_operator_and_model_endpoints(generated_client, live_server):
    client = generated_client.Client(base_url=live_server)
    operator_api = importlib.import_module("roofline_client.api.analysis.analyze_operator")
    model_api = importlib.import_module("roofline_client.api.analysis.analyze_model")
    models = importlib.import_module("roofline_client.models")

    request = models.OperatorAnalysisRequest.from_dict(
        {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096}})
    answer = operator_api.sync(client=client, body=request)
    assert answer.flops == 2 * 4096**3 and answer.bound == "compute"

    request = models.ModelAnalysisRequest.from_dict(
        {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 8, "seq_len": 1024})
    answer = model_api.sync(client=client, body=request)
    assert answer.tpot_s > 0 and answer.totals.time_s == answer.tpot_s
    missing = model_api.sync_detailed(client=client, body=models.ModelAnalysisRequest.from_dict(
        {"device_id": "nope", "model_id": "llama-3.1-8b", "phase": "decode", "seq_len": 8}))
    assert missing.status_code == 404 and missing.parsed.error == "device_not_found"
