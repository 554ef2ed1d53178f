#!/usr/bin/env python3
"""Copy the device run's raw outputs to $OUT with GPU UUIDs, serials, MACs and addresses replaced.

GPU UUIDs become GPU-00000000-0000-4000-8000-00000000000N in order of first appearance (the
convention of tests/fixtures/h200x2/), so one GPU keeps one name across files.
  python3 bench/device/gpu_redact.py RAW_DIR OUT_DIR
"""
import re
import sys
from pathlib import Path

GPU_UUID = re.compile(r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
ANY_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
SERIAL = re.compile(r"((?:Serial Number|Device Serial Number|serial)\s*[:=]?\s*)([0-9A-Za-z][0-9A-Za-z-]{5,})")
MAC = re.compile(r"\b[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}\b")
IPV4 = re.compile(r"\b(?!127\.0\.0\.1\b)(?!0\.0\.0\.0\b)(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\b")


class Redactor:
    def __init__(self):
        self.gpus = {}

    def gpu(self, match):
        key = match.group(0).lower()
        if key not in self.gpus:
            self.gpus[key] = "GPU-00000000-0000-4000-8000-%012d" % len(self.gpus)
        return self.gpus[key]

    def text(self, content):
        content = GPU_UUID.sub(self.gpu, content)
        content = ANY_UUID.sub(lambda m: m.group(0) if m.group(0).startswith("00000000-0000-4000-8000")
                               else "00000000-0000-0000-0000-000000000000", content)
        content = SERIAL.sub(lambda m: m.group(1) + "0" * len(m.group(2)), content)
        content = MAC.sub("00:00:00:00:00:00", content)
        return IPV4.sub(lambda m: "192.0.2.%s" % m.group(4) if all(int(p) < 256 for p in m.groups()) else m.group(0),
                        content)


def main(raw_dir, out_dir):
    redactor = Redactor()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for source in sorted(Path(raw_dir).iterdir()):
        if source.is_file():
            text = source.read_text(encoding="utf-8", errors="replace")
            (out / source.name).write_text(redactor.text(text), encoding="utf-8")
    print("redacted %d GPU UUIDs into %s" % (len(redactor.gpus), out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
