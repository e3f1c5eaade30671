"""The admin API (what mqadmin's DefaultMQAdminExt does), over the wire protocol only.

`Admin` puts together one class per role, each in its module: topics and groups
(admin_topics), consumers and offsets (admin_offsets), messages (admin_messages),
brokers, ACL and counts (admin_cluster), the time-travel queries (admin_timetravel),
on the connections and checks of admin_base.
"""

from __future__ import annotations

from es_broker.client.admin_base import AdminError
from es_broker.client.admin_cluster import ClusterAdmin
from es_broker.client.admin_messages import MessageAdmin
from es_broker.client.admin_offsets import OffsetAdmin, QueueProgress
from es_broker.client.admin_timetravel import TimeTravelAdmin

__all__ = ["Admin", "AdminError", "QueueProgress"]


class Admin(OffsetAdmin, MessageAdmin, ClusterAdmin, TimeTravelAdmin):
    """mqadmin's requests through `client`; a client with credentials signs every one of them.

    `async with Admin.open(namesrv, credentials=Credentials(ak, sk)) as admin:`
    makes its own connections and closes them at the end.
    """
