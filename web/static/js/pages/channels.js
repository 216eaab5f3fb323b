// Channels: every channel (the built-in web and cli_chat, and each one in config.json) with its state
// as the channel's intake reports it (polling, login_required, …), its deliveries by status and the
// newest ones, a retry for a failed one, and — for WeChat — the QR login (GET/POST /api/channels…).

import { h, fmtTime } from "../dom.js";
import { api } from "../api.js";
import { pageFrame, errorBox } from "./common.js";

const EVERY_MS = 3000;
const STATUSES = ["pending", "sent", "failed", "deferred"];

export function createPage(ctx) {
  const { el, body } = pageFrame(ctx, "channels", "Channels", "Where people reach the agent: state and deliveries, live.");
  let timer = null;
  const logins = {}; // channel key -> last login view

  function counts(c) {
    const parts = STATUSES.filter((s) => c.counts[s]).map((s) =>
      h("span", { class: `chip ${s === "failed" ? "bad" : s === "sent" ? "ok" : ""}`, dataset: { count: s } }, `${c.counts[s]} ${s}`));
    return parts.length ? h("div", { class: "chips" }, parts) : h("span", { class: "muted" }, "no deliveries yet");
  }

  async function retry(id) {
    try { await api(`/api/deliveries/${id}/retry`, { method: "POST" }); } catch (err) { alert(err.message || err); }
    load();
  }

  function delivery(d) {
    return h("tr", { dataset: { delivery: String(d.id), status: d.status } },
      h("td", null, fmtTime(d.created_at)),
      h("td", null, h("code", null, d.chat_id)),
      h("td", null, d.kind),
      h("td", null, h("span", { class: `chip ${d.status === "failed" ? "bad" : d.status === "sent" ? "ok" : ""}` }, d.status)),
      h("td", { class: "muted" }, d.text),
      h("td", null, d.error ? h("span", { class: "bad-text" }, d.error) : ""),
      h("td", null, d.status === "failed" ? h("button", { class: "btn small", onclick: () => retry(d.id) }, "Retry") : ""));
  }

  async function startLogin(key, force) {
    try { logins[key] = await api(`/api/channels/${key}/login`, { method: "POST", body: { force } }); } catch (err) { alert(err.message || err); }
    load();
  }

  function loginBox(c) {
    const view = logins[c.key];
    const box = h("div", { class: "channel-login", dataset: { role: "login" } });
    if (view && view.state !== "idle") {
      box.append(h("div", null, h("strong", null, "Login: "), h("span", { dataset: { role: "login-state" } }, view.state)));
      if (view.qr && view.state === "waiting") box.append(h("pre", { class: "qr", dataset: { role: "qr" } }, view.qr));
      if (view.url && view.state === "waiting") box.append(h("div", null, "Or open on the phone: ", h("code", null, view.url)));
      view.lines.forEach((line) => box.append(h("div", { class: "muted small" }, line)));
    }
    if (!view || view.state !== "waiting") {
      box.append(h("button", { class: "btn", onclick: () => startLogin(c.key, false) }, c.state === "login_required" ? "Log in (QR)" : "Log in again"),
        " ", h("button", { class: "btn subtle", onclick: () => startLogin(c.key, true) }, "Discard the saved login and log in"));
    }
    return box;
  }

  function card(c) {
    const rows = c.deliveries.length
      ? h("div", { class: "table-scroll" }, h("table", { class: "devices deliveries" }, h("thead", null, h("tr", null,
          ["When", "Chat", "Kind", "Status", "Text", "Error", ""].map((t) => h("th", null, t)))),
        h("tbody", null, c.deliveries.map(delivery))))
      : null;
    return h("div", { class: `card check ${c.ok ? "ok" : "bad"}`, dataset: { channel: c.key, state: c.state } },
      h("div", { class: "check-head" }, h("span", { class: `dot ${c.ok ? "ok" : "bad"}` }),
        h("span", { class: "check-name" }, c.key),
        h("span", { class: "chip" }, c.type),
        h("span", { class: `chip ${c.ok ? "ok" : "bad"}`, dataset: { role: "state" } }, c.enabled ? c.state : "disabled")),
      c.detail ? h("div", { class: "check-detail", dataset: { role: "detail" } }, c.detail) : null,
      counts(c), c.login ? loginBox(c) : null, rows);
  }

  async function refreshLogins(channels) {
    await Promise.all(channels.filter((c) => c.login).map(async (c) => {
      try { logins[c.key] = await api(`/api/channels/${c.key}/login`); } catch { /* shown on the next load */ }
    }));
  }

  async function load() {
    try {
      const { channels } = await api("/api/channels");
      await refreshLogins(channels);
      body.replaceChildren(h("div", { class: "channel-list", id: "channels" }, channels.map(card)));
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  }

  return {
    el,
    show() { load(); timer = setInterval(() => { if (document.visibilityState === "visible") load(); }, EVERY_MS); },
    hide() { clearInterval(timer); },
  };
}
