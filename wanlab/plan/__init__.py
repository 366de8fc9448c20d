"""Planning: deterministic names, addresses and routes from the IR."""
