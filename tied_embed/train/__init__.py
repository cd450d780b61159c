"""Run machinery: config fields and validation, checkpoints, the workdir and its lock, signals, the mesh, logs."""
