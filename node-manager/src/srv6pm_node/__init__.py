"""srv6pm_node: the router agent (srv6pm-node).

Where things are: ``srv6/`` turns API requests into kernel SRv6 state over netlink;
``counters/`` marks and counts packets (eBPF, netfilter); ``services/`` are the gRPC servicers;
``cli.py`` starts the daemon.
"""
