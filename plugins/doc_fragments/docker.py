"""Documentation fragment seatwright.fleet.docker: the options of modules that talk to a node's
Docker engine (after community.docker's docker fragment). The socket's default is
io/common/docker_api.py's DEFAULT_SOCKET, written here by tools/render_defaults.py."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  docker_socket:
    description: The Docker engine's API socket on the node.
    type: path
    default: /var/run/docker.sock
"""
