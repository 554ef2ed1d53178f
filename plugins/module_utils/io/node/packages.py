"""Which Debian packages a node lacks, asked of dpkg-query; node/packages.py reads its answer."""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ProbeUnavailable
from ansible_collections.seatwright.fleet.plugins.module_utils.node.packages import DPKG_QUERY_FORMAT, missing_packages


def missing_on_node(module, names, host="this host"):
    """The entries of `names` (name or name=version) that are not installed; ProbeUnavailable
    when dpkg-query is absent or fails."""
    if not names:
        return []
    dpkg_query = module.get_bin_path("dpkg-query")
    if dpkg_query is None:
        raise ProbeUnavailable(
            "dpkg-query was not found on %s: deb_packages_missing serves Debian and Ubuntu nodes only" % host
        )
    bare = sorted({name.split("=", 1)[0] for name in names})
    # dpkg-query exits 1 when some names are unknown to it: those are simply missing.
    rc, out, err = module.run_command([dpkg_query, "-W", "-f=" + DPKG_QUERY_FORMAT] + bare)
    if rc not in (0, 1):
        raise ProbeUnavailable("dpkg-query failed (rc %d): %s" % (rc, err.strip()))
    return missing_packages(names, out)
