#!/usr/bin/env python3
"""Device run: dump what NVML answers (read_nvml_raw), untouched, as JSON, and how seatwright reads it.

The dump is the input of gpu.reading_from_nvml, so it becomes a unit-test fixture once redacted.
  PYTHONPATH=/tmp/site python3 bench/device/gpu_nvml_raw.py OUT.json
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.gpu_probe import read_nvml_raw  # noqa: E402
from ansible_collections.seatwright.fleet.plugins.module_utils.node.gpu import reading_from_nvml  # noqa: E402

raw = read_nvml_raw(with_links=True)
Path(sys.argv[1]).write_text(json.dumps({"raw": raw, "reading": reading_from_nvml(raw)}, indent=2, default=str) + "\n")
print(json.dumps(reading_from_nvml(raw)["links"]))
