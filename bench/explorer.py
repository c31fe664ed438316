"""How long the explorer takes to answer a change of its inputs, in headless Chromium, from the keystroke to the
page saying it updated. Each round types a batch size none of the earlier rounds used, so no cache answers.

    .venv/bin/python bench/explorer.py URL [URL ...]

With several servers (say this tree's and an older one's), the rounds alternate between them in one run and the
medians are printed side by side with their ratio to the first. Needs chromium and chromium-driver (Debian).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

ROUNDS = 15


def browser(profile: str) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"), options=options)


def one_update(driver: webdriver.Chrome, batch: int) -> float:
    """Milliseconds from the change event to the status line naming the new batch (the page's own clock)."""
    field = driver.find_element(By.ID, "batch")
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(str(batch))
    # The page's own clock, read by an observer the moment the status names the batch (selenium's polling would
    # add its interval otherwise).
    driver.execute_script("""
        const wanted = arguments[0];
        window.__updated = null;
        window.__changed = performance.now();
        new MutationObserver((_, observer) => {
          if (document.getElementById("status").textContent.includes(wanted)) {
            window.__updated = performance.now();
            observer.disconnect();
          }
        }).observe(document.getElementById("status"), {childList: true, characterData: true, subtree: true});
    """, f"batch {batch},")
    field.send_keys(Keys.TAB)
    WebDriverWait(driver, 60, poll_frequency=0.05).until(lambda d: d.execute_script("return window.__updated;"))
    # The page debounces typing by 250 ms before it asks: that wait is the page's choice, not the service's cost.
    return driver.execute_script("return window.__updated - window.__changed;") - 250


def main(urls: list[str]) -> None:
    drivers = []
    for url in urls:
        driver = browser(tempfile.mkdtemp(prefix="explorer-bench-"))
        driver.get(f"{url}/explore")
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart svg"))
        drivers.append(driver)
    times: list[list[float]] = [[] for _ in urls]
    try:
        for round_number in range(ROUNDS):
            for index, driver in enumerate(drivers):
                times[index].append(one_update(driver, 2 + round_number * len(urls) + index))
    finally:
        for driver in drivers:
            driver.quit()
    first = statistics.median(times[0])
    print(f"explorer update, keystroke to 'Updated', median of {ROUNDS} distinct batch sizes (debounce excluded):")
    for url, samples in zip(urls, times, strict=True):
        median = statistics.median(samples)
        print(f"  {url:32s} {median:8.1f} ms  (x{median / first:.2f} of the first)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
