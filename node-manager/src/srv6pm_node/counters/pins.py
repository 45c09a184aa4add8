"""Where the counter maps are pinned, so counters survive a restart of the agent.

Layout: ``<pin-root>/netns-<cookie>/<map name>``, default pin root ``/run/srv6pm/bpf``.

* One directory per network namespace, named by the namespace's cookie (``SO_NETNS_COOKIE``): a
  64-bit id the kernel never reuses, unlike the namespace's inode number, so a new namespace can
  never pick up a dead one's counters.
* Not under ``/sys/fs/bpf``: ``ip netns exec`` mounts a fresh /sys for each command, so pins made
  there vanish with the process. A bpffs mounted in the root mount namespace under /run is visible
  inside ``ip netns exec`` and pins made from inside it persist. :func:`ensure_bpffs` mounts one
  when the pin root is not a bpffs yet; do that once from the root mount namespace (an agent
  started with ``ip netns exec`` would otherwise mount it privately, and lose it on exit).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

DEFAULT_PIN_ROOT = "/run/srv6pm/bpf"
BPF_FS_MAGIC = 0xCAFE4A11
SO_NETNS_COOKIE = 71  # linux/socket.h, kernel >= 5.14
MNT_DETACH = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
log = logging.getLogger(__name__)


class _Statfs(ctypes.Structure):
    # only f_type matters; the rest of struct statfs is padding we never read
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 120)]


def is_bpffs(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` is the root of (or inside) a mounted bpffs."""
    st = _Statfs()
    if _libc.statfs(os.fsencode(path), ctypes.byref(st)) != 0:
        return False
    return (st.f_type & 0xFFFFFFFF) == BPF_FS_MAGIC


def ensure_bpffs(root: str | os.PathLike[str]) -> bool:
    """Mount a bpffs at ``root`` unless one is there; return True if this call mounted it."""
    os.makedirs(root, exist_ok=True)
    if is_bpffs(root):
        return False
    with contextlib.suppress(OSError):
        if os.readlink("/proc/self/ns/mnt") != os.readlink("/proc/1/ns/mnt"):
            log.warning(
                "mounting a bpffs at %s from a private mount namespace (ip netns exec?): "
                "it and its pins go away with this process; mount it from the root "
                "mount namespace to keep counters across restarts",
                root,
            )
    if _libc.mount(b"bpf", os.fsencode(root), b"bpf", 0, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount bpffs at {root}: {os.strerror(err)}")
    return True


def unmount(root: str | os.PathLike[str]) -> None:
    """Unmount a bpffs (lazily, so an open fd cannot make it fail)."""
    if _libc.umount2(os.fsencode(root), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {root}: {os.strerror(err)}")


def netns_cookie() -> int:
    """Cookie of the calling thread's network namespace."""
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        return int.from_bytes(s.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8), "little")


def pin_dir(root: str | os.PathLike[str] = DEFAULT_PIN_ROOT) -> Path:
    """The calling namespace's pin directory (bpffs mounted and directory created as needed)."""
    ensure_bpffs(root)
    d = Path(root) / f"netns-{netns_cookie()}"
    d.mkdir(exist_ok=True)
    return d


def remove_pins(directory: str | os.PathLike[str]) -> None:
    """Unpin every map of a namespace (their counters are lost) and remove the directory."""
    d = Path(directory)
    if not d.exists():
        return
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


@contextlib.contextmanager
def in_netns(name: str | None) -> Iterator[None]:
    """Run the block in the named network namespace (this thread only); ``None``: stay put."""
    if name is None:
        yield
        return
    from pyroute2 import netns  # imported here: only needed when switching namespaces

    netns.pushns(name)
    try:
        yield
    finally:
        netns.popns()


@contextlib.contextmanager
def temporary_bpffs(prefix: str = "s6pm-bpf-") -> Iterator[Path]:
    """A bpffs of one's own in a fresh temporary directory, unmounted (pins and all) at the end:
    for tests and demos, whose counters must not outlive them."""
    import tempfile  # only tests and demos need it

    d = Path(tempfile.mkdtemp(prefix=prefix))
    mounted = ensure_bpffs(d)
    try:
        yield d
    finally:
        if mounted:
            with contextlib.suppress(OSError):
                unmount(d)
        with contextlib.suppress(OSError):
            d.rmdir()
