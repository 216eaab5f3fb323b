// Skills: every SKILL.md found (GET /api/skills) with its source and state; enable/disable,
// view and edit one (GET/PUT /api/skills/<name>). Only user and project skills are editable.

import { h, fmtAgo } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

const path = (name) => `/api/skills/${encodeURIComponent(name)}`;

export function createPage(ctx) {
  const { el, body } = pageFrame(ctx, "skills", "Skills", "Instructions the agent activates for a kind of task.");

  function toggleButton(skill) {
    const btn = h("button", { class: "btn small toggle", type: "button" }, skill.enabled ? "Disable" : "Enable");
    btn.addEventListener("click", async () => {
      btn.disabled = true;
      try {
        await api(`${path(skill.name)}/${skill.enabled ? "disable" : "enable"}`, { method: "POST", body: {} });
        load();
      } catch (err) {
        btn.disabled = false;
        btn.textContent = `Failed: ${err.message}`;
      }
    });
    return btn;
  }

  function viewButton(skill) {
    const btn = h("button", { class: "btn small view", type: "button" }, "View");
    btn.addEventListener("click", () => open(skill.name));
    return btn;
  }

  function row(s) {
    return h("tr", { dataset: { skill: s.name }, class: s.enabled ? "" : "off" },
      h("td", null, h("div", { class: "device-name" }, s.name, s.cut ? h("span", { class: "chip bad", title: "over 64 KB: only its start is used" }, "cut") : null)),
      h("td", { class: "skill-desc" }, s.description),
      h("td", null, h("span", { class: "chip", title: s.path }, s.source),
        s.overrides.length ? h("div", { class: "muted small" }, `overrides ${s.overrides.join(", ")}`) : null),
      h("td", null, h("span", { class: `chip state ${s.enabled ? "ok" : ""}` }, s.enabled ? "enabled" : `disabled (${s.disabled_in.join(", ")})`)),
      h("td", { class: "actions" }, viewButton(s), " ", toggleButton(s)));
  }

  async function load() {
    try {
      const data = await api("/api/skills");
      if (!data.enabled) {
        body.replaceChildren(h("div", { class: "card hint" }, "Skills are turned off (", h("code", null, "skills.enabled"), " is false)."));
        return;
      }
      body.replaceChildren(
        h("div", { class: "card hint" }, "Add a skill by creating ", h("code", null, "<name>/SKILL.md"), " in ",
          h("code", null, data.scopes.user), " (everywhere) or ", h("code", null, data.scopes.project), " (this workspace)."),
        h("div", { class: "card table-card" }, h("table", { class: "devices skills", id: "skills-table" },
          h("thead", null, h("tr", null, ["Name", "Description", "Source", "State", ""].map((t) => h("th", null, t)))),
          h("tbody", null, data.skills.map(row)))));
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  }

  async function open(name) {
    try {
      const s = await api(path(name));
      const editor = h("textarea", { id: "skill-editor", class: "skill-editor", spellcheck: "false" });
      editor.value = s.content;
      editor.readOnly = !s.editable;
      const status = h("span", { id: "skill-status", class: "muted" },
        s.editable ? "" : `Read-only here: ${s.source} skills are edited in their own folder.`);
      const save = h("button", { class: "btn primary small", id: "skill-save", type: "button", disabled: !s.editable }, "Save");
      save.addEventListener("click", async () => {
        save.disabled = true;
        status.textContent = "Saving…";
        try {
          await api(path(name), { method: "PUT", body: { content: editor.value } });
          status.textContent = `Saved ${fmtAgo(Date.now() / 1000)}.`;
        } catch (err) {
          status.textContent = `Not saved: ${err.message}`;
        } finally {
          save.disabled = false;
        }
      });
      const back = h("button", { class: "btn small", type: "button", id: "skill-back" }, "Back to the list");
      back.addEventListener("click", load);
      body.replaceChildren(
        h("div", { class: "card skill-detail", dataset: { skill: s.name } },
          h("div", { class: "check-head" }, s.name, h("span", { class: "chip" }, s.source)),
          h("p", { class: "muted small" }, h("code", null, s.path)),
          s.files.length ? h("p", { class: "muted small" }, "Files: ", s.files.map((f) => h("code", null, f, " "))) : null,
          editor,
          h("div", { class: "skill-actions" }, back, save, status)));
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  }

  return { el, show: load };
}
