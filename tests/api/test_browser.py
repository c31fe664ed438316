"""/docs in a real headless Chromium with the network closed: the operations render from the service's
own assets, nothing is fetched from elsewhere, and "Try it out" on the operator endpoint answers 200."""

import json
import os
import shutil

import pytest

pytestmark = pytest.mark.dialect_free  # the page reads the API, not the dialect: the SQLite run covers it
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    if os.environ.get("REQUIRE_BROWSER"):
        pytest.fail("chromium and chromium-driver are required (apt-get install chromium chromium-driver)")
    pytest.skip("chromium and chromium-driver are not installed", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as until  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def browser(tmp_path):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
                 # The network is closed: every host name but the loopback fails to resolve.
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def requested_urls(driver) -> list[str]:
    """Network requests the page made (the browser's own chrome:// pages are not network traffic)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            url = message["params"]["request"]["url"]
            if url.startswith(("http:", "https:", "ws:", "wss:")):
                urls.append(url)
    return urls


def test_swagger_ui_renders_and_try_it_out_works_offline(browser, live_server):
    wait = WebDriverWait(browser, 60)
    browser.get(f"{live_server}/docs")
    wait.until(until.presence_of_element_located((By.CSS_SELECTOR, ".opblock")))
    page = browser.find_element(By.TAG_NAME, "body").text
    for summary in ("Roofline of one operator", "Roofline of a transformer step", "KV-cache concurrency",
                    "Submit a measured roof", "List devices"):
        assert summary in page

    block = browser.find_element(By.ID, "operations-analysis-analyze_operator")
    block.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    wait.until(lambda d: block.find_elements(By.CSS_SELECTOR, "button.try-out__btn"))
    block.find_element(By.CSS_SELECTOR, "button.try-out__btn").click()
    wait.until(lambda d: block.find_elements(By.CSS_SELECTOR, "button.execute"))
    block.find_element(By.CSS_SELECTOR, "button.execute").click()
    status = wait.until(lambda d: block.find_element(By.CSS_SELECTOR, ".live-responses-table tr.response td.response-col_status"))
    wait.until(lambda d: status.text.strip() != "")
    assert status.text.strip().startswith("200")

    requested = requested_urls(browser)
    assert any(url.endswith("/static-offline-docs/swagger-ui-bundle.js") for url in requested)
    assert [url for url in requested if not url.startswith(live_server)] == []


def test_redoc_renders_offline(browser, live_server):
    browser.get(f"{live_server}/redoc")
    WebDriverWait(browser, 60).until(
        lambda d: "Roofline of one operator" in d.find_element(By.TAG_NAME, "body").text)
    requested = requested_urls(browser)
    assert any(url.endswith("/redoc.standalone.js") for url in requested)
    assert [url for url in requested if not url.startswith(live_server)] == []
