"""The metric names seatwright watches, from each exporter's own exposition, in one place.

Engines (what each serving engine's `/metrics` says, read from the pinned releases' code):
- vLLM 0.33.0: vllm/v1/metrics/loggers.py (PrometheusStatLogger) and, for HTTP status classes,
  vllm/entrypoints/serve/instrumentator/metrics.py (prometheus-fastapi-instrumentator's
  `http_requests_total{handler,method,status="2xx|4xx|5xx"}`). The lab engine, vLLM 0.32.0 CPU,
  exposes the same names: tests/fixtures/bench/vllm-0.32.0-cpu-metrics-tiny.txt.
- SGLang 0.5.23: sglang/srt/observability/metrics_collector.py (the collector moved there from
  srt/metrics/collector.py) and srt/observability/http_request_metrics.py. SGLang exposes them only
  when launched with --enable-metrics.
- NVIDIA DCGM exporter (4.6.0-4.8.3, the pinned image): field names of its documented collector
  CSV; the clock-event mask is DCGM_FI_DEV_CLOCKS_EVENT_REASONS (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS
  before DCGM 3.3), NVML's bits, 0x4 being the software power cap.
- Node exporter 1.5 infiniband collector (sysfs /sys/class/infiniband/<dev>/ports/<n>/counters):
  tests/fixtures/monitoring/node-exporter-1.5-infiniband.prom.

Every engine's own label `engine` (vLLM's engine index) is renamed `exported_engine` by Prometheus,
since seatwright's targets carry `engine` (vllm or sglang) as a target label.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.bench.counters import ENGINE_COUNTERS

# The labels every seat target carries (targets.py); alert rules aggregate by them.
SEAT_LABELS = ("seat", "node", "rank", "engine", "alias")


def _counter(key, prefix):
    return next(name for name in ENGINE_COUNTERS[key] if name.startswith(prefix))


# {engine: {what: metric name}}; counters carry the `_total` prometheus_client adds.
ENGINE_METRICS = {
    "vllm": {
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "generation_tokens": _counter("generation_tokens", "vllm:"),
        "prompt_tokens": _counter("prompt_tokens", "vllm:"),
        "kv_usage": "vllm:kv_cache_usage_perc",
        "preemptions": _counter("preemptions", "vllm:"),
        "ttft_bucket": "vllm:time_to_first_token_seconds_bucket",
        "responses": "http_requests_total",
    },
    "sglang": {
        "running": "sglang:num_running_reqs",
        "waiting": "sglang:num_queue_reqs",
        "generation_tokens": _counter("generation_tokens", "sglang:"),
        "prompt_tokens": _counter("prompt_tokens", "sglang:"),
        "kv_usage": "sglang:token_usage",
        # SGLang retracts (preempts) running requests when the KV pool runs out.
        "preemptions": "sglang:num_retracted_requests_total",
        "ttft_bucket": "sglang:time_to_first_token_seconds_bucket",
        "responses": "sglang:http_responses_total",
    },
}

# The selector of a server-side failure among each engine's HTTP responses.
ENGINE_ERROR_MATCHERS = {
    "vllm": 'status="5xx"',
    "sglang": 'status_code=~"5.."',
}

DCGM_POWER = "DCGM_FI_DEV_POWER_USAGE"
DCGM_POWER_LIMIT = "DCGM_FI_DEV_POWER_MGMT_LIMIT"
DCGM_CLOCK_EVENTS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
DCGM_SW_POWER_CAP_BIT = 0x4
DCGM_SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
DCGM_GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"

# The DCGM exporter's collector CSV seatwright ships: the documented defaults seatwright reads plus
# the power limit and the clock-event mask the power-cap alert needs (off in the shipped defaults).
DCGM_COUNTERS = (
    (DCGM_SM_CLOCK, "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    (DCGM_GPU_TEMP, "gauge", "GPU temperature (in C)."),
    (DCGM_POWER, "gauge", "Power draw (in W)."),
    (DCGM_POWER_LIMIT, "gauge", "Power management limit (in W)."),
    (DCGM_CLOCK_EVENTS[0], "gauge", "Current clock event reasons (bitmask of NVML reasons)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    (DCGM_FB_USED, "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
)

# Node exporter 1.5's infiniband counters that only grow on a fault (a RoCE port counts them too).
RDMA_ERROR_COUNTERS = (
    "node_infiniband_port_errors_received_total",
    "node_infiniband_symbol_error_total",
    "node_infiniband_link_downed_total",
    "node_infiniband_link_error_recovery_total",
    "node_infiniband_local_link_integrity_errors_total",
    "node_infiniband_excessive_buffer_overrun_errors_total",
    "node_infiniband_port_receive_remote_physical_errors_total",
    "node_infiniband_port_discards_transmitted_total",
)
RDMA_DATA = ("node_infiniband_port_data_received_bytes_total", "node_infiniband_port_data_transmitted_bytes_total")

# Written by the monitoring role into the node exporter's textfile folder from the node's co-tenant
# record (seat/cotenants.py): 1 for each co-tenant a seat stopped and that is not running again yet.
COTENANT_EVICTED = "seatwright_cotenant_evicted"


def name_regex(names):
    """A `__name__=~` value matching exactly these metric names."""
    return "|".join(names)


def increase_each(names, window, matchers=""):
    """increase() of each counter, labelled `counter` by its name, joined with `or`. One increase()
    over a `__name__=~` match fails in Prometheus 2.x once two of the counters exist for one port
    ("vector cannot contain metrics with the same labelset"): the function drops the names first."""
    return " or ".join(
        'label_replace(increase(%s{%s}[%s]), "counter", "%s", "", "")' % (name, matchers, window, name)
        for name in names
    )


def dcgm_counters_csv():
    """The DCGM exporter's collector file (-f), in its format: FIELD, type, help."""
    lines = ["# seatwright: the DCGM fields the alerts and the node dashboard read (monitoring/metrics.py)"]
    lines += ["%s, %s, %s" % row for row in DCGM_COUNTERS]
    return "\n".join(lines) + "\n"
