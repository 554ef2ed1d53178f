"""The gpu_facts reading on a node: GPUs, the PCI platform around them, and the cached record.

gpu_probe.py and platform_probe.py read; node/gpu.py and node/platform.py interpret. A host with
no GPU gets facts that say why; it fails (ProbeUnavailable, with those facts as a detail) only
when the caller requires GPUs.
"""

import datetime
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ProbeUnavailable
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_json
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.gpu_probe import read_gpus
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.platform_probe import read_platform
from ansible_collections.seatwright.fleet.plugins.module_utils.node.gpu import (
    assemble_facts,
    no_gpu_facts,
    sysfs_pci_address,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.platform import interpret_acs, interpret_iommu


def gpu_facts(module, host, require_gpus, cache_path):
    """The module's result: facts for `host`, cached at `cache_path` unless in check mode."""
    read_at = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    reason = None
    try:
        reading = read_gpus(module, module.params["backend"])
    except ProbeUnavailable as exc:
        reading, reason = None, str(exc)
    bus_ids = [sysfs_pci_address(d["pci_bus_id"]) for d in reading["devices"]] if reading else []
    found = read_platform(module, bus_ids)
    iommu = interpret_iommu(found["iommu_group_count"], found["cmdline"], found["iommu_reason"])
    acs = interpret_acs(found["lspci"], found["lspci_reason"], found["bridge_configs"])
    if reading is None or not reading["devices"]:
        reason = reason or "the driver answered but reports no GPU"
        gpus, summary = no_gpu_facts(reason, read_at, iommu, acs)
        facts = {"seatwright_gpus": gpus, "seatwright_gpu_summary": summary}
        if require_gpus:
            raise ProbeUnavailable(
                "host %s: no NVIDIA GPU found (%s). This play requires GPUs: install or load the NVIDIA "
                "driver, or run it only on hosts that have GPUs." % (host, reason),
                ansible_facts=facts,
            )
    else:
        gpus, summary = assemble_facts(
            reading["devices"],
            reading["driver_version"],
            reading["cuda_version"],
            reading["links"],
            reading["source"],
            read_at,
            iommu,
            acs,
            found["gpu_groups"],
        )
        facts = {"seatwright_gpus": gpus, "seatwright_gpu_summary": summary}
    written = None
    if cache_path and not module.check_mode:
        record = dict(facts, read_at=read_at, measured_at_epoch=time.time(), host=host)
        try:
            atomic_write_json(cache_path, record)
            written = cache_path
        except OSError as exc:
            # A cache that cannot be written costs a re-read later, not this run.
            module.warn("host %s: could not cache GPU facts at %s: %s" % (host, cache_path, exc))
    return dict(changed=False, cache_path=written, ansible_facts=facts)
