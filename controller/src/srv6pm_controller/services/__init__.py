"""gRPC servicers of srv6pm-controller (srv6pm.controller.v1)."""
