"""The explorer in headless Chromium with the network closed: it loads from the service's own assets, draws
the chart and the table, and follows a batch typed at the keyboard."""

import json
import os
import re
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

from schemas.models import SCHEMES
from tests.api.test_browser import (  # noqa: F401  (skips without Chromium)
    CHROMEDRIVER,
    CHROMIUM,
    browser,
    requested_urls,
)
from tests.conftest import record_artifact

pytestmark = pytest.mark.dialect_free  # the page reads the API, not the dialect: the SQLite run covers it
ARTIFACTS = Path(os.environ.get("ROOFLINE_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))


def client_answer(server: str, scheme: str, output_len: int | None = None) -> dict:
    """The explorer's own model request (batch 8, context 4096, H100 SXM), asked of the API directly."""
    body = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 8,
            "seq_len": 4096, "tensor_parallel": 1, "roofs": "effective", "dtypes": {"scheme": scheme}}
    if output_len is not None:
        body["output_len"] = output_len
    return httpx.post(f"{server}/v1/analyze/model", json=body, timeout=30).json()


def table_text(driver) -> str:
    return driver.find_element(By.CSS_SELECTOR, "#rows tbody").text


def test_explorer_follows_the_inputs_offline(browser, live_server):  # noqa: F811
    wait = WebDriverWait(browser, 90)
    browser.get(f"{live_server}/explore")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart svg") and table_text(d))
    assert "Roofline explorer" in browser.title
    first_table, first_chart = table_text(browser), browser.find_element(By.ID, "chart").get_attribute("innerHTML")
    assert "qkv_proj" in first_table and "fits" in browser.find_element(By.ID, "summary").text
    assert "nominal" in browser.find_element(By.ID, "device-roofs").text

    # Keyboard only: focus the batch field, replace 32 with 256, leave it with Tab.
    batch = browser.find_element(By.ID, "batch")
    batch.send_keys(Keys.CONTROL, "a")
    batch.send_keys("256", Keys.TAB)
    wait.until(lambda d: table_text(d) != first_table)
    assert browser.find_element(By.ID, "chart").get_attribute("innerHTML") != first_chart
    assert "batch 256" in browser.find_element(By.ID, "status").text
    # The focus moved on to the next field, as Tab should.
    assert browser.switch_to.active_element.get_attribute("id") == "context"

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "explorer.png"
    browser.set_window_size(1200, 1600)
    browser.save_screenshot(str(shot))
    record_artifact(shot)

    # A value the service refuses is shown as its error, named, not as a broken page.
    batch.send_keys(Keys.CONTROL, "a")
    batch.send_keys("0", Keys.TAB)
    wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
    assert "Batch" in browser.find_element(By.ID, "error").text
    # The figures of batch 256 are gone with it: under an error they would read as its answer.
    assert browser.find_elements(By.CSS_SELECTOR, "#chart svg") == [] and table_text(browser) == ""
    assert browser.find_element(By.ID, "summary").text == ""
    # An accepted value draws them again.
    batch.send_keys(Keys.CONTROL, "a")
    batch.send_keys("8", Keys.TAB)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart svg") and table_text(d))
    assert not browser.find_element(By.ID, "error").is_displayed() and "batch 8" in browser.find_element(By.ID, "status").text

    # A deployment scheme and an output length reach the analysis: fp8 weights halve Llama-3.1-8B's 16.06 GB of bf16
    # weights (8.03e9 parameters x 2 bytes) to 8.03 GB, and 500 output tokens add the end-to-end latency.
    summary = browser.find_element(By.ID, "summary").text
    Select(browser.find_element(By.ID, "scheme")).select_by_value("w8a8-fp8")
    wait.until(lambda d: d.find_element(By.ID, "summary").text != summary)
    fp8 = client_answer(live_server, scheme="w8a8-fp8")
    assert f"{fp8['memory']['required_bytes'] / 1e9:.3g} GB" in browser.find_element(By.ID, "summary").text
    output = browser.find_element(By.ID, "output")
    output.send_keys("500", Keys.TAB)
    wait.until(lambda d: "end-to-end latency" in d.find_element(By.ID, "summary").text)
    latency = client_answer(live_server, scheme="w8a8-fp8", output_len=500)["e2e_latency_s"]
    assert f"{latency:.3g} s" in browser.find_element(By.ID, "summary").text

    requested = requested_urls(browser)
    assert any(url.endswith("/explore/assets/explore.js") for url in requested)
    assert [url for url in requested if not url.startswith(live_server)] == []


def test_explorer_is_linked_from_the_docs(client):
    assert "(/explore)" in client.get("/openapi.json").json()["info"]["description"]
    page = client.get("/explore")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert client.get("/explore/assets/explore.js").status_code == 200
    assert client.get("/explore/assets/secrets.txt").status_code == 404
    # The page's scheme choices are the API's (schemas.models.SCHEMES), and the empty one: the checkpoint's own.
    offered = re.findall(r'<option value="([^"]*)"', page.text.split('id="scheme"')[1].split("</select>")[0])
    assert offered == ["", *SCHEMES]


def test_explorer_takes_memory_utilisation_and_a_price(browser, live_server):  # noqa: F811
    wait = WebDriverWait(browser, 90)
    browser.get(f"{live_server}/explore")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart svg") and table_text(d))
    batch = browser.find_element(By.ID, "batch")
    batch.send_keys(Keys.CONTROL, "a")
    batch.send_keys("8", Keys.TAB)
    wait.until(lambda d: "batch 8" in d.find_element(By.ID, "status").text)
    summary = browser.find_element(By.ID, "summary").text
    browser.find_element(By.ID, "utilization").send_keys("0.5", Keys.TAB)
    wait.until(lambda d: d.find_element(By.ID, "summary").text != summary)
    body = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 8,
            "seq_len": 4096, "tensor_parallel": 1, "roofs": "effective", "memory_utilization": 0.5}
    answer = httpx.post(f"{live_server}/v1/analyze/model", json=body, timeout=30).json()
    # Half the H100's usable 85.52 GB: the summary's budget is the API's.
    assert answer["memory"]["usable_bytes"] == pytest.approx(0.5 * 85.52e9, rel=1e-3)
    assert f"of {answer['memory']['usable_bytes'] / 1e9:.3g} GB" in browser.find_element(By.ID, "summary").text
    # 2 an hour for one device making tokens_per_s: 2 / (tokens_per_s x 3600) x 1e6 per million tokens.
    browser.find_element(By.ID, "price").send_keys("2", Keys.TAB)
    wait.until(lambda d: "cost per million tokens" in d.find_element(By.ID, "summary").text)
    cost = 2 / (answer["tokens_per_s"] * 3600) * 1e6
    assert f"{cost:.3g}" in browser.find_element(By.ID, "summary").text
    # Out of range: named, and the figures cleared.
    utilization = browser.find_element(By.ID, "utilization")
    utilization.send_keys(Keys.CONTROL, "a")
    utilization.send_keys("3", Keys.TAB)
    wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
    assert "Memory utilisation" in browser.find_element(By.ID, "error").text


def test_explorer_shows_a_matmuls_expectation_beside_its_bound(browser, live_server):  # noqa: F811
    wait = WebDriverWait(browser, 90)
    browser.get(f"{live_server}/explore")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart svg") and table_text(d))
    browser.find_element(By.CSS_SELECTOR, "input[name=mode][value=operator]").click()
    wait.until(lambda d: "time (expected)" in d.find_element(By.ID, "summary").text)
    operator = {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}
    answer = httpx.post(f"{live_server}/v1/analyze/operator", timeout=30,
                        json={"device_id": "nvidia-h100-sxm", "operator": operator, "roofs": "effective"}).json()
    summary = browser.find_element(By.ID, "summary").text
    # 4096^3 in bf16 on an H100: the bound 138.9 us; the calibration's formula 3.33 us + 138.9 / 0.743 = 190.4 us,
    # times 0.971 for the nearest fitted shapes: 184.7 us, off by 2.8 % where held out.
    from service.persistence.catalog import gemm_calibrations

    calibration = gemm_calibrations()[("nvidia-h100-sxm", "bf16")]
    formula = calibration.t0_s + 2 * 4096**3 / 989.4e12 / calibration.compute_efficiency
    assert answer["expected"]["time_s"] == pytest.approx(formula * calibration.corrections([4096], [4096], [4096])[0])
    assert "185 µs" in summary and "off by 2.8% in the median" in summary
    # On a device without a calibration only the bound is shown.
    Select(browser.find_element(By.ID, "device")).select_by_value("amd-mi300x")
    wait.until(lambda d: "time (expected)" not in d.find_element(By.ID, "summary").text
               and "time (bound)" in d.find_element(By.ID, "summary").text)


def test_explorer_shows_a_steps_expectation_beside_its_bound(browser, live_server):  # noqa: F811
    wait = WebDriverWait(browser, 90)
    browser.get(f"{live_server}/explore")
    wait.until(lambda d: "expected step time" in d.find_element(By.ID, "summary").text)
    body = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 32,
            "seq_len": 4096, "tensor_parallel": 1, "roofs": "effective"}
    answer = httpx.post(f"{live_server}/v1/analyze/model", json=body, timeout=30).json()
    expected = answer["expected"]
    assert answer["totals"]["time_s"] < expected["time_s"] < 1  # milliseconds: the summary writes "x.yz ms"
    summary = browser.find_element(By.ID, "summary").text
    assert f"{expected['time_s'] * 1e3:.3g} ms ({expected['engine']} matmuls, " in summary
    assert f"{round(100 * expected['calibrated_share'])}% of the bound's time" in summary
    Select(browser.find_element(By.ID, "device")).select_by_value("amd-mi300x")
    # No GEMM calibration for an MI300X: only the bound.
    wait.until(lambda d: "expected step time" not in d.find_element(By.ID, "summary").text
               and "step time" in d.find_element(By.ID, "summary").text)


def test_explorer_draws_its_chart_from_the_apis_numbers(browser, live_server):  # noqa: F811
    """The chart is drawn in the page from the analysis and the device's roofs: no server-rendered figure is asked
    for, one marker per operator row that moves bytes and does work, each at the API's intensity and FLOP/s."""
    wait = WebDriverWait(browser, 90)
    browser.get(f"{live_server}/explore")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart svg circle[data-name]") and table_text(d))
    body = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 32,
            "seq_len": 4096, "tensor_parallel": 1, "roofs": "effective"}
    answer = httpx.post(f"{live_server}/v1/analyze/model", json=body, timeout=30).json()
    drawn = [r for r in answer["rows"] if r["flops"] > 0 and r["bytes"] > 0 and r["bound"] != "interconnect"]
    markers = {c.get_attribute("data-name"): c for c in browser.find_elements(By.CSS_SELECTOR, "#chart circle[data-name]")}
    assert len(markers) == len(drawn) > 5
    qkv = next(r for r in drawn if r["name"] == "qkv_proj")
    assert float(markers["qkv_proj [dense layers]"].get_attribute("data-intensity")) == pytest.approx(qkv["flops"] / qkv["bytes"])
    assert float(markers["qkv_proj [dense layers]"].get_attribute("data-flops-per-s")) == pytest.approx(qkv["flops"] / qkv["time_s"])
    # The H100's roofs, each labelled with its figure and source: fp8 and int8 share 1.98 PFLOP/s, so one line.
    labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#chart .roof-label")]
    assert labels == ["HBM 3.35 TB/s (nominal)", "fp8/int8 tensor 1.98 PFLOP/s (nominal)",
                      "bf16 tensor 989 TFLOP/s (nominal)", "fp32 vector 66.9 TFLOP/s (nominal)"]
    title = browser.find_element(By.CSS_SELECTOR, "#chart svg title").get_attribute("textContent")
    assert title == "llama-3.1-8b decode, batch 32, 4096 tokens on nvidia-h100-sxm"

    browser.find_element(By.CSS_SELECTOR, "input[name=mode][value=operator]").click()
    wait.until(lambda d: "matmul 4096x4096x4096" in d.find_element(By.CSS_SELECTOR, "#chart svg title")
               .get_attribute("textContent"))
    [marker] = browser.find_elements(By.CSS_SELECTOR, "#chart circle[data-name]")
    # 2 x 4096^3 FLOP over 3 x 4096^2 x 2 bytes = 1365.3 FLOP/byte, compute-bound at the bf16 peak.
    assert float(marker.get_attribute("data-intensity")) == pytest.approx(2 * 4096**3 / (3 * 4096**2 * 2))
    assert float(marker.get_attribute("data-flops-per-s")) == pytest.approx(989.4e12)
    assert [url for url in requested_urls(browser) if "/v1/plot/" in url] == []


def seconds_as_the_page_writes_them(value: float) -> str:
    """The page's seconds: three significant figures as JavaScript's toPrecision(3) writes them (trailing zeros
    kept: 42.0, not Python's 42), in s, ms or µs."""
    def figures(number: float) -> str:
        return f"{number:#.3g}".rstrip(".")

    if abs(value) >= 1:
        return f"{figures(value)} s"
    if abs(value) >= 1e-3:
        return f"{figures(value * 1e3)} ms"
    return f"{figures(value * 1e6)} µs"


def screenshot(driver, name: str, height: int) -> None:
    """The page from its top, saved under the test artifacts and named at the end of the run."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / name
    driver.set_window_size(1200, height)
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(shot))
    record_artifact(shot)


def number_as_the_page_writes_it(value: float) -> str:
    """Four significant figures, then en-US grouping with at most three decimals (toLocaleString's default)."""
    return f"{float(f'{value:.4g}'):,.3f}".rstrip("0").rstrip(".")


def figures_text(driver) -> str:
    return driver.find_element(By.CSS_SELECTOR, "#figures tbody").text


def test_serving_page_is_the_apis_request_and_answer(browser, live_server):  # noqa: F811
    """/explore/serving: its form built from the OpenAPI document (every field labelled, the nested ones prefixed),
    the bound beside the expectation with the simulated percentiles and their chart, the launch commands, the state
    in the address, keyboard-only use, a refusal named, and nothing fetched from elsewhere."""
    wait = WebDriverWait(browser, 90)
    browser.get(f"{live_server}/explore/serving")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart svg rect") and figures_text(d))
    fields = browser.find_elements(By.CSS_SELECTOR, "#fields input, #fields select")
    names = {field.get_attribute("name") for field in fields}
    assert {"input_len", "concurrency", "engine", "calibration", "dtypes.scheme", "scheduler.recv_interval",
            "workload.range_ratio"} <= names
    for field in fields:  # every field has its label
        assert browser.find_elements(By.CSS_SELECTOR, f"label[for='{field.get_attribute('id')}']")

    body = {"model_id": "deepseek-v3", "device_id": "nvidia-b200", "input_len": 1024, "output_len": 1024,
            "concurrency": 64, "tensor_parallel": 8, "engine": "sglang",
            "dtypes": {"scheme": "w8a8-fp8", "kv_cache": "fp8"}}
    answer = httpx.post(f"{live_server}/v1/analyze/serving", json=body, timeout=60).json()
    shown = figures_text(browser)
    assert f"TTFT {seconds_as_the_page_writes_them(answer['bound']['ttft_s'])} " \
           f"{seconds_as_the_page_writes_them(answer['expected']['ttft_s'])}" in shown
    percentiles = browser.find_element(By.CSS_SELECTOR, "#percentiles tbody").text
    p99 = answer["expected"]["percentiles"]["ttft_s"]["p99"]
    assert seconds_as_the_page_writes_them(p99) in percentiles
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart svg rect")) == 6
    assert "sglang.launch_server" in browser.find_element(By.ID, "launch-command").text

    # Keyboard only: 16 in flight, submitted with Enter; the address holds it and the figures follow.
    concurrency = browser.find_element(By.ID, "f-concurrency")
    concurrency.send_keys(Keys.CONTROL, "a")
    concurrency.send_keys("16", Keys.ENTER)
    wait.until(lambda d: "concurrency=16" in d.current_url and figures_text(d) and figures_text(d) != shown)
    sixteen = httpx.post(f"{live_server}/v1/analyze/serving", json=body | {"concurrency": 16}, timeout=60).json()
    assert seconds_as_the_page_writes_them(sixteen["expected"]["tpot_s"]) in figures_text(browser)
    # The address is the page: opened again, it asks the same.
    browser.get(browser.current_url)
    wait.until(lambda d: figures_text(d))
    assert browser.find_element(By.ID, "f-concurrency").get_attribute("value") == "16"

    screenshot(browser, "explorer-serving.png", height=2400)

    # A refusal is named, and no figure stands under it.
    field = browser.find_element(By.ID, "f-input_len")
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys("0", Keys.ENTER)
    wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
    assert "input_len" in browser.find_element(By.ID, "error").text and figures_text(browser) == ""

    requested = requested_urls(browser)
    assert any(url.endswith("/explore/assets/serving.js") for url in requested)
    assert [url for url in requested if not url.startswith(live_server)] == []


def test_the_explorer_pages_link_to_each_other(client):
    home = client.get("/explore").text
    for page in ("serving", "plan", "compare", "calibrations"):
        assert f'href="explore/{page}"' in home
    for path in ("/explore/serving", "/explore/plan", "/explore/compare", "/explore/calibrations"):
        page = client.get(path)
        assert page.status_code == 200 and 'href="../explore"' in page.text
        assert all(f'href="{other}"' in page.text for other in ("serving", "plan", "compare", "calibrations"))
    for asset in ("form.js", "serving.js", "plan.js", "compare.js", "calibrations.js"):
        assert client.get(f"/explore/assets/{asset}").status_code == 200


def test_plan_page_ranks_and_draws_what_the_api_answers(browser, live_server):  # noqa: F811
    """/explore/plan: the plan's table is the API's ranking for the same request, and its chart plots the same
    figures: every frontier shape and ranked configuration a point naming its layout, the chosen one marked, the
    TPOT SLO drawn; a tighter SLO submitted from the keyboard re-plans; nothing fetched from elsewhere."""
    wait = WebDriverWait(browser, 120)
    browser.get(f"{live_server}/explore/plan")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart svg circle.chosen")
               and d.find_element(By.CSS_SELECTOR, "#configs tbody").text)
    body = {"model_id": "deepseek-v3", "device_ids": ["nvidia-b200"], "total_devices": 8, "input_len": 1024,
            "output_len": 1024, "engine": "sglang", "top_n": 5, "slo": {"tpot_s": 0.03},
            "dtypes": {"scheme": "w8a8-fp8", "kv_cache": "fp8"}}
    answer = httpx.post(f"{live_server}/v1/plan/serving", json=body, timeout=120).json()
    rows = browser.find_elements(By.CSS_SELECTOR, "#configs tbody tr")
    assert len(rows) == len(answer["configs"])
    best = answer["configs"][0]
    first = rows[0].text
    assert f"{best['tensor_parallel']} / {best['expert_parallel']} / {best['attention_data_parallel']}" in first
    assert number_as_the_page_writes_it(best["expected"]["tokens_per_s_per_device"]) in first
    circles = browser.find_elements(By.CSS_SELECTOR, "#chart svg circle")
    assert len(circles) == len(answer["pareto"]) + len(answer["configs"])
    chosen = browser.find_element(By.CSS_SELECTOR, "#chart svg circle.chosen")
    assert f"TP {best['tensor_parallel']} / EP {best['expert_parallel']}" in chosen.get_attribute("innerHTML")
    assert browser.find_elements(By.CSS_SELECTOR, "#chart svg line.slo")

    tpot = browser.find_element(By.ID, "f-slo-tpot_s")
    tpot.send_keys(Keys.CONTROL, "a")
    tpot.send_keys("0.025", Keys.ENTER)
    wait.until(lambda d: "slo.tpot_s=0.025" in d.current_url and d.find_elements(By.CSS_SELECTOR, "#chart svg circle.chosen"))
    tighter = httpx.post(f"{live_server}/v1/plan/serving", json=body | {"slo": {"tpot_s": 0.025}}, timeout=120).json()
    assert len(browser.find_elements(By.CSS_SELECTOR, "#configs tbody tr")) == len(tighter["configs"])

    screenshot(browser, "explorer-plan.png", height=1600)
    requested = requested_urls(browser)
    assert [url for url in requested if not url.startswith(live_server)] == []


def test_compare_page_ranks_what_the_api_answers(browser, live_server):  # noqa: F811
    """/explore/compare: the devices and the serving request each gets, both from the OpenAPI document; the table is
    the API's ranking of the same comparison, row for row, and each device's bar its relative time; a device list
    edited from the keyboard compares again; a device it could not be analysed on is listed with the API's reason;
    nothing fetched from elsewhere."""
    wait = WebDriverWait(browser, 120)
    browser.get(f"{live_server}/explore/compare")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart svg rect.device"))
    names = {field.get_attribute("name") for field in browser.find_elements(By.CSS_SELECTOR, "#fields [name]")}
    assert {"device_ids", "model_id", "concurrency", "dtypes.scheme", "scheduler.recv_interval"} <= names
    assert not {"device_id", "endpoint"} & names
    request = {"model_id": "deepseek-v3", "input_len": 1024, "output_len": 1024, "concurrency": 64,
               "tensor_parallel": 8, "engine": "sglang", "dtypes": {"scheme": "w8a8-fp8", "kv_cache": "fp8"}}
    body = {"endpoint": "serving", "device_ids": ["nvidia-b200", "nvidia-h200-sxm", "amd-mi300x"], "request": request}
    answer = httpx.post(f"{live_server}/v1/analyze/compare", json=body, timeout=120).json()
    rows = browser.find_elements(By.CSS_SELECTOR, "#ranking tbody tr")
    assert [row.find_element(By.CSS_SELECTOR, "td").text for row in rows] == [e["device_id"] for e in answer["ranking"]]
    for row, entry in zip(rows, answer["ranking"], strict=True):
        assert seconds_as_the_page_writes_them(entry["expected_time_s"]) in row.text
        assert f"{entry['relative_time']:.3f}" in row.text
    bars = browser.find_elements(By.CSS_SELECTOR, "#chart svg rect.device")
    assert [bar.get_attribute("data-device") for bar in bars] == [e["device_id"] for e in answer["ranking"]]
    widths = [float(bar.get_attribute("width")) for bar in bars]
    longest = max(e["relative_time"] for e in answer["ranking"])
    for width, entry in zip(widths, answer["ranking"], strict=True):  # each bar its relative time, the longest full
        assert width == pytest.approx(max(1, 360 * entry["relative_time"] / longest), abs=0.06)
    assert "ranked by the expected" in browser.find_element(By.ID, "basis").text
    screenshot(browser, "explorer-compare.png", height=1800)

    # Keyboard only: the L40S added, which has no link to span 8 devices: it is listed with the API's reason.
    devices = browser.find_element(By.ID, "f-device_ids")
    devices.send_keys(Keys.END, ",nvidia-l40s", Keys.ENTER)
    wait.until(lambda d: "nvidia-l40s" in d.current_url and d.find_element(By.ID, "left-out").is_displayed())
    again = httpx.post(f"{live_server}/v1/analyze/compare", json=body | {
        "device_ids": [*body["device_ids"], "nvidia-l40s"]}, timeout=120).json()
    [refused] = again["errors"]
    assert refused["device_id"] == "nvidia-l40s"
    assert f"nvidia-l40s: not analysed ({refused['detail']})" in browser.find_element(By.ID, "left-out").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#ranking tbody tr")) == len(again["ranking"])
    requested = requested_urls(browser)
    assert [url for url in requested if not url.startswith(live_server)] == []


def test_calibrations_page_lists_shows_and_takes_timings(browser, live_server):  # noqa: F811
    """/explore/calibrations: the table is GET /v1/calibrations; kernel timings pasted as CSV with a token are stored
    and fitted, and the new calibration is chosen: its parameters the API's, a parity point pair a timing; a submission
    without a valid token is refused with the API's words; nothing fetched from elsewhere."""
    from tests.conftest import TOKEN

    wait = WebDriverWait(browser, 60)
    browser.get(f"{live_server}/explore/calibrations")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#calibrations tbody tr"))
    listed = httpx.get(f"{live_server}/v1/calibrations", timeout=30).json()
    assert len(browser.find_elements(By.CSS_SELECTOR, "#calibrations tbody tr")) == len(listed)
    # A shipped serving calibration's device shown, the calibration chosen from the keyboard: its parameters, and its
    # runs drawn by the service.
    shipped = next(c for c in listed if c["kind"] == "serving" and c["origin"] == "shipped")
    device = shipped["device_id"]
    Select(browser.find_element(By.ID, "device-filter")).select_by_value(device)
    shown = browser.find_elements(By.CSS_SELECTOR, "#calibrations tbody tr")
    assert len(shown) == sum(c["device_id"] == device for c in listed) and f"device={device}" in browser.current_url
    button = next(b for b in browser.find_elements(By.CSS_SELECTOR, "#calibrations tbody button") if b.text == shipped["id"])
    button.send_keys(Keys.ENTER)
    wait.until(lambda d: d.find_element(By.ID, "chosen-title").text == shipped["id"])
    image = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#no-points img.parity"))
    assert wait.until(lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image)) > 0
    assert shipped["parameters"][0]["name"] in browser.find_element(By.CSS_SELECTOR, "#parameters tbody").text
    # The same device's scheduling calibration: its runs simulated at its timing, drawn by the service too.
    scheduling = next(c for c in listed if c["kind"] == "scheduling" and c["device_id"] == device)
    button = next(b for b in browser.find_elements(By.CSS_SELECTOR, "#calibrations tbody button")
                  if b.text == scheduling["id"])
    button.send_keys(Keys.ENTER)
    wait.until(lambda d: d.find_element(By.ID, "chosen-title").text == scheduling["id"])
    image = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#no-points img.parity"))
    assert "parity.svg" in image.get_attribute("src") and "scheduling" in image.get_attribute("src")
    assert wait.until(lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image)) > 0

    # Eight bf16 matmuls timed on an A100 (at twice their bound, plus 5 us): pasted, with the token, from the keyboard.
    shapes = [(256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
              (8192, 8192, 8192), (16, 4096, 4096), (64, 8192, 8192)]
    rows = [f"matmul,{m},{n},{k},bf16,{5e-6 + 2 * max(2 * m * n * k / 312e12, 2 * (m * k + k * n + m * n) / 2.039e12):.6e}"
            for m, n, k in shapes]
    for field, text in (("t-device", "nvidia-a100-80gb-sxm"), ("token", "not-the-token")):
        browser.find_element(By.ID, field).send_keys(text)
    csv = browser.find_element(By.ID, "t-csv")
    csv.send_keys(Keys.END, "\n" + "\n".join(rows))
    browser.find_element(By.ID, "t-submit").click()
    wait.until(lambda d: d.find_element(By.ID, "t-error").is_displayed())
    assert "token" in browser.find_element(By.ID, "t-error").text.lower()
    token = browser.find_element(By.ID, "token")
    token.send_keys(Keys.CONTROL, "a")
    token.send_keys(TOKEN)
    browser.find_element(By.ID, "t-submit").send_keys(Keys.ENTER)
    fitted = "kernel:measured:nvidia-a100-80gb-sxm:cublas:bf16"
    wait.until(lambda d: d.find_element(By.ID, "chosen-title").text == fitted)
    detail = httpx.get(f"{live_server}/v1/calibrations/{fitted}", timeout=30).json()
    assert len(detail["residuals"]) == len(shapes)
    parameters = browser.find_element(By.CSS_SELECTOR, "#parameters tbody").text
    for parameter in detail["parameters"]:
        assert parameter["name"] in parameters
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart svg circle.expected")) == len(shapes)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart svg circle.bound")) == len(shapes)
    assert f"id={fitted}" in browser.current_url.replace("%3A", ":")
    screenshot(browser, "explorer-calibrations.png", height=1800)

    # Three vLLM benchmark result files (Llama-3.1-8B on one H100 at 4, 16 and 64 in flight, each 1.4 x its bound's
    # TPOT + 2 ms), chosen as files: stored, a serving calibration fitted, opened with a point pair a run.
    files = []
    for concurrency in (4, 16, 64):
        deployment = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "tensor_parallel": 1, "engine": "vllm",
                      "input_len": 1024, "output_len": 1024, "concurrency": concurrency, "calibration": "none"}
        bound = httpx.post(f"{live_server}/v1/analyze/serving", json=deployment, timeout=60).json()["bound"]
        result = {"completed": 10 * concurrency, "total_input_tokens": 10 * concurrency * 1024,
                  "total_output_tokens": 10 * concurrency * 1024, "max_concurrency": concurrency,
                  "median_tpot_ms": 1e3 * (1.4 * bound["tpot_s"] + 0.002),
                  "median_ttft_ms": 1e3 * (1.3 * bound["ttft_s"] + 0.02)}
        path = ARTIFACTS / f"vllm-bench-{concurrency}.json"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result))
        files.append(str(path))
    for field, text in (("r-device", "nvidia-h100-sxm"), ("r-model", "llama-3.1-8b")):
        browser.find_element(By.ID, field).send_keys(text)
    browser.find_element(By.ID, "r-files").send_keys("\n".join(files))
    browser.find_element(By.ID, "r-submit").send_keys(Keys.ENTER)
    wait.until(lambda d: d.find_element(By.ID, "chosen-title").text.startswith("serving:measured:nvidia-h100-sxm:vllm"))
    serving = browser.find_element(By.ID, "chosen-title").text
    assert "fitted: " + serving in browser.find_element(By.ID, "r-status").text
    detail = httpx.get(f"{live_server}/v1/calibrations/{serving}", timeout=30).json()
    assert len(detail["run_residuals"]) == 3
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart svg circle.expected")) == 3
    requested = requested_urls(browser)
    assert [url for url in requested if not url.startswith(live_server)] == []


# Each element with text of its own, outside the charts: its colour's WCAG 2 contrast against the first opaque
# background behind it (https://www.w3.org/TR/WCAG21/#dfn-contrast-ratio), where it is below `least`.
LOW_CONTRAST = """
const least = arguments[0];
const channel = (v) => { v /= 255; return v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
const luminance = (colour) => { const [r, g, b] = colour.match(/[\\d.]+/g).slice(0, 3).map(Number).map(channel);
  return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
const behind = (el) => { for (; el; el = el.parentElement) { const c = getComputedStyle(el).backgroundColor;
  const alpha = c.match(/[\\d.]+/g)[3]; if (alpha === undefined || Number(alpha) > 0) return c; } return "rgb(255, 255, 255)"; };
const low = [];
for (const el of document.querySelectorAll("body *")) {
  if (el.closest("svg") || !el.getClientRects().length) continue;
  if (![...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
  const [a, b] = [luminance(getComputedStyle(el).color), luminance(behind(el))];
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  if (ratio < least) low.push(`${el.tagName}#${el.id}.${el.className}: ${ratio.toFixed(2)}`);
}
return low;
"""


@pytest.mark.parametrize("page, ready", [("/explore", "#chart svg"), ("/explore/serving", "#chart svg rect"),
                                         ("/explore/plan", "#chart svg circle.chosen"),
                                         ("/explore/compare", "#chart svg rect.device"),
                                         ("/explore/calibrations", "#calibrations tbody tr")])
def test_every_page_text_meets_the_contrast_minimum(browser, live_server, page, ready):  # noqa: F811
    # WCAG 2.1 AA: 4.5:1 for body text (the pages' help, captions, errors and links included), answered pages.
    browser.get(f"{live_server}{page}")
    WebDriverWait(browser, 120).until(lambda d: d.find_elements(By.CSS_SELECTOR, ready))
    assert browser.execute_script(LOW_CONTRAST, 4.5) == []
