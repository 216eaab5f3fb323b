// The chat page: header (dialog title, model picker, token totals and context-window use, dialog actions),
// the transcript, and the composer. It speaks the /ws protocol through ctx.socket.

import { h, icon, fmtTokens } from "../dom.js";
import { Transcript } from "./transcript.js";
import { Composer } from "./composer.js";
import { DialogList } from "./dialogs.js";
import { ModelPicker } from "./model.js";
import { PlanPanel } from "./plan.js";
import { ApprovalCards } from "./approvals.js";

const FIRST_LIMIT = 200; // what the server's ready frame carries
const MAX_LIMIT = 1000;

export function createPage(ctx) {
  return new ChatPage(ctx);
}

class ChatPage {
  constructor(ctx) {
    this.ctx = ctx;
    this.socket = ctx.socket;
    this.session = null;
    this.limit = FIRST_LIMIT;
    this.seq = 0;
    this.painted = false;
    this.title = h("h1", { class: "chat-title", id: "chat-title" }, "PicoBot");
    this.sub = h("span", { class: "chat-sub" });
    this.usage = h("div", { class: "usage", id: "usage", title: "Token totals and context-window use (/info)" });
    this.renameBtn = this.action("edit", "Rename this dialog", () => this.startRename());
    this.archiveBtn = this.action("archive", "Archive this dialog", () => this.command("/archive"));
    this.deleteBtn = this.action("trash", "Delete this dialog", () => this.confirmDelete());
    const menu = h("button", { class: "icon-btn menu-btn", type: "button", "aria-label": "Open navigation" }, icon("menu"));
    menu.addEventListener("click", () => ctx.openNav());
    this.titleWrap = h("div", { class: "chat-title-wrap" }, this.title, this.sub);
    this.picker = new ModelPicker({ command: (text) => this.socket.command(text),
      notice: (text, kind) => this.transcript.notice(text, kind) });
    this.plan = new PlanPanel();
    const header = h("header", { class: "chat-head" }, menu, this.titleWrap, this.picker.el, this.usage,
      h("div", { class: "chat-actions" }, this.plan.toggle, this.renameBtn, this.archiveBtn, this.deleteBtn));
    this.scroller = h("div", { class: "chat-scroll", id: "chat-scroll" });
    this.transcript = new Transcript(this.scroller, { onLoadEarlier: () => this.loadEarlier() });
    this.approvals = new ApprovalCards({ command: (text) => this.socket.command(text) });
    this.scroller.append(this.transcript.el, this.approvals.el);
    this.composer = new Composer({ onSend: (c, mode) => this.send(c, mode), onStop: () => this.stop() });
    const banner = h("div", { class: "conn-banner", role: "status" }, h("span", { class: "spinner" }),
      "Connection lost — reconnecting. Messages will catch up by themselves.");
    this.el = h("section", { class: "page chat-page", id: "chat-page" }, header, banner,
      h("div", { class: "chat-body" }, h("div", { class: "chat-col" }, this.scroller, this.composer.el), this.plan.el));
    this.dialogs = new DialogList({ chatId: ctx.chatId, onNew: () => this.command("/new"),
      onList: (list) => { this.preview = (list.find((d) => d.session_id === this.session?.session_id) || {}).preview; this.renderTitle(); },
      onSwitch: (s) => { ctx.closeNav(); ctx.go("chat"); if (s.session_id !== this.session?.session_id) this.command(`/switch ${s.dialog_id}`); } });
    ctx.dialogsSlot.append(this.dialogs.el);
    this.listen();
  }

  action(name, label, fn) {
    const btn = h("button", { class: "icon-btn", type: "button", title: label, "aria-label": label }, icon(name));
    btn.addEventListener("click", fn);
    return btn;
  }

  listen() {
    const s = this.socket;
    const mine = (f) => this.session && f.session_id === this.session.session_id;
    s.on("ready", (f) => this.onState(f));
    s.on("session", (f) => this.onState(f));
    s.on("turn_updated", (f) => { if (mine(f)) { this.transcript.snapshot(f); this.updateBusy(); } });
    s.on("turn_completed", (f) => {
      if (!mine(f)) return;
      this.transcript.dropPendingSeqs(f.inbound_seqs);
      this.refreshHistory();
      this.refreshInfo();
      this.dialogs.refreshSoon();
    });
    s.on("message", (f) => { if (mine(f)) this.refreshHistory(); });
    s.on("approval_requested", (f) => { if (mine(f)) this.approvals.requested(f); });
    s.on("approval_decided", (f) => { if (mine(f)) this.approvals.decided(f); });
    // a title written in the background after the first answer (or any later change of the dialog)
    s.on("session_updated", (f) => {
      if (!mine(f)) return;
      if (typeof f.title === "string") { this.session.title = f.title; this.renderTitle(); }
      this.dialogs.refreshSoon(0);
    });
    // the dialog's plan: its state when the socket starts watching it, then every change (other dialogs' too)
    s.on("session_plan", (f) => { if (mine(f)) this.plan.show(f.plan, false); });
    s.on("plan_updated", (f) => {
      if (mine(f)) this.plan.show(f.plan, true);
      else if (typeof f.session_id === "string") this.dialogs.markUnread(f.session_id);
    });
    s.on("error", (f) => { if (f.id === undefined || f.id === null) this.transcript.notice(f.error || "Error", "error"); });
    s.on("status", (st) => { this.composer.setConnected(st === "open"); this.el.dataset.conn = st; });
    this.composer.setConnected(false);
  }

  // `ready` (every (re)connect) and `session` (dialog changed) carry the full current state.
  onState(frame) {
    if (!this.painted) performance.mark("picobot:ready-received");
    const info = frame.session;
    const changed = !this.session || this.session.session_id !== info.session_id;
    if (changed) this.preview = "";
    // a dialog with a plan: its session_plan frame follows this one
    if (changed) this.plan.reset(); else this.plan.show(null, false);
    this.session = info;
    this.renderTitle();
    const messages = frame.history || [];
    let onPainted = null;
    if (!this.painted) {
      this.painted = true;
      // After the frame that shows the history has been painted (bench: scripts/bench/ui.py).
      onPainted = () => {
        performance.mark("picobot:history-painted");
        document.body.dataset.historyPainted = String(messages.length);
      };
    }
    if (changed) this.approvals.clear();
    this.approvals.load(info.session_id); // a card asked while disconnected (or before a reload) shows too
    if (changed) {
      this.limit = FIRST_LIMIT;
      this.transcript.clearSession();
      this.transcript.reset(messages, { hasMore: messages.length >= this.limit, onPainted });
    } else {
      this.transcript.merge(messages, { hasMore: messages.length >= this.limit }); // catch up, no duplicates
    }
    this.transcript.keepOnlyLive(frame.active_turn ? frame.active_turn.turn_id : null);
    if (frame.active_turn) this.transcript.snapshot(frame.active_turn);
    this.updateBusy();
    this.dialogs.setCurrent(info.session_id);
    this.dialogs.refreshSoon(0);
    this.refreshInfo();
  }

  refreshHistory() {
    const settled = this.transcript.finishedTurns();
    this.socket.request({ type: "history", limit: this.limit }).then((f) => {
      if (!this.session || f.session_id !== this.session.session_id) return;
      this.transcript.merge(f.messages || [], { hasMore: (f.messages || []).length >= this.limit });
      this.transcript.removeLives(settled);
      if (f.active_turn) this.transcript.snapshot(f.active_turn);
      this.updateBusy();
    }).catch(() => {}); // dropped: the next ready frame catches up
  }

  loadEarlier() {
    this.limit = MAX_LIMIT;
    this.refreshHistory();
  }

  updateBusy() {
    this.composer.setBusy(this.transcript.running() || this.transcript.waiting());
  }

  send(content, mode) {
    if (typeof content === "string") {
      const text = content.trim();
      if (text === "/stop") { this.stop(); return true; }
      const queued = /^\/queue\s+([\s\S]+)$/.exec(text);
      if (queued) return this.send(queued[1], "queue");
      if (text.startsWith("/") && !text.startsWith("//")) { this.command(text, true); return true; }
    }
    if (this.socket.status !== "open") {
      this.transcript.notice("Not connected — reconnecting. Your message is still in the box.", "warn");
      return false;
    }
    const id = `m${++this.seq}-${Date.now().toString(36)}`;
    this.transcript.addPending(id, content);
    this.socket.request({ type: "message", content, mode, id }).then((f) => {
      if (f.type === "accepted") {
        this.transcript.setFate(id, f.fate, { seq: f.seq });
        if (!this.preview && !this.session?.title) this.dialogs.refreshSoon(); // its first line names it
      } else {
        this.transcript.setFate(id, "rejected", { detail: f.error || f.code || "rejected" });
      }
      this.updateBusy();
    }).catch(() => {
      this.transcript.setFate(id, "lost", { detail: "The connection dropped before the gateway answered; the history shows whether it arrived." });
    });
    this.updateBusy();
    return true;
  }

  stop() {
    this.socket.command("/stop").catch(() => {});
  }

  // A slash command; `show` prints its reply in the transcript (typed by the user).
  command(text, show = false) {
    return this.socket.command(text).then((f) => {
      if (show || f.code) this.transcript.notice(f.text || f.error || JSON.stringify(f), f.code ? "warn" : "");
      if (f.data && f.data.command === "/rename" && this.session && f.data.session_id === this.session.session_id) {
        this.session.title = f.data.title;
        this.renderTitle();
        this.dialogs.refreshSoon(0);
      }
      if (f.data && f.data.command === "/info") this.renderUsage(f.data);
      if (f.data && (f.data.command === "/model" || f.data.command === "/provider")) {
        this.picker.render(f.data);
        this.refreshInfo();
      }
      return f;
    }).catch((err) => this.transcript.notice(`Could not run ${text.split(" ")[0]}: ${err.message}`, "warn"));
  }

  refreshInfo() {
    this.socket.command("/info --json").then((f) => { if (f.data) this.renderUsage(f.data); }).catch(() => {});
    if (this.session) this.picker.refresh(this.session.session_id);
  }

  renderTitle() {
    const s = this.session;
    this.title.textContent = (s && s.title) || this.preview || "New chat";
    this.title.classList.toggle("untitled", !(s && s.title));
    this.sub.textContent = s ? s.dialog_id : "";
  }

  renderUsage(info) {
    if (!this.session || info.session_id !== this.session.session_id) return;
    const pct = Math.min(100, Number(info.context_used_pct) || 0);
    const fill = h("div", { class: "ctx-fill" + (pct > 80 ? " high" : "") });
    fill.style.width = `${pct}%`; // CSSOM property, permitted by style-src 'self'
    this.usage.replaceChildren(
      h("span", { class: "usage-tokens" }, `${fmtTokens(info.input_tokens)} in · ${fmtTokens(info.output_tokens)} out`),
      h("span", { class: "ctx", title: `${info.context_tokens} of ${info.context_window_tokens} tokens of context used` },
        h("span", { class: "ctx-bar" }, fill), `${pct}% of ${fmtTokens(info.context_window_tokens)}`));
  }

  startRename() {
    const input = h("input", { class: "rename-input", value: this.session?.title || "", maxlength: 256, "aria-label": "Dialog title" });
    const done = (save) => {
      if (!input.isConnected) return;
      input.replaceWith(this.title);
      const title = input.value.trim();
      if (save && title && title !== this.session?.title) this.command(`/rename ${title}`);
    };
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") done(true);
      if (e.key === "Escape") done(false);
    });
    input.addEventListener("blur", () => done(true));
    this.title.replaceWith(input);
    input.focus();
    input.select();
  }

  confirmDelete() {
    if (this.deleteBtn.classList.contains("confirm")) {
      this.deleteBtn.classList.remove("confirm");
      this.command("/delete");
      return;
    }
    this.deleteBtn.classList.add("confirm");
    this.deleteBtn.title = "Click again to delete this dialog";
    setTimeout(() => { this.deleteBtn.classList.remove("confirm"); this.deleteBtn.title = "Delete this dialog"; }, 3000);
  }

  show() {
    if (this.session) this.dialogs.refreshSoon(0);
  }
}
