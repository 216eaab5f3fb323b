// The dialog's transcript: stored messages keyed by id (so a reconnect or a history refresh
// never duplicates one), live turns below them, then the user's messages still waiting
// for an answer from the gateway or for their turn (each showing its fate).

import { h } from "../dom.js";
import { LiveTurn, renderStored, userBubble, speechPlayer, textOf, FINAL, SPOKEN_MARK } from "./messages.js";
import { api } from "../api.js";

// What the server offers for voice (GET /api/voice), asked once; history may be drawn before it answers.
const voiceReady = api("/api/voice").then((v) => v || { tts: false }).catch(() => ({ tts: false }));

const STICK_PX = 120; // "at the bottom" tolerance: follow the stream unless the user scrolled up
const FIRST_CHUNK = 16; // messages drawn before the first paint: about a screenful of a typical chat
const LATER_CHUNK = 60; // then the older ones, this many per task, so the page stays responsive

export class Transcript {
  constructor(scroller, { onLoadEarlier } = {}) {
    this.scroller = scroller;
    this.messages = new Map(); // id -> stored message
    this.rendered = new Map(); // id -> element (or null when folded into a tool block)
    this.tools = new Map(); // tool call id -> ToolView
    this.lives = new Map(); // turn id -> LiveTurn
    this.pending = new Map(); // local id -> {el, content, fate, seq}
    this.fates = new Map(); // inbound seq -> fate, for user blocks of live turns
    this.seenSeqs = new Set(); // inbound seqs a turn has already shown or finished
    this.lastPosition = -1;
    this.generation = 0;
    this.earlier = h("button", { class: "btn ghost load-earlier", type: "button" }, "Load earlier messages");
    this.earlier.hidden = true;
    if (onLoadEarlier) this.earlier.addEventListener("click", onLoadEarlier);
    this.list = h("div", { class: "messages" });
    this.liveEl = h("div", { class: "lives" });
    this.pendingEl = h("div", { class: "pending" });
    this.empty = h("div", { class: "empty" }, h("div", { class: "empty-title" }, "Start a conversation"),
      h("div", { class: "muted" }, "Ask anything. PicoBot can use tools, and you can attach images."));
    this.el = h("div", { class: "transcript" }, this.earlier, this.empty, this.list, this.liveEl, this.pendingEl);
    // Off-screen messages (content-visibility) settle their real height frames later, on a busy
    // machine many frames later: while the reader is at the end, every size change keeps them there.
    this.pinned = true;
    scroller.addEventListener("scroll", () => { this.pinned = this.atBottom(); }, { passive: true });
    if (typeof ResizeObserver === "function") {
      new ResizeObserver(() => { if (this.pinned) scroller.scrollTop = scroller.scrollHeight; }).observe(this.el);
    }
  }

  atBottom(slack = STICK_PX) {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < slack;
  }

  // Run a DOM change, then keep following the bottom if we were there.
  change(fn, forceBottom = false) {
    const stick = forceBottom || this.atBottom();
    const result = fn();
    if (stick) this.scroller.scrollTop = this.scroller.scrollHeight;
    this.updateEmpty();
    return result;
  }

  updateEmpty() {
    this.empty.hidden = this.messages.size > 0 || this.lives.size > 0 || this.pending.size > 0;
  }

  // A new dialog (or the first load): replace everything. The newest messages are drawn first
  // and painted; the older ones are drawn in the next task and slid in above them, so a long
  // dialog shows its end at once (scripts/bench/ui.py measures this first paint).
  reset(messages, { hasMore = false, onPainted = null, progressive = true } = {}) {
    this.messages.clear();
    this.rendered.clear();
    this.tools.clear();
    this.list.replaceChildren();
    this.lastPosition = -1;
    this.spoke = false;
    for (const live of this.lives.values()) live.el.remove();
    this.lives.clear();
    this.earlier.hidden = !hasMore;
    const generation = ++this.generation;
    let split = progressive ? Math.max(0, messages.length - FIRST_CHUNK) : 0;
    while (split > 0 && messages[split].role === "tool") split--; // keep a tool result with its call
    const older = messages.slice(0, split);
    for (const msg of older) this.messages.set(msg.id, msg); // known now, drawn below
    this.change(() => this.list.append(this.build(messages.slice(split))), true);
    // rAF runs just before the frame is painted; a task queued from it runs just after.
    requestAnimationFrame(() => setTimeout(() => {
      if (onPainted) onPainted();
      this.prependOlder(older, generation);
    }, 0));
  }

  // Draw `older` (oldest first) above what is shown, newest part first, one chunk per task.
  prependOlder(older, generation) {
    if (generation !== this.generation) return; // replaced meanwhile
    if (!older.length) {
      if (!this.completed) performance.mark("picobot:history-complete"); // bench: scripts/bench/ui.py
      this.completed = true;
      return;
    }
    let split = Math.max(0, older.length - LATER_CHUNK);
    while (split > 0 && older[split].role === "tool") split--;
    const pinned = this.atBottom(); // a reader at the end stays at the end
    const fromBottom = this.scroller.scrollHeight - this.scroller.scrollTop;
    const laterTools = this.tools;
    const spoke = this.spoke; // where the newest message left it: later messages follow that one
    this.tools = new Map(); // the chunk's own calls; a result always follows its call
    this.spoke = false;
    const frag = this.build(older.slice(split));
    this.tools = new Map([...this.tools, ...laterTools]);
    this.spoke = spoke;
    this.list.prepend(frag);
    if (pinned) {
      this.scroller.scrollTop = this.scroller.scrollHeight;
      // off-screen messages (content-visibility) settle their real height on the next frame
      requestAnimationFrame(() => { if (this.atBottom(4 * STICK_PX)) this.scroller.scrollTop = this.scroller.scrollHeight; });
    } else {
      this.scroller.scrollTop = this.scroller.scrollHeight - fromBottom; // the reader's view stays put
    }
    setTimeout(() => this.prependOlder(older.slice(0, split), generation), 0);
  }

  build(messages) {
    const frag = document.createDocumentFragment();
    for (const msg of messages) {
      this.messages.set(msg.id, msg);
      const el = renderStored(msg, this.tools);
      this.rendered.set(msg.id, el);
      if (msg.role === "user") this.spoke = textOf(msg.content).startsWith(SPOKEN_MARK);
      else if (this.spoke && el && msg.role === "assistant" && !msg.marker && !(msg.tool_calls || []).length
        && textOf(msg.content).trim()) {
        this.spoke = false; // the answer to a voice message: it can be heard too (with voice.tts)
        const slot = h("div", { class: "speech-slot" });
        el.append(slot);
        voiceReady.then((v) => { if (v.tts) slot.replaceWith(speechPlayer(msg.id)); else slot.remove(); });
      }
      if (el) frag.append(el);
      this.lastPosition = Math.max(this.lastPosition, msg.position);
    }
    return frag;
  }

  appendAll(messages) {
    this.list.append(this.build(messages));
  }

  // Fresh history from the server: add what we do not have, in true order.
  merge(messages, { hasMore } = {}) {
    const fresh = messages.filter((m) => !this.messages.has(m.id));
    if (hasMore !== undefined) this.earlier.hidden = !hasMore;
    if (!fresh.length) return;
    if (fresh.some((m) => m.position < this.lastPosition)) {
      const all = [...this.messages.values(), ...fresh].sort((a, b) => a.position - b.position);
      const top = this.scroller.scrollHeight - this.scroller.scrollTop;
      this.reset(all, { hasMore: !this.earlier.hidden, progressive: false });
      this.scroller.scrollTop = this.scroller.scrollHeight - top; // keep the reader's place
      return;
    }
    this.change(() => this.appendAll(fresh.sort((a, b) => a.position - b.position)));
  }

  // --- live turns ---------------------------------------------------------------------------

  snapshot(snap) {
    let live = this.lives.get(snap.turn_id);
    if (!live) {
      live = new LiveTurn(snap.turn_id);
      this.lives.set(snap.turn_id, live);
      this.liveEl.append(live.el);
    }
    this.change(() => {
      live.update(snap, this.fates);
      for (const block of snap.blocks || []) if (block.type === "user") this.dropPendingSeq(block.seq);
    });
  }

  // After a ready/session frame: only the server's active turn stays live; the rest is history.
  keepOnlyLive(activeTurnId) {
    this.removeLives([...this.lives.keys()].filter((id) => id !== activeTurnId));
  }

  // Finished turns give way to their stored messages (called once fresh history is merged).
  removeLives(ids) {
    for (const id of ids) {
      const live = this.lives.get(id);
      if (live) {
        live.el.remove();
        this.lives.delete(id);
      }
    }
    this.updateEmpty();
  }

  finishedTurns() {
    return [...this.lives.values()].filter((l) => FINAL.has(l.status)).map((l) => l.turnId);
  }

  running() {
    return [...this.lives.values()].some((l) => !FINAL.has(l.status));
  }

  // Accepted messages whose turn has not shown them yet (a turn is about to run).
  waiting() {
    return [...this.pending.values()].some((e) => ["sending", "started", "steered", "queued"].includes(e.fate));
  }

  // --- the user's own messages before the turn shows them ----------------------------------

  addPending(localId, content) {
    const entry = { content, fate: "sending", seq: null, el: userBubble(content, { fate: "sending" }) };
    this.pending.set(localId, entry);
    this.change(() => this.pendingEl.append(entry.el), true);
  }

  setFate(localId, fate, { seq = null, detail = "" } = {}) {
    const entry = this.pending.get(localId);
    if (!entry) return;
    entry.fate = fate;
    entry.seq = seq;
    if (seq !== null) this.fates.set(seq, fate);
    const el = userBubble(entry.content, { fate, detail });
    entry.el.replaceWith(el);
    entry.el = el;
    // Already shown by a snapshot (it can beat the accepted frame): drop the copy.
    if (seq !== null && this.seenSeqs.has(seq)) this.dropPendingSeq(seq);
  }

  dropPendingSeq(seq) {
    this.seenSeqs.add(seq);
    for (const [id, entry] of this.pending) {
      if (entry.seq === seq) {
        entry.el.remove();
        this.pending.delete(id);
      }
    }
  }

  dropPendingSeqs(seqs) {
    for (const seq of seqs || []) this.dropPendingSeq(seq);
    this.updateEmpty();
  }

  // Another dialog: sequence numbers and waiting messages belonged to the old one.
  clearSession() {
    for (const entry of this.pending.values()) entry.el.remove();
    this.pending.clear();
    this.fates.clear();
    this.seenSeqs.clear();
    this.pendingEl.replaceChildren();
  }

  notice(text, kind = "") {
    const el = h("div", { class: `notice command-reply ${kind}` }, h("pre", null, text));
    this.change(() => this.pendingEl.append(el), true);
    return el;
  }
}
