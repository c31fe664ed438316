"""Time to the first chart of each explorer page, in headless Chromium, and each page's weight: the model-step view
(`/explore`, its roofline chart) beside the serving page (`/explore/serving`, its percentile chart), the planning
page (`/explore/plan`, its frontier with the chosen configuration), the comparison page (`/explore/compare`, its
bars) and the calibrations page (`/explore/calibrations`, its table). Loads alternate between the pages, each a fresh
load of the page (its assets cached after the first, as a planner's browser would), timed from the navigation to the
chart's first element: on the page's own clock (an observer set before the page's scripts notes when the chart's
element appears), and as selenium polling every 10 ms saw it (the way this bench measured until 2026-12-07).

    .venv/bin/python bench/explorer_pages.py URL      (a running service, e.g. http://127.0.0.1:8000)
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script, as its usage line says

from bench.explorer import browser

LOADS = 10
PAGES = {"model step (/explore)": ("/explore", "#chart svg"),
         "serving (/explore/serving)": ("/explore/serving", "#chart svg rect"),
         "plan (/explore/plan)": ("/explore/plan", "#chart svg circle.chosen"),
         "compare (/explore/compare)": ("/explore/compare", "#chart svg rect.device"),
         "calibrations (/explore/calibrations)": ("/explore/calibrations", "#calibrations tbody tr")}
ASSETS = {"/explore": ["/explore/assets/explore.css", "/explore/assets/roofline.js", "/explore/assets/explore.js"],
          "/explore/serving": ["/explore/assets/explore.css", "/explore/assets/form.js", "/explore/assets/serving.js"],
          "/explore/plan": ["/explore/assets/explore.css", "/explore/assets/form.js", "/explore/assets/plan.js"],
          "/explore/compare": ["/explore/assets/explore.css", "/explore/assets/form.js", "/explore/assets/compare.js"],
          "/explore/calibrations": ["/explore/assets/explore.css", "/explore/assets/form.js",
                                    "/explore/assets/calibrations.js", "/v1/calibrations"]}


# Set in every page before its own scripts run (Page.addScriptToEvaluateOnNewDocument): an observer that notes, on the
# page's own clock (from the navigation's start), when the page's chart element first appears. Selenium polling the
# page every 10 ms instead costs CPU of the 2 this machine has, beside the server answering the page's request: the
# longer a page waits on the server, the more the polling slows it (the planning page most).
OBSERVER = """
(() => {
  const selectors = %s;
  const selector = selectors[location.pathname];
  if (!selector) return;
  new MutationObserver((_, observer) => {
    if (document.querySelector(selector)) {
      window.__firstChart = performance.now();
      observer.disconnect();
    }
  }).observe(document, {childList: true, subtree: true});
})();
"""


def first_chart(driver, url: str, selector: str) -> tuple[float, float]:
    """(seconds to the chart on the page's own clock, seconds until selenium's 10 ms polling saw it)."""
    started = time.perf_counter()
    driver.get(url)
    WebDriverWait(driver, 120, poll_frequency=0.01).until(lambda d: d.find_elements(By.CSS_SELECTOR, selector))
    polled = time.perf_counter() - started
    own = WebDriverWait(driver, 120, poll_frequency=0.05).until(lambda d: d.execute_script("return window.__firstChart"))
    return own / 1e3, polled


def main(base: str) -> None:
    selectors = dict(PAGES.values())
    with tempfile.TemporaryDirectory() as profile:
        driver = browser(profile)
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": OBSERVER % json.dumps(selectors)})
        try:
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in PAGES}
            for path, selector in PAGES.values():  # one warm-up load each
                first_chart(driver, base + path, selector)
            for _ in range(LOADS):
                for name, (path, selector) in PAGES.items():
                    times[name].append(first_chart(driver, base + path, selector))
        finally:
            driver.quit()
    own = {name: statistics.median(t[0] for t in runs) for name, runs in times.items()}
    polled = {name: statistics.median(t[1] for t in runs) for name, runs in times.items()}
    reference, polled_reference = next(iter(own.values())), next(iter(polled.values()))
    # The weight counts what a load fetches: a form page carries its request's part of the OpenAPI document.
    print("| page | time to first chart, the page's clock (median of 10 loads) | vs the model-step view | "
          "seen by selenium polling every 10 ms | vs the model-step view | page weight (with what it reads) |")
    print("|---|---|---|---|---|---|")
    for name, (path, _) in PAGES.items():
        weight = sum(len(httpx.get(base + p).content) for p in [path, *ASSETS[path]])
        print(f"| {name} | {own[name] * 1e3:.0f} ms | {own[name] / reference:.2f} x | {polled[name] * 1e3:.0f} ms | "
              f"{polled[name] / polled_reference:.2f} x | {weight / 1024:.1f} KiB |")


if __name__ == "__main__":
    sys.path.insert(0, ".")
    main(sys.argv[1].rstrip("/"))
