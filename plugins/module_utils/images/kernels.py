"""The CUDA architectures a shared library's kernels were built for, read from its bytes.

Pure. nvcc puts every cubin (machine code for one sm_XY) and PTX (compute_XY, JIT-compiled by
the driver) into the ELF section .nv_fatbin as fat binary containers. The image holds no
cuobjdump, so the probe reads the section itself; the plan trusts these, not a label or
TORCH_CUDA_ARCH_LIST.
"""

import struct

FATBIN_SECTION = ".nv_fatbin"
_FATBIN_MAGIC = 0xBA55ED50
_KINDS = {1: "compute", 2: "sm"}


def elf_section(data, name):
    """The bytes of section `name` of a 64-bit little-endian ELF file; None when it has none."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shstrndx >= shnum:
        return None
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for header in headers:
        start = names + header[0]
        # find, not index: the probe passes an mmap of a library of a gigabyte or more.
        if data[start : data.find(b"\0", start)].decode("ascii", "replace") == name:
            return data[header[4] : header[4] + header[5]]
    return None


def fatbin_archs(section):
    """Sorted 'sm_120' (cubin) and 'compute_120' (PTX) names of every entry of a .nv_fatbin section."""
    found, offset = set(), 0
    while offset + 16 <= len(section):
        magic, _, header_size, fat_size = struct.unpack_from("<IHHQ", section, offset)
        if magic != _FATBIN_MAGIC:
            # Containers are 8-byte aligned; padding between them is zeros.
            offset += 8
            continue
        entry, end = offset + header_size, offset + header_size + fat_size
        while entry + 32 <= end:
            kind, _, entry_header, size = struct.unpack_from("<HHIQ", section, entry)
            arch = struct.unpack_from("<I", section, entry + 28)[0]
            if kind in _KINDS and arch:
                found.add("%s_%d" % (_KINDS[kind], arch))
            if not entry_header:
                break
            entry += entry_header + size
        offset = end
    return sorted(found, key=arch_order)


def arch_order(name):
    """Sort key of 'sm_90' < 'sm_120' < 'compute_120': by kind, then by number, not as text."""
    kind, _, number = name.partition("_")
    return (kind, int(number) if number.isdigit() else 0)


def library_archs(data):
    """fatbin_archs of a shared library's bytes; [] when it carries no CUDA kernels."""
    section = elf_section(data, FATBIN_SECTION)
    return fatbin_archs(section) if section else []


def list_elf_archs(text):
    """The sm_XY names in `cuobjdump --list-elf` output ('ELF file    1: _C.1.sm_120.cubin')."""
    found = set()
    for line in text.splitlines():
        if line.strip().startswith("ELF file") and ".sm_" in line:
            arch = line.rsplit(".sm_", 1)[1].split(".")[0].rstrip("af")
            if arch.isdigit():
                found.add("sm_%s" % arch)
    return sorted(found, key=lambda name: int(name[3:]))


def runs_on(archs, compute_capability):
    """True when a cubin or PTX in `archs` runs on a GPU of `compute_capability` ('12.0').

    A cubin sm_XY runs on capability X.Z for Z >= Y (same major); PTX compute_XY is compiled by
    the driver for any capability at or above X.Y.
    """
    major, _, minor = str(compute_capability).partition(".")
    want = int(major) * 10 + int(minor or 0)
    for name in archs:
        kind, _, number = name.partition("_")
        value = int(number.rstrip("af"))
        if kind == "sm" and value // 10 == want // 10 and value <= want:
            return True
        if kind == "compute" and value <= want:
            return True
    return False
