"""Network topology: extracted from the nodes, stored embedded (default) or in ArangoDB."""
