"""Pure decisions about checkpoints and weight staging: safetensors layout, manifests, listings."""
