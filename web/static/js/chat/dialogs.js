// The sidebar's dialog list for this browser's chat: new, switch (and show archived ones).
// Rename, archive and delete act on the current dialog from the chat header, exactly as the
// /rename, /archive and /delete commands do in the terminal.

import { h, icon, fmtAgo } from "../dom.js";
import { api } from "../api.js";

export class DialogList {
  constructor({ chatId, onNew, onSwitch, onList }) {
    this.chatId = chatId;
    this.onSwitch = onSwitch;
    this.onList = onList || (() => {});
    this.showArchived = false;
    this.currentId = null;
    this.unread = new Set(); // dialogs whose plan changed while another one was shown
    this.list = h("ul", { class: "dialog-list", id: "dialog-list" });
    this.archivedToggle = h("input", { type: "checkbox", id: "show-archived" });
    this.archivedToggle.addEventListener("change", () => {
      this.showArchived = this.archivedToggle.checked;
      this.refresh();
    });
    const newBtn = h("button", { class: "btn new-chat", type: "button", id: "new-chat" }, icon("plus"), "New chat");
    newBtn.addEventListener("click", onNew);
    this.el = h("div", { class: "dialogs-inner" },
      newBtn,
      h("div", { class: "nav-heading" }, "Dialogs"),
      this.list,
      h("label", { class: "archived-toggle", for: "show-archived" }, this.archivedToggle, "Show archived"));
    this.timer = null;
  }

  // Coalesce bursts (a turn ending and a session change arrive together).
  refreshSoon(delay = 150) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.refresh(), delay);
  }

  async refresh() {
    const q = new URLSearchParams({ chat_id: this.chatId, channel: "web", archived: this.showArchived ? "1" : "0" });
    let data;
    try {
      data = await api(`/api/sessions?${q}`);
    } catch {
      return; // offline: keep what we show
    }
    this.render(data.sessions);
  }

  setCurrent(sessionId) {
    this.currentId = sessionId;
    this.unread.delete(sessionId);
    for (const li of this.list.children) {
      li.classList.toggle("current", li.dataset.session === sessionId);
      li.classList.toggle("plan-unread", this.unread.has(li.dataset.session));
    }
  }

  // Another dialog's plan changed: a mark on it until it is shown.
  markUnread(sessionId) {
    if (sessionId === this.currentId) return;
    this.unread.add(sessionId);
    for (const li of this.list.children) if (li.dataset.session === sessionId) li.classList.add("plan-unread");
  }

  render(sessions) {
    this.list.replaceChildren(...sessions.map((s) => {
      const title = s.title || s.preview || "New chat";
      const item = h("li", { class: "dialog" + (s.archived ? " archived" : ""), dataset: { session: s.session_id, dialog: s.dialog_id } },
        h("button", { type: "button", class: "dialog-btn", title: `${title} (${s.dialog_id})` },
          h("span", { class: "dialog-title" }, title),
          h("span", { class: "dialog-meta" }, s.archived ? "archived · " : "", fmtAgo(s.updated_at),
            h("span", { class: "plan-dot", title: "Its plan changed" }))));
      item.firstChild.addEventListener("click", () => this.onSwitch(s));
      return item;
    }));
    this.setCurrent(this.currentId);
    this.onList(sessions);
  }
}
