"""Any model shape a job runs on: a language model, an image pipeline or a video pipeline.

One name for the union, used wherever a function takes any of them (the estimator, the pick, the
reports); the job union beside it is `workload.job.Job`.
"""

from __future__ import annotations

from gpuscout.workload.image import ImageModelShape
from gpuscout.workload.shape import ModelShape
from gpuscout.workload.video import VideoModelShape

Model = ModelShape | ImageModelShape | VideoModelShape
