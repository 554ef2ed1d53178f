#!/usr/bin/env python3
"""Copy the device run's raw outputs to OUT_DIR through the project's evidence redactor.

The rules live in plugins/module_utils/evidence/redact.py (GPU UUIDs numbered in order of first
appearance, serials, addresses, MACs, GUIDs, secrets); one Redactor covers every file so one GPU
keeps one name across files. Host names to hide may be given after the folders.
  python3 bench/device/gpu_redact.py RAW_DIR OUT_DIR [HOSTNAME ...]
"""

import importlib.util
import sys
from pathlib import Path

# Loaded by path: the device machine runs this with a bare python3, and redact.py imports nothing.
_SPEC = importlib.util.spec_from_file_location(
    "seatwright_redact", Path(__file__).resolve().parents[2] / "plugins/module_utils/evidence/redact.py"
)
redact_module = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(redact_module)


def main(raw_dir, out_dir, hostnames):
    redactor = redact_module.Redactor(hostnames)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    for source in sorted(Path(raw_dir).iterdir()):
        if source.is_file():
            text = source.read_text(encoding="utf-8", errors="replace")
            (out / source.name).write_text(redactor.text(text), encoding="utf-8")
            count += 1
    print("redacted %d files into %s" % (count, out))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
