"""Shared I/O helpers: atomic file writes, caches, probes of the host (GPU, checkpoint files) and the staging transports. Everything that touches the host lives here."""
