"""dueq: producers and workers for the dueq delayed-job queue, speaking its
wire protocol (docs/protocol.md) to a dueq broker over ZeroMQ."""

from ._connection import CurveKeys
from .producer import DueqError, Job as NewJob, Producer, Rejected
from .protocol import EnqueueResult, EnqueueStatus, Outcome, QueueStats
from .worker import Fail, Job, Worker

__all__ = ["CurveKeys", "DueqError", "EnqueueResult", "EnqueueStatus", "Fail", "Job", "NewJob", "Outcome", "Producer",
           "QueueStats", "Rejected", "Worker"]
__version__ = "0.3.0"
