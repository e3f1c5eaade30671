'use strict';

// Consume with an ali-ons cluster-mode push Consumer and print one JSON line per delivery.
//
//   node consume.js --namesrv HOST:PORT --topic TOPIC --group GROUP --expect N
//                   [--expression '*'|'TagA||TagB'] [--sql SQL92_EXPRESSION]
//                   [--timeout SECONDS] [--pull-log FILE]
//
// Output line per delivered message, in delivery order:
//   {"topic", "tags", "keys", "body", "queueId", "queueOffset", "msgId", "reconsumeTimes"}
// Once N distinct messages (by msgId) have been handled, the consumer is closed — which
// persists its in-memory offsets to the broker (UPDATE_CONSUMER_OFFSET per assigned queue)
// and unregisters it — and the script exits 0. With fewer than N messages after --timeout
// seconds it exits 3 without closing (offsets may then be partly committed).
// --sql subscribes with ali-ons' SQL92 form {expressionType: 'SQL92', subString} instead.
// --pull-log FILE appends one JSON line {topic, tags, queueId, queueOffset, msgId} per message
// the broker returned in PULL_MESSAGE responses, before ali-ons' own client-side tag filter,
// so a test can tell whether the broker filtered by tag.
// The consumer uses ali-ons' defaults otherwise (consumeFromWhere CONSUME_FROM_LAST_OFFSET),
// so a new group only starts at offset 0 if the broker answers QUERY_CONSUMER_OFFSET with 0
// for never-committed queues, as the Java broker does (docs/protocol.md §11.5).

const fs = require('fs');
const { Consumer } = require('ali-ons');
const { httpclient, logger, parseArgs, emit, exit, hardTimeout } = require('./common');

const args = parseArgs(process.argv.slice(2), {
  script: 'consume.js',
  options: {
    namesrv: 'HOST:PORT', topic: 'TOPIC', group: 'CONSUMER_GROUP', expect: 'N',
    expression: 'TAG_EXPRESSION', sql: 'SQL92_EXPRESSION', timeout: 'SECONDS', 'pull-log': 'FILE',
    'access-key': 'ACCESS_KEY', 'secret-key': 'SECRET_KEY',
  },
  required: ['namesrv', 'topic', 'group', 'expect'],
  defaults: { expression: '*', timeout: '60' },
});

function allProcessQueuesDrained(consumer) {
  for (const { processQueue } of consumer.processQueueTable.values()) {
    if (processQueue.msgCount > 0) {
      return false;
    }
  }
  return true;
}

// Observe (not alter) what the broker answers to PULL_MESSAGE.
function logPulls(consumer, file) {
  const client = consumer._mqClient;
  const pullMessage = client.pullMessage.bind(client);
  client.pullMessage = async (...args) => {
    const result = await pullMessage(...args);
    const lines = result.msgFoundList.map(msg => JSON.stringify({
      topic: msg.topic,
      tags: msg.tags === undefined ? null : msg.tags,
      queueId: msg.queueId,
      queueOffset: msg.queueOffset,
      msgId: msg.msgId,
    }) + '\n');
    if (lines.length) {
      fs.appendFileSync(file, lines.join(''));
    }
    return result;
  };
}

async function main() {
  hardTimeout(args.timeout, 'consume.js');
  const expected = Number(args.expect);
  const seen = new Set();
  let resolveDone;
  const done = new Promise(resolve => { resolveDone = resolve; });
  if (expected === 0) {
    resolveDone();
  }

  const consumer = new Consumer({
    httpclient,
    logger,
    nameSrv: args.namesrv,
    consumerGroup: args.group,
    // plain ACL: ali-ons signs every request when both are given (tests/test_acl_ali_ons.py)
    accessKey: args['access-key'],
    secretKey: args['secret-key'],
  });
  consumer.on('error', err => console.error('[consumer error]', err));
  if (args['pull-log']) {
    logPulls(consumer, args['pull-log']);
  }

  const selector = args.sql ? { expressionType: 'SQL92', subString: args.sql } : args.expression;
  consumer.subscribe(args.topic, selector, async msg => {
    emit({
      topic: msg.topic,
      tags: msg.tags === undefined ? null : msg.tags,
      keys: msg.keys ? msg.keys.split(' ') : [],
      body: msg.body ? msg.body.toString('utf8') : '',
      queueId: msg.queueId,
      queueOffset: msg.queueOffset,
      msgId: msg.msgId,
      reconsumeTimes: msg.reconsumeTimes,
    });
    seen.add(msg.msgId);
    if (seen.size >= expected) {
      resolveDone();
    }
  });
  await consumer.ready();
  await done;

  // The handler's promise resolved; ali-ons marks the message consumed (moves the in-memory
  // offset) right after, in the same consume loop. Let that loop catch up before closing, so
  // close() persists the final offsets.
  while (!allProcessQueuesDrained(consumer)) {
    await new Promise(resolve => setImmediate(resolve));
  }
  await new Promise(resolve => setImmediate(resolve));
  await consumer.close();
  console.error(`consume.js: received ${seen.size} distinct messages, consumer closed`);
}

main().then(() => exit(0), err => {
  console.error('consume.js failed:', err);
  exit(1);
});
