"""Instructions the request codec spends on the shape's two requests, counted by callgrind.

Run: python bench/header_codec_cg.py [--n 2000] [--pure]

The SEND_MESSAGE_V2 and PULL_MESSAGE headers of `bench/rocketmq_shape.py` (a 1 KiB send with a
key, a pull of 32 with commitOffset, as the Java client writes them) and their two answers, each
step run N and 2N times under `valgrind --tool=callgrind`; the difference over N is what one
send and one pull cost that step, the interpreter's start and imports left out:

* `decode_json_header`: the two JSON headers to commands;
* `encode_json_header`: the two answers' JSON headers;
* `check_text`: the edge's text check of the two requests (B-335);
* `decode`: their typed headers (requests.decode).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STEPS = ("decode_json_header", "encode_json_header", "check_text", "decode")


def _head(code: int, ext: dict[str, str]) -> bytes:
    header = {
        "code": code,
        "extFields": ext,
        "flag": 0,
        "language": "JAVA",
        "opaque": 12345,
        "serializeTypeCurrentRPC": "JSON",
        "version": 395,
    }
    return json.dumps(header, separators=(",", ":")).encode()


def loop(step: str, n: int) -> None:
    """Run `step` n times over the shape's send and pull."""
    from es_broker.remoting import command, header, requests
    from es_broker.remoting.codes import ResponseCode
    from es_broker.remoting.response_headers import (
        PullMessageResponseHeader,
        SendMessageResponseHeader,
    )

    props = "KEYS\x01key-000123\x02UNIQ_KEY\x017F0000010A2B3C4D5E6F708192A3B4C5\x02WAIT\x01true\x02"
    send_ext = {
        "a": "benchmark_producer",
        "b": "BenchmarkShape",
        "c": "TBW102",
        "d": "4",
        "e": "3",
        "f": "0",
        "g": "1764393600123",
        "h": "0",
        "i": props,
        "j": "0",
        "k": "false",
        "m": "false",
    }
    pull_ext = {
        "consumerGroup": "benchmark_consumer",
        "topic": "BenchmarkShape",
        "queueId": "3",
        "queueOffset": "12345",
        "maxMsgNums": "32",
        "sysFlag": "7",
        "commitOffset": "12345",
        "suspendTimeoutMillis": "15000",
        "subscription": "*",
        "subVersion": "1764393600123",
        "expressionType": "TAG",
    }
    send, pull = _head(310, send_ext), _head(11, pull_ext)
    send_req = header.decode_json_header(send, b"x" * 1024)
    pull_req = header.decode_json_header(pull, b"")
    send_answer = command.response_to(
        send_req,
        ResponseCode.SUCCESS,
        None,
        SendMessageResponseHeader.stored("7F00000100002A9F00000000000ABCDE", 3, 12345),
    )
    pull_answer = command.response_to(
        pull_req,
        ResponseCode.SUCCESS,
        "FOUND",
        PullMessageResponseHeader.pulled(0, 12377, 0, 12400),
    )
    if step == "decode_json_header":
        decode_json_header = header.decode_json_header
        for _ in range(n):
            decode_json_header(send, b"")
            decode_json_header(pull, b"")
    elif step == "encode_json_header":
        encode_json_header = header.encode_json_header
        for _ in range(n):
            encode_json_header(send_answer)
            encode_json_header(pull_answer)
    elif step == "check_text":
        check_text = requests.check_text
        for _ in range(n):
            check_text(send_req)
            check_text(pull_req)
    else:
        decode = requests.decode
        for _ in range(n):
            decode(send_req)
            decode(pull_req)


def counted(step: str, n: int, env: dict[str, str]) -> int:
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    command += [sys.executable, __file__, "--loop", step, "--n", str(n)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stderr
    match = re.search(r"refs:\s+([\d,]+)", out)
    if match is None:
        raise SystemExit(f"no instruction count from callgrind:\n{out}")
    return int(match.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--pure", action="store_true", help="ES_BROKER_PURE_PYTHON=1")
    parser.add_argument("--loop", choices=STEPS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:
        loop(args.loop, args.n)
        return
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if args.pure:
        env["ES_BROKER_PURE_PYTHON"] = "1"
    else:
        env.pop("ES_BROKER_PURE_PYTHON", None)
    for step in STEPS:
        once, twice = counted(step, args.n, env), counted(step, 2 * args.n, env)
        print(f"{step}: {(twice - once) / args.n / 1e3:.1f}k Ir for the send and the pull")


if __name__ == "__main__":
    main()
