"""Python package versions compared as PEP 440 orders them, with the standard library only.

The node's modules may not import `packaging`; this is the subset seatwright's rules need:
release numbers, pre-releases (a/b/rc), post-releases and dev releases, so a nightly such as
0.6.18.dev20260801 sorts before 0.6.18 as PEP 440 orders it. `fix_carried` decides whether a
build carries a fix that shipped in a release and, from a given day, in that line's dated nightlies.
"""

import datetime
import re

_VERSION = re.compile(
    r"^v?(?:(?P<epoch>[0-9]+)!)?(?P<release>[0-9]+(?:\.[0-9]+)*)"
    r"(?:[-_.]?(?P<pre_l>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>[0-9]+)?)?"
    r"(?P<post>(?:-(?P<post_n1>[0-9]+))|(?:[-_.]?(?:post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?))?"
    r"(?P<dev>[-_.]?dev[-_.]?(?P<dev_n>[0-9]+)?)?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?$",
    re.IGNORECASE,
)
_PRE = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
# Sort keys: a dev release of X sorts before X's pre-releases, a final before its post-releases.
_LOWEST = (-1, 0)
_HIGHEST = (3, 0)


def version_key(text):
    """A tuple that orders versions as PEP 440 does; None when `text` is not a PEP 440 version."""
    match = _VERSION.match(str(text).strip())
    if not match:
        return None
    release = tuple(int(part) for part in match.group("release").split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    dev = match.group("dev_n")
    is_dev = match.group("dev") is not None
    pre_l = match.group("pre_l")
    post = match.group("post_n1") or match.group("post_n2")
    has_post = match.group("post") is not None
    if pre_l:
        pre = (_PRE[pre_l.lower()], int(match.group("pre_n") or 0))
    elif is_dev and not has_post:
        pre = _LOWEST
    else:
        pre = _HIGHEST
    post_key = (int(post or 0),) if has_post else (-1,)
    dev_key = (int(dev or 0),) if is_dev else (float("inf"),)
    # A local label (+cu130) sorts after the same public version; labels are not compared further.
    return (int(match.group("epoch") or 0), release, pre, post_key, dev_key, match.group("local") is not None)


def version_at_least(have, want):
    """True when version `have` is `want` or newer (PEP 440); False when either does not parse."""
    have_key, want_key = version_key(have), version_key(want)
    if have_key is None or want_key is None:
        return False
    return have_key >= want_key


def _nightly_day(number):
    """The day of a dated nightly's dev number (YYYYMMDD), or None when it is not a date."""
    text = str(number)
    if len(text) != 8:
        return None
    try:
        return datetime.date(int(text[:4]), int(text[4:6]), int(text[6:]))
    except ValueError:
        return None


def fix_carried(have, release, nightly_from):
    """(carried, case, words): does version `have` carry a fix released in `release`?

    Releases of `release` or later carry it (PEP 440 order; post-releases too). Dev builds are
    nightlies named <line>.devYYYYMMDD (FlashInfer names its nightlies so), which PEP 440 orders
    below the release of their line: one of the `release` line or a later one carries the fix when
    it is dated `nightly_from` (an ISO day) or after. Anything else does not.
    case: 'release', 'dated nightly', 'too-early nightly', 'older release', 'older nightly',
    'undated dev build', 'pre-release' or 'unparsed'; words say it for a person.
    """
    match = _VERSION.match(str(have).strip())
    want = version_key(release)
    if not match or want is None:
        return False, "unparsed", "%r is not a PEP 440 version" % (have,)
    line = version_key(match.group("release"))
    since = datetime.date.fromisoformat(nightly_from)
    if match.group("dev") is not None:
        number = match.group("dev_n")
        day = _nightly_day(number) if number else None
        if line[:2] < want[:2]:
            return (
                False,
                "older nightly",
                "%s is a nightly of %s, a line older than %s"
                % (
                    have,
                    match.group("release"),
                    release,
                ),
            )
        if day is None:
            return (
                False,
                "undated dev build",
                "%s is a dev build of the %s line with no YYYYMMDD date"
                % (
                    have,
                    match.group("release"),
                ),
            )
        if day < since:
            return (
                False,
                "too-early nightly",
                "%s is a nightly of %s dated %s, before %s, when the fix reached the nightlies"
                % (
                    have,
                    match.group("release"),
                    day.isoformat(),
                    since.isoformat(),
                ),
            )
        return (
            True,
            "dated nightly",
            "%s is a nightly of %s dated %s, on or after %s"
            % (
                have,
                match.group("release"),
                day.isoformat(),
                since.isoformat(),
            ),
        )
    if version_key(have) >= want:
        return True, "release", "%s is a release of %s or later" % (have, release)
    if match.group("pre_l"):
        return False, "pre-release", "%s is a pre-release, before %s" % (have, release)
    return False, "older release", "%s is a release older than %s" % (have, release)
