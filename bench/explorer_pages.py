"""Time to the first chart of each explorer page, in headless Chromium, and each page's weight: the model-step view
(`/explore`, its roofline chart) beside the serving page (`/explore/serving`, its percentile chart), the planning
page (`/explore/plan`, its frontier with the chosen configuration), the comparison page (`/explore/compare`, its
bars) and the calibrations page (`/explore/calibrations`, its table). Loads alternate between the pages, each a fresh
load of the page (its assets cached after the first, as a planner's browser would), timed from the navigation to the
chart's first element (selenium polling every 10 ms).

    .venv/bin/python bench/explorer_pages.py URL      (a running service, e.g. http://127.0.0.1:8000)
"""

from __future__ import annotations

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


def first_chart(driver, url: str, selector: str) -> float:
    started = time.perf_counter()
    driver.get(url)
    WebDriverWait(driver, 120, poll_frequency=0.01).until(lambda d: d.find_elements(By.CSS_SELECTOR, selector))
    return time.perf_counter() - started


def main(base: str) -> None:
    with tempfile.TemporaryDirectory() as profile:
        driver = browser(profile)
        try:
            times: dict[str, list[float]] = {name: [] for name in PAGES}
            for path, selector in PAGES.values():  # one warm-up load each
                first_chart(driver, base + path, selector)
            for _ in range(LOADS):
                for name, (path, selector) in PAGES.items():
                    times[name].append(first_chart(driver, base + path, selector))
        finally:
            driver.quit()
    reference = statistics.median(next(iter(times.values())))
    # The weight counts what a load fetches: a form page carries its request's part of the OpenAPI document.
    print("| page | time to first chart (median of 10 loads) | vs the model-step view | page weight (with what it reads) |")
    print("|---|---|---|---|")
    for name, (path, _) in PAGES.items():
        weight = sum(len(httpx.get(base + p).content) for p in [path, *ASSETS[path]])
        median = statistics.median(times[name])
        print(f"| {name} | {median * 1e3:.0f} ms | {median / reference:.2f} x | {weight / 1024:.1f} KiB |")


if __name__ == "__main__":
    sys.path.insert(0, ".")
    main(sys.argv[1].rstrip("/"))
