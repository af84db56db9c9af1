"""Process workers with response_timeout 1 s: a sync predict that sleeps as long as asked."""

import os
import time


class Model:
    def predict(self, inputs):
        sleep = inputs.get("sleep", 0)
        time.sleep(float(getattr(sleep, "flat", [sleep])[0]))
        return {"pid": os.getpid()}
