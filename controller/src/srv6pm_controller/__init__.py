"""srv6pm_controller: northbound API, node clients, result publishing, topology, and the srv6pm CLI."""
