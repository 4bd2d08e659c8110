"""The V-cycle's policy: what happens to the weights (and optimizer state) at a transition
between levels (``transition``), and the symmetry breakers used on the way up."""
