"""Documentation fragment seatwright.fleet.router: the options every module that runs the router on
its node takes (router_control, router_cotenants). The kinds (choices) are router/kinds/'s and the
defaults the modules' argument_spec's, both written here by tools/render_defaults.py."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kind:
    description: The router's kind (one description each in C(plugins/module_utils/router/kinds/)).
    type: str
    choices: [litellm, smg]
    required: true
  authenticating_front:
    description: An authenticating front of the operator's own stands before the router's port.
    type: bool
    default: false
  config_dir:
    description: seatwright's config folder on the node.
    type: str
    required: true
  state_dir:
    description: seatwright's state folder on the node.
    type: str
    required: true
  user:
    description: The system user the router runs as.
    type: str
    default: seatwright-router
  service_manager:
    description: C(auto) uses systemd where it is PID 1, else a pid file per process.
    type: str
    choices: [auto, systemd, process]
    default: auto
  aliases:
    description: The inventory's aliases, alias to model group.
    type: dict
    default: {}
"""
