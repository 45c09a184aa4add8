"""The SRv6PM measurement engine: alternate-marking loss and probe delay per SR policy.

Where things happen:

* :mod:`.blocks`    — the block clock: block n = floor(unix_ns / T), colour n mod 2;
* :mod:`.spec`      — a MeasurementSpec checked and normalised;
* :mod:`.dataplane` — the counter driver, flows, per-block counter snapshots, probe endpoints;
* :mod:`.sender`    — the sender side: probes, per-block loss and delay, results;
* :mod:`.reflector` — the reflector side: which counters answer a probe;
* :mod:`.state`     — what survives a restart (SQLite in the node's state directory);
* :mod:`.engine`    — the event loop that ties them together, and the result stream.
"""
