"""The kind of a node, and what each role does on it: an ordinary Linux host, or Linux under Windows'
WSL 2 with Docker Desktop's engine (the node of field report [003]).

Pure: io/node/kind_probe.py reads the kernel release, two paths and `docker info`; library/node_kind.py
hands them here. Every role's choice on a kind, with its reason, is in this file (docs/node-kinds.md).
A skip is reported as a reason, never as a failure.
"""

import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import NodeContractError

KINDS = ("linux", "wsl2")

# Where WSL 2 maps the Windows driver's CUDA libraries and nvidia-smi into the Linux guest, and the
# device of its GPU paravirtualization (both from NVIDIA's CUDA on WSL User Guide).
WSL_LIB_DIR = "/usr/lib/wsl/lib"
DXG_DEVICE = "/dev/dxg"
# Microsoft's WSL 2 kernels name themselves so: 6.6.87.2-microsoft-standard-WSL2.
WSL2_KERNEL = re.compile(r"-microsoft-standard-WSL2(\+|\b)", re.IGNORECASE)
DOCKER_DESKTOP_OS = "Docker Desktop"

# The upstream documents each WSL2 choice rests on, cited by key in reasons and docs/node-kinds.md.
SOURCES = {
    "cuda-wsl": "NVIDIA, CUDA on WSL User Guide, https://docs.nvidia.com/cuda/wsl-user-guide/index.html "
    "(sections 'Getting Started with CUDA on WSL 2' and 'WSL 2 Support Constraints')",
    "docker-desktop-gpu": "Docker, Docker Desktop GPU support, https://docs.docker.com/desktop/features/gpu/",
    "nccl-env": "NVIDIA, NCCL environment variables, "
    "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html",
    "nccl-442": "NVIDIA/nccl issue 442: on WSL NCCL finds no real path of the GPU's PCI bus in sysfs",
    "vllm-5161": "vllm-project/vllm issue 5161: TP=2 on WSL 2 stalls in the GPU peer-to-peer access check",
    "field-003": "field report [003]: two RTX PRO 6000 Max-Q on Windows 11, Docker Desktop/WSL2, driver 610.88",
}

# What each node role does on a WSL2 node instead of its Linux steps, and why.
DRIVER_SERVED = (
    "served by the Windows driver: WSL 2 maps the Windows NVIDIA driver's CUDA library and nvidia-smi into "
    "%s, and NVIDIA says no Linux NVIDIA driver may be installed inside WSL 2 [cuda-wsl]; no driver package, "
    "kernel module, nvidia-persistenced, container toolkit or Docker runtime is installed here, and Docker "
    "Desktop's engine passes the GPUs to containers itself [docker-desktop-gpu]" % WSL_LIB_DIR
)
NOT_SETTABLE = "not settable on this node kind"
POWER_NOT_SETTABLE = (
    "%s (wsl2): the Windows driver owns power limits, persistence and clocks, and NVML inside WSL 2 is "
    "limited [cuda-wsl], so seatwright sets none of them from the guest. Set them on the Windows host "
    "(nvidia-smi.exe, as administrator) and record the cap in gpu_power_limit_w" % NOT_SETTABLE
)
NO_BOOT_UNIT = "no boot unit installed (wsl2): nothing is set from inside WSL 2 that a boot would need to re-apply"
NO_RDMA = (
    "skipped (wsl2): a WSL2 node is a single-node seat host; WSL 2 passes no RDMA device and no GPUDirect "
    "RDMA path to the Linux guest [cuda-wsl], so there is no fabric to set up or measure"
)
MULTI_NODE_REFUSAL = {
    "id": "wsl2-single-node",
    "reason": "a WSL2 node has no RDMA device and its GPUs are paravirtualized through the Windows driver "
    "[cuda-wsl]: it serves seats on its own GPUs only (single-node seat host, [003])",
    "remedy": "place the seat on Linux nodes (seat_hosts), or choose a one-node recipe for this node",
}

# The NCCL contract of a seat on a WSL2 node: NCCL inside one node, over shared memory. Each entry
# has its reason and the sources it rests on. [003] ran a 'WSL2-safe NCCL contract' but does not
# list it; these are seatwright's settings from the upstream documents above.
WSL2_NCCL = (
    (
        "NCCL_P2P_DISABLE",
        "1",
        "WSL 2 paravirtualizes the GPUs through /dev/dxg: NCCL sees no PCI path between them [nccl-442] and a "
        "TP=2 start stalled in the peer-to-peer check [vllm-5161]; peer copies off, NCCL goes through shared memory",
        ("cuda-wsl", "nccl-442", "vllm-5161", "nccl-env"),
    ),
    (
        "NCCL_SHM_DISABLE",
        "0",
        "shared memory is the path between the two GPUs once peer copies are off; the seat's container runs "
        "with the host's IPC namespace and a large /dev/shm (seat/container.py)",
        ("nccl-env",),
    ),
    (
        "NCCL_CUMEM_ENABLE",
        "0",
        "NCCL's cuMem buffers reserve and map memory through the driver, and WSL 2 limits pinned system memory "
        "[cuda-wsl]; off, as vLLM already sets it for its own ranks (vllm/env_override.py), so SGLang's ranks "
        "run the same",
        ("cuda-wsl", "nccl-env"),
    ),
    (
        "NCCL_IB_DISABLE",
        "1",
        "no RDMA device reaches WSL 2 [cuda-wsl]; nothing for NCCL's IB transport to open",
        ("cuda-wsl", "nccl-env"),
    ),
)


def docker_engine(info):
    """What `docker info --format '{{json .}}'` (parsed) says about the engine; None when it did not answer."""
    if not isinstance(info, dict) or not info:
        return None
    system = str(info.get("OperatingSystem") or "")
    kernel = str(info.get("KernelVersion") or "")
    return {
        "server_version": info.get("ServerVersion"),
        "operating_system": system or None,
        "kernel_version": kernel or None,
        "docker_desktop": system == DOCKER_DESKTOP_OS,
        "wsl2_kernel": bool(WSL2_KERNEL.search(kernel)),
    }


def _check_readings(host, readings):
    expected = (
        "{kernel_release: str, dxg: bool, wsl_lib: bool, docker_info: dict or null}, as "
        "io/node/kind_probe.py reads them"
    )
    if not isinstance(readings, dict) or set(readings) - {"kernel_release", "dxg", "wsl_lib", "docker_info"}:
        raise NodeContractError("host %s: node readings are %r; expected %s" % (host, readings, expected))
    if not isinstance(readings.get("kernel_release"), str):
        raise NodeContractError(
            "host %s: kernel_release is %r; expected %s" % (host, readings.get("kernel_release"), expected)
        )
    for key in ("dxg", "wsl_lib"):
        if not isinstance(readings.get(key), bool):
            raise NodeContractError("host %s: %s is %r; expected %s" % (host, key, readings.get(key), expected))
    if readings.get("docker_info") is not None and not isinstance(readings["docker_info"], dict):
        raise NodeContractError("host %s: docker_info is %r; expected %s" % (host, readings["docker_info"], expected))


def decide(host, readings, declared=None, source="node"):
    """The node's kind from what it shows: {kind, source, evidence, warnings, problems, docker_engine, ...}.

    `readings`: the kernel release, whether /dev/dxg and /usr/lib/wsl/lib exist, and `docker info` as
    JSON (None where no engine answered). A WSL 2 kernel, or the paravirtualized GPU device with the
    Windows driver's libraries, make it wsl2; Docker Desktop's engine is recorded beside them. `declared`:
    the inventory's seatwright_node_kind (None: not declared); a node that shows another kind is a problem.
    """
    _check_readings(host, readings)
    release = readings["kernel_release"].strip()
    engine = docker_engine(readings.get("docker_info"))
    evidence = []
    if WSL2_KERNEL.search(release):
        evidence.append("kernel release %s is a WSL 2 kernel" % release)
    if readings["dxg"]:
        evidence.append("%s is present (WSL 2's GPU paravirtualization)" % DXG_DEVICE)
    if readings["wsl_lib"]:
        evidence.append("%s is present (the Windows driver's libraries)" % WSL_LIB_DIR)
    if engine and engine["docker_desktop"]:
        evidence.append(
            "Docker's engine is Docker Desktop %s on kernel %s" % (engine["server_version"], engine["kernel_version"])
        )
    wsl2 = bool(WSL2_KERNEL.search(release)) or (readings["dxg"] and readings["wsl_lib"])
    kind = "wsl2" if wsl2 else "linux"
    warnings = []
    if wsl2:
        if not readings["dxg"]:
            warnings.append(
                "%s is missing: WSL 2 passes no GPU to this guest; install the Windows NVIDIA driver and run "
                "`wsl --update` on the Windows host" % DXG_DEVICE
            )
        if not readings["wsl_lib"]:
            warnings.append(
                "%s is missing: the Windows driver's CUDA library and nvidia-smi are not mapped in; update "
                "the Windows NVIDIA driver" % WSL_LIB_DIR
            )
        if engine and not engine["wsl2_kernel"]:
            warnings.append(
                "Docker's engine runs on kernel %s, not a WSL 2 kernel: it is not Docker Desktop's WSL 2 "
                "engine; seats run where that engine runs" % engine["kernel_version"]
            )
    elif engine and engine["docker_desktop"]:
        warnings.append(
            "Docker Desktop's engine answers on a host that is not WSL 2 (kernel %s): its containers run in "
            "Docker Desktop's own VM, without this host's GPUs" % release
        )
    problems = []
    if declared not in (None, "") and declared != kind:
        problems.append(
            "host %s: seatwright_node_kind declares %s, but the node shows %s (%s); fix the inventory"
            % (host, declared, kind, "; ".join(evidence) or "kernel %s, no WSL 2 device or libraries" % release)
        )
    return {
        "kind": kind,
        "source": source,
        "kernel_release": release,
        "evidence": evidence,
        "warnings": warnings,
        "problems": problems,
        "docker_engine": engine,
        "driver_dir": WSL_LIB_DIR if wsl2 else None,
        "single_node_only": wsl2,
        "reason": (
            "WSL 2: %s" % "; ".join(evidence)
            if wsl2
            else "Linux: kernel %s, no WSL 2 kernel, device or driver libraries" % release
        ),
    }


def lab_input_problem(host, test_input, lab_marker, fleet_name):
    """None when a labelled test input may stand in for the node's readings, else why not.

    Test equipment: honoured only on a lab node, one that lab/prepare.yml marked and whose fleet is
    the lab, so no real inventory can make a Linux node look like WSL 2 (or the reverse)."""
    if test_input is None:
        return None
    if fleet_name != "lab" or not lab_marker:
        return (
            "host %s: node_base_kind_test_input is lab test equipment and is honoured only on a lab node "
            "(seatwright_fleet_name lab, prepared by lab/prepare.yml); remove it from this inventory" % host
        )
    return None


def kind_of(host_kind_fact, declared=None):
    """The kind to plan with: the node's fact when cached, else the inventory's seatwright_node_kind, else linux."""
    if isinstance(host_kind_fact, dict) and host_kind_fact.get("kind") in KINDS:
        return host_kind_fact["kind"], "facts"
    if declared in KINDS:
        return declared, "inventory"
    return "linux", "default"


def cited(text):
    """A reason with its [source] keys spelled out once at the end, for messages a person reads."""
    keys = [key for key in SOURCES if "[%s]" % key in text]
    if not keys:
        return text
    return "%s (sources: %s)" % (text, "; ".join("[%s] %s" % (key, SOURCES[key]) for key in keys))


def role_skip(kind, role):
    """Why `role` skips its Linux steps on a node of `kind` (None: it runs them)."""
    if kind != "wsl2":
        return None
    return {"nvidia_driver": DRIVER_SERVED, "rdma_fabric": NO_RDMA, "gpu_power_boot": NO_BOOT_UNIT}.get(role)


def driver_report(host, kind, summary):
    """What the driver role says on a node of `kind`, from its GPU summary (gpu_facts)."""
    if kind != "wsl2":
        return None
    summary = summary if isinstance(summary, dict) else {}
    version = summary.get("driver_version")
    seen = (
        "Windows driver %s answers for %d GPU%s"
        % (version, summary.get("count") or 0, "" if summary.get("count") == 1 else "s")
        if version
        else "no driver version read (%s)" % (summary.get("reason") or "nvidia-smi did not answer")
    )
    return "host %s: %s; %s" % (host, seen, DRIVER_SERVED)


def _changes(trial):
    """The settings a check-mode gpu_settings run would change, as phrases."""
    phrases = []
    for item in trial.get("limits") or []:
        if item.get("changed"):
            phrases.append(
                "GPU %s power limit %s W -> %s W" % (item.get("index"), item.get("before_w"), item.get("after_w"))
            )
    for item in trial.get("persistence") or []:
        if item.get("changed"):
            phrases.append("GPU %s persistence %s -> %s" % (item.get("index"), item.get("before"), item.get("after")))
    clocks = trial.get("clocks") or {}
    if clocks.get("changed"):
        phrases.append("clock lock %s -> %s" % (clocks.get("before"), clocks.get("after")))
    return phrases


def power_outcome(host, kind, trial):
    """Whether gpu_power applies its settings on a node of `kind`, after a check-mode trial there.

    `trial`: the check-mode gpu_settings result (registered with failed_when false). On Linux the settings
    are applied as always. On WSL2 nothing is set: a trial that would change nothing is reported as
    holding; one that would change something, or that the node refused (no power limits reported), is
    reported as not settable on this node kind, naming each setting. Never a failure.
    """
    if kind != "wsl2":
        return {"apply": True, "status": "applied", "messages": []}
    trial = trial if isinstance(trial, dict) else {}
    if trial.get("failed"):
        return {
            "apply": False,
            "status": "not-settable",
            "messages": [
                "host %s: power limits, persistence and clocks %s; the check-mode trial was refused: %s"
                % (host, POWER_NOT_SETTABLE, str(trial.get("msg") or "no reason given").strip())
            ],
        }
    wanted = _changes(trial)
    if not wanted:
        return {
            "apply": False,
            "status": "holds",
            "messages": [
                "host %s: the GPUs already hold the requested settings; nothing to set (wsl2: settings are "
                "%s, and none is needed)" % (host, NOT_SETTABLE)
            ],
        }
    return {
        "apply": False,
        "status": "not-settable",
        "messages": ["host %s: %s: %s" % (host, "; ".join(wanted), POWER_NOT_SETTABLE)],
    }


def multi_node_refusal(seat_nodes, multi_node):
    """The plan's refusal of a multi-node seat with a rank on a WSL2 node (None: nothing to refuse)."""
    if not multi_node:
        return None
    hosts = [node["host"] for node in seat_nodes if node.get("kind") == "wsl2"]
    if not hosts:
        return None
    return dict(
        MULTI_NODE_REFUSAL,
        detail="%s %s WSL2 node%s; a seat across nodes needs a fabric between them"
        % (", ".join(hosts), "is a" if len(hosts) == 1 else "are", "" if len(hosts) == 1 else "s"),
    )


def wsl2_nccl_entries():
    """The WSL2 NCCL contract as {name, value, reason, sources} entries (sources spelled out)."""
    return [
        {"name": name, "value": value, "reason": reason, "sources": [SOURCES[key] for key in keys]}
        for name, value, reason, keys in WSL2_NCCL
    ]


def wsl2_nccl_env():
    """The WSL2 NCCL contract as {name: value}: what a seat's ranks on a WSL2 node run with."""
    return dict((name, value) for name, value, _, _ in WSL2_NCCL)


# What a seat's engine container is told of its node's kind. The sglang-sm120 image's patch
# wsl2-logits-symm-mem reads it: its symmetric-memory logits gather raised SIGFPE through WSL 2's CUDA
# proxy [003], so on "wsl2" the engine gathers logits over NCCL. The node's kind is decided once (decide,
# from the kernel release, /dev/dxg and Docker's engine, or declared); the engine never guesses it again.
NODE_KIND_ENV = "SEATWRIGHT_NODE_KIND"


def engine_env(kind):
    """{name: value} a seat's engine ranks on a node of `kind` run with: none on linux; on wsl2 the NCCL
    contract and NODE_KIND_ENV, which turns the patched SGLang's symmetric-memory logits gather off."""
    if kind not in KINDS:
        raise NodeContractError("node kind %r is not one of %s" % (kind, ", ".join(KINDS)))
    if kind != "wsl2":
        return {}
    return dict(wsl2_nccl_env(), **{NODE_KIND_ENV: kind})


STEPS = ("driver", "power", "power_boot", "rdma")


def role_step(host, kind, step, data=None):
    """What a node role does at `step` on a node of `kind`: {act, messages}; `act` false is a skip whose
    messages say why (never a failure). `data`: the GPU summary for driver, the check-mode trial for power."""
    if step not in STEPS:
        raise NodeContractError("step %r is not one of %s" % (step, ", ".join(STEPS)))
    if kind not in KINDS:
        raise NodeContractError("host %s: node kind %r is not one of %s" % (host, kind, ", ".join(KINDS)))
    if step == "power":
        outcome = power_outcome(host, kind, data)
        return {"act": outcome["apply"], "status": outcome["status"], "messages": outcome["messages"]}
    if kind != "wsl2":
        return {"act": True, "status": "linux", "messages": []}
    if step == "driver":
        return {"act": False, "status": "served-by-windows", "messages": [driver_report(host, kind, data)]}
    reason = role_skip(kind, {"rdma": "rdma_fabric", "power_boot": "gpu_power_boot"}[step])
    return {"act": False, "status": "skipped", "messages": ["host %s: %s" % (host, reason)]}
