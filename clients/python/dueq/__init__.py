"""dueq: producers and workers for the dueq delayed-job queue, speaking its
wire protocol (docs/protocol.md) to a dueq broker over ZeroMQ."""

from ._connection import CurveKeys
from .producer import AdminResult, DueqError, FlowJob, GroupResult, Job as NewJob, Producer, Rejected
from .protocol import EnqueueResult, EnqueueStatus, JobEnd, Outcome, QueueStats
from .worker import Fail, Job, Snooze, Worker

__all__ = ["AdminResult", "CurveKeys", "DueqError", "EnqueueResult", "EnqueueStatus", "Fail", "FlowJob", "GroupResult", "Job",
           "JobEnd", "NewJob", "Outcome", "Producer",
           "QueueStats", "Rejected", "Snooze", "Worker"]
__version__ = "0.3.0"
