"""Fixtures of the golden-packet tests: the real srv6pm object, loaded unpinned."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from srv6pm_node.counters import ebpf, layout, libbpf
from tests.support import require, require_root


@pytest.fixture(scope="module")
def driver() -> Iterator[ebpf.EbpfDriver]:
    """An eBPF driver over fresh, unpinned maps (nothing is attached anywhere).

    The index is dumped after each test to clear it (65536 slots of 16 bytes: fast)."""
    require_root()
    require(ebpf.COUNTERS_OBJ.exists(), f"{ebpf.COUNTERS_OBJ} not built (scripts/setup.sh builds it)")
    drv = ebpf.EbpfDriver(pin_root=None)
    try:
        yield drv
    finally:
        drv.close()


@pytest.fixture
def dp(driver: ebpf.EbpfDriver) -> Iterator[ebpf.EbpfDriver]:
    """The driver with no flows, colour 0 and the default marking bit."""
    def reset() -> None:
        zero_ctr = bytes(driver._ctr_stride() * libbpf.possible_cpus())
        for d in driver._index:  # slot by slot: also clears hand-made entries
            for k, flow, _, _ in driver._slots(d):
                driver._set_slot(d, k, 0, layout.EMPTY, 0)
                driver._ctrs[d].update(layout.INDEX_FMT.pack(flow), zero_ctr)
            driver._ids[d].clear()
        driver._known.clear()
        driver.set_colour(0)
        driver._cfg.update(b"\0" * 4, b"\0" * 8)  # back to "never configured"

    yield driver
    reset()
