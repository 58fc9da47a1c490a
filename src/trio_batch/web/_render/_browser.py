"""One headless Chromium as untrusted work: its flags, its process group, its memory watchdog.

:func:`open_browser` starts Debian's Chromium in a process group of its own (a new session),
speaks the DevTools protocol to it over a pipe (``_cdp``; no debugging port is opened), and
kills the whole group when the block ends, when the browser's memory goes over its limit, or
when the caller calls :meth:`Browser.kill`. Every process Chromium starts (zygote, renderers,
utilities) stays in that group, so one ``killpg`` ends them all.

Memory: an address-space limit (``RLIMIT_AS``) kills Chromium at start (it reserves terabytes
of address space for its allocators and V8's cage), so a watchdog sums what the group really
holds, every ``_WATCH_SECONDS``: the anonymous and shared-memory resident pages of each process
(``RssAnon`` + ``RssShmem`` of ``/proc/PID/status``; file-backed pages, the binary and its
libraries mapped in every process, are not counted once per process), and kills the group
past ``memory`` bytes.

Network: the browser resolves nothing and connects nowhere itself. Every request goes to our
proxy (``--proxy-server``), loopback included (``--proxy-bypass-list=<-loopback>``); its own
resolver maps every name to "not found" except the proxy's address; QUIC is off (it would be
UDP, which an HTTP proxy does not carry) and WebRTC may use no UDP that is not proxied.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, final

import trio

from ..._errors import TargetError
from ._cdp import CdpConnection, open_cdp

DEFAULT_CHROMIUM: Final = "/usr/bin/chromium"
"""Debian's ``chromium`` package's launcher (a shell script that runs ``/usr/lib/chromium``)."""
_DEBIAN_BINARY: Final = "/usr/lib/chromium/chromium"
_WATCH_SECONDS: Final = 0.25
"""How often the watchdog sums a browser's memory (one scan of /proc costs ~5 ms here)."""
_PAGE_SIZE: Final = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_STDERR_TAIL: Final = 2000
# Chromium's flags that keep its network in our hands (see the module docstring) and leave
# out every background service that would talk to the network or write beyond its profile.
_FLAGS: Final = (
    "--headless",
    "--remote-debugging-pipe",
    "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--disable-quic",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--dns-prefetch-disable",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-domain-reliability",
    "--disable-breakpad",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-features=DnsOverHttps,Translate,OptimizationHints,MediaRouter,"
    "AutofillServerCommunication,InterestFeedContentSuggestions,CertificateTransparencyComponentUpdater",
    "--no-first-run",
    "--no-default-browser-check",
    "--no-pings",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--mute-audio",
    "--hide-scrollbars",
    "--password-store=basic",
    "--use-mock-keychain",
    "--window-size=1280,800",
)


def chromium_missing_error(path: str) -> TargetError:
    """The error of a render when the browser is not installed (status 501)."""
    return TargetError(
        f"rendering pages needs Chromium, which is not installed at {path}",
        hint="install Debian's chromium package (apt-get install chromium), or ask for the "
        "page without render",
        status=501,
    )


def find_chromium(path: str = DEFAULT_CHROMIUM) -> str | None:
    """The executable to start for ``path``, or None when it is not installed.

    Debian's ``/usr/bin/chromium`` is a launcher script that loads extensions and API keys
    from ``/etc/chromium.d``; when it is the one asked for, its binary runs directly.
    """
    if path == DEFAULT_CHROMIUM and os.access(_DEBIAN_BINARY, os.X_OK):
        return _DEBIAN_BINARY
    found = shutil.which(path)
    return found if found and os.access(found, os.X_OK) else None


def sandbox_allowed() -> bool:
    """Whether Chromium's own sandbox can run here: not as root (Chromium refuses it then)."""
    return os.geteuid() != 0


def browser_flags(proxy_port: int, profile: str, *, sandbox: bool) -> list[str]:
    """The command-line flags of one renderer's browser."""
    flags = [
        *_FLAGS,
        f"--proxy-server=http://127.0.0.1:{proxy_port}",
        f"--user-data-dir={profile}",
    ]
    if not sandbox:
        flags.append("--no-sandbox")
    flags.append("about:blank")
    return flags


def group_memory(pgid: int) -> int:
    """Bytes of anonymous and shared memory resident in the processes of group ``pgid``."""
    total = 0
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
            # Fields after the command name (which may hold spaces and parentheses).
            fields = stat[stat.rindex(b")") + 2 :].split()
            if int(fields[2]) != pgid:
                continue
            status = Path(f"/proc/{pid}/status").read_bytes()
        except (OSError, ValueError, IndexError):
            continue  # the process ended meanwhile
        for line in status.splitlines():
            if line.startswith((b"RssAnon:", b"RssShmem:")):
                total += int(line.split()[1]) * 1024
    return total


@final
@dataclass(eq=False)
class Browser:
    """A running Chromium: its DevTools connection and its process group."""

    cdp: CdpConnection
    pgid: int
    memory_limit: int
    over_memory: bool = False
    """Set when the watchdog killed the group for holding more than ``memory_limit``."""
    peak_memory: int = 0
    _killed: bool = field(default=False, repr=False)

    def kill(self) -> None:
        """End every process of the browser at once (SIGKILL to its group); idempotent."""
        if not self._killed:
            self._killed = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGKILL)

    @property
    def alive(self) -> bool:
        return not self._killed and not self.cdp.closed


async def _watch_memory(browser: Browser) -> None:
    while True:
        used = await trio.to_thread.run_sync(group_memory, browser.pgid)
        browser.peak_memory = max(browser.peak_memory, used)
        if used > browser.memory_limit:
            browser.over_memory = True
            browser.kill()
            return
        await trio.sleep(_WATCH_SECONDS)


_TRAMPOLINE: Final = (
    "import fcntl, os, sys\n"
    "r, w = (fcntl.fcntl(int(fd), fcntl.F_DUPFD, 10) for fd in sys.argv[1:3])\n"
    "os.dup2(r, 3)\n"
    "os.dup2(w, 4)\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n"
)


def _launch_command(executable: str, flags: list[str], read_fd: int, write_fd: int) -> list[str]:
    """A small Python puts the pipe's ends on fds 3 and 4 (where Chromium looks) and execs the
    browser in its place: no ``preexec_fn``, which is unsafe in a process with threads, and no
    shell (dash takes single-digit descriptors only)."""
    return [
        sys.executable,
        "-I",
        "-S",
        "-c",
        _TRAMPOLINE,
        str(read_fd),
        str(write_fd),
        executable,
        *flags,
    ]


@contextlib.asynccontextmanager
async def open_browser(
    executable: str,
    *,
    proxy_port: int,
    memory: int,
    sandbox: bool,
    launch_seconds: float = 30.0,
    max_message_bytes: int = 64 * 2**20,
) -> AsyncIterator[Browser]:
    """Start one Chromium for the block's life, killed with its whole group at the end.

    Raises:
        TargetError: the browser did not start (status 502, with the end of its error output).
    """
    profile = tempfile.mkdtemp(prefix="trio-batch-chromium-")
    _write_preferences(profile)
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()
    log_fd = os.open(os.path.join(profile, "stderr.log"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        process = await trio.lowlevel.open_process(
            _launch_command(
                executable,
                browser_flags(proxy_port, profile, sandbox=sandbox),
                to_browser_r,
                from_browser_w,
            ),
            pass_fds=(to_browser_r, from_browser_w),
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            start_new_session=True,
        )
    except BaseException:
        for fd in (to_browser_r, to_browser_w, from_browser_r, from_browser_w, log_fd):
            os.close(fd)
        shutil.rmtree(profile, ignore_errors=True)
        raise
    for fd in (to_browser_r, from_browser_w, log_fd):
        os.close(fd)
    send = trio.lowlevel.FdStream(to_browser_w)
    receive = trio.lowlevel.FdStream(from_browser_r)
    try:
        async with (
            send,
            receive,
            open_cdp(send, receive, max_message_bytes=max_message_bytes) as cdp,
        ):
            browser = Browser(cdp=cdp, pgid=process.pid, memory_limit=memory)
            async with trio.open_nursery() as nursery:
                try:
                    with trio.fail_after(launch_seconds):
                        await cdp.call("Browser.getVersion")
                except Exception as exc:
                    raise _launch_failed(profile) from exc
                nursery.start_soon(_watch_memory, browser)
                try:
                    yield browser
                finally:
                    nursery.cancel_scope.cancel("the browser closed")
    finally:
        browser_pid = process.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(browser_pid, signal.SIGKILL)
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await process.wait()
            await trio.to_thread.run_sync(shutil.rmtree, profile, True)


_PREFERENCES: Final = {
    # The same policy as the flag, as a profile preference: the page contexts (off the record)
    # read it from the profile they overlay.
    "webrtc": {
        "ip_handling_policy": "disable_non_proxied_udp",
        "multiple_routes_enabled": False,
        "nonproxied_udp_enabled": False,
    },
}


def _write_preferences(profile: str) -> None:
    default = Path(profile, "Default")
    default.mkdir()
    (default / "Preferences").write_text(json.dumps(_PREFERENCES))


def _launch_failed(profile: str) -> TargetError:
    try:
        tail = Path(profile, "stderr.log").read_bytes()[-_STDERR_TAIL:].decode(errors="replace")
    except OSError:
        tail = ""
    return TargetError(
        "the browser did not start" + (f": {tail.strip()}" if tail.strip() else ""),
        hint="check that Debian's chromium package works on this machine (chromium --headless "
        "--version); as root it needs --no-sandbox, which trio-batch adds itself",
        status=502,
    )
