"""Which Debian packages a node still lacks, decided from dpkg-query's output.

Opening apt's cache costs seconds per task on slow disks (7-9 s in the lab's containers), so roles
ask dpkg first and call apt only when something is really missing.
"""

# One line per package: name, tab, the status word dpkg keeps for it.
DPKG_QUERY_FORMAT = "${Package}\t${db:Status-Status}\n"


def installed_packages(dpkg_output):
    """Names that dpkg reports as fully installed."""
    installed = set()
    for line in dpkg_output.splitlines():
        name, _, status = line.partition("\t")
        if name and status.strip() == "installed":
            installed.add(name.split(":", 1)[0])
    return installed


def missing_packages(wanted, dpkg_output):
    """The wanted packages (in the order given, without repeats) that are not installed.

    A version pin such as `nvidia-driver=580.*` is checked by its name only: apt decides versions.
    """
    installed = installed_packages(dpkg_output)
    missing = []
    for spec in wanted:
        name = spec.split("=", 1)[0].split(":", 1)[0]
        if name not in installed and spec not in missing:
            missing.append(spec)
    return missing
