// The /ws connection: the same protocol as the terminal client (docs/PROTOCOL.md), plus
// automatic reconnection. After any drop the server's next `ready` frame carries the whole
// current state (history + active turn), so the page catches up from that, not from replay.

const PING_EVERY_MS = 15000;
const PONG_WAIT_MS = 8000; // no pong by then: the network dropped silently; reconnect
const BACKOFF_MS = [250, 500, 1000, 2000, 4000, 5000];

export class ChatSocket {
  constructor(chatId, { channel = "web" } = {}) {
    this.chatId = chatId;
    this.channel = channel;
    this.handlers = new Map();
    this.pending = new Map(); // frame id -> {resolve, reject}
    this.status = "connecting";
    this.attempt = 0;
    this.nextId = 1;
    this.ws = null;
    this.pingTimer = null;
    this.pongTimer = null;
    window.addEventListener("online", () => this.reconnectNow());
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible" && this.status !== "open") this.reconnectNow();
    });
  }

  on(type, fn) {
    if (!this.handlers.has(type)) this.handlers.set(type, []);
    this.handlers.get(type).push(fn);
  }

  emit(type, payload) {
    for (const fn of this.handlers.get(type) || []) {
      try {
        fn(payload);
      } catch (err) {
        console.error(`handler for ${type} failed`, err);
      }
    }
  }

  url() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const q = new URLSearchParams({ channel: this.channel, chat_id: this.chatId });
    return `${scheme}//${location.host}/ws?${q}`;
  }

  connect() {
    clearTimeout(this.retryTimer);
    this.setStatus(this.attempt ? "reconnecting" : "connecting");
    const early = window.__picobotEarlySocket; // opened by boot.js while the modules loaded
    window.__picobotEarlySocket = undefined;
    const adopt = early && !early.closed && early.chatId === this.chatId;
    if (early && !adopt) early.ws.close();
    const ws = adopt ? early.ws : new WebSocket(this.url());
    this.ws = ws;
    const opened = () => {
      if (ws !== this.ws) return;
      this.attempt = 0;
      this.setStatus("open");
      this.startPing();
    };
    const message = (data) => {
      if (ws !== this.ws) return;
      let frame;
      try {
        frame = JSON.parse(data);
      } catch {
        return;
      }
      this.receive(frame);
    };
    ws.onopen = opened;
    ws.onmessage = (ev) => message(ev.data);
    ws.onclose = () => {
      if (ws !== this.ws) return;
      this.dropped();
    };
    if (adopt) {
      if (early.open) opened();
      for (const data of early.frames) message(data);
    }
  }

  receive(frame) {
    clearTimeout(this.pongTimer);
    if (frame.id !== undefined && frame.id !== null && this.pending.has(frame.id) && frame.type !== "pong") {
      const waiter = this.pending.get(frame.id);
      this.pending.delete(frame.id);
      waiter.resolve(frame);
    }
    this.emit(frame.type, frame);
    this.emit("*", frame);
  }

  dropped() {
    this.stopPing();
    for (const waiter of this.pending.values()) waiter.reject(new Error("connection lost"));
    this.pending.clear();
    this.setStatus("reconnecting");
    const delay = BACKOFF_MS[Math.min(this.attempt, BACKOFF_MS.length - 1)];
    this.attempt++;
    // After a few failures, ask whether we are still paired: a revoked browser gets the pairing page.
    if (this.attempt === 3 || this.attempt % 10 === 0) this.emit("check-auth");
    this.retryTimer = setTimeout(() => this.connect(), delay);
  }

  reconnectNow() {
    if (this.status === "open") return;
    this.attempt = Math.min(this.attempt, 1);
    clearTimeout(this.retryTimer);
    if (this.ws && this.ws.readyState === WebSocket.CONNECTING) return;
    this.connect();
  }

  setStatus(status) {
    if (status === this.status) return;
    this.status = status;
    this.emit("status", status);
  }

  startPing() {
    this.stopPing();
    this.pingTimer = setInterval(() => {
      if (!this.send({ type: "ping", id: `ping-${this.nextId++}` })) return;
      clearTimeout(this.pongTimer);
      this.pongTimer = setTimeout(() => this.ws && this.ws.close(), PONG_WAIT_MS);
    }, PING_EVERY_MS);
  }

  stopPing() {
    clearInterval(this.pingTimer);
    clearTimeout(this.pongTimer);
  }

  send(frame) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  // Send a frame with an id and resolve with the server's answer to it (accepted, rejected,
  // command, history or error). Rejects when not connected or when the connection drops.
  request(frame, timeoutMs = 30000) {
    const id = frame.id || `r${this.nextId++}`;
    return new Promise((resolve, reject) => {
      if (!this.send({ ...frame, id })) {
        reject(new Error("not connected"));
        return;
      }
      this.pending.set(id, { resolve, reject });
      setTimeout(() => {
        if (this.pending.delete(id)) reject(new Error("no answer"));
      }, timeoutMs);
    });
  }

  command(text) {
    return this.request({ type: "command", command: text });
  }
}
