"""The data a run reads: megatron-core text datasets, image datasets, the sample stream."""
