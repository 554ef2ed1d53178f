"""Pure decisions about the fabric: sysfs and bandwidth-tool readings, the NCCL environment."""
