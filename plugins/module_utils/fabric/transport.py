"""What a seat's ranks talk over: the RDMA devices a container gets, the transport a seat requires,
and the transport a rank's own log shows (pure).

Three decisions, one home each:

- `container_rdma`: which device nodes and capabilities an engine (or cross-node probe) container
  of a node gets, from the node's fabric facts, else its declared `seatwright_node_rdma_devices`
  (labelled `declared`);
- `required_transport`: what a seat must reach: the fleet's declaration
  (`seatwright_fleet_transport_required` with its reason), else the best the nodes' facts promise;
- `rank_transport` / `judge_transport`: what a rank's log shows (NCCL's channel lines, else the
  torch.distributed backend of a CPU seat) and whether it falls short of the requirement.

The device decision: the whole `/dev/infiniband` folder. The fabric facts name RDMA devices by
their verbs name (mlx5_0), not by the uverbs character device the kernel numbered for them
(uverbsN follows probe order, not the mlx5 index), so naming single nodes would be a guess the
facts cannot check. Docker adds every device node under a folder given to --device, rdma_cm
included, and NCCL_IB_HCA (fabric/nccl.py) already restricts NCCL to the fabric port.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import (
    NCCL_DEBUG_ENV,
    distributed_backend,
    engine_transports,
)

# Passed whole: uverbsN of every RDMA device plus rdma_cm (see the module docstring for why).
RDMA_DEVICE_DIR = "/dev/infiniband"
# Registering memory with the NIC pins it; the container may lock memory beyond its rlimit.
RDMA_CAPS = ("IPC_LOCK",)

# Best first. rdma-gdr: NET/IB (RoCE or InfiniBand) with GPUDirect RDMA on every inter-node
# channel; rdma: NET/IB, staged through host memory; socket: NET/Socket, or a CPU seat's gloo.
TRANSPORTS = ("rdma-gdr", "rdma", "socket")
DECLARED_VARIABLE = "seatwright_fleet_transport_required"
REASON_VARIABLE = "seatwright_fleet_transport_reason"


def _active_devices(fabric):
    names = []
    for device in (fabric or {}).get("rdma_devices") or []:
        if any(port.get("active") for port in device.get("ports") or []):
            names.append(device["name"])
    return names


def _gpudirect(fabric):
    """'peermem', 'dmabuf' or 'none' as the facts say; 'unknown' without facts."""
    if not fabric:
        return "unknown"
    gpudirect = fabric.get("gpudirect") or {}
    if not gpudirect.get("available"):
        return "none"
    if gpudirect.get("peermem_loaded") or gpudirect.get("via") == "peermem":
        return "peermem"
    return "dmabuf"


def container_rdma(host, fabric, declared_devices):
    """The RDMA part of one node's containers: {devices, cap_add, source, rdma_devices, gpudirect, note}.

    fabric: the node's cached fabric facts (None when not gathered); declared_devices: its
    seatwright_node_rdma_devices. Facts win; the declaration stands in, labelled `declared`, until
    they are gathered. A node with neither gets nothing (source `none`).
    """
    if fabric and not fabric.get("declared_only"):
        names, source = _active_devices(fabric), "facts"
    else:
        # No facts, or facts made from the declaration (fabric/nccl.py declared_fabric): the declaration.
        names = list(declared_devices or []) or _active_devices(fabric)
        source = "declared"
    gpudirect = _gpudirect(fabric if source == "facts" else None)
    if not names:
        return {
            "devices": [],
            "cap_add": [],
            "source": "none" if source == "declared" else source,
            "rdma_devices": [],
            "gpudirect": gpudirect,
            "note": "host %s: no RDMA device%s; its ranks use sockets"
            % (host, " with an active port in its fabric facts" if source == "facts" else " declared"),
        }
    return {
        "devices": [RDMA_DEVICE_DIR],
        "cap_add": list(RDMA_CAPS),
        "source": source,
        "rdma_devices": names,
        "gpudirect": gpudirect,
        "note": "host %s: %s (%s) through %s with %s; GPUDirect RDMA %s"
        % (
            host,
            ", ".join(names),
            "from fabric facts" if source == "facts" else "declared, fabric facts not gathered",
            RDMA_DEVICE_DIR,
            ", ".join(RDMA_CAPS),
            {
                "peermem": "through nvidia-peermem",
                "dmabuf": "through DMA-BUF",
                "none": "not available (no nvidia-peermem, no DMA-BUF)",
                "unknown": "unknown until the fabric facts are gathered",
            }[gpudirect],
        ),
    }


def promised_transport(rdma):
    """The best transport one node's container_rdma promises."""
    if not rdma["devices"]:
        return "socket"
    return "rdma-gdr" if rdma["gpudirect"] in ("peermem", "dmabuf") else "rdma"


def _promise_source(node_rdma):
    # The promise is only as firm as its weakest input: a declared node has not been probed.
    if node_rdma and all(r.get("source") == "facts" for r in node_rdma):
        return "fabric facts"
    return "declared RDMA devices"


def required_transport(declared, reason, node_rdma, multi_node, device):
    """What the seat's ranks must reach at bring-up: {required, source, promised, reason}.

    declared: seatwright_fleet_transport_required (None or 'auto': the best the nodes promise);
    reason: seatwright_fleet_transport_reason, required with a declaration below that promise.
    node_rdma: container_rdma of each of the seat's nodes. Nodes declared but not gathered
    promise RDMA without GPUDirect (what the facts would have to show to promise more).
    """
    if not multi_node:
        return {"required": None, "source": "one node", "promised": None, "reason": "no inter-node traffic"}
    promised = TRANSPORTS[max(TRANSPORTS.index(promised_transport(r)) for r in node_rdma)] if node_rdma else "socket"
    if device != "cuda":
        # A CPU seat talks over torch.distributed's gloo: sockets, whatever the fabric offers.
        promised = "socket"
    if declared in (None, "", "auto"):
        return {
            "required": promised,
            "source": _promise_source(node_rdma) if device == "cuda" else "CPU seat (gloo)",
            "promised": promised,
            "reason": "the best the seat's nodes promise",
        }
    if declared not in TRANSPORTS:
        raise SeatError("%s is %r; expected auto or one of %s" % (DECLARED_VARIABLE, declared, ", ".join(TRANSPORTS)))
    if TRANSPORTS.index(declared) > TRANSPORTS.index(promised) and not reason:
        raise SeatError(
            "%s is %s, below the %s the seat's nodes promise; say why in %s (e.g. a CPU lab with no RDMA)"
            % (DECLARED_VARIABLE, declared, promised, REASON_VARIABLE)
        )
    return {"required": declared, "source": "fleet declaration", "promised": promised, "reason": reason or "declared"}


def socket_refusal(requirement):
    """A plan refusal for a multi-node seat that can only talk over sockets the fleet has not accepted.

    Sockets carry a cross-node seat's collectives at a fraction of the fabric's rate: a fleet takes
    them only by saying so (seatwright_fleet_transport_required: socket, with its reason).
    """
    if requirement.get("required") != "socket" or requirement.get("source") == "fleet declaration":
        return None
    return {
        "id": "transport-declared",
        "reason": "a cross-node seat over sockets runs its collectives at a fraction of the fabric's rate; "
        "a fleet runs one only by declaring it acceptable",
        "detail": "the seat spans nodes but %s: its ranks would talk over sockets"
        % (
            "it runs on CPU (torch.distributed gloo)"
            if requirement.get("source") == "CPU seat (gloo)"
            else "no node shows an RDMA device"
        ),
        "remedy": "gather fabric facts or declare seatwright_node_rdma_devices; or, where sockets are acceptable, "
        "declare %s: socket and %s (why) for the fleet" % (DECLARED_VARIABLE, REASON_VARIABLE),
    }


def rank_transport(log_text, channels_summary=None):
    """What one rank's log shows it talked over: {kind, backend, source, channels, nics, detail}.

    channels_summary: fabric/nccl.py engine_transports of the same log (its channel lines). A
    log without NCCL channel lines but with the torch.distributed line of a gloo group (vLLM's
    `... backend=gloo`) is a CPU seat: socket, read from that line. kind None: nothing logged.
    """
    summary = channels_summary if channels_summary is not None else engine_transports(log_text, False, False)
    net = [line for line in summary.get("lines") or [] if " via NET/" in line]
    vias = sorted(via for via in (summary.get("counts") or {}) if via.startswith("NET/"))
    if vias:
        if any(via.startswith("NET/Socket") for via in vias):
            kind = "socket"
        elif summary.get("net_gdrdma"):
            kind = "rdma-gdr"
        else:
            kind = "rdma"
        return {
            "kind": kind,
            "backend": "nccl",
            "source": "rank logs (NCCL channel lines)",
            "channels": {via: summary["counts"][via] for via in vias},
            "nics": list(summary.get("nics") or []),
            "gid_index": summary.get("gid_index"),
            "detail": net[:8],
        }
    backend = distributed_backend(log_text)
    if backend == "gloo":
        return {
            "kind": "socket",
            "backend": "gloo",
            "source": "rank logs (torch.distributed backend line)",
            "channels": {},
            "nics": [],
            "gid_index": None,
            "detail": [],
        }
    return {
        "kind": None,
        "backend": backend,
        "source": "rank logs",
        "channels": {},
        "nics": [],
        "detail": [],
    }


LIKELY_CAUSES = {
    "socket": (
        "the container has no %s (plan the seat again so its spec passes the devices), NCCL_IB_HCA names "
        "a device or port that is down or absent, or NCCL_IB_GID_INDEX points at a GID with no RoCE v2 "
        "address" % RDMA_DEVICE_DIR
    ),
    "rdma": (
        "nvidia-peermem is not loaded and DMA-BUF is not usable (open kernel module, kernel >= 5.12), "
        "or NCCL_NET_GDR_LEVEL is nearer than the GPU-NIC path"
    ),
}


def judge_transport(requirement, observed, host, must_show=True):
    """None when `observed` (rank_transport) meets `requirement` (required_transport), else why not.

    must_show: the rank's log must show its transport. Node rank 0 always must: its engine logs
    its own channels, and under Ray the workers' lines are forwarded to it. Another rank's log
    (a Ray worker's container) may show nothing, but what it does show is judged.
    """
    required = (requirement or {}).get("required")
    if not required:
        return None
    kind = observed.get("kind")
    if kind is None and not must_show:
        return None
    if kind is None:
        return (
            "host %s: the rank's log shows no NCCL channel and no distributed backend line, so the transport "
            "(%s required) is not proven; the rank must run with %s"
            % (host, required, " ".join("%s=%s" % item for item in sorted(NCCL_DEBUG_ENV.items())))
        )
    if TRANSPORTS.index(kind) <= TRANSPORTS.index(required):
        return None
    channels = ", ".join("%s x%d" % item for item in sorted(observed["channels"].items())) or (
        "backend %s" % observed.get("backend")
    )
    return "host %s: the rank talks over %s (%s), the seat requires %s (%s); likely cause: %s" % (
        host,
        kind,
        channels,
        required,
        requirement.get("source"),
        LIKELY_CAUSES.get(kind, "see the rank's NCCL lines"),
    )


def observed_transport(log_text, channels_summary, requirement, must_show, host):
    """What bring-up records for one rank: rank_transport of its log, the requirement and the verdict."""
    observed = rank_transport(log_text, channels_summary)
    problem = judge_transport(requirement, observed, host, must_show)
    return dict(
        observed,
        required=(requirement or {}).get("required"),
        required_source=(requirement or {}).get("source"),
        problem=problem,
    )
