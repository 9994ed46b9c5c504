"""The plan report in a real headless Chromium (Debian's, scripts/install_chromium.sh, driven by playwright with
its own browser download never used): `python -m tkf_infra report --stack prod` run as a user runs it, the page
opened from disk with every network request refused, no console error, a screenshot taken, and the DOM holding
one element per GPU (4 nodes × 8 H100) and per model with the figures the plan's outputs have.

Set TKF_REPORT_SCREENSHOT=path.png to keep the screenshot (docs/observability.md's image is made so).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tkf_infra.names import PROJECT_ROOT

CHROMIUM = os.environ.get("TKF_CHROMIUM_BIN", "/usr/bin/chromium")
pytestmark = pytest.mark.browser  # Chromium comes with the setup: these run after it (scripts/test_suite.sh)
#: As the brief for headless use says: no sandbox (root in CI), no GPU, nothing fetched or synced in the background.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "fleet.html"
    run = subprocess.run([sys.executable, "-m", "tkf_infra", "report", "--stack", "prod", "-o", str(out)],
                         cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert out.with_suffix(".svg").read_text().startswith("<svg")
    return out


@pytest.fixture(scope="module")
def browser_page(report: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, list[str], list[str]]]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium with scripts/install_chromium.sh "
                    "(scripts/setup.sh --dev does), or set TKF_CHROMIUM_BIN", pytrace=False)
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True,
                                                        args=ARGS, viewport={"width": 1100, "height": 900})
        try:
            page = context.new_page()
            errors: list[str] = []
            requests: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))

            def refuse(route: Any) -> None:
                if not route.request.url.startswith("file://"):
                    requests.append(route.request.url)
                    route.abort()
                else:
                    route.continue_()

            page.route("**/*", refuse)
            page.goto(report.as_uri(), wait_until="load")
            yield page, errors, requests
        finally:
            context.close()


def _expected() -> dict[str, Any]:
    from tkf_infra.ops.report import offline_plan
    from tkf_infra.outputs import endpoints_output
    from tkf_infra.plan.headroom import pool_headroom

    plan, _ = offline_plan("prod")
    return {"endpoints": endpoints_output(plan), "headroom": pool_headroom(plan)}


def test_the_page_renders_offline_without_errors_and_a_screenshot_is_taken(
        browser_page: tuple[Any, list[str], list[str]], tmp_path: Path) -> None:
    page, errors, requests = browser_page
    assert errors == [] and requests == [], (errors, requests)
    assert page.title() == "tkf-infra plan: prod"
    shot = Path(os.environ.get("TKF_REPORT_SCREENSHOT") or tmp_path / "report.png")
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_one_element_per_gpu_four_nodes_of_eight_h100(browser_page: tuple[Any, list[str], list[str]]) -> None:
    page, _, _ = browser_page
    gpus = page.eval_on_selector_all("g.gpu", "els => els.map(e => [e.dataset.pool, e.dataset.node, "
                                              "Number(e.dataset.index), e.dataset.holders])")
    assert Counter((pool, node) for pool, node, _, _ in gpus) == {("h100", f"h100-{n}"): 8 for n in range(1, 5)}
    held = Counter(h for *_, holders in gpus for h in holders.split(",") if h)
    endpoints = _expected()["endpoints"]
    assert held == {ep["name"]: ep["gpus"] * ep["replicas"] for ep in endpoints.values()}
    assert page.locator("svg.layout").is_visible()


def test_one_element_per_model_with_the_outputs_figures(browser_page: tuple[Any, list[str], list[str]]) -> None:
    page, _, _ = browser_page
    expected = _expected()
    models = page.eval_on_selector_all("section.model", "els => els.map(e => ({...e.dataset}))")
    assert sorted(m["model"] for m in models) == sorted(ep["name"] for ep in expected["endpoints"].values())
    by_name = {ep["name"]: ep for ep in expected["endpoints"].values()}
    for m in models:
        fit = by_name[m["model"]]["fit"]
        assert m["verdict"] == (fit.get("verdict") or ("fits" if fit["fits"] else "refuses"))
        for key in ("weightsGiB", "kvCacheGiB", "kvCacheTokens", "kvCacheTokensBound", "maxConcurrency"):
            assert m[key.lower()] == str(fit[key]), (m["model"], key)
        shown = page.locator(f"#model-{m['model']} td.figure[data-key='kvCacheTokens']").inner_text()
        assert shown == str(fit["kvCacheTokens"])
        terms = page.eval_on_selector_all(f"#model-{m['model']} rect.term",
                                          "els => Object.fromEntries(els.map(e => [e.dataset.term, e.dataset.gib]))")
        assert float(terms["weights"]) == pytest.approx(fit["weightsGiB"], abs=0.01)
        assert float(terms["kvCache"]) == pytest.approx(fit["kvCacheGiB"], abs=0.01)
        assert page.locator(f"#model-{m['model']} line.bound").count() == 1
    headroom = expected["headroom"]["h100"]
    table = page.locator("table.headroom[data-pool='h100']")
    assert table.get_attribute("data-gpus") == str(headroom["gpus"]) == "32"
    for end in ("atMinimum", "atMaximum"):
        assert table.locator(f"tr[data-at='{end}'] td.free").inner_text() == str(headroom[end]["free"])


def test_the_browser_is_debians_chromium() -> None:
    """The browser driven is the one the project's script installs (executable_path), not one of playwright's."""
    assert shutil.which("chromium") == CHROMIUM or os.access(CHROMIUM, os.X_OK)
    version = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, timeout=60).stdout
    assert "Chromium" in version, version
