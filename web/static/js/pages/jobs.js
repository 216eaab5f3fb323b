// Jobs: every scheduled job (GET /api/jobs) with its schedule in words, next run, last outcome and
// state; create or edit one as job JSON (POST /api/jobs, PUT /api/jobs/<id>), pause, resume, run
// now, delete; one job's run history with the session and turn each run produced (GET /api/jobs/<id>).
// Below the jobs: the inbound webhooks (GET /api/hooks) and their newest runs, with each callback's state.

import { h, fmtTime } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

const path = (id) => `/api/jobs/${encodeURIComponent(id)}`;
const GOOD = new Set(["ok", "active", "completed", "delivered"]);
const BAD = new Set(["failed", "missed", "refused"]);
const EDITABLE = ["id", "kind", "schedule", "target", "payload", "timezone"];

function chip(text, role) {
  const cls = GOOD.has(text) ? "ok" : BAD.has(text) ? "bad" : "";
  return h("span", { class: `chip ${cls}`, dataset: { role } }, text || "—");
}

export function createPage(ctx) {
  const { el, body, side } = pageFrame(ctx, "jobs", "Jobs", "Scheduled tasks: what runs when, and how each run went.");
  const newBtn = h("button", { class: "btn small primary", id: "job-new", type: "button" }, "New job");
  newBtn.addEventListener("click", () => edit(null));
  side.append(newBtn);

  // A new job goes to this browser's chat unless the JSON says otherwise.
  const template = () => ({
    id: "my.job", kind: "agent_task", schedule: { type: "cron", expression: "0 9 * * 1-5" },
    target: { channel: "web", chat_id: ctx.chatId }, payload: { prompt: "Summarise what is on today." },
  });

  function actionButton(job, action, label, after) {
    const btn = h("button", { class: `btn small ${action === "delete" ? "danger" : ""}`, type: "button", dataset: { action } }, label);
    btn.addEventListener("click", async () => {
      if (action === "delete" && !window.confirm(`Delete the job ${job.id}?`)) return;
      btn.disabled = true;
      try {
        if (action === "delete") await api(path(job.id), { method: "DELETE" });
        else await api(`${path(job.id)}/${action}`, { method: "POST", body: {} });
        after();
      } catch (err) {
        btn.disabled = false;
        btn.textContent = `Failed: ${err.message}`;
      }
    });
    return btn;
  }

  function buttons(job, after) {
    const toggle = job.state === "paused" ? ["resume", "Resume"] : job.state === "active" ? ["pause", "Pause"] : null;
    // a paused or completed job does not run, not even on demand: resume it first
    return [toggle ? actionButton(job, toggle[0], toggle[1], after) : null,
      job.state === "active" ? actionButton(job, "run", "Run now", after) : null,
      job.source === "user" ? actionButton(job, "delete", "Delete", after) : null]; // config and builtin jobs live in config
  }

  function row(job) {
    const view = h("button", { class: "btn small view", type: "button" }, "View");
    view.addEventListener("click", () => open(job.id));
    return h("tr", { dataset: { job: job.id, state: job.state } },
      h("td", null, h("div", { class: "device-name" }, job.id), h("div", { class: "muted small" }, job.kind)),
      h("td", { dataset: { role: "schedule" } }, job.schedule_text || JSON.stringify(job.schedule)),
      h("td", { dataset: { role: "next" } }, fmtTime(job.next_due_at)),
      h("td", null, chip(job.last_outcome, "last")),
      h("td", null, chip(job.state, "state")),
      h("td", { class: "actions" }, view, " ", buttons(job, load)));
  }

  // What the page shows is the newest of the list, a job or the editor the user asked for: an answer that
  // arrives after the user moved on (a slow list load, then "New job") is dropped, not drawn over the editor.
  let view = 0;

  async function load() {
    const mine = ++view;
    try {
      const data = await api("/api/jobs");
      if (mine !== view) return;
      const hint = data.enabled ? null
        : h("div", { class: "card hint" }, "The scheduler is turned off (", h("code", null, "scheduler.enabled"), " is false): jobs are kept but none runs.");
      body.replaceChildren(...[hint, data.jobs.length
        ? h("div", { class: "card table-card" }, h("table", { class: "devices jobs", id: "jobs-table" },
          h("thead", null, h("tr", null, ["Job", "Schedule", "Next run", "Last run", "State", ""].map((t) => h("th", null, t)))),
          h("tbody", null, data.jobs.map(row))))
        : h("div", { class: "card", id: "jobs-empty" }, "No jobs yet. Create one here, ask the agent (scheduler_manage), or run ",
          h("code", null, "picobot jobs add job.json"), ".")].filter(Boolean));
      const hooks = await webhooks();
      if (mine === view) body.append(...hooks);
    } catch (err) {
      if (mine === view) body.replaceChildren(errorBox(err));
    }
  }

  function hookRunRow(r) {
    const cb = r.callback ? [chip(r.callback.status, "callback"), ` ${r.callback.attempts}×`] : "—";
    return h("tr", { dataset: { hookRun: r.run_id, status: r.status } },
      h("td", null, fmtTime(r.created_at)),
      h("td", null, h("div", { class: "device-name" }, r.hook), h("div", { class: "muted small" }, r.mode)),
      h("td", null, chip(r.status, "status")),
      h("td", { class: "muted" }, r.ended_at ? fmtTime(r.ended_at) : "—"),
      h("td", { class: "job-run-error" }, (r.error || r.result || "").slice(0, 200)),
      h("td", null, cb, r.callback && r.callback.last_error ? h("div", { class: "muted small" }, r.callback.last_error) : ""));
  }

  async function webhooks() {
    const data = await api("/api/hooks");
    if (!data.hooks.length && !data.runs.length) return [];
    const names = data.hooks.map((x) => `${x.name} (${x.mode}${x.enabled ? "" : ", off"})`).join(" · ") || "none configured";
    return [h("div", { class: "card hint", id: "hooks-list" }, "Webhooks: ", names),
      h("div", { class: "card table-card" }, h("table", { class: "devices hook-runs", id: "hook-runs" },
        h("thead", null, h("tr", null, ["Received", "Webhook", "Status", "Ended", "Result / error", "Callback"].map((t) => h("th", null, t)))),
        h("tbody", null, data.runs.length ? data.runs.map(hookRunRow) : h("tr", null, h("td", { colspan: 6, class: "muted" }, "No webhook runs yet.")))))];
  }

  function runRow(r) {
    const where = [r.session_id ? `session ${r.session_id}` : null, r.turn_id ? `turn ${r.turn_id}` : null].filter(Boolean).join(" · ");
    return h("tr", { dataset: { run: String(r.id), outcome: r.outcome } },
      h("td", null, fmtTime(r.due_at)),
      h("td", null, chip(r.outcome, "outcome")),
      h("td", { class: "muted" }, r.started_at ? fmtTime(r.started_at) : "—", r.ended_at ? ` → ${fmtTime(r.ended_at)}` : ""),
      h("td", { class: "job-run-where" }, where ? h("code", null, where) : "—"),
      h("td", { class: "job-run-error" }, r.error || ""));
  }

  async function open(id) {
    const mine = ++view;
    try {
      const job = await api(`${path(id)}?runs=50`);
      if (mine !== view) return;
      const back = h("button", { class: "btn small", type: "button", id: "job-back" }, "Back to the list");
      back.addEventListener("click", load);
      const editBtn = h("button", { class: "btn small", type: "button", id: "job-edit", disabled: job.source !== "user" }, "Edit");
      editBtn.addEventListener("click", () => edit(job));
      const refresh = () => open(id);
      body.replaceChildren(h("div", { class: "job-detail", dataset: { job: job.id, state: job.state } }, h("div", { class: "card skill-detail" },
        h("div", { class: "check-head" }, job.id, chip(job.state, "state")),
        h("p", null, h("strong", null, job.schedule_text || ""), h("span", { class: "muted" }, ` · next run ${fmtTime(job.next_due_at)}`)),
        h("p", { class: "muted small" }, `${job.kind} · source ${job.source}`,
          job.target ? ` · to ${job.target.channel}:${job.target.chat_id}` : ""),
        h("pre", { class: "code job-json" }, JSON.stringify({ payload: job.payload, schedule: job.schedule }, null, 2)),
        h("div", { class: "skill-actions" }, back, editBtn, buttons(job, refresh))),
        h("div", { class: "card table-card" }, h("table", { class: "devices job-runs", id: "job-runs" },
          h("thead", null, h("tr", null, ["Due", "Outcome", "Ran", "Session / turn", "Error"].map((t) => h("th", null, t)))),
          h("tbody", null, job.runs.length ? job.runs.map(runRow) : h("tr", null, h("td", { colspan: 5, class: "muted" }, "No runs yet.")))))));
    } catch (err) {
      if (mine === view) body.replaceChildren(errorBox(err));
    }
  }

  function edit(job) {
    view += 1;
    const editor = h("textarea", { id: "job-editor", class: "skill-editor", spellcheck: "false" });
    const start = job ? Object.fromEntries(EDITABLE.filter((k) => job[k] != null).map((k) => [k, job[k]])) : template();
    editor.value = JSON.stringify(start, null, 2);
    const status = h("span", { id: "job-status", class: "muted" });
    const save = h("button", { class: "btn primary small", id: "job-save", type: "button" }, "Save");
    save.addEventListener("click", async () => {
      let data;
      try {
        data = JSON.parse(editor.value);
      } catch (err) {
        status.textContent = `Not saved: this is not JSON (${err.message}).`;
        return;
      }
      save.disabled = true;
      status.textContent = "Saving…";
      try {
        const saved = job ? await api(path(job.id), { method: "PUT", body: data }) : await api("/api/jobs", { method: "POST", body: data });
        open(saved.id);
      } catch (err) {
        status.textContent = `Not saved: ${err.message}`;
        save.disabled = false;
      }
    });
    const back = h("button", { class: "btn small", type: "button", id: "job-back" }, job ? "Cancel" : "Back to the list");
    back.addEventListener("click", () => (job ? open(job.id) : load()));
    body.replaceChildren(h("div", { class: "card skill-detail job-edit" },
      h("div", { class: "check-head" }, job ? `Edit ${job.id}` : "New job"),
      h("p", { class: "muted small" }, "Job JSON: id, kind (agent_task, silent_agent_task, outbound_message, internal_event), ",
        "schedule ({type: cron, expression} · {type: interval or delay, seconds} · {type: at, at}), target {channel, chat_id}, payload ",
        "({prompt} for agent tasks, {text} for a message). See docs/SCHEDULER.md."),
      editor,
      h("div", { class: "skill-actions" }, back, save, status)));
    editor.focus();
  }

  return { el, show: load };
}
