"""Python package versions compared as PEP 440 orders them, with the standard library only.

The node's modules may not import `packaging`; this is the subset seatwright's rules need:
release numbers, pre-releases (a/b/rc), post-releases and dev releases, so a pre-fix nightly
such as 0.6.18.dev20260801 sorts before 0.6.18 and never passes a rule that needs 0.6.18.
"""

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
