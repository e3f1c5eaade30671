"""Client settings with the Java client's defaults (B-04, B-05), one frozen dataclass per role.

Each field names the Java setting it mirrors. Durations are seconds (floats)
so tests can shorten the timers; the Java names are in milliseconds.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from es_broker.acl.signing import Credentials
from es_broker.net.tls import TlsClientSettings

DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
AUTO_CREATE_TOPIC_KEY = "TBW102"  # DefaultMQProducer.createTopicKey
MASTER_ID = 0


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """What every client instance shares (Java ClientConfig)."""

    poll_name_server_interval: float = 30.0  # pollNameServerInterval
    heartbeat_broker_interval: float = 30.0  # heartbeatBrokerInterval
    rpc_timeout: float = 3.0  # timeout of heartbeats, route and consumer-list lookups
    # The RPCHook of the Java constructors (AclClientRPCHook): with credentials every request is
    # signed. Credentials' repr hides the secret, so this config's repr does too.
    credentials: Credentials | None = None
    # TLS (useTLS / tls.enable): verified against tls_ca_file (None: the system store) unless tls_test_mode
    use_tls: bool = False
    tls_ca_file: str | None = None
    tls_test_mode: bool = False  # tls.test.mode.enable: trust any server (Java's default, not ours)


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """DefaultMQProducer settings."""

    send_msg_timeout: float = 3.0  # sendMsgTimeout: the whole send, retries included
    retry_times_when_send_failed: int = 2  # retryTimesWhenSendFailed
    retry_another_broker_when_not_store_ok: bool = False  # retryAnotherBrokerWhenNotStoreOK
    compress_msg_body_over_howmuch: int = 4096  # compressMsgBodyOverHowmuch
    default_topic_queue_nums: int = 4  # defaultTopicQueueNums
    max_message_size: int = 4 * 1024 * 1024  # maxMessageSize


def client_config_with(
    config: ClientConfig | None, credentials: Credentials | None
) -> ClientConfig:
    """`config` (or the defaults) with `credentials`, which the `credentials=` keywords give.

    Credentials given both ways must be the same ones: two accounts for one
    client would sign with one of them silently.
    """
    config = config or ClientConfig()
    if credentials is None or config.credentials == credentials:
        return config
    if config.credentials is not None:
        raise ValueError(
            "credentials given twice, differently: as credentials= and in the ClientConfig"
        )
    return dataclasses.replace(config, credentials=credentials)


def default_consume_timestamp() -> str:
    """Construction time minus 30 minutes as yyyyMMddHHmmss, local time (B-47)."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(time.time() - 30 * 60))


@dataclass(frozen=True, slots=True)
class PushConsumerConfig:
    """DefaultMQPushConsumer settings and the client constants of B-05."""

    pull_batch_size: int = 32  # pullBatchSize
    consume_message_batch_max_size: int = 1  # consumeMessageBatchMaxSize
    consume_thread_max: int = 20  # consumeThreadMax: handler calls running at once
    pull_threshold_for_queue: int = 1000  # pullThresholdForQueue (messages)
    pull_threshold_size_for_queue: int = 100 * 1024 * 1024  # pullThresholdSizeForQueue (bytes)
    consume_concurrently_max_span: int = 2000  # consumeConcurrentlyMaxSpan
    max_reconsume_times: int = 16  # maxReconsumeTimes (-1 means 16 for concurrent listeners)
    post_subscription_when_pull: bool = False  # postSubscriptionWhenPull
    rebalance_interval: float = 20.0  # rocketmq.client.rebalance.waitInterval
    persist_consumer_offset_interval: float = 5.0  # persistConsumerOffsetInterval
    persist_consumer_offset_delay: float = 10.0  # first periodic persist after start (B-41)
    broker_suspend_max_time_millis: int = 15_000  # BROKER_SUSPEND_MAX_TIME_MILLIS (B-05)
    consumer_timeout_when_suspend: float = 30.0  # CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND (B-05)
    pull_time_delay_when_exception: float = 1.0  # pullTimeDelayMillsWhenException (B-04)
    pull_time_delay_when_flow_control: float = 0.05  # PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
    pull_time_delay_when_broker_flow_control: float = 0.02  # ..._WHEN_BROKER_FLOW_CONTROL
    pull_max_idle_time: float = 120.0  # ProcessQueue pullMaxIdleTime (B-54)
    offset_illegal_delay: float = 10.0  # OFFSET_ILLEGAL fix-up delay (B-67)
    reset_offset_wait: float = 10.0  # sleep inside MQClientInstance#resetOffset (B-78 step 4)
    # Java persists the reset offsets oneway (B-78 step 5), which races with the
    # QUERY_CONSUMER_OFFSET of step 6 (B-85). False waits for the broker's answer.
    reset_persist_oneway: bool = True
    consume_later_delay: float = 5.0  # local re-consume after a failed send-back (B-89)
    send_back_timeout: float = 5.0  # CONSUMER_SEND_MSG_BACK timeout (B-88)
    offset_rpc_timeout: float = 5.0  # offset and position lookups (B-05)
    offset_store_dir: str | None = None  # rocketmq.client.localOffsetStoreDir (~/.rocketmq_offsets)

    def replace(self, **changes: Any) -> PushConsumerConfig:
        """A copy with some settings changed."""
        return dataclasses.replace(self, **changes)


def client_tls(config: ClientConfig) -> TlsClientSettings | None:
    """The TLS a ClientConfig asks for (use_tls, tls_ca_file, tls_test_mode); None: plain TCP."""
    if not config.use_tls:
        return None
    return TlsClientSettings(ca_file=config.tls_ca_file, test_mode=config.tls_test_mode)
