"""The browser capability: a real headless Chromium for the agent (docs/BROWSER.md).

    plugin.py    the plugin: the `browser` and `browser_profiles` tools, /health, shutdown
    tool.py      the tools: argument checks, one engine call each
    engine.py    the loop thread that owns Playwright, the shared Chromium and the contexts
    actions.py   what each action does to a page
    guard.py     the network guard on every request a page makes
    profiles.py  named profiles under <home>/browser_profiles
"""
