"""The project's one redactor for evidence: text or JSON-like objects in, a redacted copy out.

Pure (no I/O, no globals that change). Everything that leaves a node as evidence (bring-up
records, qualification and benchmark results, device probes copied into fixtures) goes through
`redact`.

What is replaced, and by what (numbered in order of first appearance):

- GPU UUIDs `GPU-...`, `MIG-...`, any UUID: `GPU-00000000-0000-4000-8000-00000000000N` (0-based,
  the convention of the H200 fixtures); bare UUIDs keep no prefix.
- Serial numbers (`Serial Number : X`, `serial=X`, JSON keys `serial*`, CSV columns named
  `serial`): zeros of the same length ending in N.
- IPv4 addresses (leading zeros too: `010.001.002.003`) other than loopback, 0.0.0.0, netmasks and
  the documentation ranges:
  `192.0.2.N` (then 198.51.100.N, 203.0.113.N).
- IPv6 addresses other than `::`, `::1` and `2001:db8::/32` (IPv4-mapped and link-local
  included): `2001:db8::N`.
- MAC addresses with colons or dashes: `02:00:00:00:00:NN` (same separator).
- 20-byte IPoIB hardware addresses: the 4-byte QPN/flags kept, the 16-byte GID replaced:
  `fe:80:00:...:00:NN`.
- InfiniBand GUIDs (`0x` + 16 hex digits, `xxxx:xxxx:xxxx:xxxx`, perftest `GID: 16 bytes`):
  `0x000000000000000N`, `0000:0000:0000:000N`, `0:...:N`.
- MAC addresses written with dots (`0011.2233.4455`): `0200.0000.NNNN`. Bare 12-hex MACs
  (`001122334455`) only where they are named one: after `link/ether`, `ether`, `HWaddr`, `lladdr`,
  `mac`/`mac address`, or as the value of a JSON key named `mac`, `hwaddr`, `mac_address`...:
  `02000000NNNN`. Twelve hex digits anywhere else (short image ids, digest prefixes) are kept.
- Host names: the run's own (`hostnames`: inventory names that are real names, `ansible_host`,
  FQDNs), each with its short form, numbered in the order given so one host keeps one placeholder in
  every file of a run; values of JSON keys `hostname`/`fqdn`/`nodename`; and names under private
  zones (`*.internal`, `*.local`, `*.lan`, `*.corp`, `*.home.arpa`, `*.localdomain`): `host-N`.
- The run's own secrets (`secrets`: the seat key, router keys, HF tokens), in any shape: bare or
  inside longer text, URL-encoded (once or twice), JSON-escaped (once or more), as the base64 of
  the secret or of `user:secret` (a `Basic` header), in values and in keys: `<redacted>`. A secret
  shorter than MIN_SECRET_LEN characters is replaced only where it is a whole value (a string, a
  list item, a key); inside other text it would eat ordinary words, so it is left to the patterns
  below (a short key is weak anyway).
- Secrets found by their shape or their name: `Bearer`/`Basic`/`ApiKey` credentials and whatever
  follows `Authorization:` (any scheme: Token, Digest...), `hf_...` and GitHub (`ghp_...`,
  `github_pat_...`) tokens, JWTs, AWS access key
  ids (`AKIA...`, `ASIA...`), PEM private key blocks (the body; the BEGIN/END lines stay), URL
  passwords (`scheme://user:pass@host`, the password may hold `@`, `%` and `:`; a user part alone
  longer than a login name is taken for a token), URL query values named like secrets (`?token=`,
  `&api_key=`, `&password=`, `&X-Amz-Signature=`), `NAME=value`/`NAME: value` where the name ends in
  token/secret/password/api_key/access_key/secret_key/private_key/credentials, command-line flags
  of those names followed by their value (`--api-key KEY`, `--hf-token=KEY`, and in argv lists
  `["--api-key", KEY]`) and name-value pairs (`[["api_key", KEY]]`), JSON keys of those names (a
  list or object under them has every string replaced, `{"api_key": [KEY]}`), and env names of that
  kind.
- Kept on purpose: sha256 digests and image ids (`sha256:...`, 12-hex short ids), 40-hex commit
  revisions, numbers, and counts or times under names that end in "token" (benchmark metrics).
  UUIDs are replaced (they name GPUs and boots); a model revision written as a UUID is replaced too.
- The controller's checkout, when given as `root` (one path or several spellings of it): the
  project-relative path (`/home/me/seatwright/seats/lab.yml` becomes `seats/lab.yml`; the
  checkout itself is `.`). The home folder, when given as `home`: `~` (`~/.cache/...`).

Placeholders are left alone, so redacting twice gives the same result. One `Redactor` keeps its
numbering across calls: use one per evidence folder so one GPU or host keeps one name across files.
"""

import base64
import ipaddress
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.hostnames import MIN_HOST_NAME_LEN

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

MAC_DOTTED = re.compile(r"(?<![\w.:-])(%s{4}\.%s{4}\.%s{4})(?![\w]|[.:-]\w)" % (_HEX, _HEX, _HEX))
MAC_BARE = re.compile(
    r"(?i)(\b(?:link/ether|hwaddr|lladdr|permaddr|ether|mac(?:[ _-]?addr(?:ess)?)?)[\"']?\s*[:=]?\s*[\"']?)"
    r"(%s{12})(?![0-9A-Fa-f\w])" % _HEX
)
MAC_KEY = re.compile(r"(?i)^(?:mac|(?:mac|hw|perm)[ _-]?addr(?:ess)?|lladdr|ether)$")
PRIVATE_FQDN = re.compile(
    r"(?i)(?<![\w.@/-])((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+"
    r"(?:internal|local|lan|corp|intranet|localdomain|home\.arpa))(?![\w.-])"
)

BEARER = re.compile(r"(?i)(\b(?:bearer|basic|apikey)\s+)(?!<redacted>)([^\s\"',;]+)")
# Whatever follows an Authorization header, behind any scheme (Token, Digest, ApiKey, a bare key).
AUTHORIZATION = re.compile(
    r"(?i)(\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:[A-Za-z][\w.-]*\s+)?)"
    r"(?!<redacted>)([^\s\"',;}]+)(?![^\s\"',;}])(?!\s+<redacted>)"
)
HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{16,}\b")
# GitHub's tokens: classic and OAuth/app/refresh ones (ghp_, gho_, ghu_, ghs_, ghr_) and fine-grained ones.
GITHUB_TOKEN = re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})\b")
JWT = re.compile(r"(?<![\w-])eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}(?:\.[A-Za-z0-9_-]*){1,3}")
AWS_KEY_ID = re.compile(
    r"(?<![A-Za-z0-9])(?:AKIA|ASIA|AIDA|AROA|AGPA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"
)
PEM_PRIVATE = re.compile(r"(-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----)(.*?)(-----END \2-----|\Z)", re.S)
# scheme://user:password@host: the password runs to the last @ before the path, so it may hold @, % and :.
URL_USERINFO = re.compile(
    r"(\b[a-zA-Z][a-zA-Z0-9+.-]*:(?:\\?/){2})([^\s/?#@:\"'<>\\]*)(?::([^\s/?#\"'\\]*))?@(?=[\w\[])"
)
LOGIN_NAME = re.compile(r"^[a-z_][a-z0-9_.-]{0,15}$")
# Names that end in "token" but count or time tokens (benchmark metrics), not hold one.
_TOKEN_METRIC = r"(?<!first_)(?<!last_)(?<!per_)(?<!inter_)(?<!output_)(?<!input_)(?<!prompt_)(?<!completion_)"
# Names whose value is a secret: the one list for assignments, JSON keys, env names, flags and queries.
_SECRET_WORDS = (
    r"(?:%stoken|secret|passw(?:or)?d|passwd|api[_-]?key|apikey|access[_-]?key(?:[_-]?id)?|secret[_-]?key"
    r"|private[_-]?key|credentials?)" % _TOKEN_METRIC
)
SECRET_ASSIGNMENT = re.compile(
    r"(?i)(\b[\w.-]*%s[\"']?\s*[=:]\s*[\"']?)"
    # A value, not the start of a JSON object or list, nor a placeholder already there.
    r"(?![{\[])(?!<redacted>)([^\s\"',;}]+)" % _SECRET_WORDS
)
# --api-key KEY, "--hf-token", "KEY" (an argv list written as text); --flag=KEY is an assignment.
SECRET_FLAG_TEXT = re.compile(
    r"(?i)((?<![\w-])--?[\w-]*?%s[\"']?(?:\s*,\s*|\s+)[\"']?)(?!-)(?!<redacted>)([^\s\"',;}\]]+)" % _SECRET_WORDS
)
SECRET_FLAG = re.compile(r"(?i)^--?[\w-]*?%s$" % _SECRET_WORDS)
AUTH_HEADER_NAME = re.compile(r"(?i)^(?:proxy-)?authorization$|^x-api-key$")
FLAG = re.compile(r"^--?[A-Za-z]")
URL_QUERY_SECRET = re.compile(
    r"(?i)([?&](?:[\w.-]*%s|(?:[\w.-]*[_.-])?(?:key|sig|signature|auth|pass|pwd))=)(?!<redacted>)([^&#\s\"'<>]+)"
    % _SECRET_WORDS
)
# A number under a name that ends in "token" is a count or a time; under a password it is a secret.
NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
TOKEN_NAME = re.compile(r"(?i)token[\"']?\s*[=:]\s*[\"']?$|token$")
SECRET_KEY = re.compile(r"(?i)(?:%s|authorization)$" % _SECRET_WORDS)
# Below this length a secret is replaced only as a whole value: inside text it would eat words.
MIN_SECRET_LEN = 8
# A copy cut before redaction (`text[:200]`) leaves the secret's head at the cut, or its tail after
# one: a head or tail of this many characters or more is replaced where a value or a cut ends it.
MIN_FRAGMENT_LEN = 8
# What may follow a cut head (the value's end, a quote, a bracket, "...") or come before a cut tail.
_CUT_AFTER = r"""(?=$|[\s"'\\)\]},;\u2026]|\.\.\.|\[)"""
_CUT_BEFORE = r"""(?:^|(?<=[\s"'\\(\[{,;\u2026\]])|(?<=\.\.\.))"""
HOSTNAME_KEY = re.compile(r"(?i)^(?:hostname|host_name|fqdn|nodename|node_name|ansible_hostname|ansible_fqdn)$")

_DOCUMENTATION_V4 = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]
_DOCUMENTATION_V6 = ipaddress.ip_network("2001:db8::/32")


def _char_shapes(char):
    """One character of a secret as it may be written: itself (JSON-escaped any number of times),
    percent-encoded (once or twice, either case), a JSON \\u escape, or + for a space in a form."""
    shapes = [r"\\*" + re.escape(char)]
    shapes.append("".join(r"%%(?:25)?(?i:%02x)" % byte for byte in char.encode("utf-8")))
    if ord(char) < 0x10000:
        shapes.append(r"\\+(?i:u%04x)" % ord(char))
    if char == " ":
        shapes.append(r"\+")
    return "(?:%s)" % "|".join(shapes)


def _base64_cores(secret):
    """The base64 characters that encode only the secret, at each of the three alignments it can
    take after a prefix (`user:` of a Basic header), in both alphabets."""
    data = secret.encode("utf-8")
    cores = set()
    for pad in range(3):
        text = base64.b64encode(b"\0" * pad + data).decode("ascii")
        core = text[-(-8 * pad // 6) : (8 * (pad + len(data))) // 6]
        if len(core) >= MIN_SECRET_LEN:
            cores.add(core)
            cores.add(core.replace("+", "-").replace("/", "_"))
    return cores


def _secrets(secrets):
    """The run's secrets as text, stripped; placeholders and empty values dropped."""
    secrets = [secrets] if isinstance(secrets, (str, bytes)) else list(secrets or ())
    out = set()
    for secret in secrets:
        if isinstance(secret, bytes):
            secret = secret.decode("utf-8", "replace")
        secret = str(secret if secret is not None else "").strip()
        if secret and secret not in SECRET:
            out.add(secret)
    return out


def secrets_from_env(environ, names=()):
    """Values of the environment that are secrets: those under secret names (HF_TOKEN,
    VLLM_API_KEY...) and under the extra `names` (the variable a tool was told holds its key)."""
    # A short value under a generic secret name (HF_HUB_DISABLE_TOKEN=1) is not taken; a named one is.
    return {
        value.strip()
        for key, value in environ.items()
        if isinstance(value, str)
        and value.strip()
        and (key in names or (secret_name(key) and len(value.strip()) >= MIN_SECRET_LEN))
    }


def _csv_fields(line):
    return [field.strip() for field in line.split(",")]


def _is_serial_column(name):
    name = re.sub(r"\s*\[.*\]$", "", name).strip().lower().replace(" ", "_").replace(".", "_")
    return bool(SERIAL_KEY.search(name))


class Redactor:
    """Redacts text and JSON-like values; numbering is kept across calls of one instance."""

    def __init__(self, hostnames=(), root=None, home=None, secrets=()):
        self._names = {}
        self._host_alias = {}
        self._hostnames = self._hostname_pattern(hostnames)
        self._short_secrets, self._secrets, self._encoded, self._fragments = self._secret_patterns(_secrets(secrets))
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
    def _secret_patterns(secrets):
        """Short secrets (whole values only), one pattern for every shape of the others, and one
        for base64 words that encode one of them (the whole word goes)."""
        long_ones = sorted((s for s in secrets if len(s) >= MIN_SECRET_LEN), key=len, reverse=True)
        short = {s for s in secrets if len(s) < MIN_SECRET_LEN}
        if not long_ones:
            return short, None, None, None
        shapes = re.compile("|".join("".join(_char_shapes(c) for c in s) for s in long_ones))
        cores = sorted(set().union(*(_base64_cores(s) for s in long_ones)), key=len, reverse=True)
        encoded = None
        if cores:
            word = "[A-Za-z0-9+/_-]*"
            encoded = re.compile("%s(?:%s)%s={0,2}" % (word, "|".join(re.escape(c) for c in cores), word))
        heads = {s[:n] for s in long_ones for n in range(MIN_FRAGMENT_LEN, len(s))}
        tails = {s[-n:] for s in long_ones for n in range(MIN_FRAGMENT_LEN, len(s))}
        fragments = re.compile(
            "(?:%s)%s|%s(?:%s)"
            % (
                "|".join(re.escape(h) for h in sorted(heads, key=len, reverse=True)),
                _CUT_AFTER,
                _CUT_BEFORE,
                "|".join(re.escape(t) for t in sorted(tails, key=len, reverse=True)),
            )
        )
        return short, shapes, encoded, fragments

    def _hostname_pattern(self, hostnames):
        names = set()
        for name in hostnames or ():
            name = str(name or "").strip().rstrip(".")
            if not name:
                continue
            # Numbered in the order given, so every file (and every call) of a run agrees; a short
            # form given after its FQDN shares the FQDN's number.
            if name.lower() not in self._host_alias:
                self._number("host", name.lower())
            names.add(name.lower())
            short = name.split(".", 1)[0]
            if short != name and len(short) >= MIN_HOST_NAME_LEN:
                names.add(short.lower())
                self._host_alias.setdefault(short.lower(), name.lower())
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
        if text.lower().replace("-", ":").startswith("02:00:00:00:"):
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
            # Leading zeros (010.001.002.003) are refused by ipaddress but still name an address to
            # anyone reading the evidence: read each part as the decimal it is written as.
            parts = text.split(".")
            if len(parts) != 4 or not all(p.isdigit() and int(p) <= 255 for p in parts):
                return text
            address = ipaddress.IPv4Address(".".join(str(int(p)) for p in parts))
            text = str(address)
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

    def _host(self, name):
        name = name.lower()
        if re.fullmatch(r"host-\d+", name):
            return name
        return "host-%d" % self._number("host", self._host_alias.get(name, name))

    def _hostname(self, match):
        return self._host(match.group(1))

    def _mac_number(self, hex12):
        return self._number("mac", ":".join(hex12[i : i + 2] for i in range(0, 12, 2)).lower())

    def _mac_dotted(self, match):
        text = match.group(1)
        if text.lower().startswith("0200.0000."):
            return text
        return "0200.0000.%04x" % self._mac_number(text.replace(".", ""))

    def _mac_bare_value(self, value):
        if value.lower().startswith("02000000"):
            return value
        return "02000000%04x" % self._mac_number(value)

    def _mac_bare(self, match):
        return match.group(1) + self._mac_bare_value(match.group(2))

    @staticmethod
    def _url_userinfo(match):
        scheme, user, password = match.group(1), match.group(2), match.group(3)
        if password is not None:
            return "%s%s:%s@" % (scheme, user, SECRET)
        # A user part alone is a login name (git@, ubuntu@) or a token (https://ghp_...@github.com).
        if LOGIN_NAME.match(user) or user == SECRET:
            return match.group(0)
        return "%s%s@" % (scheme, SECRET)

    @staticmethod
    def _pem(match):
        end = match.group(4) or ""
        return "%s\n%s\n%s" % (match.group(1), SECRET, end) if end else "%s\n%s" % (match.group(1), SECRET)

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

    def _whole_secret(self, value):
        return isinstance(value, str) and bool(self._short_secrets) and value.strip() in self._short_secrets

    def text(self, text):
        """Return `text` with every identifier and secret replaced."""
        if self._whole_secret(text):
            return SECRET
        # The run's own secrets first, before another pattern rewrites part of one.
        if self._secrets is not None:
            text = self._secrets.sub(SECRET, text)
        if self._encoded is not None:
            text = self._encoded.sub(SECRET, text)
        if self._fragments is not None:
            text = self._fragments.sub(SECRET, text)
        if self._root is not None:
            text = self._root.sub(self._path, text)
        text = PEM_PRIVATE.sub(self._pem, text)
        text = JWT.sub(SECRET, text)
        text = AWS_KEY_ID.sub(SECRET, text)
        text = URL_USERINFO.sub(self._url_userinfo, text)
        text = URL_QUERY_SECRET.sub(lambda m: m.group(1) + SECRET, text)
        text = AUTHORIZATION.sub(lambda m: m.group(1) + SECRET, text)
        text = BEARER.sub(lambda m: m.group(1) + SECRET, text)
        text = HF_TOKEN.sub(SECRET, text)
        text = GITHUB_TOKEN.sub(SECRET, text)
        text = SECRET_ASSIGNMENT.sub(self._assignment, text)
        text = SECRET_FLAG_TEXT.sub(self._assignment, text)
        text = UUID.sub(self._uuid, text)
        if "," in text:
            text = self._csv_serial_columns(text)
        text = SERIAL_LABEL.sub(self._serial_label, text)
        text = IPOIB.sub(self._ipoib, text)
        text = PERFTEST_GID.sub(self._perftest_gid, text)
        text = GUID_0X.sub(self._guid_0x, text)
        text = GUID_COLON.sub(self._guid_colon, text)
        text = MAC.sub(self._mac, text)
        text = MAC_DOTTED.sub(self._mac_dotted, text)
        text = MAC_BARE.sub(self._mac_bare, text)
        text = IPV6.sub(self._ipv6, text)
        text = IPV4.sub(self._ipv4, text)
        if self._hostnames is not None:
            text = self._hostnames.sub(self._hostname, text)
        text = PRIVATE_FQDN.sub(self._hostname, text)
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
                if SECRET_KEY.search(name) and isinstance(item, (dict, list, tuple)):
                    out[new_key] = self._all_secret(name, item, _depth + 1)
                elif SECRET_KEY.search(name) and item not in (None, "") and _secret_value(name, item):
                    out[new_key] = SECRET
                elif SERIAL_KEY.search(name) and isinstance(item, (str, int)) and not isinstance(item, bool):
                    out[new_key] = self._serial(item)
                elif HOSTNAME_KEY.match(name) and isinstance(item, str) and item:
                    out[new_key] = self._host(item)
                elif MAC_KEY.match(name) and isinstance(item, str) and re.fullmatch("%s{12}" % _HEX, item):
                    out[new_key] = self._mac_bare_value(item)
                else:
                    out[new_key] = self.redact(item, _depth + 1)
            return out
        if isinstance(value, (list, tuple)):
            out = []
            for index, item in enumerate(value):
                before = value[index - 1] if index else None
                # argv ["--api-key", KEY], header pairs ["Authorization", "Token KEY"] and name-value
                # pairs ["api_key", KEY] (a list of two, as [["api_key", KEY]] holds them)
                pair = len(value) == 2 and index == 1 and isinstance(before, str) and bool(SECRET_KEY.search(before))
                if (
                    isinstance(before, str)
                    and (SECRET_FLAG.match(before) or AUTH_HEADER_NAME.match(before) or pair)
                    and not (isinstance(item, str) and FLAG.match(item))
                    and item not in (None, "")
                    and _secret_value(before, item)
                ):
                    out.append(SECRET)
                else:
                    out.append(self.redact(item, _depth + 1))
            return tuple(out) if isinstance(value, tuple) else out
        return value

    def _all_secret(self, name, value, depth):
        """A list or object under a secret name: every text and number in it replaced, shape kept."""
        if depth > 200:
            return SECRET
        if isinstance(value, dict):
            return {
                self.text(k) if isinstance(k, str) else k: self._all_secret(name, v, depth + 1)
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            items = [self._all_secret(name, v, depth + 1) for v in value]
            return tuple(items) if isinstance(value, tuple) else items
        if value not in (None, "") and _secret_value(name, value):
            return SECRET
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


def redact(value, hostnames=(), root=None, home=None, secrets=()):
    """Redact one text or JSON-like value (fresh numbering); see the module docstring."""
    return Redactor(hostnames, root, home, secrets).redact(value)
