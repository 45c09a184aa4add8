"""srv6pm_topos: emulated SRv6 networks in Linux network namespaces and the srv6-pm demo."""
