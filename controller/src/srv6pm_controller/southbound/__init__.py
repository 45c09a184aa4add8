"""Clients of the node agents (srv6pm.node.v1)."""
