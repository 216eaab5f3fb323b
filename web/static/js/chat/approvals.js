// Approval cards: a tool call waiting for the user's yes or no (frames approval_requested and
// approval_decided; docs/APPROVALS.md). A button sends /approve or /deny over the socket, exactly
// as typing it would; every socket of the dialog gets approval_decided, so every card updates.

import { h } from "../dom.js";

const LABELS = { approved: "Approved", denied: "Denied", expired: "Expired — nobody answered in time",
  cancelled: "Cancelled — the turn was stopped" };
const SHOW_DECIDED = 3; // decided ones shown after a reload, newest first

export class ApprovalCards {
  constructor({ command }) {
    this.command = command;
    this.cards = new Map(); // approval id -> {el, status, ...}
    this.el = h("div", { class: "approvals", id: "approvals" });
  }

  clear() {
    this.cards.clear();
    this.el.replaceChildren();
  }

  // The dialog's approvals as /approvals lists them (on connect and on a dialog change).
  load(sessionId) {
    return this.command("/approvals").then((f) => {
      const list = (f.data && Array.isArray(f.data.approvals)) ? f.data.approvals : [];
      if (f.data && f.data.session_id && f.data.session_id !== sessionId) return;
      let decided = 0;
      for (const a of list.slice().reverse()) {
        const keep = a.status === "pending" || this.cards.has(a.approval_id) || list.indexOf(a) < SHOW_DECIDED;
        if (a.status !== "pending") decided++;
        if (keep) this.upsert(a);
      }
      return decided;
    }).catch(() => {});
  }

  requested(f) { this.upsert({ ...f, status: "pending" }); }

  decided(f) {
    const card = this.cards.get(f.approval_id);
    if (card) this.upsert({ ...card.data, ...f });
  }

  upsert(a) {
    const old = this.cards.get(a.approval_id);
    const data = { ...(old ? old.data : {}), ...a };
    const el = this.render(data);
    if (old) old.el.replaceWith(el); else this.el.append(el);
    this.cards.set(a.approval_id, { el, data });
  }

  render(a) {
    const pending = a.status === "pending";
    const head = h("div", { class: "approval-head" }, h("strong", null, pending ? "Approval needed" : "Approval"),
      " ", h("code", null, a.tool || ""), " ", h("span", { class: "muted" }, `(${a.rule || ""}) · ${a.approval_id}`));
    const body = h("pre", { class: "approval-summary" }, a.summary || "");
    const card = h("div", { class: `approval-card ${a.status}`, dataset: { approvalId: a.approval_id, status: a.status } },
      head, body);
    if (pending) {
      const buttons = [
        this.button("Approve", "primary", `/approve ${a.approval_id}`),
        this.button("Allow for this dialog", "", `/approve ${a.approval_id} session`),
        this.button("Deny", "danger", `/deny ${a.approval_id}`),
      ];
      const left = a.expires_at ? new Date(a.expires_at * 1000).toLocaleTimeString() : "";
      card.append(h("div", { class: "approval-actions" }, buttons,
        left ? h("span", { class: "muted" }, ` denied at ${left} without an answer`) : null));
    } else {
      const who = a.decided_by && a.decided_by !== "system" ? ` by ${a.decided_by} via ${a.decided_via}` : "";
      const scope = a.scope === "session" ? " (for this dialog)" : "";
      card.append(h("div", { class: "approval-outcome" }, `${LABELS[a.status] || a.status}${scope}${who}`));
    }
    return card;
  }

  button(label, kind, text) {
    const btn = h("button", { class: `btn ${kind}`.trim(), type: "button" }, label);
    btn.addEventListener("click", () => {
      for (const b of btn.parentElement.querySelectorAll("button")) b.disabled = true;
      this.command(text).then((f) => {
        const a = f.data && f.data.approval;
        if (a) this.upsert(a); // the decided frame says the same; this covers a lost one
        else for (const b of btn.parentElement.querySelectorAll("button")) b.disabled = false;
      }).catch(() => { for (const b of btn.parentElement.querySelectorAll("button")) b.disabled = false; });
    });
    return btn;
  }
}
