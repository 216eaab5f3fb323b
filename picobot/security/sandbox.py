"""The bubblewrap sandbox `bash` runs in, and the decision whether it is in effect.

Inside: the workspace read-write at its own path, the system read-only, a fresh /tmp,
/proc and a minimal /dev, and nothing else of the host: PicoBot's home, /home and /root
are absent, and the sandbox has its own empty network namespace (host loopback and
private networks are unreachable). HTTP(S) leaves only through an egress proxy on a
Unix socket, reached through a tiny forwarder on 127.0.0.1 inside (see bridge_argv).

`tools.bash.sandbox`: `auto` uses bubblewrap when it is installed and a probe run works
here (some containers forbid the namespaces it needs), else plain bash; `bwrap` requires
it; `none` never uses it.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # imported when a proxy is needed (socket_for)
    from picobot.security.egress import EgressProxy
    from picobot.security.netpolicy import NetworkPolicy

AUTO, BWRAP, NONE = "auto", "bwrap", "none"
_SYSTEM_DIRS = ("/usr", "/etc")
_OPTIONAL_DIRS = ("/opt",)
# On merged-/usr systems these are symlinks into /usr; elsewhere they are real folders.
_TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_PROBE_TIMEOUT_SECS = 10
PROXY_PORT = 3128
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"


class SandboxUnavailable(Exception):
    """`tools.bash.sandbox` is "bwrap" but bubblewrap is missing or does not work here."""


@dataclass(frozen=True)
class SandboxStatus:
    setting: str
    active: bool  # commands run inside bubblewrap
    ok: bool  # False only when the sandbox is required and cannot run
    detail: str
    bwrap: str | None = None

    def as_check(self) -> dict[str, object]:
        """This status as one /health entry."""
        return {"ok": self.ok, "setting": self.setting, "active": self.active, "detail": self.detail}


def sandbox_status(setting: str) -> SandboxStatus:
    """What `tools.bash.sandbox` comes to on this machine (the probe runs once per process)."""
    if setting == NONE:
        return SandboxStatus(setting, False, True, "off (tools.bash.sandbox is none): bash runs unsandboxed")
    bwrap = shutil.which("bwrap")
    problem = probe(bwrap) if bwrap else f"bubblewrap (bwrap) is not installed; {INSTALL_HINT}"
    if problem is None:
        return SandboxStatus(setting, True, True, f"bubblewrap ({bwrap})", bwrap)
    if setting == BWRAP:
        return SandboxStatus(setting, False, False, f"required but unavailable: {problem}")
    return SandboxStatus(setting, False, True, f"not in effect, bash runs unsandboxed: {problem}")


def require(status: SandboxStatus) -> None:
    """Raise SandboxUnavailable with a message that says how to fix it, if the sandbox cannot run."""
    if not status.ok:
        raise SandboxUnavailable(
            f"The bash sandbox is required (tools.bash.sandbox = \"bwrap\") but {status.detail.split(': ', 1)[-1]}. "
            "Install or repair bubblewrap, or set tools.bash.sandbox to \"auto\" or \"none\"."
        )


@functools.lru_cache(maxsize=8)
def probe(bwrap: str) -> str | None:
    """None when bwrap can run a command in the full sandbox here, else why not. Cached per path."""
    with tempfile.TemporaryDirectory(prefix="picobot-probe-") as tmp:
        argv = bwrap_argv(bwrap, Path(tmp), homes=(), command=["/bin/sh", "-c", "exit 0"])
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=_PROBE_TIMEOUT_SECS,
                                  env={"PATH": "/usr/bin:/bin"})
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap at {bwrap} could not run ({type(exc).__name__})"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        return f"bubblewrap at {bwrap} cannot create a sandbox here ({why[0][:200]})"
    return None


def bwrap_argv(bwrap: str, workspace: Path, homes: Sequence[Path], command: Sequence[str],
               extra_ro: Sequence[Path] = (), chdir: Path | None = None) -> list[str]:
    """The bwrap command line that runs `command` with `workspace` as its only writable folder,
    in `chdir` (a folder inside the workspace; default the workspace itself)."""
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    argv += _system_mounts()
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    # A home inside anything bound (/opt or /etc for a system-wide install, or the workspace) would
    # be visible there: an empty tmpfs over it hides it. Each is laid right after the binds that
    # expose it, so a workspace inside such a home is bound again on top.
    argv += _hide(homes, _system_dirs())
    for path in extra_ro:
        argv += ["--ro-bind", str(path), str(path)]
    argv += _hide(homes, extra_ro)
    ws = str(workspace)
    argv += ["--bind", ws, ws]
    argv += _hide(homes, [workspace])
    argv += ["--chdir", str(chdir or workspace), "--", *command]
    return argv


def _hide(homes: Sequence[Path], folders: Sequence[Path]) -> list[str]:
    """bwrap arguments that put an empty tmpfs over each home lying in (or being) one of `folders`."""
    argv: list[str] = []
    for home in homes:
        hidden = next(filter(None, (_covered(folder, home) for folder in folders)), None)
        if hidden is not None:
            argv += ["--tmpfs", str(hidden)]
    return argv


def _system_mounts() -> list[str]:
    argv: list[str] = []
    for path in _SYSTEM_DIRS:
        argv += ["--ro-bind", path, path]
    for path in _OPTIONAL_DIRS:
        argv += ["--ro-bind-try", path, path]
    for path in _TOP_LINKS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    return argv


def _system_dirs() -> list[Path]:
    """The host folders _system_mounts binds (read-only) into the sandbox."""
    dirs = [*_SYSTEM_DIRS, *_OPTIONAL_DIRS]
    dirs += [path for path in _TOP_LINKS if not os.path.islink(path) and os.path.isdir(path)]
    return [Path(path) for path in dirs]


def _covered(folder: Path, home: Path) -> Path | None:
    """The home's real path when it lies in (or is) `folder`, else None."""
    try:
        real_folder, real_home = folder.resolve(), home.resolve()
    except (OSError, RuntimeError):
        return None
    return real_home if real_home == real_folder or real_home.is_relative_to(real_folder) else None


def sandbox_env(env: dict[str, str], workspace: Path) -> dict[str, str]:
    """The command's environment inside the sandbox: its home is the workspace, /tmp is private."""
    return {**env, "HOME": str(workspace), "TMPDIR": "/tmp"}


# --- egress: HTTP(S) through a proxy on a Unix socket ------------------------------------

# Runs inside the sandbox: listen on 127.0.0.1:<port> first (so the command never races it),
# fork a forwarder to the proxy's Unix socket, then become the command.
_BRIDGE = r"""
import os, socket, sys, threading
port, target, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(64)
def pump(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
def serve(c):
    u = socket.socket(socket.AF_UNIX)
    try:
        u.connect(target)
    except OSError:
        c.close()
        return
    threading.Thread(target=pump, args=(c, u), daemon=True).start()
    pump(u, c)
parent = os.getpid()
if os.fork() == 0:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    srv.settimeout(1.0)
    while os.getppid() == parent:  # the command ended (or was killed): so does the forwarder
        try:
            conn, _ = srv.accept()
        except OSError:
            continue
        conn.settimeout(None)
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
    os._exit(0)
srv.close()
os.execvp(argv[0], argv)
"""


def bridge_argv(socket_path: str, command: Sequence[str]) -> tuple[list[str], list[Path]]:
    """The command wrapped in the forwarder, and the read-only folders that must be bound for it."""
    python = _sandbox_python()
    binds = [Path(socket_path).parent]
    if not python.startswith("/usr/"):
        binds.append(Path(sys.base_prefix))
    return [python, "-I", "-S", "-c", _BRIDGE, str(PROXY_PORT), socket_path, *command], binds


def _sandbox_python() -> str:
    # The system Python is inside the read-only /usr; a virtualenv's may live anywhere.
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.realpath(sys._base_executable if hasattr(sys, "_base_executable") else sys.executable)


def proxy_env(env: dict[str, str]) -> dict[str, str]:
    """Point every common HTTP client at the forwarder."""
    url = f"http://127.0.0.1:{PROXY_PORT}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
    return {**env, **{name: url for name in names}, "NO_PROXY": "", "no_proxy": ""}


class EgressLink:
    """One egress proxy per process for sandboxed commands, started on first use.

    None from socket_for() means no egress is available: the sandbox then has no network.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proxies: dict[str, tuple[EgressProxy, str]] = {}

    def socket_for(self, settings: Mapping[str, Any]) -> str | None:
        """The Unix socket of a running proxy enforcing settings' network policy, or None."""
        try:
            from picobot.security.egress import EgressProxy
            from picobot.security.netpolicy import NetworkPolicy
        except ImportError:
            return None
        policy = NetworkPolicy.from_settings(settings)
        key = repr(policy)  # one proxy per distinct policy (config is fixed per process)
        with self._lock:
            if key not in self._proxies:
                self._proxies[key] = self._start(EgressProxy, policy)
            return self._proxies[key][1]

    @staticmethod
    def _start(proxy_cls: type[EgressProxy], policy: NetworkPolicy) -> tuple[EgressProxy, str]:
        # A private folder: the socket is bound into sandboxes, and nobody else should use it.
        folder = tempfile.mkdtemp(prefix="picobot-egress-")
        path = os.path.join(folder, "proxy.sock")
        proxy = proxy_cls(policy, path)
        proxy.start()
        atexit.register(shutil.rmtree, folder, True)  # no stale socket folders after the worker exits
        return proxy, path

    def close(self) -> None:
        with self._lock:
            for proxy, path in self._proxies.values():
                proxy.stop()
                shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            self._proxies.clear()
