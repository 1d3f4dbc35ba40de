"""Driving Airflow's UI with Debian's chromium (headless) through chromedriver and Selenium: log in,
read the Tidemark page, fill the trigger form. Selectors follow Airflow 3.3's React UI (Chakra UI):
fields are found by their label text, as an operator finds them."""

from __future__ import annotations

from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
WAIT = 60


def chrome() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--lang=en-US"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def wait(driver, condition, timeout: float = WAIT):
    return WebDriverWait(driver, timeout).until(condition)


def log_in(driver, url: str, user: str, password: str) -> None:
    driver.get(f"{url}/")
    wait(driver, ec.presence_of_element_located((By.NAME, "username"))).send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(driver, lambda d: "/auth/login" not in d.current_url)
    wait(driver, ec.presence_of_element_located((By.CSS_SELECTOR, "nav, [aria-label=Browse], button")))


# The page has loaded with its fonts, and no transition (a finite animation: a menu closing, a fade) still runs.
SETTLED = """return document.readyState === "complete" && document.fonts.status === "loaded"
    && document.getAnimations().every(a => a.playState !== "running" || !a.effect
                                           || a.effect.getTiming().iterations === Infinity)"""
# Resolves once the browser has painted the DOM as it is now (the frame after the next one).
PAINTED = "const done = arguments[arguments.length - 1]; requestAnimationFrame(() => requestAnimationFrame(done));"


def screenshot(driver, path: Path) -> None:
    """Save a screenshot once the last render has settled: the page and its fonts loaded, its transitions
    over, and the current DOM painted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    wait(driver, lambda d: d.execute_script(SETTLED))
    driver.execute_async_script(PAINTED)
    driver.save_screenshot(str(path))


def _number(text: str) -> int | None:
    return None if text.strip() in ("", "-") else int(text)


def page_numbers(driver) -> dict[tuple[str, int], tuple[int | None, int | None, int | None]]:
    """The Tidemark page's partition table: (topic, partition) -> (committed, latest, lag)."""
    numbers = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "#partitions tr[data-topic]"):
        cell = {c.get_attribute("data-field"): c.text for c in row.find_elements(By.CSS_SELECTOR, "td[data-field]")}
        numbers[(row.get_attribute("data-topic"), int(row.get_attribute("data-partition")))] = (
            _number(cell["committed_offset"]), _number(cell["latest_offset"]), _number(cell["lag"]))
    return numbers


def chart_marks(driver, chart: str) -> dict[int, tuple[str, float, str]]:
    """A chart of the Tidemark page, read from its SVG: batch id -> (kind, value, the mark's tooltip)."""
    return {int(mark.get_attribute("data-batch")): (
        mark.get_attribute("data-kind"), float(mark.get_attribute("data-value")),
        mark.find_element(By.CSS_SELECTOR, "title").get_attribute("textContent"))
        for mark in driver.find_elements(By.CSS_SELECTOR, f"#{chart} svg [data-batch]")}


def open_trigger_form(driver, url: str, dag_id: str) -> None:
    driver.get(f"{url}/dags/{dag_id}")
    wait(driver, ec.element_to_be_clickable((By.CSS_SELECTOR, "button[aria-label='Trigger Dag']"))).click()
    wait(driver, ec.presence_of_element_located((By.XPATH, "//*[@role='dialog']//*[text()='Run Parameters']")))


def _field(driver, label: str):
    """The form field whose label starts with ``label``."""
    xpath = (f"//*[@role='dialog']//label[starts-with(normalize-space(.), '{label}')]"
             "/ancestor::div[@data-part='root'][1]")
    field = wait(driver, ec.presence_of_element_located((By.XPATH, xpath)))
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", field)
    return field


def set_select(driver, label: str, value: str) -> None:
    _retype(_field(driver, label).find_element(By.CSS_SELECTOR, "input[type=text]"), value)
    option = wait(driver, ec.element_to_be_clickable(
        (By.XPATH, f"//*[@role='option' and normalize-space(.)='{value}']")))
    option.click()


def set_datetime(driver, label: str, date: str, clock: str) -> None:
    """A date-time field: its picker takes the date as YYYY/MM/DD and the time as HH:mm."""
    field = _field(driver, label)
    field.find_element(By.CSS_SELECTOR, "[data-testid=datetime-input]").click()
    popover = "[data-scope=popover][data-part=content][data-state=open]"
    day = wait(driver, ec.visibility_of_element_located(
        (By.CSS_SELECTOR, f"{popover} input[placeholder='YYYY/MM/DD']")))
    _retype(day, date)
    _retype(driver.find_element(By.CSS_SELECTOR, f"{popover} input[placeholder='HH:mm']"), clock)
    field.find_element(By.CSS_SELECTOR, "label").click()  # closes the picker
    wait(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, popover))


def _retype(box, text: str) -> None:
    box.click()
    box.send_keys(Keys.CONTROL, "a")  # a separate call: modifiers stay down until the call ends
    box.send_keys(text)


def submit_trigger_form(driver) -> None:
    button = driver.find_element(By.XPATH, "//*[@role='dialog']//button[normalize-space(.)='Trigger']")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", button)
    wait(driver, ec.element_to_be_clickable(button)).click()
    wait(driver, lambda d: not d.find_elements(By.XPATH, "//*[@role='dialog']//*[text()='Run Parameters']"))
