"""A thin ctypes binding over Debian's ``libbpf.so.1`` (libbpf 1.1): just what srv6pm needs.

Objects (open, pin paths, load), map element access, TC (clsact) and XDP attach through libbpf's
own netlink code, and ``BPF_PROG_TEST_RUN``. Errors come back as :class:`OSError` with the errno
libbpf reported. Struct layouts follow ``/usr/include/bpf/{libbpf,bpf}.h`` of libbpf 1.1; each
options struct carries its own size, which is how libbpf keeps such callers compatible.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
from dataclasses import dataclass
from functools import cache

BPF_ANY, BPF_NOEXIST, BPF_EXIST = 0, 1, 2
BPF_TC_INGRESS, BPF_TC_EGRESS = 1, 2
BPF_TC_F_REPLACE = 1
XDP_FLAGS_UPDATE_IF_NOEXIST = 1
XDP_FLAGS_SKB_MODE = 2
XDP_FLAGS_DRV_MODE = 4

_c = ctypes
_vp = _c.c_void_p
log = logging.getLogger(__name__)
# libbpf_print_fn_t: int (*)(enum libbpf_print_level, const char *fmt, va_list ap). va_list reaches
# the callback as a pointer on x86-64 and arm64 alike, and goes back to vsnprintf unchanged.
_PRINT_FN = _c.CFUNCTYPE(_c.c_int, _c.c_int, _c.c_char_p, _vp)
_libc = _c.CDLL(ctypes.util.find_library("c"))
_libc.vsnprintf.argtypes = [_c.c_char_p, _c.c_size_t, _c.c_char_p, _vp]


def _on_print(level: int, fmt: bytes, ap: int) -> int:
    buf = _c.create_string_buffer(1024)
    _libc.vsnprintf(buf, len(buf), fmt, ap)
    msg = buf.value.decode(errors="replace").rstrip()
    # netlink extack text ("Parent Qdisc doesn't exists") accompanies errors we handle by errno
    if level == 0 and "Kernel error message" not in msg:
        log.warning("libbpf: %s", msg)
    else:
        log.debug("libbpf: %s", msg)
    return 0


_print_cb = _PRINT_FN(_on_print)  # module-level: must outlive every libbpf call


class TcHook(_c.Structure):
    """struct bpf_tc_hook"""

    _fields_ = [
        ("sz", _c.c_size_t),
        ("ifindex", _c.c_int),
        ("attach_point", _c.c_int),
        ("parent", _c.c_uint32),
    ]


class TcOpts(_c.Structure):
    """struct bpf_tc_opts"""

    _fields_ = [
        ("sz", _c.c_size_t),
        ("prog_fd", _c.c_int),
        ("flags", _c.c_uint32),
        ("prog_id", _c.c_uint32),
        ("handle", _c.c_uint32),
        ("priority", _c.c_uint32),
    ]


class TestRunOpts(_c.Structure):
    """struct bpf_test_run_opts"""

    _fields_ = [
        ("sz", _c.c_size_t),
        ("data_in", _vp),
        ("data_out", _vp),
        ("data_size_in", _c.c_uint32),
        ("data_size_out", _c.c_uint32),
        ("ctx_in", _vp),
        ("ctx_out", _vp),
        ("ctx_size_in", _c.c_uint32),
        ("ctx_size_out", _c.c_uint32),
        ("retval", _c.c_uint32),
        ("repeat", _c.c_int),
        ("duration", _c.c_uint32),
        ("flags", _c.c_uint32),
        ("cpu", _c.c_uint32),
        ("batch_size", _c.c_uint32),
    ]


@cache
def lib() -> ctypes.CDLL:
    """The loaded libbpf with the prototypes this module uses."""
    name = ctypes.util.find_library("bpf") or "libbpf.so.1"
    so = ctypes.CDLL(name, use_errno=True)
    sigs = {
        "bpf_object__open_file": (_vp, [_c.c_char_p, _vp]),
        "bpf_object__load": (_c.c_int, [_vp]),
        "bpf_object__close": (None, [_vp]),
        "bpf_object__next_map": (_vp, [_vp, _vp]),
        "bpf_object__find_map_by_name": (_vp, [_vp, _c.c_char_p]),
        "bpf_object__find_program_by_name": (_vp, [_vp, _c.c_char_p]),
        "bpf_map__name": (_c.c_char_p, [_vp]),
        "bpf_map__fd": (_c.c_int, [_vp]),
        "bpf_map__value_size": (_c.c_uint32, [_vp]),
        "bpf_map__set_pin_path": (_c.c_int, [_vp, _c.c_char_p]),
        "bpf_program__fd": (_c.c_int, [_vp]),
        "bpf_map_update_elem": (_c.c_int, [_c.c_int, _vp, _vp, _c.c_uint64]),
        "bpf_map_lookup_elem": (_c.c_int, [_c.c_int, _vp, _vp]),
        "bpf_map_delete_elem": (_c.c_int, [_c.c_int, _vp]),
        "bpf_map_get_next_key": (_c.c_int, [_c.c_int, _vp, _vp]),
        "bpf_map_lookup_batch": (_c.c_int, [_c.c_int, _vp, _vp, _vp, _vp, _c.POINTER(_c.c_uint32), _vp]),
        "bpf_tc_hook_create": (_c.c_int, [_c.POINTER(TcHook)]),
        "bpf_tc_attach": (_c.c_int, [_c.POINTER(TcHook), _c.POINTER(TcOpts)]),
        "bpf_tc_detach": (_c.c_int, [_c.POINTER(TcHook), _c.POINTER(TcOpts)]),
        "bpf_tc_query": (_c.c_int, [_c.POINTER(TcHook), _c.POINTER(TcOpts)]),
        "bpf_xdp_attach": (_c.c_int, [_c.c_int, _c.c_int, _c.c_uint32, _vp]),
        "bpf_xdp_detach": (_c.c_int, [_c.c_int, _c.c_uint32, _vp]),
        "bpf_xdp_query_id": (_c.c_int, [_c.c_int, _c.c_int, _c.POINTER(_c.c_uint32)]),
        "bpf_prog_get_fd_by_id": (_c.c_int, [_c.c_uint32]),
        "bpf_obj_get_info_by_fd": (_c.c_int, [_c.c_int, _vp, _c.POINTER(_c.c_uint32)]),
        "bpf_prog_test_run_opts": (_c.c_int, [_c.c_int, _c.POINTER(TestRunOpts)]),
        "libbpf_num_possible_cpus": (_c.c_int, []),
        "bpf_enable_stats": (_c.c_int, [_c.c_int]),
        "libbpf_set_print": (_vp, [_PRINT_FN]),
    }
    for fname, (res, args) in sigs.items():
        fn = getattr(so, fname)
        fn.restype, fn.argtypes = res, args
    so.libbpf_set_print(_print_cb)  # libbpf's messages go to logging, not straight to stderr
    return so


def _check(rc: int, what: str) -> int:
    """libbpf 1.x returns -errno (and sets errno); turn a failure into OSError."""
    if rc < 0:
        err = -rc if rc != -1 else (ctypes.get_errno() or errno.EINVAL)
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


@cache
def possible_cpus() -> int:
    """Number of possible CPUs: the stride of per-CPU map values."""
    return _check(lib().libbpf_num_possible_cpus(), "libbpf_num_possible_cpus")


class Map:
    """A map of a loaded object, addressed by its fd (element access needs no netns)."""

    def __init__(self, fd: int, name: str, value_size: int, percpu: bool = False) -> None:
        self.fd, self.name, self.value_size, self.percpu = fd, name, value_size, percpu

    def _vbuf(self) -> ctypes.Array:
        n = possible_cpus() if self.percpu else 1
        stride = (self.value_size + 7) & ~7 if self.percpu else self.value_size
        return ctypes.create_string_buffer(stride * n)

    def lookup(self, key: bytes) -> bytes | None:
        """The value (per-CPU maps: every CPU's copy, 8-byte aligned) or None if absent."""
        buf = self._vbuf()
        rc = lib().bpf_map_lookup_elem(self.fd, key, buf)
        if rc == -errno.ENOENT:
            return None
        _check(rc, f"lookup in {self.name}")
        return buf.raw

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        """Insert or replace (per-CPU maps: ``value`` holds every CPU's copy)."""
        buf = self._vbuf()
        if len(value) != len(buf):
            raise ValueError(f"{self.name}: value of {len(value)} bytes, expected {len(buf)}")
        _check(lib().bpf_map_update_elem(self.fd, key, value, flags), f"update of {self.name}")

    def delete(self, key: bytes) -> bool:
        """Delete; False if the key was not there."""
        rc = lib().bpf_map_delete_elem(self.fd, key)
        if rc == -errno.ENOENT:
            return False
        _check(rc, f"delete from {self.name}")
        return True

    def dump_array(self, entries: int) -> bytes:
        """The values of elements 0 .. ``entries``-1 of an ARRAY map (per-CPU: every CPU's copy
        of each, as :meth:`lookup` gives them), concatenated in index order, in a few syscalls
        (BPF_MAP_LOOKUP_BATCH) rather than one lookup per element."""
        elem = len(self._vbuf())
        chunk = max(1, min(4096, entries))
        out = bytearray()
        keys = ctypes.create_string_buffer(4 * chunk)
        vals = ctypes.create_string_buffer(elem * chunk)
        in_b, out_b = ctypes.c_uint32(0), ctypes.c_uint32(0)
        first = True
        while len(out) < entries * elem:
            count = ctypes.c_uint32(min(chunk, entries - len(out) // elem))
            rc = lib().bpf_map_lookup_batch(
                self.fd,
                None if first else ctypes.byref(in_b),
                ctypes.byref(out_b),
                keys,
                vals,
                ctypes.byref(count),
                None,
            )
            if rc < 0 and rc != -errno.ENOENT:
                _check(rc, f"batch lookup in {self.name}")
            out += vals.raw[: count.value * elem]
            if rc == -errno.ENOENT or count.value == 0:
                break
            in_b.value, first = out_b.value, False
        return bytes(out[: entries * elem])

    def keys(self, key_size: int) -> list[bytes]:
        """Every key (a snapshot)."""
        out: list[bytes] = []
        prev = None
        nxt = ctypes.create_string_buffer(key_size)
        while True:
            rc = lib().bpf_map_get_next_key(self.fd, prev, nxt)
            if rc == -errno.ENOENT:
                return out
            _check(rc, f"get_next_key in {self.name}")
            out.append(nxt.raw)
            prev = ctypes.create_string_buffer(nxt.raw, key_size)


class BpfObject:
    """An ELF object opened and loaded by libbpf.

    ``pin_dir``: when given, every map is pinned there by name, and an existing pin is reused
    instead of creating a new map — which is how counters survive a restart of the agent.
    """

    def __init__(self, path: str, pin_dir: str | None = None) -> None:
        so = lib()
        ctypes.set_errno(0)
        obj = so.bpf_object__open_file(os.fsencode(path), None)
        if not obj:
            err = ctypes.get_errno() or errno.EINVAL
            raise OSError(err, f"cannot open BPF object {path}: {os.strerror(err)}")
        self._obj: int | None = obj
        try:
            if pin_dir is not None:
                m = so.bpf_object__next_map(obj, None)
                while m:
                    name = so.bpf_map__name(m).decode()
                    if not name.startswith("."):  # .rodata/.bss: no state worth keeping
                        _check(
                            so.bpf_map__set_pin_path(m, os.fsencode(os.path.join(pin_dir, name))),
                            f"pin path of {name}",
                        )
                    m = so.bpf_object__next_map(obj, m)
            _check(so.bpf_object__load(obj), f"load of {path}")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Unload (programs still attached stay alive in the kernel; pinned maps stay pinned)."""
        if self._obj:
            lib().bpf_object__close(self._obj)
            self._obj = None

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def prog_fd(self, name: str) -> int:
        """File descriptor of a program, by function name."""
        p = lib().bpf_object__find_program_by_name(self._obj, name.encode())
        if not p:
            raise KeyError(f"no program {name}")
        return lib().bpf_program__fd(p)

    def map(self, name: str, percpu: bool = False) -> Map:
        """A map, by name."""
        m = lib().bpf_object__find_map_by_name(self._obj, name.encode())
        if not m:
            raise KeyError(f"no map {name}")
        return Map(lib().bpf_map__fd(m), name, lib().bpf_map__value_size(m), percpu)


# --- TC clsact ---------------------------------------------------------------------------------


def _tc(ifindex: int, ingress: bool) -> TcHook:
    return TcHook(ctypes.sizeof(TcHook), ifindex, BPF_TC_INGRESS if ingress else BPF_TC_EGRESS, 0)


def tc_attach(ifindex: int, ingress: bool, prog_fd: int, handle: int, priority: int) -> None:
    """Create the clsact qdisc if needed and attach (or replace) our filter at handle/priority."""
    hook = _tc(ifindex, ingress)
    rc = lib().bpf_tc_hook_create(ctypes.byref(hook))
    if rc != -errno.EEXIST:
        _check(rc, "creating the clsact qdisc")
    opts = TcOpts(ctypes.sizeof(TcOpts), prog_fd, BPF_TC_F_REPLACE, 0, handle, priority)
    _check(lib().bpf_tc_attach(ctypes.byref(hook), ctypes.byref(opts)), "tc attach")


def tc_query(ifindex: int, ingress: bool, handle: int, priority: int) -> int | None:
    """Id of the program at our handle/priority, or None."""
    hook = _tc(ifindex, ingress)
    opts = TcOpts(ctypes.sizeof(TcOpts), 0, 0, 0, handle, priority)
    rc = lib().bpf_tc_query(ctypes.byref(hook), ctypes.byref(opts))
    if rc in (-errno.ENOENT, -errno.EINVAL):  # no qdisc, or no such filter
        return None
    _check(rc, "tc query")
    return opts.prog_id


def tc_detach(ifindex: int, ingress: bool, handle: int, priority: int) -> bool:
    """Remove our filter (the clsact qdisc stays: others may use it). False if absent."""
    hook = _tc(ifindex, ingress)
    opts = TcOpts(ctypes.sizeof(TcOpts), 0, 0, 0, handle, priority)
    rc = lib().bpf_tc_detach(ctypes.byref(hook), ctypes.byref(opts))
    if rc in (-errno.ENOENT, -errno.EINVAL):
        return False
    _check(rc, "tc detach")
    return True


# --- XDP ---------------------------------------------------------------------------------------


def xdp_attach(ifindex: int, prog_fd: int, flags: int) -> None:
    """Attach (replacing whatever XDP program is there: callers check ownership first)."""
    _check(lib().bpf_xdp_attach(ifindex, prog_fd, flags, None), "xdp attach")


def xdp_query(ifindex: int, flags: int = 0) -> int:
    """Id of the attached XDP program (0: none)."""
    pid = ctypes.c_uint32(0)
    _check(lib().bpf_xdp_query_id(ifindex, flags, ctypes.byref(pid)), "xdp query")
    return pid.value


def xdp_detach(ifindex: int, flags: int = 0) -> None:
    """Detach the XDP program."""
    _check(lib().bpf_xdp_detach(ifindex, flags, None), "xdp detach")


def prog_name(prog_id: int) -> str:
    """Name of a loaded program, by id (struct bpf_prog_info: name at offset 64)."""
    fd = _check(lib().bpf_prog_get_fd_by_id(prog_id), f"prog id {prog_id}")
    try:
        info = ctypes.create_string_buffer(256)
        n = ctypes.c_uint32(len(info))
        _check(lib().bpf_obj_get_info_by_fd(fd, info, ctypes.byref(n)), "prog info")
        return info.raw[64:80].split(b"\0", 1)[0].decode()
    finally:
        os.close(fd)


def enable_run_time_stats() -> int:
    """Turn on the kernel's per-program run-time statistics while the returned fd stays open
    (BPF_ENABLE_STATS: scoped to the fd, unlike the kernel.bpf_stats_enabled sysctl)."""
    return _check(lib().bpf_enable_stats(0), "BPF_ENABLE_STATS")  # 0 = BPF_STATS_RUN_TIME


def prog_run_stats(prog_fd: int) -> tuple[int, int]:
    """(run_time_ns, run_cnt) of a program (struct bpf_prog_info: offsets 192 and 200)."""
    info = ctypes.create_string_buffer(256)
    n = ctypes.c_uint32(len(info))
    _check(lib().bpf_obj_get_info_by_fd(prog_fd, info, ctypes.byref(n)), "prog info")
    return int.from_bytes(info.raw[192:200], "little"), int.from_bytes(info.raw[200:208], "little")


# --- BPF_PROG_TEST_RUN -------------------------------------------------------------------------


@dataclass(frozen=True)
class TestRun:
    """Result of one BPF_PROG_TEST_RUN: program return value, output frame, ns per run."""

    retval: int
    data: bytes
    duration_ns: int
    ctx: bytes = b""


def test_run(prog_fd: int, data: bytes, repeat: int = 1, ctx: bytes | None = None) -> TestRun:
    """Run a program on one frame (``ctx``: an optional ``struct __sk_buff`` / ``xdp_md``)."""
    out = ctypes.create_string_buffer(len(data) + 4096)
    ctx_out = ctypes.create_string_buffer(len(ctx)) if ctx else None
    din = ctypes.create_string_buffer(data, len(data))
    cin = ctypes.create_string_buffer(ctx, len(ctx)) if ctx else None
    opts = TestRunOpts(
        sz=ctypes.sizeof(TestRunOpts),
        data_in=ctypes.cast(din, _vp),
        data_out=ctypes.cast(out, _vp),
        data_size_in=len(data),
        data_size_out=len(out),
        repeat=repeat,
    )
    if ctx:
        opts.ctx_in, opts.ctx_size_in = ctypes.cast(cin, _vp), len(ctx)
        opts.ctx_out, opts.ctx_size_out = ctypes.cast(ctx_out, _vp), len(ctx)
    _check(lib().bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts)), "BPF_PROG_TEST_RUN")
    retval = ctypes.c_int32(opts.retval).value
    return TestRun(
        retval,
        out.raw[: opts.data_size_out],
        opts.duration,
        ctx_out.raw[: opts.ctx_size_out] if ctx_out else b"",
    )
