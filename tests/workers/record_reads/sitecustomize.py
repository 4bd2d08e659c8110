"""Put on PYTHONPATH by tests/test_length_zero3.py: every training process appends the sample
indices its loader is asked for (one JSON list a micro-batch) to ``$MLSYS_TEST_READS/rank<R>``,
so the test sees what was read across phases and length factors, not what was counted; and
each loader made (``[consumed, steps]`` a line) to ``rank<R>.loaders``."""

import json
import os

if os.environ.get("MLSYS_TEST_READS"):
    import mlsys.data.loader as loader

    _steps = loader.step_indices
    _path = os.path.join(os.environ["MLSYS_TEST_READS"], f"rank{os.environ.get('RANK', '0')}")

    def _recorded(consumed, steps, *args, **kwargs):
        with open(_path + ".loaders", "a") as out:
            out.write(json.dumps([int(consumed), int(steps)]) + "\n")
        with open(_path, "a") as out:
            for micro in _steps(consumed, steps, *args, **kwargs):
                out.write(json.dumps([int(i) for i in micro]) + "\n")
                yield micro

    loader.step_indices = _recorded
