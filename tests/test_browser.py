"""The browser app in a real browser: `streamlit run scripts/app.py` against a real tritonserver,
driven by selenium in Debian's headless Chromium. A person's three paths: a photo named and
drawn, a person enrolled and forgotten, the sample video summarised. Screenshots go to
out/browser/ (look at them; README's picture is one of them, made smaller).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from environment import REPO_ROOT
from face_client import SEQUENCE_MODEL
from triton_server import free_ports

pytestmark = pytest.mark.engines("onnx")

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SHOTS = REPO_ROOT / "out" / "browser"
WAIT_S = 60
VIDEO_WAIT_S = 240


@pytest.fixture(scope="module")
def app_url(start_module_server, tmp_path_factory):
    """The app served by `streamlit run` (its own process) against a real server."""
    server = start_module_server(more_models=(SEQUENCE_MODEL,))
    port = free_ports(1)[0]
    log = tmp_path_factory.mktemp("streamlit") / "streamlit.log"
    env = dict(os.environ, FACE_URL=f"127.0.0.1:{server.http_port}")
    with open(log, "wb") as out:
        app = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(REPO_ROOT / "scripts" / "app.py"),
             "--server.headless", "true", "--server.port", str(port),
             "--browser.gatherUsageStats", "false"],
            cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(port, app, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        app.terminate()
        app.wait(timeout=30)


def wait_until(probe, failure, timeout: float = WAIT_S):
    """`probe()`'s first true value, asked every 0.3 s; past `timeout` seconds the test fails
    with `failure()` (called then: it may describe the last thing the probe saw)."""
    deadline = time.monotonic() + timeout
    while not (value := probe()):
        assert time.monotonic() < deadline, failure()
        time.sleep(0.3)
    return value


def wait_healthy(port: int, app: subprocess.Popen, log: Path) -> None:
    def healthy() -> bool:
        assert app.poll() is None, f"streamlit exited:\n{log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                return r.read().strip() == b"ok"
        except OSError:
            return False
    wait_until(healthy, lambda: f"streamlit not healthy in {WAIT_S} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def browser():
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: install Debian's chromium and chromium-driver "
                    "(scripts/setup.sh does)", pytrace=False)
    os.environ["SE_AVOID_STATS"] = "true"  # selenium-manager must not reach the internet
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000",
                "--autoplay-policy=no-user-gesture-required"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(WAIT_S)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def page_text(driver) -> str:
    from selenium.webdriver.common.by import By
    return driver.find_element(By.TAG_NAME, "body").text


def wait_for_text(driver, *wanted: str, timeout: float = WAIT_S) -> None:
    text = ""

    def shown() -> bool:
        nonlocal text
        text = page_text(driver)
        return all(w in text for w in wanted)
    wait_until(shown, lambda: f"not on the page: {wanted}\n---\n{text[-2000:]}", timeout)


def open_tab(driver, url: str, tab: str):
    from selenium.webdriver.common.by import By
    driver.get(url)
    wait_for_text(driver, "Photos", "People", "Video")
    for element in driver.find_elements(By.CSS_SELECTOR, "[role=tab]"):
        if element.text.strip().startswith(tab):
            element.click()
            return
    raise AssertionError(f"no tab {tab}")


UPLOADER_INPUTS = "[data-testid=stFileUploader] input[type=file]"


def file_inputs(driver, at_least: int = 1, timeout: float = WAIT_S):
    """The page's file inputs, once it shows `at_least` of them: a tab just clicked may still
    be rendering (a loaded machine once found none)."""
    from selenium.webdriver.common.by import By
    found = []

    def enough():
        nonlocal found
        found = driver.find_elements(By.CSS_SELECTOR, UPLOADER_INPUTS)
        return found if len(found) >= at_least else None
    return wait_until(enough, lambda: f"{len(found)} file inputs on the page, not {at_least}",
                      timeout)


def upload(driver, path: Path, nth: int = 0, tries: int = 3) -> None:
    """`path` into the page's `nth` file uploader, until the uploader lists it: a file sent while
    Streamlit re-renders the page can be dropped (a loaded CI machine once showed an empty
    uploader a minute later), so a file not listed within 15 s is sent again."""
    for attempt in range(tries):
        file_inputs(driver, at_least=nth + 1)[nth].send_keys(str(path))
        try:
            wait_for_text(driver, path.name, timeout=15)
            return
        except AssertionError:
            if attempt == tries - 1:
                raise


def click_button(driver, label: str, timeout: float = WAIT_S) -> None:
    """Click the visible, enabled button `label`, waiting for it (Streamlit re-renders the page
    after every change, so elements found a moment ago may be gone: look again)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def clicked() -> bool:
        try:
            for button in driver.find_elements(By.TAG_NAME, "button"):
                if button.text.strip() == label and button.is_displayed() and button.is_enabled():
                    button.click()
                    return True
        except StaleElementReferenceException:
            pass
        return False
    wait_until(clicked, lambda: f"no visible, enabled button {label!r} within {timeout:.0f} s",
               timeout)


def shot(driver, name: str) -> Path:
    """A screenshot of the whole page (the window made as tall as the page for it)."""
    path = SHOTS / f"{name}.png"
    width, height = driver.get_window_size()["width"], driver.get_window_size()["height"]
    tall = driver.execute_script(
        "return Math.max(...[...document.querySelectorAll('*')].map(e => e.scrollHeight));")
    driver.set_window_size(width, min(max(height, tall + 150), 4000))
    time.sleep(0.5)
    driver.save_screenshot(str(path))
    driver.set_window_size(width, height)
    return path


def test_photo_named_and_drawn(browser, app_url, photos):
    open_tab(browser, app_url, "Photos")
    upload(browser, photos.path("obama_640x480.jpg"))
    wait_for_text(browser, "obama_640x480.jpg: 1 face(s); obama")
    # The annotated photo: an image the browser decoded, of non-zero size.
    sizes = wait_until(lambda: browser.execute_script(
        "return [...document.querySelectorAll('img')].filter(i => i.complete)"
        ".map(i => [i.naturalWidth, i.naturalHeight]).filter(s => s[0] > 100);"),
        lambda: "no annotated photo on the page")
    assert all(h > 0 for _, h in sizes), sizes
    shot(browser, "photos")


def test_enroll_and_forget_in_the_list(browser, app_url, photos):
    from selenium.webdriver.common.by import By
    open_tab(browser, app_url, "People")
    wait_for_text(browser, "2 people")
    browser.find_element(By.CSS_SELECTOR, "input[aria-label=Name]").send_keys("alice")
    # The second uploader is the enrollment form's.
    upload(browser, photos.path("obama3.jpg"), nth=1)
    click_button(browser, "Enroll")
    wait_for_text(browser, "Enrolled alice", "3 people")
    shot(browser, "people")
    # Forget: choose alice in the select box, then the button.
    select = browser.find_element(By.CSS_SELECTOR, "[data-testid=stSelectbox] input[aria-label^='Forget']")
    select.click()
    select.send_keys("alice\n")
    click_button(browser, "Forget")
    wait_for_text(browser, "Forgot alice", "2 people")


def test_sample_video_summary(browser, app_url):
    from selenium.webdriver.common.by import By
    open_tab(browser, app_url, "Video")
    for label in browser.find_elements(By.CSS_SELECTOR, "[data-testid=stCheckbox] label"):
        if "sample video" in label.text:
            label.click()
    click_button(browser, "Process")
    wait_for_text(browser, "end of input", "Who appeared", timeout=VIDEO_WAIT_S)
    # The table comes in after its heading: wait for it, as for the text.
    tables = []

    def people_table() -> bool:
        nonlocal tables
        tables = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "[data-testid=stTable]")
                  if t.is_displayed()]
        return any("obama" in t and "biden" in t for t in tables)
    wait_until(people_table, lambda: tables)
    # The annotated video plays in the browser (H.264 in MP4): its first frame is decoded.
    wait_until(lambda: browser.execute_script(
        "const v = document.querySelector('video');"
        "return v && v.readyState >= 2 && v.videoWidth;"),
        lambda: "the annotated video did not load in the browser")
    shot(browser, "video")

