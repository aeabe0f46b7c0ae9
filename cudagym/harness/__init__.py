"""Code that runs inside evaluation children (imported there as top-level modules)."""
