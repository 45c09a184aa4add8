"""What the router's FRR knows, read through vtysh's JSON output."""
