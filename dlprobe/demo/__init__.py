"""The bundled demo: a training script with a copy-on-access leak, and its fix."""
