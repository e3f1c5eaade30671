'use strict';

// Send messages with the ali-ons Producer and print one JSON line per send result.
//
//   node produce.js --namesrv HOST:PORT --topic TOPIC (--messages JSON | --count N)
//                   [--tags TagA,TagB] [--group GROUP] [--timeout SECONDS]
//
// --messages is a JSON array of {"tags": "TagA", "keys": ["k1"], "body": "text"} (optionally
// "properties": {"name": "value"}, user properties);
// --count N sends N messages instead: tags cycle through --tags, keys ["key-<i>"],
// bodies "body-<i>". Output line per message, in send order:
//   {"index", "topic", "tags", "keys", "body", "msgId", "queueId", "queueOffset", "sendStatus"}
// Exit 0 when every send succeeded; 1 on a failed send; 3 on the hard timeout.

const { Producer, Message } = require('ali-ons');
const { httpclient, logger, parseArgs, emit, exit, hardTimeout } = require('./common');

const args = parseArgs(process.argv.slice(2), {
  script: 'produce.js',
  options: {
    namesrv: 'HOST:PORT', topic: 'TOPIC', messages: 'JSON', count: 'N', tags: 'TAG[,TAG...]',
    group: 'PRODUCER_GROUP', timeout: 'SECONDS',
    'access-key': 'ACCESS_KEY', 'secret-key': 'SECRET_KEY',
  },
  required: ['namesrv', 'topic'],
  defaults: { group: 'interop_producer', tags: 'TagA', timeout: '60' },
});

function plannedMessages() {
  if (args.messages !== undefined) {
    return JSON.parse(args.messages);
  }
  if (args.count === undefined) {
    console.error('give --messages or --count');
    process.exit(64);
  }
  const tags = args.tags.split(',');
  const out = [];
  for (let i = 0; i < Number(args.count); i++) {
    out.push({ tags: tags[i % tags.length], keys: [ `key-${i}` ], body: `body-${i}` });
  }
  return out;
}

async function main() {
  hardTimeout(args.timeout, 'produce.js');
  const planned = plannedMessages();
  const producer = new Producer({
    httpclient,
    logger,
    nameSrv: args.namesrv,
    producerGroup: args.group,
    // plain ACL: ali-ons signs every request when both are given (tests/test_acl_ali_ons.py)
    accessKey: args['access-key'],
    secretKey: args['secret-key'],
  });
  producer.on('error', err => console.error('[producer error]', err));
  await producer.ready();

  for (let i = 0; i < planned.length; i++) {
    const m = planned[i];
    const msg = new Message(args.topic, m.tags, m.body);
    if (m.keys && m.keys.length) {
      msg.keys = m.keys;
    }
    // user properties, for SQL92 selectors (consume.js --sql)
    Object.assign(msg.properties, m.properties || {});
    const result = await producer.send(msg);
    emit({
      index: i,
      topic: args.topic,
      tags: m.tags,
      keys: m.keys || [],
      body: m.body,
      msgId: result.msgId,
      queueId: Number(result.messageQueue.queueId),
      queueOffset: result.queueOffset,
      sendStatus: result.sendStatus,
    });
  }
  await producer.close();
}

main().then(() => exit(0), err => {
  console.error('produce.js failed:', err);
  exit(1);
});
