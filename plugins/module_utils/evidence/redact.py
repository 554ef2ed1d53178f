"""The project's one redactor for evidence: text or JSON-like objects in, a redacted copy out.

Pure (no I/O, no globals that change). Everything that leaves a node as evidence (bring-up
records, qualification and benchmark results, device probes copied into fixtures) goes through
`redact`.

What is replaced, and by what (numbered in order of first appearance):

- GPU UUIDs `GPU-...`, `MIG-...`, any UUID: `GPU-00000000-0000-4000-8000-00000000000N` (0-based,
  the convention of the H200 fixtures); bare UUIDs keep no prefix.
- Serial numbers (`Serial Number : X`, `serial=X`, JSON keys `serial*`, CSV columns named
  `serial`): zeros of the same length ending in N.
- IPv4 addresses other than loopback, 0.0.0.0, netmasks and the documentation ranges:
  `192.0.2.N` (then 198.51.100.N, 203.0.113.N).
- IPv6 addresses other than `::`, `::1` and `2001:db8::/32` (IPv4-mapped and link-local
  included): `2001:db8::N`.
- MAC addresses with colons or dashes: `02:00:00:00:00:NN` (same separator).
- 20-byte IPoIB hardware addresses: the 4-byte QPN/flags kept, the 16-byte GID replaced:
  `fe:80:00:...:00:NN`.
- InfiniBand GUIDs (`0x` + 16 hex digits, `xxxx:xxxx:xxxx:xxxx`, perftest `GID: 16 bytes`):
  `0x000000000000000N`, `0000:0000:0000:000N`, `0:...:N`.
- Host names (those configured and their short form, values of JSON keys `hostname`/`fqdn`/
  `nodename`): `host-N`.
- Secrets (bearer tokens, `hf_...` tokens, URL passwords, `*TOKEN*=`/`*SECRET*=`/`*PASSWORD*=`/
  `*API_KEY*=` values, JSON keys and env names of that kind): `<redacted>`.
- The controller's checkout, when given as `root` (one path or several spellings of it): the
  project-relative path (`/home/me/seatwright/seats/lab.yml` becomes `seats/lab.yml`; the
  checkout itself is `.`). The home folder, when given as `home`: `~` (`~/.cache/...`).

Placeholders are left alone, so redacting twice gives the same result. One `Redactor` keeps its
numbering across calls: use one per evidence folder so one GPU or host keeps one name across files.
"""

import ipaddress
import re

SECRET = "<redacted>"

_HEX = "[0-9A-Fa-f]"
_UUID_BODY = r"%s{8}-%s{4}-%s{4}-%s{4}-%s{12}" % ((_HEX,) * 5)
UUID = re.compile(r"(?<![\w-])((?:MIG-)?(?:GPU-)?)(%s)(?![\w-])" % _UUID_BODY)
GPU_PLACEHOLDER = "GPU-00000000-0000-4000-8000-%012d"

SERIAL_LABEL = re.compile(
    r"(?i)((?:serial(?:[ _-]?(?:number|no|num))?)\s*(?:[:=]|\s)\s*)"
    r"(?!(?i:number|no|num)\b)([0-9A-Za-z](?:[0-9A-Za-z]|-(?=[0-9A-Za-z])){4,})"
)
SERIAL_KEY = re.compile(r"(?i)(?:^|[_ .])serial(?:[_ ]?(?:number|no|num))?$")

IPOIB = re.compile(r"(?<![\w:])((?:%s{2}:){4})((?:%s{2}:){15}%s{2})(?![\w:])" % (_HEX, _HEX, _HEX))
PERFTEST_GID = re.compile(r"(GID\s*:\s*)((?:%s{1,3}:){15}%s{1,3})(?![\w:])" % (_HEX, _HEX))
MAC = re.compile(r"(?<![\w:.-])(%s{2})([:-])(%s{2})(?:\2%s{2}){4}(?![\w]|[:-]%s)" % (_HEX, _HEX, _HEX, _HEX))
GUID_0X = re.compile(r"(?<!\w)0x(%s{16})(?!\w)" % _HEX)
GUID_COLON = re.compile(r"(?<![\w:.])(%s{4}(?::%s{4}){3})(?![\w:])" % (_HEX, _HEX))
IPV6 = re.compile(r"(?<![\w:.%%])((?:%s{0,4}:){2,7}(?:%s{1,4}|\d{1,3}(?:\.\d{1,3}){3})?)(?![\w:])" % (_HEX, _HEX))
IPV4 = re.compile(r"(?<![\w.])(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})(?![\w]|\.\d)")

BEARER = re.compile(r"(?i)(\b(?:bearer|basic)\s+)([^\s\"',;]+)")
HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{16,}\b")
URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)([^@\s/]+)(@)")
# Names that end in "token" but count or time tokens (benchmark metrics), not hold one.
_TOKEN_METRIC = r"(?<!first_)(?<!last_)(?<!per_)(?<!inter_)(?<!output_)(?<!input_)(?<!prompt_)(?<!completion_)"
SECRET_ASSIGNMENT = re.compile(
    r"(?i)(\b[\w.-]*(?:%stoken|secret|passw(?:or)?d|api[_-]?key|credentials?)"
    r"[\"']?\s*[=:]\s*[\"']?|--(?:api-key|token|password)[ =])"
    # A value, not the start of a JSON object or list.
    r"(?![{\[])([^\s\"',;}]+)" % _TOKEN_METRIC
)
# A number under a name that ends in "token" is a count or a time; under a password it is a secret.
NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
TOKEN_NAME = re.compile(r"(?i)token[\"']?\s*[=:]\s*[\"']?$|token$")
SECRET_KEY = re.compile(r"(?i)(?:%stoken|secret|passw(?:or)?d|api[_-]?key|credentials?|authorization)$" % _TOKEN_METRIC)
HOSTNAME_KEY = re.compile(r"(?i)^(?:hostname|host_name|fqdn|nodename|node_name|ansible_hostname|ansible_fqdn)$")

_DOCUMENTATION_V4 = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]
_DOCUMENTATION_V6 = ipaddress.ip_network("2001:db8::/32")


def _csv_fields(line):
    return [field.strip() for field in line.split(",")]


def _is_serial_column(name):
    name = re.sub(r"\s*\[.*\]$", "", name).strip().lower().replace(" ", "_").replace(".", "_")
    return bool(SERIAL_KEY.search(name))


class Redactor:
    """Redacts text and JSON-like values; numbering is kept across calls of one instance."""

    def __init__(self, hostnames=(), root=None, home=None):
        self._names = {}
        self._hostnames = self._hostname_pattern(hostnames)
        # Longest first, so a checkout inside the home folder is made relative, not "~/...".
        self._paths = {p: "" for p in self._absolute(root)}
        self._paths.update({p: "~" for p in self._absolute(home) if p not in self._paths})
        self._root = self._path_pattern(self._paths)

    @staticmethod
    def _absolute(paths):
        paths = [paths] if isinstance(paths, str) else list(paths or ())
        # "/" or a relative path would rewrite unrelated paths; only a real folder is replaced.
        return {str(p).rstrip("/") for p in paths if str(p or "").startswith("/") and str(p).rstrip("/")}

    @staticmethod
    def _path_pattern(paths):
        if not paths:
            return None
        alternatives = "|".join(re.escape(p) for p in sorted(paths, key=len, reverse=True))
        return re.compile(r"(?<![\w./-])(%s)(?:(/)(?=[\w.~-])|(?![\w.-]))" % alternatives)

    def _path(self, match):
        short = self._paths[match.group(1)]
        if short == "~":
            return "~/" if match.group(2) else "~"
        return "" if match.group(2) else "."

    @staticmethod
    def _hostname_pattern(hostnames):
        names = set()
        for name in hostnames or ():
            name = str(name or "").strip().rstrip(".")
            if not name:
                continue
            names.add(name.lower())
            short = name.split(".", 1)[0]
            if short != name and len(short) >= 3:
                names.add(short.lower())
        if not names:
            return None
        alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        return re.compile(r"(?i)(?<![\w-])(%s)(?![\w-])" % alternatives)

    def _number(self, kind, key, first=1):
        table = self._names.setdefault(kind, {})
        if key not in table:
            table[key] = len(table) + first
        return table[key]

    # ---- one function per kind of identifier -------------------------------------------------

    def _uuid(self, match):
        prefix, body = match.group(1), match.group(2).lower()
        if body.startswith("00000000-0000-4000-8000-") or body == "00000000-0000-0000-0000-000000000000":
            return match.group(0)
        placeholder = GPU_PLACEHOLDER % self._number("uuid", body, first=0)
        return prefix + placeholder[len("GPU-") :]

    def _serial(self, value):
        value = str(value)
        if re.fullmatch(r"0+\d{0,3}", value) or value.upper() in ("N/A", "NONE", "UNKNOWN", "[N/A]"):
            return value
        number = str(self._number("serial", value))
        return number.rjust(max(len(value), len(number)), "0")

    def _serial_label(self, match):
        return match.group(1) + self._serial(match.group(2))

    def _ipoib(self, match):
        gid = match.group(2).lower()
        if gid.startswith("ff:") or gid.startswith("fe:80:00:00:00:00:00:00:00:00:00:00:00:00:"):
            return match.group(0)  # a multicast (broadcast) GID names no host; placeholders stay
        number = self._number("ipoib", gid)
        tail = "%04x" % number
        return match.group(1) + "fe:80:00:00:00:00:00:00:00:00:00:00:00:00:%s:%s" % (tail[:2], tail[2:])

    def _perftest_gid(self, match):
        groups = match.group(2).split(":")
        if groups[:12] == ["00"] * 10 + ["255", "255"] and all(g.isdigit() and int(g) < 256 for g in groups[12:]):
            # RoCE v2: an IPv4-mapped GID in decimal bytes; the address gets its usual placeholder
            address = self._ipv4_text(".".join(str(int(g)) for g in groups[12:]))
            return match.group(1) + ":".join(groups[:12] + ["%02d" % int(o) for o in address.split(".")])
        number = self._number("gid", match.group(2).lower())
        return match.group(1) + ":".join(["00"] * 15 + ["%02d" % number])

    def _mac(self, match):
        text, sep = match.group(0), match.group(2)
        if text.lower().replace("-", ":").startswith("02:00:00:00:00:"):
            return text
        number = self._number("mac", text.lower().replace("-", ":"))
        return sep.join(["02", "00", "00", "00", "%02x" % (number // 256), "%02x" % (number % 256)])

    def _guid_0x(self, match):
        if int(match.group(1), 16) < 0x10000:
            return match.group(0)
        return "0x%016x" % self._number("guid", match.group(1).lower())

    def _guid_colon(self, match):
        value = match.group(1).lower()
        if int(value.replace(":", ""), 16) < 0x10000:
            return match.group(0)
        text = "%016x" % self._number("guid", value.replace(":", ""))
        return ":".join(text[i : i + 4] for i in range(0, 16, 4))

    def _ipv6(self, match):
        text = match.group(1)
        try:
            address = ipaddress.IPv6Address(text)
        except ValueError:
            return text
        if address.is_unspecified or address.is_loopback or address in _DOCUMENTATION_V6:
            return text
        return "2001:db8::%x" % self._number("ipv6", address.compressed)

    def _ipv4(self, match):
        return self._ipv4_text(match.group(1))

    def _ipv4_text(self, text):
        try:
            address = ipaddress.IPv4Address(text)
        except ValueError:
            return text
        if (
            address.is_loopback
            or address.is_unspecified
            or text.startswith("255.")
            or any(address in net for net in _DOCUMENTATION_V4)
        ):
            return text
        number = self._number("ipv4", text)
        block, host = divmod(number - 1, 254)
        prefix = ("192.0.2", "198.51.100", "203.0.113")[block % 3]
        return "%s.%d" % (prefix, host + 1)

    def _hostname(self, match):
        return "host-%d" % self._number("host", match.group(1).lower())

    # ---- text -----------------------------------------------------------------------------

    def _csv_serial_columns(self, text):
        lines = text.split("\n")
        columns, width = [], 0
        for index, line in enumerate(lines):
            fields = _csv_fields(line)
            if len(fields) > 1 and any(_is_serial_column(f) for f in fields) and not columns:
                columns = [i for i, f in enumerate(fields) if _is_serial_column(f)]
                width = len(fields)
                continue
            if columns and len(fields) == width:
                raw = line.split(",")
                for column in columns:
                    value = raw[column].strip()
                    if value:
                        raw[column] = raw[column].replace(value, self._serial(value), 1)
                lines[index] = ",".join(raw)
            else:
                columns = []
        return "\n".join(lines)

    @staticmethod
    def _assignment(match):
        name, value = match.group(1), match.group(2)
        if value == SECRET or (NUMBER.match(value) and TOKEN_NAME.search(name)):
            return match.group(0)
        return name + SECRET

    def text(self, text):
        """Return `text` with every identifier and secret replaced."""
        if self._root is not None:
            text = self._root.sub(self._path, text)
        text = URL_PASSWORD.sub(lambda m: m.group(1) + SECRET + m.group(3), text)
        text = BEARER.sub(lambda m: m.group(1) + SECRET, text)
        text = HF_TOKEN.sub(SECRET, text)
        text = SECRET_ASSIGNMENT.sub(self._assignment, text)
        text = UUID.sub(self._uuid, text)
        if "," in text:
            text = self._csv_serial_columns(text)
        text = SERIAL_LABEL.sub(self._serial_label, text)
        text = IPOIB.sub(self._ipoib, text)
        text = PERFTEST_GID.sub(self._perftest_gid, text)
        text = GUID_0X.sub(self._guid_0x, text)
        text = GUID_COLON.sub(self._guid_colon, text)
        text = MAC.sub(self._mac, text)
        text = IPV6.sub(self._ipv6, text)
        text = IPV4.sub(self._ipv4, text)
        if self._hostnames is not None:
            text = self._hostnames.sub(self._hostname, text)
        return text

    # ---- JSON-like --------------------------------------------------------------------------

    def redact(self, value, _depth=0):
        """Return a redacted copy of `value`: a string, or dicts/lists/tuples of JSON-like values."""
        if _depth > 200:
            return SECRET
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                name = key if isinstance(key, str) else str(key)
                new_key = self.text(key) if isinstance(key, str) else key
                if SECRET_KEY.search(name) and item not in (None, "") and _secret_value(name, item):
                    out[new_key] = SECRET
                elif SERIAL_KEY.search(name) and isinstance(item, (str, int)) and not isinstance(item, bool):
                    out[new_key] = self._serial(item)
                elif HOSTNAME_KEY.match(name) and isinstance(item, str) and item:
                    out[new_key] = (
                        "host-%d" % self._number("host", item.lower()) if not item.startswith("host-") else item
                    )
                else:
                    out[new_key] = self.redact(item, _depth + 1)
            return out
        if isinstance(value, list):
            return [self.redact(item, _depth + 1) for item in value]
        if isinstance(value, tuple):
            return tuple(self.redact(item, _depth + 1) for item in value)
        return value


def _secret_value(name, item):
    """A value that may hold a secret: text, or a number under anything but a token-named key."""
    if isinstance(item, str):
        return True
    return isinstance(item, (int, float)) and not isinstance(item, bool) and not TOKEN_NAME.search(name)


def secret_name(name):
    """True for a key or env name whose value is a secret (VLLM_API_KEY, HF_TOKEN, db_password)."""
    return bool(SECRET_KEY.search(str(name)))


def redact_env(env):
    """A copy of an environment with the values of secret names replaced, for messages and evidence."""
    return {key: (SECRET if secret_name(key) and value not in (None, "") else value) for key, value in env.items()}


def redact(value, hostnames=(), root=None, home=None):
    """Redact one text or JSON-like value (fresh numbering); see the module docstring."""
    return Redactor(hostnames, root, home).redact(value)
