"""The sysFlag bits of a PULL_MESSAGE request (RocketMQ 4.9.8 PullSysFlag).

One definition for both sides: the broker reads them (`server/processors/build.py`),
the push, orderly and lite pull consumers set them.
"""

from __future__ import annotations

from enum import IntFlag


class PullSysFlag(IntFlag):
    """PullSysFlag's bits; `build` combines them as Java's buildSysFlag does."""

    COMMIT_OFFSET = 0x1  # commitOffset in the header is meaningful: store it (B-31)
    SUSPEND = 0x2  # nothing new: hold the pull (long polling, B-63)
    SUBSCRIPTION = 0x4  # the header carries the subscription expression
    CLASS_FILTER = 0x8  # class filter mode (not supported by es-broker)
    LITE_PULL_MESSAGE = 0x10  # sent by DefaultLitePullConsumer

    @classmethod
    def build(
        cls,
        *,
        commit_offset: bool = False,
        suspend: bool = False,
        subscription: bool = False,
        class_filter: bool = False,
        lite_pull: bool = False,
    ) -> int:
        """The int sysFlag of a pull with these properties."""
        flag = 0
        for on, bit in (
            (commit_offset, cls.COMMIT_OFFSET),
            (suspend, cls.SUSPEND),
            (subscription, cls.SUBSCRIPTION),
            (class_filter, cls.CLASS_FILTER),
            (lite_pull, cls.LITE_PULL_MESSAGE),
        ):
            if on:
                flag |= bit
        return int(flag)


PULL_COMMIT_OFFSET = int(PullSysFlag.COMMIT_OFFSET)
PULL_SUSPEND = int(PullSysFlag.SUSPEND)
PULL_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)
PULL_CLASS_FILTER = int(PullSysFlag.CLASS_FILTER)
PULL_LITE_PULL_MESSAGE = int(PullSysFlag.LITE_PULL_MESSAGE)
