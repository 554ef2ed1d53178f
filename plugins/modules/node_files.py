#!/usr/bin/python
"""Ansible module: a role's folders and whole files on the node, made to match in one call."""

DOCUMENTATION = r"""
module: node_files
short_description: Make a role's folders and files on a node match, in one call
description:
  - Creates the I(folders) and writes the I(files) whose content or mode differs, owned by root,
    each file atomically (a reader sees the old file or the new one). Leaves the rest alone.
  - One call replaces a C(file) task per folder and a C(copy)/C(template) task per file, each of
    which costs the node a round trip or more; render templates on the controller with
    C(lookup('ansible.builtin.template', ...)) and pass the text as I(content).
options:
  folders:
    description: Folders to create, each C({path, mode}) (mode defaults to C(0755)).
    type: list
    elements: dict
    default: []
  files:
    description: Files to write, each C({path, content, mode}) (mode defaults to C(0644)).
    type: list
    elements: dict
    default: []
attributes:
  check_mode:
    support: full
    description: Reports what would change and writes nothing.
  diff_mode:
    support: full
    description: Each changed file's text before and after.
author: seatwright
"""

EXAMPLES = r"""
- name: Write the NCCL configuration and the engines' env file
  node_files:
    folders:
      - {path: /etc/seatwright}
    files:
      - {path: /etc/nccl.conf, content: "NCCL_SOCKET_IFNAME=eth0\n"}
      - {path: /etc/seatwright/nccl.env, content: "NCCL_SOCKET_IFNAME=eth0\n"}
  notify: restart something
"""

RETURN = r"""
paths:
  description: Every folder and file given, with whether it changed (or would, in check mode).
  returned: always
  type: list
  elements: dict
  sample:
    - {path: /etc/nccl.conf, kind: file, changed: false}
changed_paths:
  description: The paths that changed (or would, in check mode).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import converge_files


def _problem(entries, kind, needs):
    for position, entry in enumerate(entries):
        missing = [key for key in needs if not isinstance(entry.get(key), str)]
        if missing or not entry["path"].startswith("/"):
            return "%s[%d]: expected an absolute path and %s, got %r" % (kind, position, ", ".join(needs), entry)
    return None


def main():
    module = AnsibleModule(
        argument_spec={
            "folders": {"type": "list", "elements": "dict", "default": []},
            "files": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    folders, files = module.params["folders"], module.params["files"]
    problem = _problem(folders, "folders", ["path"]) or _problem(files, "files", ["path", "content"])
    if problem:
        module.fail_json(msg=problem)
    try:
        results = converge_files(folders, files, module.check_mode)
    except (OSError, ValueError) as exc:
        module.fail_json(msg="could not write %s: %s" % (getattr(exc, "filename", None) or "a file", exc))
    changed = [r for r in results if r["changed"]]
    result = {
        "changed": bool(changed),
        "changed_paths": [r["path"] for r in changed],
        "paths": [{"path": r["path"], "kind": r["kind"], "changed": r["changed"]} for r in results],
    }
    if module._diff:
        result["diff"] = [
            {
                "before_header": r["path"],
                "after_header": r["path"],
                "before": r.get("before", ""),
                "after": r.get("after", ""),
            }
            for r in changed
            if r["kind"] == "file"
        ]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
