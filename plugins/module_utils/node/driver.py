"""NVIDIA driver decisions: repository, keyring, package selection and pinning per distribution.

Pure functions; library/nvidia_driver_plan.py hands over the node's distribution and current
driver, roles/nvidia_driver writes what is decided here.
"""

import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DriverError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.hardware import GPU_PROFILES, is_sm120
from ansible_collections.seatwright.fleet.plugins.module_utils.node.secureboot import module_signing_plan

CUDA_REPO_BASE = "https://developer.download.nvidia.com/compute/cuda/repos"
# NVIDIA's CUDA repository signing key for deb-based distributions (driver installation guide,
# "GPG Keys Used to Sign the Packages": 3bf863cc), published beside each repository.
CUDA_KEY_FILE = "3bf863cc.pub"
CUDA_KEY_FINGERPRINT = "EB693B3035CD5710E231E123A4B469963BF863CC"
# NVIDIA Container Toolkit repository and its signing key (container toolkit install guide).
TOOLKIT_REPO_URL = "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
TOOLKIT_KEY_URL = "https://nvidia.github.io/libnvidia-container/gpgkey"
TOOLKIT_KEY_FINGERPRINT = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"

# Repository folder per distribution and release, with the signing key NVIDIA documents for it.
# Debian 13's repository is signed by a newer key whose fingerprint is not recorded here: it
# needs nvidia_driver_cuda_key_url and _fingerprint from the user.
REPOSITORIES = {
    ("debian", "12"): {"folder": "debian12", "key": CUDA_KEY_FILE},
    ("debian", "13"): {"folder": "debian13", "key": None},
    ("ubuntu", "22.04"): {"folder": "ubuntu2204", "key": CUDA_KEY_FILE},
    ("ubuntu", "24.04"): {"folder": "ubuntu2404", "key": CUDA_KEY_FILE},
}
ARCHITECTURES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "sbsa", "arm64": "sbsa"}

# Branches from which NVIDIA packages a pinning package and an unversioned nvidia-open.
FIRST_PINNING_BRANCH = 580
# The open kernel modules became NVIDIA's default packaging at 560; Blackwell (SM120) needs 570+.
FIRST_OPEN_DEFAULT_BRANCH = 560
FIRST_SM120_BRANCH = 570

_BRANCH = re.compile(r"^\d{3}$")
# Package name patterns that belong to the driver branch (not the toolkit, not CUDA libraries).
PINNED_PACKAGE_PATTERN = (
    "/^(nvidia-(open|driver|kernel|modprobe|persistenced|settings|xconfig|smi|firmware|dkms|utils)"
    "|libnvidia-|libcuda1|libxnvctrl|xserver-xorg-video-nvidia|firmware-nvidia|cuda-drivers)/"
)


def repository(distribution, version, architecture, base_url=CUDA_REPO_BASE):
    """The CUDA repository entry for a node: URL, suite, key file URL (or None)."""
    name = (distribution or "").lower()
    release = str(version or "")
    if name == "debian":
        release = release.split(".")[0]
    key = (name, release)
    if key not in REPOSITORIES:
        supported = ", ".join("%s %s" % pair for pair in sorted(REPOSITORIES))
        raise DriverError(
            "%s %s is not a distribution seatwright installs the NVIDIA driver on "
            "(supported: %s); install the driver by hand and set "
            "nvidia_driver_install_packages: false" % (distribution or "?", release or "?", supported)
        )
    arch = ARCHITECTURES.get((architecture or "").lower())
    if arch is None:
        raise DriverError(
            "architecture %r has no NVIDIA CUDA repository; expected one of %s"
            % (architecture, ", ".join(sorted(ARCHITECTURES)))
        )
    entry = REPOSITORIES[key]
    url = "%s/%s/%s/" % (base_url.rstrip("/"), entry["folder"], arch)
    return {
        "folder": entry["folder"],
        "url": url,
        "suite": "/",
        "key_url": url + entry["key"] if entry["key"] else None,
        "key_fingerprint": CUDA_KEY_FINGERPRINT if entry["key"] else None,
    }


def parse_branch(branch):
    text = str(branch).strip()
    if not _BRANCH.match(text):
        raise DriverError("nvidia_driver_branch is %r; expected a three-digit driver branch such as 580" % (branch,))
    return int(text)


def driver_packages(branch, open_modules=True, compute_capabilities=()):
    """The packages that install one pinned driver branch from NVIDIA's repository."""
    number = parse_branch(branch)
    blackwell = [cc for cc in compute_capabilities if is_sm120(cc)]
    if blackwell and not open_modules:
        raise DriverError(
            "this node has compute capability %s GPUs (Blackwell), which only the open "
            "kernel modules drive; set nvidia_driver_open_kernel_modules: true" % blackwell[0]
        )
    if blackwell and number < FIRST_SM120_BRANCH:
        raise DriverError(
            "driver branch %d predates Blackwell (compute capability %s needs %d or "
            "newer); raise nvidia_driver_branch" % (number, blackwell[0], FIRST_SM120_BRANCH)
        )
    if number >= FIRST_PINNING_BRANCH:
        return ["nvidia-driver-pinning-%d" % number, "nvidia-open" if open_modules else "cuda-drivers"]
    if number >= FIRST_OPEN_DEFAULT_BRANCH:
        return ["nvidia-open-%d" % number if open_modules else "cuda-drivers-%d" % number]
    raise DriverError(
        "driver branch %d is older than %d, before NVIDIA's current packaging; raise "
        "nvidia_driver_branch" % (number, FIRST_OPEN_DEFAULT_BRANCH)
    )


def pin_preferences(branch):
    """apt preferences that hold the driver's packages to one branch."""
    number = parse_branch(branch)
    return (
        "# Written by seatwright (roles/nvidia_driver): hold the NVIDIA driver to branch %d.\n"
        "Package: %s\n"
        "Pin: version %d.*\n"
        "Pin-Priority: 1000\n" % (number, PINNED_PACKAGE_PATTERN, number)
    )


def driver_action(current_version, branch):
    """(action, reason): none when the running driver already is of the branch."""
    number = parse_branch(branch)
    if not current_version:
        return "install", "no NVIDIA driver is loaded"
    current = str(current_version).strip()
    if current.split(".")[0] == str(number):
        return "none", "driver %s is already of branch %d" % (current, number)
    return "change", "driver %s is loaded, branch %d is wanted" % (current, number)


def url_problem(variable, url, allow_http=False):
    """Why a repository or key URL is not acceptable, or None.

    Keys and package lists fetched over plain http can be swapped by anyone on the path, and a
    swapped key is then trusted by apt; http is refused unless the user allows it explicitly
    (a local mirror on a trusted network).
    """
    scheme = str(url or "").split("://", 1)[0].lower() if "://" in str(url or "") else ""
    if scheme == "https":
        return None
    if scheme == "http" and allow_http:
        return None
    if scheme == "http":
        return (
            "%s is %s, a plain http URL: anyone on the path could swap what it serves. Use https, or set "
            "nvidia_driver_allow_http: true for a mirror on a network you trust" % (variable, url)
        )
    return "%s is %r; expected an https:// URL" % (variable, url)


def keyring_problem(path, found, expected):
    """Why a downloaded keyring must not be trusted, or None when it holds exactly the expected primary key.

    apt's signed-by trusts every key in the file, so one extra key would let its owner sign the
    repository too.
    """
    expected = str(expected or "").replace(" ", "").upper()
    if found == [expected]:
        return None
    if expected in found:
        return (
            "keyring %s holds the expected key %s and also %s; signed-by would trust all of them. Replace it "
            "with the single key NVIDIA publishes" % (path, expected, ", ".join(f for f in found if f != expected))
        )
    return (
        "keyring %s does not hold the expected key %s (found: %s); replace it with the key NVIDIA publishes, "
        "or correct the fingerprint variable" % (path, expected, ", ".join(found) or "none")
    )


def driver_plan(
    distribution,
    version,
    architecture,
    branch,
    open_modules=True,
    compute_capabilities=(),
    current_version=None,
    container_toolkit=True,
    toolkit_version=None,
    cuda_key_url=None,
    cuda_key_fingerprint=None,
    base_url=CUDA_REPO_BASE,
    allow_http=False,
):
    """Everything roles/nvidia_driver needs: repositories, keys, packages, pin text, action."""
    repo = repository(distribution, version, architecture, base_url)
    key_url = cuda_key_url or repo["key_url"]
    key_fingerprint = (cuda_key_fingerprint or repo["key_fingerprint"] or "").replace(" ", "").upper()
    if not key_url or not key_fingerprint:
        raise DriverError(
            "no signing key is recorded for NVIDIA's %s repository; set "
            "nvidia_driver_cuda_key_url and nvidia_driver_cuda_key_fingerprint from "
            "NVIDIA's documentation for it" % repo["folder"]
        )
    if not re.match(r"^[0-9A-F]{40}$", key_fingerprint):
        raise DriverError(
            "nvidia_driver_cuda_key_fingerprint %r is not a 40-hex-digit OpenPGP fingerprint" % cuda_key_fingerprint
        )
    for variable, url in (("nvidia_driver_repo_base_url", base_url), ("nvidia_driver_cuda_key_url", key_url)):
        problem = url_problem(variable, url, allow_http) if url else None
        if problem:
            raise DriverError(problem)
    action, reason = driver_action(current_version, branch)
    packages = driver_packages(branch, open_modules, compute_capabilities)
    toolkit = []
    if container_toolkit:
        toolkit = ["nvidia-container-toolkit" + ("=%s" % toolkit_version if toolkit_version else "")]
    return {
        "branch": parse_branch(branch),
        "open_kernel_modules": bool(open_modules),
        "cuda_repository": dict(repo, key_url=key_url, key_fingerprint=key_fingerprint),
        "toolkit_repository": {
            "url": TOOLKIT_REPO_URL,
            "suite": "/",
            "key_url": TOOLKIT_KEY_URL,
            "key_fingerprint": TOOLKIT_KEY_FINGERPRINT,
        }
        if container_toolkit
        else None,
        "driver_packages": packages,
        "toolkit_packages": toolkit,
        "pin_preferences": pin_preferences(branch),
        "action": action,
        "reason": reason,
        "current_version": current_version or None,
    }


def plan_from_params(params, current_version):
    """driver_plan for nvidia_driver_plan's parameters, with the running driver's version given.

    A node without GPU facts yet is planned from its declared profile's compute capability.
    """
    capabilities = params["compute_capabilities"]
    profile = params["gpu_profile"]
    if not capabilities and profile:
        if profile not in GPU_PROFILES:
            raise DriverError("gpu_profile %r is not one of %s" % (profile, ", ".join(sorted(GPU_PROFILES))))
        capabilities = [GPU_PROFILES[profile]["compute_capability"]]
    plan = driver_plan(
        params["distribution"],
        params["distribution_version"],
        params["architecture"],
        params["branch"],
        params["open_kernel_modules"],
        capabilities,
        current_version,
        params["container_toolkit"],
        params["toolkit_version"],
        params["cuda_key_url"],
        params["cuda_key_fingerprint"],
        params["repo_base_url"],
        params["allow_http"],
    )
    # Decided before anything is installed: a refusal here leaves the node as it was.
    secure_boot = params.get("secure_boot")
    plan["module_signing"] = (
        None
        if secure_boot is None
        else module_signing_plan(
            params.get("host") or "(unnamed)",
            secure_boot,
            params["open_kernel_modules"],
            params.get("mok_key"),
            params.get("mok_cert"),
        )
    )
    return plan


SOURCES_DIR = "/etc/apt/sources.list.d"


def deb822_source(name, url, keyring, enabled):
    """(path, text) of one repository's deb822 source, as ansible.builtin.deb822_repository writes
    it (its fields sorted by option name), so that nodes it wrote see no change."""
    fields = [
        ("Enabled", "yes" if enabled else "no"),
        ("X-Repolib-Name", name),
        ("Signed-By", keyring),
        ("Suites", "/"),
        ("Types", "deb"),
        ("URIs", url),
    ]
    if not re.match(r"^[a-z0-9-]+$", name) or any("\n" in str(value) for _, value in fields):
        raise DriverError("repository %r: a name of a-z, 0-9 and '-' and one-line fields are needed" % name)
    return "%s/%s.sources" % (SOURCES_DIR, name), "".join("%s: %s\n" % field for field in fields)


def key_fingerprints(gpg_colons):
    """Fingerprints of primary keys in `gpg --show-keys --with-colons` output."""
    fingerprints, after_primary = [], False
    for line in (gpg_colons or "").splitlines():
        fields = line.split(":")
        if fields[0] == "pub":
            after_primary = True
        elif fields[0] == "sub":
            after_primary = False
        elif fields[0] == "fpr" and after_primary and len(fields) > 9:
            fingerprints.append(fields[9].upper())
            after_primary = False
    return fingerprints
