'use strict';

// One ali-ons Producer kept alive through an add-and-drain (tests/test_interop_ali_ons_drain.py),
// driven by JSON commands on stdin, one answer line on stdout per command:
//
//   node drain.js --namesrv HOST:PORT --topic TOPIC --poll-ms MS --heartbeat-ms MS
//                 [--group GROUP] [--timeout SECONDS]
//
//   {"op": "send", "prefix": "before", "count": 40}
//     -> {"sent": [{"body", "brokerName", "queueId", "msgId", "tried": [brokerName, ...]}]}
//        `tried` is every broker a send went to, in order (ali-ons retries another broker after
//        NO_PERMISSION and the like); one entry when the first try took it.
//   {"op": "route"}
//     -> {"publish": [brokerName of each queue the producer sends to],
//         "perms": {brokerName: perm} of the topic's route as ali-ons last took it,
//         "brokers": [brokerName of each broker ali-ons keeps an address of]}
//   {"op": "close"} -> {"closed": true}, then exit 0.
//
// --poll-ms is ali-ons' `pollNameServerInteval` (sic: its spelling), the period of its route
// refresh from the name server (30 s by default); --heartbeat-ms its heartbeatBrokerInterval,
// whose task also forgets the brokers no route names any more (`_cleanOfflineBroker`). ali-ons'
// close() unregisters from every broker it keeps and, unlike the Java client, rejects when one
// of them is unreachable: close only once a stopped broker is forgotten.

const readline = require('readline');
const { Producer, Message } = require('ali-ons');
const { httpclient, logger, parseArgs, emit, exit, hardTimeout } = require('./common');

const args = parseArgs(process.argv.slice(2), {
  script: 'drain.js',
  options: {
    namesrv: 'HOST:PORT', topic: 'TOPIC', 'poll-ms': 'MS', 'heartbeat-ms': 'MS',
    group: 'PRODUCER_GROUP', timeout: 'SECONDS',
  },
  required: ['namesrv', 'topic', 'poll-ms', 'heartbeat-ms'],
  defaults: { group: 'interop_drain_producer', timeout: '60' },
});

// Observe (not alter) which broker each try of a send goes to.
function recordTries(producer, tries) {
  const sendKernelImpl = producer.sendKernelImpl.bind(producer);
  producer.sendKernelImpl = async (msg, messageQueue) => {
    tries.push(messageQueue.brokerName);
    return sendKernelImpl(msg, messageQueue);
  };
}

async function send(producer, tries, prefix, count) {
  const sent = [];
  for (let i = 0; i < count; i++) {
    const body = `${prefix}-${i}`;
    tries.length = 0;
    const result = await producer.send(new Message(args.topic, 'TagA', body));
    sent.push({
      body,
      brokerName: result.messageQueue.brokerName,
      queueId: Number(result.messageQueue.queueId),
      msgId: result.msgId,
      tried: tries.slice(),
    });
  }
  return { sent };
}

function route(producer) {
  const info = producer._topicPublishInfoTable.get(args.topic);
  const data = producer._mqClient._topicRouteTable.get(args.topic);
  const perms = {};
  for (const q of (data && data.queueDatas) || []) {
    perms[q.brokerName] = q.perm;
  }
  const brokers = [ ...producer._mqClient._brokerAddrTable.keys() ];
  return { publish: info ? info.messageQueueList.map(mq => mq.brokerName) : [], perms, brokers };
}

async function main() {
  hardTimeout(args.timeout, 'drain.js');
  const producer = new Producer({
    httpclient,
    logger,
    nameSrv: args.namesrv,
    producerGroup: args.group,
    pollNameServerInteval: Number(args['poll-ms']),
    heartbeatBrokerInterval: Number(args['heartbeat-ms']),
  });
  producer.on('error', err => console.error('[producer error]', err));
  await producer.ready();
  const tries = [];
  recordTries(producer, tries);

  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    if (!line.trim()) {
      continue;
    }
    const command = JSON.parse(line);
    if (command.op === 'send') {
      emit(await send(producer, tries, command.prefix, command.count));
    } else if (command.op === 'route') {
      emit(route(producer));
    } else if (command.op === 'close') {
      await producer.close();
      emit({ closed: true });
      return;
    } else {
      throw new Error(`unknown op ${command.op}`);
    }
  }
  throw new Error('stdin closed before {"op": "close"}');
}

main().then(() => exit(0), err => {
  console.error('drain.js failed:', err);
  exit(1);
});
