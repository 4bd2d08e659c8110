"""The training loop: the stage controller, engines, evaluation, checkpoints, metrics, export."""
