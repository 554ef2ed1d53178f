"""A rate cap shared by threads: a destination's receive cap, a server's upload cap."""

import threading
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging import throttle_step

# The most a capped sender may send at once after idling: a quarter second at its rate.
BURST_S = 0.25


class Throttle:
    """One cap shared by every thread that consumes through it; a rate of 0 is no cap."""

    def __init__(self, rate_bytes_s):
        self.rate = rate_bytes_s
        self.allowance = 0.0
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def consume(self, count):
        if not self.rate:
            return
        with self.lock:
            now = time.monotonic()
            self.allowance, delay = throttle_step(
                self.allowance, now - self.last, count, self.rate, self.rate * BURST_S
            )
            self.last = now
        if delay:
            time.sleep(delay)
