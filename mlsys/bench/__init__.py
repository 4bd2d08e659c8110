"""The benchmark: profiles, running them side by side, and comparing runs at equal compute."""
