"""The roles a seat's node ranks play, shared by the launch plan and the image check.

seat/launch.py gives each rank its role; images/facts.py checks the engine's flags on the ranks
that run the engine. Both import the vocabulary from here, so images never imports seat.
"""

# A Ray worker rank runs `ray start`, not the engine: the engine on the head drives it.
RAY_WORKER = "ray-worker"


def runs_engine(rank):
    """True when the rank's argv is the engine's command line (a Ray worker's is `ray start`)."""
    return rank.get("role") != RAY_WORKER
