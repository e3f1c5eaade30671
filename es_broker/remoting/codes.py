"""Code tables of the RocketMQ 4.x remoting protocol (docs/protocol.md §2.1, §2.2, §6).

Commands carry plain ints (an unknown code must still decode so the server can
answer REQUEST_CODE_NOT_SUPPORTED); these enums name the known ones.
"""

from __future__ import annotations

from enum import IntEnum


class SerializeType(IntEnum):
    """Header serialization, the high byte of the frame's second int (docs/protocol.md §1.2)."""

    JSON = 0
    ROCKETMQ = 1


class LanguageCode(IntEnum):
    """Sender implementation language (docs/protocol.md §2.1): name in JSON, byte in binary."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12


class Version(IntEnum):
    """Protocol versions: ordinals of Java's `MQVersion.Version` (docs/protocol.md §2.2).

    Only the ordinals the protocol branches on, plus the 4.9.x releases; any
    other int is valid on the wire. `version_name` names every 4.x ordinal.
    """

    V3_0_7_SNAPSHOT = 28  # broker pushes RESET_CONSUMER_CLIENT_OFFSET only from here on
    V3_0_11 = 37  # name server's filter-server aware register path
    V3_1_8_SNAPSHOT = 62  # oldest client GET_CONSUMER_RUNNING_INFO is forwarded to
    V3_4_9 = 121  # ali-ons' fixed version; maxReconsumeTimes honoured from here on
    V4_0_0 = 213
    V4_1_0_SNAPSHOT = 232  # Java client needs a broker at least this new for SQL92
    V4_5_0 = 313
    V4_9_0 = 393
    V4_9_1 = 395
    V4_9_2 = 397
    V4_9_3 = 399
    V4_9_4 = 401  # name server answers standard JSON routes from here on
    V4_9_5 = 403
    V4_9_6 = 405
    V4_9_7 = 407
    V4_9_8 = 409  # last 4.x release


#: What this server stamps into the commands it creates (docs/protocol.md §2.2: Java servers
#: stamp their own version; clients need at least V4_1_0_SNAPSHOT).
CURRENT_VERSION: int = int(Version.V4_9_8)

# 4.x ordinals follow a fixed pattern: 20 per minor, SNAPSHOT then release per patch.
_V4_FIRST = 212  # V4_0_0_SNAPSHOT
_V4_LAST = 411  # V4_9_9


def version_name(ordinal: int) -> str:
    """Human-readable name of a version ordinal, e.g. 409 -> "V4_9_8"."""
    try:
        return Version(ordinal).name
    except ValueError:
        pass
    if _V4_FIRST <= ordinal <= _V4_LAST:
        minor, rest = divmod(ordinal - _V4_FIRST, 20)
        patch, released = divmod(rest, 2)
        return f"V4_{minor}_{patch}" + ("" if released else "_SNAPSHOT")
    return f"version#{ordinal}"


class RequestCode(IntEnum):
    """Request codes, 4.9.x numbering (docs/protocol.md §6.1)."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_TOPIC_CONFIG_LIST = 22
    GET_TOPIC_NAME_LIST = 23
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    TRIGGER_DELETE_FILES = 27
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    UPDATE_AND_CREATE_ACL_CONFIG = 50
    DELETE_ACL_CONFIG = 51
    GET_BROKER_CLUSTER_ACL_INFO = 52
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG = 53
    GET_BROKER_CLUSTER_ACL_CONFIG = 54  # 4.9.0; removed by 4.9.8; es-broker masks the secrets
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    SUSPEND_CONSUMER = 209
    RESUME_CONSUMER = 210
    RESET_CONSUMER_OFFSET_IN_CONSUMER = 211
    RESET_CONSUMER_OFFSET_IN_BROKER = 212
    ADJUST_CONSUMER_THREAD_POOL = 213
    WHO_CONSUME_THE_MESSAGE = 214
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    # 217/218 were removed from 4.x Java; kept because ali-ons still defines 217.
    GET_KV_CONFIG_BY_VALUE = 217
    DELETE_KV_CONFIG_BY_VALUE = 218
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    REGISTER_FILTER_SERVER = 301
    REGISTER_MESSAGE_FILTER_CLASS = 302
    QUERY_CONSUME_TIME_SPAN = 303
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    GET_CONSUMER_RUNNING_INFO = 307
    QUERY_CORRECTION_OFFSET = 308
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    CLONE_GROUP_OFFSET = 314
    VIEW_BROKER_STATS_DATA = 315
    CLEAN_UNUSED_TOPIC = 316
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_BATCH_MESSAGE = 320
    QUERY_CONSUME_QUEUE = 321
    QUERY_DATA_VERSION = 322
    RESUME_CHECK_HALF_MESSAGE = 323
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_ALL_PRODUCER_INFO = 328
    DELETE_EXPIRED_COMMITLOG = 329
    # RocketMQ 5's pop consumption, which its proxy speaks to brokers (es_broker/remoting/pop_headers.py)
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053


class ResponseCode(IntEnum):
    """Response codes (docs/protocol.md §6.2)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29  # RocketMQ 5: a pop's maxMsgNums out of range
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202  # (sic), the Java name
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    UPDATE_AND_CREATE_ACL_CONFIG_FAILED = 209
    DELETE_ACL_CONFIG_FAILED = 210
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED = 211
    FLOW_CONTROL = 215


#: Flag bits of the command header (docs/protocol.md §2).
FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2


class EsRequestCode(IntEnum):
    """es-broker's own request codes, outside RocketMQ's numbering; RocketMQ brokers answer them
    REQUEST_CODE_NOT_SUPPORTED."""

    RESET_OFFSET = 9101  # reset by time/offset/shift/earliest/latest, dry run, server-side (S-2)
    HISTORY_ARCHIVE = 9102  # seal the log's old segments now (`es-broker archive -b`, B-411)
    REDRIVE_DLQ = 9201  # re-send dead letters of a group, each re-drive a record (S-9)
    MESSAGE_TRACE = 9202  # a message's whole journey from the records, as JSON
    # time travel over the wire (es_broker/server/query_processors.py), answered from the broker's
    # own projections, so a dashboard or an admin on another host needs no data directory
    OFFSETS_AT = 9203  # a group's offset table at a moment (`es-broker offsets --at`)
    OFFSET_HISTORY = 9204  # a group's newest offset changes and the records that explain them
    OFFSET_TIMELINE = 9205  # a group's offsets and lag sampled over a time window, and its events
    EXPLAIN_GROUP = 9206  # why a group started where it did (`es-broker explain`)
    ACCOUNT_SCOPE = (
        9207  # the topics and groups the calling ACL account may see (a dashboard's filter)
    )
    STATS_HISTORY = 9208  # messages in and out per interval, broker and topics (stats projection)
    OPEN_TRANSACTIONS = 9230  # the open transactions (half messages) per producer group, as JSON
    # master/slave replication (es_broker/ha): a slave's fetch of records from seq N, long-polled on the
    # master's tail, which also acknowledges N - 1; and the merge of offsets a slave took alone (S-5)
    HA_FETCH_RECORDS = 9280
    HA_MERGE_SLAVE_OFFSETS = 9281
    # automatic fail-over (B-380): a rejoining node reports the records it set aside to its new leader
    HA_REPORT_SET_ASIDE = 9282
    # a planned switch-over (es-broker admin haSwitch): the leader hands its key to a named follower
    HA_SWITCH = 9283
