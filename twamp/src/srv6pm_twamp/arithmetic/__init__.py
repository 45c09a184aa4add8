"""Loss and delay arithmetic: pure functions over numbers, no I/O, no clocks."""
