"""Everything that touches the host: files, commands, sockets, HTTP, the Docker API.

Grouped by the same concerns as the pure side (node/, fabric/, seat/, weights/, images/,
qualify/, bench/, evidence/), plus common/ for what several share (atomic files and caches,
progress, services, the Docker API, the OpenAI-compatible client). A module's driver here takes
its parameters (or the AnsibleModule, where it runs commands), hands readings to the pure side and
applies its answer; failures are raised as errors.py's kinds with the message for people.
"""
