// Opens /ws as early as the page allows. This small classic script runs as soon as it arrives,
// while the app's modules are still loading; socket.js then adopts the socket together with
// the frames that came meanwhile, so the server prepares the history in parallel with our load.
(function () {
  "use strict";
  try {
    var id = localStorage.getItem("picobot.chat_id");
    if (!id || !/^[A-Za-z0-9_.@-]{1,128}$/.test(id)) return; // first visit: app.js creates the id
    var query = new URLSearchParams({ channel: "web", chat_id: id });
    performance.mark("picobot:ws-start"); // bench: scripts/bench/ui.py
    var ws = new WebSocket((location.protocol === "https:" ? "wss:" : "ws:") + "//" + location.host + "/ws?" + query);
    var early = { ws: ws, chatId: id, frames: [], open: false, closed: false };
    ws.onopen = function () { early.open = true; performance.mark("picobot:ws-open"); };
    ws.onmessage = function (ev) { early.frames.push(ev.data); };
    ws.onclose = function () { early.closed = true; };
    window.__picobotEarlySocket = early;
  } catch (err) {
    // no storage or no WebSocket: the app connects the ordinary way
  }
})();
