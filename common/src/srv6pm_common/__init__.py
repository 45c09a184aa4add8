"""srv6pm_common: plumbing shared by srv6pm-node and srv6pm-controller (gRPC server bootstrap, logs)."""
