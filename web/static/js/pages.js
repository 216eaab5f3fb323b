// The app's pages, in navigation order. A later capability (memories, scheduled jobs, skills,
// sub-agents, MCP servers, channels) adds one entry here and one module under pages/ that
// exports createPage(ctx) -> {el, title, show(), hide()}; nothing else in the app changes.
// `group` places the link: "main" above the dialog list, "manage" in the management section.

export const PAGES = [
  { id: "chat", title: "Chat", icon: "chat", group: "main", load: () => import("./chat/page.js") },
  { id: "health", title: "Health", icon: "pulse", group: "manage", load: () => import("./pages/health.js") },
  { id: "config", title: "Config", icon: "sliders", group: "manage", load: () => import("./pages/config.js") },
  { id: "devices", title: "Devices", icon: "devices", group: "manage", load: () => import("./pages/devices.js") },
  { id: "agents", title: "Agents", icon: "copy", group: "manage", load: () => import("./pages/agents.js") },
  { id: "skills", title: "Skills", icon: "book", group: "manage", load: () => import("./pages/skills.js") },
  { id: "channels", title: "Channels", icon: "chat", group: "manage", load: () => import("./pages/channels.js") },
  { id: "deliveries", title: "Deliveries", icon: "send", group: "manage", load: () => import("./pages/deliveries.js") },
  { id: "subagents", title: "Sub-agent runs", icon: "copy", group: "manage", load: () => import("./pages/subagents.js") },
  { id: "mcp", title: "MCP servers", icon: "tool", group: "manage", load: () => import("./pages/mcp.js") },
  { id: "plugins", title: "Plugins", icon: "tool", group: "manage", load: () => import("./pages/plugins.js") },
  { id: "memories", title: "Memories", icon: "brain", group: "manage", load: () => import("./pages/memories.js") },
  { id: "knowledge", title: "Knowledge", icon: "book", group: "manage", load: () => import("./pages/knowledge.js") },
  { id: "jobs", title: "Jobs", icon: "clock", group: "manage", load: () => import("./pages/jobs.js") },
  { id: "logs", title: "Logs", icon: "pulse", group: "manage", load: () => import("./pages/logs.js") },
  { id: "usage", title: "Usage", icon: "bars", group: "manage", load: () => import("./pages/usage.js") },
];

export const DEFAULT_PAGE = "chat";
