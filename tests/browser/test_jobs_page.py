"""The Jobs page in a real Chromium against a real stack: create a job as JSON, see it listed with its
schedule in words, pause it, run it now and see the run in its history; a bad job is refused in place."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.stack import Stack

pytestmark = pytest.mark.slow

JOB = {"id": "ui.hello", "kind": "outbound_message", "schedule": {"type": "cron", "expression": "30 9 * * 1-5"},
       "payload": {"text": "good morning from the jobs page"}}


def state_is(page: Any, job_id: str, state: str) -> None:
    page.wait_for_function(f"() => document.querySelector('#jobs-table tr[data-job=\"{job_id}\"]')"
                           f"?.dataset.state === '{state}'")


def test_jobs_page_creates_pauses_and_runs_a_job(stack: Stack, new_page: Any, page_errors: Any) -> None:
    page = new_page()
    page.goto(stack.http + "/")
    page.wait_for_selector(".app[data-conn=open]")
    chat_id = page.evaluate("() => localStorage.getItem('picobot.chat_id')")
    page.click(".nav-link[data-page=jobs]")
    page.wait_for_selector("#job-new")
    page.click("#job-new")
    template = json.loads(page.input_value("#job-editor"))
    assert template["target"] == {"channel": "web", "chat_id": chat_id}  # new jobs go to this browser's chat

    page.fill("#job-editor", json.dumps(JOB))  # no target: the page has no chat to default to
    page.click("#job-save")
    page.wait_for_function("() => /^Not saved: target/.test(document.querySelector('#job-status').textContent)")
    page.fill("#job-editor", json.dumps({**JOB, "target": template["target"],
                                         "schedule": {"type": "cron", "expression": "99 9 * * *"}}))
    page.click("#job-save")
    page.wait_for_function("() => /^Not saved: schedule.expression/.test(document.querySelector('#job-status').textContent)")
    page.fill("#job-editor", json.dumps({**JOB, "target": template["target"]}))
    page.click("#job-save")
    page.wait_for_selector(".job-detail[data-job='ui.hello']")
    page.click("#job-back")
    row = page.locator("#jobs-table tr[data-job='ui.hello']")
    row.wait_for()
    schedule = row.locator("[data-role=schedule]").inner_text()
    assert "09:30" in schedule and "{" not in schedule, schedule  # in words, not the JSON
    assert row.locator("[data-role=next]").inner_text() != "—"
    screenshot(page, "jobs-laptop")

    row.locator("button[data-action=pause]").click()
    state_is(page, "ui.hello", "paused")
    paused = page.locator("#jobs-table tr[data-job='ui.hello']")
    assert paused.locator("button[data-action=run]").count() == 0  # a paused job does not run
    paused.locator("button[data-action=resume]").click()
    state_is(page, "ui.hello", "active")

    page.locator("#jobs-table tr[data-job='ui.hello'] button.view").click()
    page.wait_for_selector(".job-detail[data-job='ui.hello'] #job-runs")
    assert "No runs yet" in page.locator("#job-runs").inner_text()
    page.click(".job-detail button[data-action=run]")
    for _ in range(60):  # the page shows a snapshot: reopen it until the worker has recorded the run
        page.wait_for_selector(".job-detail[data-job='ui.hello'] #job-runs")
        if page.locator("#job-runs tr[data-outcome=ok]").count():
            break
        page.wait_for_timeout(500)
        page.click("#job-back")
        page.locator("#jobs-table tr[data-job='ui.hello'] button.view").click()
    run = page.locator("#job-runs tr[data-outcome=ok]")
    assert run.count() == 1, page.locator("#job-runs").inner_text()
    screenshot(page, "job-runs-laptop")
    assert [e for e in page_errors.errors if "status of 400" not in e] == []


def test_a_slow_list_does_not_replace_the_editor_opened_meanwhile(stack: Stack, new_page: Any, page_errors: Any) -> None:
    # the list's answer is held back until "New job" has opened the editor; when it comes, the editor stays
    page = new_page()
    held: list[Any] = []
    hold = [True]
    page.route("**/api/jobs", lambda route: held.append(route) if hold[0] else route.continue_())
    page.goto(stack.http + "/")
    page.wait_for_selector(".app[data-conn=open]")
    page.click(".nav-link[data-page=jobs]")
    page.wait_for_selector("#job-new")
    while not held:  # the page's request has reached the route
        page.wait_for_timeout(50)
    page.click("#job-new")
    page.wait_for_selector("#job-editor")
    hold[0] = False
    for route in held:
        route.continue_()
    # the list arrives now; the hooks' request after it shows the page has had its answer and drawn it
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(300)
    assert page.locator("#job-editor").count() == 1 and page.locator("#jobs-table, #jobs-empty").count() == 0
    page.fill("#job-editor", json.dumps(JOB))
    page.click("#job-save")
    page.wait_for_function("() => /^Not saved: target/.test(document.querySelector('#job-status')?.textContent)")
