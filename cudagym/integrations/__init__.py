"""Plugs for the trainer and serving libraries (each module needs its library's extra, e.g. ``cudagym[openenv]``)."""
