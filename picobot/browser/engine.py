"""The one place PicoBot runs Playwright: an asyncio loop on its own thread, one per worker process.

Playwright belongs to the thread that started it, so a single daemon thread owns it, the one
shared Chromium (launched on first use, headless, the system's executable) and every context.
Tool calls, from any thread, hand a coroutine to that loop and wait for it a bounded time while
watching the turn's cancel token (`run`). The loop interleaves them: calls on different contexts
run concurrently, calls on one context (one `Slot`) one after another.

Contexts:
- a dialog's temporary context (`session_id`), closed after `idle_close_secs` without use, by the
  `close` action, and when its turn is stopped;
- a named profile (`persistent_id`): `launch_persistent_context` on `<home>/browser_profiles/<id>`,
  which needs a Chromium process of its own; an advisory file lock keeps another worker process
  from opening the same profile at the same time. Different profiles run in parallel.

Every context gets the guard's routes and service workers blocked; Chromium's only way out is the
guard's proxy (guard.py). Pages are bounded by the action timeout and a V8 heap limit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

from picobot.browser.guard import Guard, ProxyFront
from picobot.browser.profiles import profile_dir
from picobot.domain.cancel import CancelToken
from picobot.errors import ToolError, TurnCancelled
from picobot.security.netpolicy import NetworkPolicy

log = logging.getLogger("picobot.browser")
T = TypeVar("T")

DEFAULT_CHROMIUM = "/usr/bin/chromium"
INSTALL_HINT = "install it with scripts/install-browser (or: apt-get install chromium), or set browser.executable"
VIEWPORT = {"width": 1280, "height": 800}
_GRACE_SECS = 2.0  # on top of an action's timeout, for the loop to deliver its own timeout
LAUNCH_SECS = 60.0  # the longest Playwright and a Chromium may take to start (not counted in an action's time)


class BrowserUnavailable(ToolError):
    """No Chromium to run: the text says how to install one."""


def chromium_path(executable: str | None) -> str:
    return executable or os.environ.get("PICOBOT_CHROMIUM") or DEFAULT_CHROMIUM


def chromium_problem(path: str) -> str | None:
    """None when `path` is an executable file; else what is wrong and how to fix it."""
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return None
    return f"Chromium was not found at {path}: {INSTALL_HINT}."


def chromium_args(max_page_memory_mb: int, extra: list[str]) -> list[str]:
    """Flags for every Chromium we launch: bounded page memory, no /dev/shm (small in containers), no
    background traffic of Chromium's own."""
    return ["--disable-dev-shm-usage", "--disable-gpu", f"--js-flags=--max-old-space-size={max_page_memory_mb}",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", "--disable-features=DnsOverHttps", *extra]


@dataclass
class Slot:
    """One browser context and its page; `lock` keeps its calls in order."""

    key: str
    context: Any = None
    page: Any = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_used: float = field(default_factory=time.monotonic)
    workspace: Path | None = None
    notes: list[str] = field(default_factory=list)  # downloads since the last answer
    refused: list[tuple[str, str]] = field(default_factory=list)  # (url, why) the guard refused for this context
    lock_file: Any = None  # a profile's advisory lock, held while it is open


class BrowserEngine:
    """`run(...)` from any thread; `close()` once, when the process stops."""

    def __init__(self, cfg: Any, policy: NetworkPolicy, home: Path) -> None:
        self.cfg = cfg
        self.home = home
        self.executable = chromium_path(cfg.executable)
        self.guard = Guard(policy)
        self._start_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pw: Any = None
        self._browser: Any = None
        self._proxy: ProxyFront | None = None
        self._slots: dict[str, Slot] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._reaper: asyncio.Task[None] | None = None

    # --- the loop thread --------------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="browser-loop", daemon=True)
                self._thread.start()
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T], cancel: CancelToken | None = None) -> T:
        """The coroutine's result, run on the loop; ToolError after the action timeout (plus the time a
        Chromium may take to start), TurnCancelled on /stop."""
        limit = self.cfg.action_timeout_secs
        future = asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())
        unregister = cancel.on_cancel(future.cancel) if cancel is not None else (lambda: None)
        try:
            return future.result(LAUNCH_SECS + limit + _GRACE_SECS)
        except (concurrent.futures.TimeoutError, asyncio.TimeoutError, TimeoutError):
            future.cancel()
            raise ToolError(f"The browser did not finish within {limit:g} s (browser.action_timeout_secs).") from None
        except concurrent.futures.CancelledError:
            raise TurnCancelled(cancel.reason if cancel is not None else "stopped") from None
        finally:
            unregister()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a coroutine on the loop without waiting (closing a stopped turn's context)."""
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(coro, self._loop)

    # --- contexts ---------------------------------------------------------------------------

    async def use(self, session_id: str, profile: str | None, workspace: Path,
                  fn: Callable[[Any, Slot], Awaitable[T]]) -> T:
        """Run fn(page, slot) on the dialog's temporary context, or on the named profile's."""
        key = f"profile:{profile}" if profile else f"session:{session_id}"
        # shielded: a stopped call leaves a Chromium that is starting to finish starting, not half made
        slot = await asyncio.wait_for(asyncio.shield(self._slot(key, profile)), LAUNCH_SECS)
        async with slot.lock:
            slot.workspace = workspace
            slot.last_used = time.monotonic()
            try:
                if slot.page is None or slot.page.is_closed():
                    slot.page = await slot.context.new_page()
                return await asyncio.wait_for(fn(slot.page, slot), self.cfg.action_timeout_secs)
            except asyncio.TimeoutError:
                await self._drop_page(slot)
                raise ToolError(f"The browser did not finish within {self.cfg.action_timeout_secs:g} s "
                                "(browser.action_timeout_secs).") from None
            except asyncio.CancelledError:
                await self._drop_page(slot)
                raise
            finally:
                slot.last_used = time.monotonic()

    async def _slot(self, key: str, profile: str | None) -> Slot:
        if key in self._slots:
            return self._slots[key]
        opening = self._opening.setdefault(key, asyncio.Lock())
        async with opening:  # two first calls of one dialog open one context
            if key not in self._slots:
                slot = Slot(key)
                if profile:
                    await self._open_profile(slot, profile)
                else:
                    slot.context = await (await self._shared()).new_context(**self._context_options())
                await self._prepare(slot)
                self._slots[key] = slot
                self._start_reaper()
            self._opening.pop(key, None)
        return self._slots[key]

    async def _drop_page(self, slot: Slot) -> None:
        """An action was cut short: its page may still be loading, so the next action gets a fresh one."""
        page, slot.page = slot.page, None
        try:
            await page.close()
        except Exception:  # already closed with its context
            pass

    def _forget(self, slot: Slot) -> None:
        """A context closed under us (its Chromium crashed or exited): the next call opens a new one."""
        if self._slots.get(slot.key) is slot:
            del self._slots[slot.key]
            unlock(slot.lock_file)

    def _context_options(self) -> dict[str, Any]:
        return {"service_workers": "block", "accept_downloads": True, "viewport": VIEWPORT}

    async def _playwright(self) -> Any:
        problem = chromium_problem(self.executable)
        if problem:
            raise BrowserUnavailable(f"The browser is not available: {problem}")
        if self._pw is None:
            from playwright.async_api import async_playwright

            self._pw = await async_playwright().start()
            self._proxy = ProxyFront(self.guard.proxy_policy)
        return self._pw

    def _launch_options(self) -> dict[str, Any]:
        assert self._proxy is not None
        return {"headless": True, "executable_path": self.executable,
                "args": chromium_args(self.cfg.max_page_memory_mb, list(self.cfg.extra_args)),
                "proxy": {"server": self._proxy.server}}

    async def _shared(self) -> Any:
        pw = await self._playwright()
        if self._browser is None or not self._browser.is_connected():
            self._browser = await pw.chromium.launch(**self._launch_options())
        return self._browser

    async def _open_profile(self, slot: Slot, profile: str) -> None:
        pw = await self._playwright()
        folder = profile_dir(self.home, profile, create=True)
        slot.lock_file = lock_profile(folder, profile)
        try:
            slot.context = await pw.chromium.launch_persistent_context(
                str(folder / "chromium"), **self._launch_options(), **self._context_options())
        except BaseException:
            unlock(slot.lock_file)
            raise

    async def _prepare(self, slot: Slot) -> None:
        ctx = slot.context
        ms = self.cfg.action_timeout_secs * 1000
        ctx.set_default_timeout(ms)
        ctx.set_default_navigation_timeout(ms)
        route, web_socket = self.guard.handlers(slot.refused)
        await ctx.route("**/*", route)
        await ctx.route_web_socket("**/*", web_socket)
        ctx.on("download", lambda d: asyncio.ensure_future(self._download(slot, d)))
        ctx.on("close", lambda _ctx: self._forget(slot))
        if slot.page is None and ctx.pages:
            slot.page = ctx.pages[0]  # a persistent context opens with a page

    async def _download(self, slot: Slot, download: Any) -> None:
        """A download goes to the workspace's downloads/ folder, up to browser.max_download_mb."""
        if slot.workspace is None:
            await download.cancel()
            return
        folder = slot.workspace / "downloads"
        folder.mkdir(parents=True, exist_ok=True)
        name = "".join(c if c.isalnum() or c in "._-" else "_" for c in download.suggested_filename)[:120] or "download"
        path = folder / name.lstrip(".")
        try:
            await download.save_as(str(path))
        except Exception as exc:
            slot.notes.append(f"download {name} failed: {exc}"[:300])
            return
        if path.stat().st_size > self.cfg.max_download_mb * 1024 * 1024:
            path.unlink(missing_ok=True)
            slot.notes.append(f"download {name} was larger than {self.cfg.max_download_mb} MB and was removed")
        else:
            slot.notes.append(f"downloaded downloads/{path.name} ({path.stat().st_size} bytes)")

    async def close_slot(self, key: str) -> bool:
        """Close one context (and a profile's own Chromium); False when none was open."""
        slot = self._slots.pop(key, None)
        if slot is None:
            return False
        try:
            await slot.context.close()
        except Exception:  # already gone with its browser
            log.debug("closing browser context %s failed", key, exc_info=True)
        finally:
            unlock(slot.lock_file)
        return True

    def is_open(self, key: str) -> bool:
        return key in self._slots

    def open_keys(self) -> list[str]:
        return list(self._slots)

    # --- idle close -------------------------------------------------------------------------

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.ensure_future(self._reap_forever())

    async def _reap_forever(self) -> None:
        period = max(0.2, min(60.0, self.cfg.idle_close_secs / 4))
        while self._slots:
            await asyncio.sleep(period)
            await self.reap()

    async def reap(self) -> None:
        """Close contexts idle for idle_close_secs; the shared Chromium too when nothing uses it."""
        now = time.monotonic()
        for key, slot in list(self._slots.items()):
            if not slot.lock.locked() and now - slot.last_used >= self.cfg.idle_close_secs:
                log.info("closing idle browser context %s", key)
                await self.close_slot(key)
        opening = any(lock.locked() for lock in self._opening.values())  # a context being made needs it
        if self._browser is not None and not opening and not any(k.startswith("session:") for k in self._slots):
            browser, self._browser = self._browser, None
            await browser.close()

    # --- shutdown ---------------------------------------------------------------------------

    async def _close_all(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for key in list(self._slots):
            await self.close_slot(key)
        if self._browser is not None:
            await self._browser.close()
            self._browser = None
        if self._pw is not None:
            await self._pw.stop()
            self._pw = None

    def close(self) -> None:
        if self._loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close_all(), self._loop).result(15)
        except Exception:  # the process is going away either way
            log.warning("the browser did not close cleanly", exc_info=True)
        if self._proxy is not None:
            self._proxy.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)


def lock_profile(folder: Path, profile: str) -> Any:
    handle = open(folder / ".lock", "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise ToolError(f"The browser profile {profile!r} is in use by another worker; try again shortly.") from None
    return handle


def unlock(handle: Any) -> None:
    if handle is not None:
        handle.close()  # closing the file releases the lock
