"""Action plugin: nvidia_driver_plan decided on the controller when the node has nothing to add.

The plan is a pure function of the task's arguments once the running driver's version is known
(module_utils/node/driver.py). With O(current_version) given (the GPU facts) and no keyring to
verify, running the module on each node would only cost a Python start and Ansible's imports
there (issue 25: a no-op converge's time per node). Otherwise the module runs on the node: it
reads the loaded driver from sysfs, or verifies and installs keyrings with gpg and writes sources.
"""

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.driver import plan_from_params
from ansible_collections.seatwright.fleet.plugins.modules.nvidia_driver_plan import ARGUMENT_SPEC


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, params = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if not params["current_version"] or params["verify_keyrings"] or params["repositories"]:
            result.update(self._execute_module(task_vars=task_vars))
            return result
        try:
            plan = plan_from_params(params, params["current_version"])
        except SeatwrightError as exc:
            raise AnsibleActionFail(str(exc), result=dict(exc.details)) from None
        result.update(changed=False, plan=plan)
        return result
