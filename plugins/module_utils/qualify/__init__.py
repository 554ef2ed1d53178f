"""Pure qualification of a served seat: reading replies, detectors, gates, the quality protocol, soak
statistics and verdicts. The HTTP client and the runner that drives these live in io/."""
