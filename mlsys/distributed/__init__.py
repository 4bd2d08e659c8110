"""The distributed edges: process-group helpers, ZeRO-3 parameter access, whole-model weight
files, local rank spawning, SLURM's environment and the preemption flag."""
