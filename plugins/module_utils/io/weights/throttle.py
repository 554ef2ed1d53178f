"""A rate cap shared by threads: a destination's receive cap, a server's upload cap."""

import threading
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging import throttle_delay


class Throttle:
    """One cap shared by every thread that consumes through it; a rate of 0 is no cap."""

    def __init__(self, rate_bytes_s):
        self.rate = rate_bytes_s
        self.started = time.monotonic()
        self.sent = 0
        self.lock = threading.Lock()

    def consume(self, count):
        if not self.rate:
            return
        with self.lock:
            self.sent += count
            delay = throttle_delay(self.rate, self.started, self.sent, time.monotonic())
        if delay:
            time.sleep(delay)
