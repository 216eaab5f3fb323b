// Plugins: every plugin this web process loaded (GET /api/plugins), with its source, version,
// state, hooks and last error — its own, or one a live worker reported for it (a hook that failed
// while that worker ran a turn). Read-only: plugins are installed and disabled on the server.

import { h } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

const STATE_CLASS = { active: "ok", failed: "bad", disabled: "" };

export function createPage(ctx) {
  const { el, body } = pageFrame(ctx, "plugins", "Plugins", "Built-in capabilities and installed plugins, as this server loaded them.");

  function hooks(p) {
    if (!p.hooks.length) return h("span", { class: "muted" }, "—");
    return h("div", { class: "plugin-hooks" }, p.hooks.map((name, i) => [i ? ", " : "", h("code", null, name)]).flat());
  }

  // the newest error each plugin had in a worker, as "worker: error"
  function workerErrors(workers) {
    const found = {};
    for (const [worker, list] of Object.entries(workers || {})) {
      for (const s of list) if (s && s.error) found[s.name] = `${worker}: ${s.error}`;
    }
    return found;
  }

  function row(p, inWorkers) {
    const cls = STATE_CLASS[p.state] ?? "";
    const error = p.error || inWorkers[p.name];
    return h("tr", { dataset: { plugin: p.name, state: p.state }, class: p.state === "disabled" ? "off" : "" },
      h("td", null, h("div", { class: "device-name" }, p.name)),
      h("td", null, h("span", { class: "chip" }, p.source)),
      h("td", null, p.version || h("span", { class: "muted" }, "—")),
      h("td", null, h("span", { class: `chip ${cls}`, dataset: { role: "state" } }, p.state)),
      h("td", null, hooks(p)),
      h("td", { dataset: { role: "error" } }, error
        ? [error, p.errors > 1 ? h("div", { class: "muted small" }, `${p.errors} errors`) : null]
        : h("span", { class: "muted" }, "—")));
  }

  async function load() {
    try {
      const { plugins, workers } = await api("/api/plugins");
      const inWorkers = workerErrors(workers);
      body.replaceChildren(
        h("div", { class: "card hint" }, "Install a plugin with ", h("code", null, "pip install"), " (entry-point group ",
          h("code", null, "picobot.plugins"), ") or drop a ", h("code", null, ".py"), " file in ",
          h("code", null, "$PICOBOT_HOME/plugins/"), ", then restart PicoBot. A hook error in a turn is shown with the worker that ran it."),
        h("div", { class: "card table-card" }, h("table", { class: "devices skills plugins", id: "plugins-table" },
          h("thead", null, h("tr", null, ["Name", "Source", "Version", "State", "Hooks", "Last error"].map((t) => h("th", null, t)))),
          h("tbody", null, plugins.map((p) => row(p, inWorkers))))));
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  }

  return { el, show: load };
}
