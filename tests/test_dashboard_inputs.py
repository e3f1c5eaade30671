"""The dashboard's answers to what an operator types: the messages page's searches, the
throughput window's step, and the status of a question asked wrong (400), of something that
does not exist (404) and of a broker that cannot be reached (502). A real broker process and
a real dashboard process, asked over HTTP as the pages' forms ask (tests/dashboard_fixtures).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest
import trio

from es_broker.client.messages import SendResult
from tests.dashboard_fixtures import Answer, Operator, dashboard
from tests.helpers import produce, topic_ready
from tests.process_fixtures import ServedBroker, serve

pytest.importorskip("hypercorn")


@dataclass
class Inputs:
    served: ServedBroker
    url: str  # --allow-writes, no sign-in (loopback, brokers without ACL)
    sent: list[SendResult]  # T's messages: body m<n>, key key<n>

    @property
    def broker(self) -> str:
        return self.sent[0].queue.broker_name


async def _traffic(served: ServedBroker) -> list[SendResult]:
    """T (4 queues): five messages, the n-th with key `key<n>` and a producer's UNIQ_KEY."""
    async with trio.open_nursery() as nursery:
        await topic_ready(served, "T", 4)
        sent = []
        for n in range(5):
            sent += await produce(served, nursery, "T", [b"m%d" % n], keys=f"key{n}", tags="tg")
        return sent


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Iterator[Inputs]:
    tmp = tmp_path_factory.mktemp("dashboard-inputs")
    with serve(tmp / "data") as served:
        sent = trio.run(_traffic, served)
        with dashboard(served.namesrv, "--allow-writes", log=tmp / "dashboard.log") as url:
            yield Inputs(served, url, sent)


def error_of(answer: Answer) -> str:
    """The error an answer gives: the API's `error`, or the error page's #error."""
    if answer.headers.get("content-type", "").startswith("application/json"):
        return answer.json()["error"]
    m = re.search(r'<p class="error" id="error">(.*?)</p>', answer.body, re.S)
    assert m is not None, answer.body
    return html.unescape(m.group(1))


class _Form(HTMLParser):
    """The fields of one form of a page, as a browser submits them."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id = form_id
        self.inside = False
        self.select: str | None = None
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        elif self.inside and tag == "input" and "name" in a:
            self.fields[a["name"]] = a.get("value", "")
        elif self.inside and tag == "select":
            self.select = a["name"]
        elif self.inside and tag == "option" and self.select and "selected" in a:
            self.fields[self.select] = a["value"]

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self.select = None


def form_fields(page: str, form_id: str) -> dict[str, str]:
    parser = _Form(form_id)
    parser.feed(page)
    return parser.fields


def message_rows(page: str) -> list[list[str]]:
    """The cells of the messages page's table, as text."""
    table = re.search(r'<table id="messages">(.*?)</table>', page, re.S)
    assert table is not None, page
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)[1:]
    return [
        [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", r)]
        for r in rows
    ]


# ---------------------------------------------------------------------- the messages page


def test_the_keys_column_shows_the_keys_a_message_was_sent_with(inputs):
    """The keys cell holds the message's KEYS, not the text of a Python method."""
    op = Operator(inputs.url)
    answer = op.get("/messages?topic=T&key=key3")
    assert answer.status == 200
    assert "built-in method" not in answer.body
    (row,) = message_rows(answer.body)
    assert row[0] == inputs.sent[3].offset_msg_id and row[4] == "tg" and row[5] == "key3"


def test_a_unique_key_in_the_by_id_field_finds_its_message(inputs):
    """A producer's msgId (UNIQ_KEY) reads as an offset id of a port that is no port: it is
    looked up as a unique key, in every topic or in the topic given, as queryMsgById does."""
    op = Operator(inputs.url)
    uniq = inputs.sent[2].msg_id
    for query in ({"msgId": uniq}, {"msgId": uniq, "topic": "T"}):
        answer = op.get("/api/messages?" + urlencode(query))
        assert answer.status == 200, answer.body
        (found,) = answer.json()["messages"]
        assert (found["uniqKey"], found["msgId"], found["body"]) == (
            uniq,
            inputs.sent[2].offset_msg_id,
            "m2",
        )
    page = op.get("/messages?" + urlencode({"msgId": uniq}))
    assert page.status == 200 and message_rows(page.body)[0][0] == inputs.sent[2].offset_msg_id


def test_an_id_that_names_no_message_answers_404(inputs):
    op = Operator(inputs.url)
    unknown = "C0000202051BF18391CF983FED6C9AC9"  # 192.0.2.2, port 85717379: a unique key
    answer = op.get(f"/api/messages?msgId={unknown}")
    assert answer.status == 404, answer.body
    assert f"no message {unknown}" in error_of(answer)


def test_by_offset_with_a_broker_the_topic_has_not_answers_400_naming_its_brokers(inputs):
    op = Operator(inputs.url)
    for path in ("/api/messages", "/messages"):
        answer = op.get(f"{path}?topic=T&broker=nobroker&queueId=0&offset=0")
        assert answer.status == 400, answer.body
        assert error_of(answer) == (
            f"topic T has no broker nobroker (its brokers: {inputs.broker})"
        )


def test_by_offset_finds_the_message_at_that_offset(inputs):
    sent = inputs.sent[4]
    query = urlencode(
        {
            "topic": "T",
            "broker": inputs.broker,
            "queueId": sent.queue.queue_id,
            "offset": sent.queue_offset,
        }
    )
    answer = Operator(inputs.url).get(f"/api/messages?{query}")
    assert answer.status == 200, answer.body
    assert [m["msgId"] for m in answer.json()["messages"]] == [sent.offset_msg_id]


def test_an_incomplete_search_asks_for_the_field_it_misses(inputs):
    """By queue and offset without a broker, by key without a topic, a topic alone: each is
    refused with what to give (the API's 400, the page's error), never an empty answer."""
    op = Operator(inputs.url)
    cases = {
        "topic=T&queueId=0&offset=0": "give a broker:",
        "topic=T&broker=&queueId=0&offset=": "give a broker and an offset:",
        "queueId=0": "give a topic and a broker and an offset:",
        "key=key3": "give a topic: a key is looked up in one topic",
        "topic=T": "give a key, or a broker name, queue and offset, with the topic",
    }
    for query, words in cases.items():
        for path in ("/api/messages", "/messages"):
            answer = op.get(f"{path}?{query}")
            assert answer.status == 400, (path, query, answer.body)
            assert error_of(answer).startswith(words), (query, error_of(answer))
    empty = op.get("/messages")
    assert empty.status == 200 and 'id="by-offset"' in empty.body


# ---------------------------------------------------------------------- the throughput window


def test_a_new_window_in_the_throughput_form_picks_its_own_step(inputs):
    """The form shows the step of the window it drew (1 minute for 1h); choosing last 7d and
    show sends that step back with it: the 7d window picks its own step, and draws."""
    op = Operator(inputs.url)
    first = op.get("/throughput?window=1h")
    assert first.status == 200
    fields = form_fields(first.body, "window-form")
    assert fields["window"] == "1h" and fields["step"] == "1"
    fields["window"] = "7d"
    week = op.get("/throughput?" + urlencode(fields))
    assert week.status == 200
    assert 'class="error broker-error"' not in week.body, week.body
    assert int(form_fields(week.body, "window-form")["step"]) >= 7 * 1440 // 120  # 120 points


def test_a_step_too_short_for_the_window_is_lengthened_to_what_the_broker_answers(inputs):
    """step=1 over 7 days would be more than the broker's 10000 intervals: the shortest step
    it answers is asked instead."""
    answer = Operator(inputs.url).get("/api/throughput?window=7d&step=1")
    assert answer.status == 200
    (broker,) = answer.json()["brokers"]
    assert "error" not in broker, broker
    assert broker["history"]["step"] == 2 * 60_000


# ---------------------------------------------------------------------- statuses


def test_what_does_not_exist_answers_404(inputs):
    op = Operator(inputs.url)
    topic = op.get("/api/topics/NoSuchTopic")
    assert topic.status == 404 and "NoSuchTopic" in error_of(topic)
    page = op.get("/topics/NoSuchTopic")
    assert page.status == 404 and "NoSuchTopic" in error_of(page)
    at = urlencode({"topic": "T", "broker": inputs.broker, "queueId": 0, "offset": 999})
    message = op.get(f"/api/messages?{at}")
    assert message.status == 404 and "no message at offset 999" in error_of(message)


def test_a_question_asked_wrong_answers_400_saying_what_is_wrong(inputs):
    op = Operator(inputs.url)
    at = {"topic": "T", "broker": inputs.broker}
    for query, words in (
        ({**at, "queueId": 0, "offset": -1}, "an offset is 0 or more, not -1"),
        ({**at, "queueId": 77, "offset": 0}, f"T has queues 0..3 on {inputs.broker}, not 77"),
    ):
        answer = op.get("/api/messages?" + urlencode(query))
        assert (answer.status, error_of(answer)) == (400, words)
    for fields, words in (
        ({"topic": "Q1", "queues": "-3"}, "queues is 1 or more, not -3"),
        ({"topic": "bad name!"}, "topic name 'bad name!': at most 127"),
        ({"topic": "Q2", "perm": "9"}, "perm is 0..7 (2 W, 4 R, 6 RW), not 9"),
    ):
        answer = op.post("/api/topics", fields)
        assert answer.status == 400 and error_of(answer).startswith(words), answer.body
    perm = op.post("/api/topics/T/perm", {"perm": "9"})
    assert perm.status == 400 and error_of(perm).startswith("perm is 0..7"), perm.body
    names = [t["topic"] for t in op.get("/api/topics").json()["topics"]]
    assert not {"Q1", "Q2", "bad name!"} & set(names)


def test_a_name_server_that_cannot_be_reached_answers_502(tmp_path: Path):
    with dashboard("127.0.0.1:1", log=tmp_path / "dashboard.log") as url:
        answer = Operator(url).get("/api/topics")
    assert answer.status == 502, answer.body
