"""The daemons' Prometheus endpoint: what the reader returns at scrape time, in the text format."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from srv6pm_common.metrics import Figure, MetricsServer, parse_listen


def scrape(port: int) -> dict[str, tuple[str, dict[str, float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for f in text_string_to_metric_families(text):
        samples = {",".join(f"{k}={v}" for k, v in sorted(s.labels.items())): s.value for s in f.samples}
        out[f.name] = (f.type, samples)
    return out


def test_each_scrape_shows_the_figures_as_they_stand():
    state = {"published": 3, "streams": {"r1": 1, "r2": 0}}

    def read():
        yield Figure.single("x_published", "results published", "counter", state["published"])
        yield Figure("x_up", "stream open", "gauge", {(("node", n),): v for n, v in state["streams"].items()})

    server = MetricsServer("127.0.0.1:0", read)
    try:
        assert scrape(server.port) == {
            "x_published": ("counter", {"": 3.0}),
            "x_up": ("gauge", {"node=r1": 1.0, "node=r2": 0.0}),
        }
        state["published"], state["streams"] = 10, {}
        assert scrape(server.port) == {"x_published": ("counter", {"": 10.0}), "x_up": ("gauge", {})}
    finally:
        server.close()
    with pytest.raises(OSError):  # closed: the port is free again, nothing answers
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=2)


@pytest.mark.parametrize(
    ("listen", "want"),
    [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:0", ("::1", 0)), (":9464", ("::", 9464))],
)
def test_listen_addresses(listen, want):
    assert parse_listen(listen) == want


@pytest.mark.parametrize("listen", ["9464", "host", "::1:9464", "h:99999", "h:-1", ""])
def test_bad_listen_addresses_are_refused(listen):
    with pytest.raises(ValueError, match=r"HOST:PORT|brackets"):
        parse_listen(listen)
