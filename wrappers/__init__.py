"""cudagym.wrappers."""
