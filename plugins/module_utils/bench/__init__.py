"""Pure benchmark analysis: engine counters, per-request records, sweeps, stability, telemetry, promotion."""
