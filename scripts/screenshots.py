"""The README's screenshots of the Tidemark page, taken from the demo pipeline ('orders') in a running
`make airflow`, with Debian's chromium (scripts/browser.sh) driven as in the browser tests:

    make demo && make airflow && .venv/bin/python scripts/screenshots.py

Environment as for `make airflow`: AIRFLOW_PORT (8080), AIRFLOW_LOCAL_HOME (.cache/airflow-local: the
logins' passwords), AIRFLOW_USER (admin). Writes tidemark-page.png (every pipeline) and
tidemark-pipeline.png (the demo pipeline: partitions, charts per batch, history) to SCREENSHOTS
(docs/screenshots). The trigger form's screenshot comes from tests/e2e/test_local_airflow.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402

from tests.e2e.browser import chrome, log_in, screenshot, wait  # noqa: E402

PIPELINE = "orders"


def main() -> None:
    url = f"http://127.0.0.1:{os.environ.get('AIRFLOW_PORT', '8080')}"
    home = Path(os.environ.get("AIRFLOW_LOCAL_HOME", ROOT / ".cache" / "airflow-local"))
    user = os.environ.get("AIRFLOW_USER", "admin")
    out = Path(os.environ.get("SCREENSHOTS", ROOT / "docs" / "screenshots"))
    password = json.loads((home / "passwords.json").read_text())[user]
    driver = chrome()
    try:
        log_in(driver, url, user, password)
        driver.get(f"{url}/plugin/tidemark")
        frame = wait(driver, ec.presence_of_element_located((By.CSS_SELECTOR, "iframe")))
        driver.switch_to.frame(frame)
        row = f'tr[data-pipeline="{PIPELINE}"] a'
        wait(driver, ec.presence_of_element_located((By.CSS_SELECTOR, row)))
        driver.switch_to.default_content()
        screenshot(driver, out / "tidemark-page.png")
        driver.switch_to.frame(driver.find_element(By.CSS_SELECTOR, "iframe"))
        driver.find_element(By.CSS_SELECTOR, row).click()
        marks = wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-records svg [data-batch]"))
        driver.switch_to.default_content()
        screenshot(driver, out / "tidemark-pipeline.png")
        print(f"wrote {out / 'tidemark-page.png'} and {out / 'tidemark-pipeline.png'} ({PIPELINE}: "
              f"{len(marks)} batches charted)")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
