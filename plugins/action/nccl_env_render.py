"""Action plugin: nccl_env_render decided on the controller, in the task's worker.

The decision is a pure function of the fabric facts (module_utils/fabric/nccl.py), so running the
module on each node would only cost a Python start and Ansible's imports there per node (issue 25:
a no-op converge's time per node). The module file keeps the documentation and the argument spec.
"""

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import node_env_files
from ansible_collections.seatwright.fleet.plugins.modules.nccl_env_render import ARGUMENT_SPEC


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, params = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            files = node_env_files(**params)
        except SeatwrightError as exc:
            raise AnsibleActionFail(str(exc), result=dict(exc.details)) from None
        result.update(files, changed=False)
        return result
