"""Filter seatwright.fleet.monitoring_render: the text of a file the monitoring role writes."""

import json

from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring.files import render

DOCUMENTATION = r"""
name: monitoring_render
author: seatwright
short_description: The text of a Prometheus, alert rule, dashboard or exporter file seatwright writes
description:
  - Renders one file of the monitoring role from C(plugins/module_utils/monitoring/)
    (C(files.py) C(render)), so the role, the tests and the docs share one source.
  - C(rules) is the alert rules file, C(prometheus) prometheus.yml, C(dashboard) a Grafana dashboard's
    JSON, C(cotenants) the node exporter textfile of a node's co-tenant record, C(dcgm_counters) the
    DCGM exporter's collector file.
  - Fails naming the setting, seat or input that cannot be used.
options:
  _input:
    description: Which file, one of C(rules), C(prometheus), C(dashboard), C(cotenants), C(dcgm_counters).
    type: str
    required: true
  args:
    description: >-
      Its inputs: C({settings, ttft_bounds}) for rules; the scrape configuration's
      (C(nodes), C(gpu_nodes), C(routers), C(file_sd_dir), C(credentials_file), C(rules_file), ...)
      for prometheus; C({kind}) for dashboard; C({record}) for cotenants.
    type: dict
    required: false
"""

EXAMPLES = r"""
- name: Write the alert rules
  ansible.builtin.copy:
    content: "{{ 'rules' | seatwright.fleet.monitoring_render({'settings': {}, 'ttft_bounds': {'lab': 500}}) }}"
    dest: /etc/prometheus/seatwright/alerts.yml
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The file's text.
  type: str
"""


def monitoring_render(what, args=None):
    # Plain values: the YAML dumper cannot represent Ansible's tagged strings.
    plain = json.loads(json.dumps(args or {}, default=str))
    try:
        return render(str(what), plain)
    except (SeatwrightError, TypeError) as exc:
        raise AnsibleFilterError("monitoring_render %s: %s" % (what, exc))


class FilterModule:
    def filters(self):
        return {"monitoring_render": monitoring_render}
