"""gRPC servicers of srv6pm-node."""
