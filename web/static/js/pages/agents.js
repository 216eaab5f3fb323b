// Agents: every agent (GET /api/agents) — config `agents` and agent files ($PICOBOT_HOME/agents/<id>.md) —
// with its model, tool/skill allowlists, delegates and source, and each agent file's load error.
// Read-only: agents are defined in config.json or in their files; an edited file applies at the next turn.

import { h } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

export function createPage(ctx) {
  const { el, body } = pageFrame(ctx, "agents", "Agents", "Named agents from config and agent files, as the server reads them now.");

  function names(list) {
    if (list === null || list === undefined) return h("span", { class: "muted" }, "any");
    if (!list.length) return h("span", { class: "muted" }, "none");
    return h("div", null, list.map((name, i) => [i ? ", " : "", h("code", null, name)]).flat());
  }

  function row(a) {
    return h("tr", { dataset: { agent: a.name, source: a.source } },
      h("td", null, h("div", { class: "device-name" }, a.name),
        a.description ? h("div", { class: "muted small" }, a.description) : null),
      h("td", null, h("span", { class: "chip" }, a.source)),
      h("td", { dataset: { role: "model" } }, h("code", null, `${a.provider}:${a.model}`)),
      h("td", { dataset: { role: "tools" } }, names(a.tools)),
      h("td", { dataset: { role: "skills" } }, names(a.skills)),
      h("td", { dataset: { role: "delegates" } }, names(a.delegates)));
  }

  function errorRow(e) {
    return h("tr", { dataset: { agentError: e.name } },
      h("td", null, h("div", { class: "device-name" }, e.name)),
      h("td", { dataset: { role: "error" } }, h("span", { class: "chip bad" }, "not loaded"), " ", e.error));
  }

  async function load() {
    try {
      const { agents, errors, folder } = await api("/api/agents");
      body.replaceChildren(
        h("div", { class: "card hint" }, "Add an agent with a Markdown file in ", h("code", null, folder),
          " (frontmatter: model, tools, skills, delegates; body: its instructions). Changes apply at the next turn."),
        h("div", { class: "card table-card" }, h("table", { class: "devices skills", id: "agents-table" },
          h("thead", null, h("tr", null, ["Name", "Source", "Model", "Tools", "Skills", "Delegates"].map((t) => h("th", null, t)))),
          h("tbody", null, agents.map(row)))),
        errors.length ? h("div", { class: "card table-card" }, h("table", { class: "devices", id: "agent-errors" },
          h("thead", null, h("tr", null, ["File", "Error"].map((t) => h("th", null, t)))),
          h("tbody", null, errors.map(errorRow)))) : null);
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  }

  return { el, show: load };
}
