"""srv6pm_controller: northbound API, southbound clients, measurement scheduler, result publishing, topology, CLI."""
